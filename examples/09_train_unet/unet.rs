//! The model: a U-Net with a resnet18 encoder.
//!
//! Encoder: torchvision's resnet18 (conv 7x7/2 + BN + ReLU, max-pool 3x3/2, four stages of two
//! BasicBlocks with 64, 128, 256, 512 channels). Decoder: segmentation_models_pytorch's `Unet`
//! (decoder channels 256, 128, 64, 32, 16; each block upsamples x2 (nearest), concatenates the
//! skip and applies two conv3x3 + BN + ReLU), then a conv3x3 head to the output channels.

use candle_core::{Module, ModuleT, Result, Tensor};
use candle_nn::VarBuilder;
use candle_nn::{batch_norm, conv2d, conv2d_no_bias, BatchNorm, Conv2d, Conv2dConfig};

/// A convolution without bias followed by batch normalisation.
struct ConvBn {
    conv: Conv2d,
    bn: BatchNorm,
}

impl ConvBn {
    fn new(vb: VarBuilder, from: usize, to: usize, kernel: usize, stride: usize) -> Result<Self> {
        let config = Conv2dConfig {
            padding: kernel / 2,
            stride,
            ..Default::default()
        };
        Ok(Self {
            conv: conv2d_no_bias(from, to, kernel, config, vb.pp("conv"))?,
            bn: batch_norm(to, 1e-5, vb.pp("bn"))?,
        })
    }

    fn forward(&self, x: &Tensor, train: bool) -> Result<Tensor> {
        self.bn.forward_t(&self.conv.forward(x)?, train)
    }
}

/// resnet's BasicBlock: two conv3x3, a 1x1 projection when the shape changes.
struct BasicBlock {
    first: ConvBn,
    second: ConvBn,
    downsample: Option<ConvBn>,
}

impl BasicBlock {
    fn new(vb: VarBuilder, from: usize, to: usize, stride: usize) -> Result<Self> {
        let downsample = (stride != 1 || from != to)
            .then(|| ConvBn::new(vb.pp("downsample"), from, to, 1, stride))
            .transpose()?;
        Ok(Self {
            first: ConvBn::new(vb.pp("1"), from, to, 3, stride)?,
            second: ConvBn::new(vb.pp("2"), to, to, 3, 1)?,
            downsample,
        })
    }

    fn forward(&self, x: &Tensor, train: bool) -> Result<Tensor> {
        let y = self.first.forward(x, train)?.relu()?;
        let y = self.second.forward(&y, train)?;
        let shortcut = match &self.downsample {
            Some(downsample) => downsample.forward(x, train)?,
            None => x.clone(),
        };
        (y + shortcut)?.relu()
    }
}

/// Max-pooling 3x3, stride 2, padding 1, for inputs that are >= 0 (after a ReLU), where
/// zero padding acts as -inf padding. candle's own `max_pool2d` has a gradient only when
/// the kernel equals the stride, so this takes the maximum of shifted views (whose
/// gradients candle has) and keeps every second row and column.
fn max_pool_3x3_stride_2(x: &Tensor) -> Result<Tensor> {
    let (n, c, h, w) = x.dims4()?;
    let padded = x.pad_with_zeros(2, 1, 1)?.pad_with_zeros(3, 1, 1)?;
    let rows = padded
        .narrow(2, 0, h)?
        .maximum(&padded.narrow(2, 1, h)?)?
        .maximum(&padded.narrow(2, 2, h)?)?;
    let both = rows
        .narrow(3, 0, w)?
        .maximum(&rows.narrow(3, 1, w)?)?
        .maximum(&rows.narrow(3, 2, w)?)?;
    both.reshape((n, c, h / 2, 2, w / 2, 2))?
        .narrow(3, 0, 1)?
        .narrow(5, 0, 1)?
        .reshape((n, c, h / 2, w / 2))
}

/// Nearest-neighbour upsampling x2 as a broadcast, whose gradient is a sum (candle's
/// `upsample_nearest2d` takes a grouped convolution per channel backwards).
fn upsample_x2(x: &Tensor) -> Result<Tensor> {
    let (n, c, h, w) = x.dims4()?;
    x.reshape((n, c, h, 1, w, 1))?
        .broadcast_as((n, c, h, 2, w, 2))?
        .reshape((n, c, 2 * h, 2 * w))
}

/// Two conv3x3 + BN + ReLU after upsampling and concatenating the skip.
struct DecoderBlock {
    first: ConvBn,
    second: ConvBn,
}

impl DecoderBlock {
    fn forward(&self, x: &Tensor, skip: Option<&Tensor>, train: bool) -> Result<Tensor> {
        let x = upsample_x2(x)?;
        let x = match skip {
            Some(skip) => Tensor::cat(&[&x, skip], 1)?,
            None => x,
        };
        let x = self.first.forward(&x, train)?.relu()?;
        self.second.forward(&x, train)?.relu()
    }
}

/// The whole network.
pub struct Unet {
    stem: ConvBn,
    stages: Vec<Vec<BasicBlock>>,
    decoder: Vec<DecoderBlock>,
    head: Conv2d,
}

/// Inputs must divide by this (five halvings).
pub const DIVISOR: usize = 32;

impl Unet {
    pub fn new(vb: VarBuilder, inputs: usize, outputs: usize) -> Result<Self> {
        let encoder = vb.pp("encoder");
        let stem = ConvBn::new(encoder.pp("stem"), inputs, 64, 7, 2)?;
        let widths = [64, 128, 256, 512];
        let mut stages = Vec::new();
        let mut from = 64;
        for (i, &width) in widths.iter().enumerate() {
            let stride = if i == 0 { 1 } else { 2 };
            let vb = encoder.pp(format!("layer{}", i + 1));
            stages.push(vec![
                BasicBlock::new(vb.pp("0"), from, width, stride)?,
                BasicBlock::new(vb.pp("1"), width, width, 1)?,
            ]);
            from = width;
        }
        // segmentation_models_pytorch's Unet over resnet18: block inputs are the previous
        // block's output (512 first), skips the encoder's features from deep to shallow.
        let decoder_widths = [256, 128, 64, 32, 16];
        let skips = [256, 128, 64, 64, 0];
        let mut decoder = Vec::new();
        let mut from = 512;
        for (i, (&width, &skip)) in decoder_widths.iter().zip(&skips).enumerate() {
            let vb = vb.pp(format!("decoder{i}"));
            decoder.push(DecoderBlock {
                first: ConvBn::new(vb.pp("1"), from + skip, width, 3, 1)?,
                second: ConvBn::new(vb.pp("2"), width, width, 3, 1)?,
            });
            from = width;
        }
        let head_config = Conv2dConfig {
            padding: 1,
            ..Default::default()
        };
        let head = conv2d(16, outputs, 3, head_config, vb.pp("head"))?;
        Ok(Self {
            stem,
            stages,
            decoder,
            head,
        })
    }

    pub fn forward(&self, x: &Tensor, train: bool) -> Result<Tensor> {
        // Features at 1/2 (stem), 1/4, 1/8, 1/16 and 1/32 of the grid.
        let stem = self.stem.forward(x, train)?.relu()?;
        let mut features = vec![stem.clone()];
        let mut x = max_pool_3x3_stride_2(&stem)?;
        for stage in &self.stages {
            for block in stage {
                x = block.forward(&x, train)?;
            }
            features.push(x.clone());
        }
        let mut x = features.pop().expect("five feature maps");
        for block in &self.decoder {
            let skip = features.pop();
            x = block.forward(&x, skip.as_ref(), train)?;
        }
        self.head.forward(&x)
    }
}
