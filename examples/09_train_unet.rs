//! # 08: an ERA5 U-Net trained in Rust (candle) on zarrpipe's batches
//!
//! The NCAR/NVIDIA ERA5 U-Net hackathon (`zarr_ML_optimization/train_unet.py`) showed its GPUs
//! waiting on data with three bars: training on real data, loading alone, and training on
//! synthetic data. This example is that experiment in Rust: a U-Net with a resnet18 encoder
//! (torchvision's layout, no pretrained weights) and segmentation_models_pytorch's decoder,
//! built with candle-nn, trained with AdamW (lr 1e-3, weight decay 1e-4) on the MSE of a
//! one-step forecast (inputs at t, targets at t+1), every variable normalised with its mean and
//! standard deviation. Setup A of the training benchmark (docs/training.md): `t2m, V500, U500, T500, Z500, Q500`, batch 16, whole
//! 640 x 1280 fields.
//!
//! `--loader` picks where the batches come from:
//! - `synthetic`: random tensors made once on the device, the upper bound;
//! - `gpu`, `cpu`, `split`, `auto`: zarrpipe decoding on the GPU, on the CPU, on both at once,
//!   or on the CPU with the GPU helping while training waits (`DecodeOn`), every one collating
//!   on the GPU and handing its batches to candle without a copy (`Batch::<Gpu>::into_candle`;
//!   feature `candle`);
//! - `host`: CPU decoding into host batches, copied into candle tensors (the CPU path).
//!
//! `--no-training` times the loader alone. Timing is honest: warm-up steps are left out, the
//! device is synchronised at the end of every step (so the time spent waiting for a batch is
//! time the device had nothing to do) and before each clock is read, and every loader runs
//! the same number of steps. The last line printed is a JSON object with the figures.
//!
//! Memory: candle 0.11 (without cuDNN) convolves through im2col and keeps every intermediate
//! of its batch norm for the backward pass. One training step at batch 1 on whole 640 x 1280
//! fields of six variables peaked at 5.0 GB resident on the CPU (`--device cpu --loader
//! synthetic`); memory grows with the batch, so batch 16 needs roughly sixteen times that: a
//! 141 GB H200 holds it, an 80 GB H100 may not (`--batch-size 8` there, and say so).
//!
//! ```sh
//! # CPU, in CI: 32 x 32 crops of the embedded sample, a few steps; fails unless the loss falls
//! cargo run --example 09_train_unet -- --tiny
//! # a GPU host (build set-up: scripts/cuda-build-env.sh), setup A's store
//! cargo run --release --features candle --example 09_train_unet -- --url era5_a.zarr --loader gpu
//! ```

use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{bail, ensure, Context};
use candle_core::{DType, Device, Tensor};
use candle_nn::{Optimizer, VarBuilder, VarMap};
use clap::{Parser, ValueEnum};
use zarrpipe::batcher::Shuffle;
use zarrpipe::collate::CollateOptions;
use zarrpipe::pipeline::PipelineBuilder;
use zarrpipe::prelude::*;

/// Setup A's variables: surface temperature and five 500 hPa fields.
pub const SETUP_A_VARIABLES: &str = "t2m,V500,U500,T500,Z500,Q500";

/// The sample's surface variables, which `--tiny` trains on when `--vars` is not given.
pub const TINY_VARIABLES: &str = "t2m,u10,v10,msl";

/// Where the batches come from.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum Loader {
    /// Random tensors made once on the device: training without a loader (the upper bound).
    Synthetic,
    /// zarrpipe: decode on the GPU, collate on the GPU (feature `candle`).
    Gpu,
    /// zarrpipe: decode on the CPU, collate on the GPU (feature `candle`).
    Cpu,
    /// zarrpipe: decode each batch on both, shared by measured rates (feature `candle`).
    Split,
    /// zarrpipe: decode on the CPU, the GPU helping while training waits (feature `candle`).
    Auto,
    /// zarrpipe: decode and collate on the CPU, batches copied into candle tensors.
    Host,
}

/// The example's flags (`--help` lists them).
#[derive(Clone, Debug, Parser)]
#[command(about = "Train an ERA5 U-Net (resnet18 encoder) with candle on zarrpipe's batches")]
pub struct Args {
    /// The Zarr store (default: the embedded sample with `--tiny`).
    #[arg(long)]
    pub url: Option<String>,
    /// Variables, in and out, as channels in this order [default: t2m,V500,U500,T500,Z500,Q500;
    /// with --tiny: t2m,u10,v10,msl].
    #[arg(long, value_delimiter = ',')]
    pub vars: Option<Vec<String>>,
    /// Where the batches come from [default: gpu; with --tiny: host].
    #[arg(long, value_enum)]
    pub loader: Option<Loader>,
    /// Time the loader alone: batches are delivered to the device and dropped.
    #[arg(long)]
    pub no_training: bool,
    /// `cpu` or `cuda:N` [default: cuda:0 with the `candle` feature, else cpu; with --tiny: cpu].
    #[arg(long)]
    pub device: Option<String>,
    /// Samples per step [default: 16; with --tiny: 4].
    #[arg(long)]
    pub batch_size: Option<usize>,
    /// Steps before the clock starts [default: 5; with --tiny: 2].
    #[arg(long)]
    pub warmup: Option<usize>,
    /// Timed steps, the same for every loader [default: 50; with --tiny: 6].
    #[arg(long)]
    pub steps: Option<usize>,
    /// Print the loss every this many steps [default: 10; with --tiny: 1].
    #[arg(long)]
    pub log_every: Option<usize>,
    /// Per-variable mean and std, as `zarrpipe stats URL --json` prints them (default: computed
    /// here, over every chunk of each variable).
    #[arg(long)]
    pub normalize: Option<PathBuf>,
    /// Square crops of this many points (latitude and longitude) instead of whole fields
    /// [default: whole fields; with --tiny: 32].
    #[arg(long)]
    pub patch: Option<u64>,
    /// Batches loaded ahead of training.
    #[arg(long, default_value_t = 4)]
    pub prefetch: usize,
    /// `--loader auto`: most of the GPU's time decoding may take (e.g. 0.05).
    #[arg(long)]
    pub gpu_share: Option<f64>,
    /// Shuffling seed (each epoch shuffles with seed + epoch).
    #[arg(long, default_value_t = 0)]
    pub seed: u64,
    /// The CI check: the sample store, 32 x 32 crops, batch 4, 2 + 6 steps on the CPU with
    /// host batches; fails unless the loss is finite and falls. Flags given override these.
    #[arg(long)]
    pub tiny: bool,
}

/// What a run measured (also printed as the last line, in JSON).
#[derive(Clone, Debug, serde::Serialize)]
pub struct Report {
    pub loader: String,
    pub training: bool,
    pub device: String,
    pub batch_size: usize,
    /// `[channels in, latitude, longitude]`.
    pub input_shape: Vec<usize>,
    pub warmup_steps: usize,
    pub timed_steps: usize,
    pub seconds: f64,
    pub samples_per_second: f64,
    pub step_ms: f64,
    /// Of the timed wall-clock time, the fraction spent waiting for the next batch.
    pub data_wait_fraction: f64,
    /// GPU time the loader's batches took (decode and collate kernels, CUDA events) during the
    /// timed steps, and that over the timed wall-clock time.
    pub loader_gpu_seconds: f64,
    pub loader_gpu_fraction: f64,
    /// Every step's loss, warm-up included (empty with `--no-training`).
    pub losses: Vec<f32>,
}

// --- 1. The model: a U-Net with a resnet18 encoder ---
//
// Encoder: torchvision's resnet18 (conv 7x7/2 + BN + ReLU, max-pool 3x3/2, four stages of two
// BasicBlocks with 64, 128, 256, 512 channels). Decoder: segmentation_models_pytorch's `Unet`
// (decoder channels 256, 128, 64, 32, 16; each block upsamples x2 (nearest), concatenates the
// skip and applies two conv3x3 + BN + ReLU), then a conv3x3 head to the output channels.

mod unet {
    use candle_core::{Module, ModuleT, Result, Tensor};
    use candle_nn::VarBuilder;
    use candle_nn::{batch_norm, conv2d, conv2d_no_bias, BatchNorm, Conv2d, Conv2dConfig};

    /// A convolution without bias followed by batch normalisation.
    struct ConvBn {
        conv: Conv2d,
        bn: BatchNorm,
    }

    impl ConvBn {
        fn new(
            vb: VarBuilder,
            from: usize,
            to: usize,
            kernel: usize,
            stride: usize,
        ) -> Result<Self> {
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
}

// --- 2. The batches: zarrpipe's stream, or synthetic tensors ---

/// What every loader's pipeline shares.
struct DataConfig {
    dataset: Arc<Dataset>,
    variables: Vec<String>,
    patch: Option<u64>,
    batch_size: usize,
    prefetch: usize,
    seed: u64,
    stats_json: String,
}

impl DataConfig {
    /// One epoch's pipeline: inputs at t, targets at t+1, shuffled, normalised, NaN as 0.
    fn builder(&self, epoch: u64) -> PipelineBuilder {
        let mut builder = Pipeline::from_dataset(self.dataset.clone())
            .variables(self.variables.clone())
            .forecast(1, [1])
            .batch_size(self.batch_size)
            .drop_last(true)
            .shuffle(Shuffle::Full)
            .seed(self.seed)
            .epoch(epoch)
            .prefetch(self.prefetch)
            .collate_options(CollateOptions {
                nan_fill: Some(0.0),
                ..Default::default()
            })
            .normalize_with_stats(self.stats_json.clone());
        if let Some(patch) = self.patch {
            builder = builder
                .window("latitude", patch, patch)
                .window("longitude", patch, patch);
        }
        builder
    }
}

/// One loader's stream of `(inputs, targets)` candle tensors on the training device, epoch
/// after epoch (each epoch's pipeline is built when the last one ends).
// One value per run: the variants' sizes do not matter.
#[allow(clippy::large_enum_variant)]
enum Batches {
    Synthetic {
        inputs: Tensor,
        targets: Tensor,
    },
    Host {
        config: DataConfig,
        epoch: u64,
        stream: BatchStream<Host>,
        /// GPU time of the epochs done.
        past_gpu: Duration,
    },
    #[cfg(feature = "candle")]
    Gpu {
        config: DataConfig,
        gpu: Arc<GpuDevice>,
        decode_on: DecodeOn,
        epoch: u64,
        stream: BatchStream<Gpu>,
        past_gpu: Duration,
    },
}

impl Batches {
    async fn next(&mut self, device: &Device) -> anyhow::Result<(Tensor, Tensor)> {
        match self {
            Self::Synthetic { inputs, targets } => Ok((inputs.clone(), targets.clone())),
            Self::Host {
                config,
                epoch,
                stream,
                past_gpu,
            } => {
                let batch = match stream.try_next().await? {
                    Some(batch) => batch,
                    None => {
                        *past_gpu += stream.metrics().gpu_busy;
                        *epoch += 1;
                        *stream = config.builder(*epoch).build().await?;
                        stream
                            .try_next()
                            .await?
                            .context("an epoch with no batches")?
                    }
                };
                let targets = batch.targets.context("forecasting batches have targets")?;
                Ok((
                    host_tensor(batch.inputs, device)?,
                    host_tensor(targets, device)?,
                ))
            }
            #[cfg(feature = "candle")]
            Self::Gpu {
                config,
                gpu,
                decode_on,
                epoch,
                stream,
                past_gpu,
            } => {
                let batch = match stream.try_next().await? {
                    Some(batch) => batch,
                    None => {
                        *past_gpu += stream.metrics().gpu_busy;
                        *epoch += 1;
                        *stream = gpu_stream(config, gpu, *decode_on, *epoch).await?;
                        stream
                            .try_next()
                            .await?
                            .context("an epoch with no batches")?
                    }
                };
                // The same device memory, now candle's; candle's stream waits for the batch.
                let batch = batch.into_candle(device)?;
                let targets = batch.targets.context("forecasting batches have targets")?;
                Ok((batch.inputs, targets))
            }
        }
    }

    /// The GPU time the loader's delivered batches took so far.
    fn gpu_busy(&self) -> Duration {
        match self {
            Self::Synthetic { .. } => Duration::ZERO,
            Self::Host {
                stream, past_gpu, ..
            } => *past_gpu + stream.metrics().gpu_busy,
            #[cfg(feature = "candle")]
            Self::Gpu {
                stream, past_gpu, ..
            } => *past_gpu + stream.metrics().gpu_busy,
        }
    }
}

/// A host batch tensor as a candle tensor on `device` (a copy; an upload on a GPU).
fn host_tensor(array: ndarray::ArrayD<f32>, device: &Device) -> anyhow::Result<Tensor> {
    let shape = array.shape().to_vec();
    let values: Vec<f32> = match array.as_slice() {
        Some(values) => values.to_vec(),
        None => array.iter().copied().collect(),
    };
    Ok(Tensor::from_vec(values, shape, device)?)
}

#[cfg(feature = "candle")]
async fn gpu_stream(
    config: &DataConfig,
    gpu: &Arc<GpuDevice>,
    decode_on: DecodeOn,
    epoch: u64,
) -> anyhow::Result<BatchStream<Gpu>> {
    Ok(config
        .builder(epoch)
        .gpu(gpu.clone())
        .decode_on(decode_on)
        .collate_on_gpu()
        .build()
        .await?)
}

/// The training device from `--device`.
fn training_device(name: Option<&str>, tiny: bool) -> anyhow::Result<Device> {
    let name = match name {
        Some(name) => name,
        None if tiny || !cfg!(feature = "candle") => "cpu",
        None => "cuda:0",
    };
    if name == "cpu" {
        return Ok(Device::Cpu);
    }
    let ordinal: usize = name
        .strip_prefix("cuda:")
        .and_then(|n| n.parse().ok())
        .with_context(|| format!("--device {name}: expected cpu or cuda:N"))?;
    if !cfg!(feature = "candle") {
        bail!("--device {name} needs the `candle` feature (see scripts/cuda-build-env.sh)");
    }
    Ok(Device::new_cuda(ordinal)?)
}

/// The statistics for normalisation: the `--normalize` file, or computed now.
async fn statistics(
    dataset: &Arc<Dataset>,
    variables: &[String],
    file: Option<&PathBuf>,
) -> anyhow::Result<String> {
    if let Some(file) = file {
        return std::fs::read_to_string(file)
            .with_context(|| format!("cannot read --normalize {}", file.display()));
    }
    println!(
        "computing each variable's mean and std over every chunk (--normalize FILE skips this)"
    );
    let mut stats = Vec::new();
    for name in variables {
        let variable = dataset.variable(name)?;
        let decoder = Arc::new(CpuDecoder::new());
        let variable_stats = zarrpipe::stats::variable_stats(variable, decoder, 64)
            .await
            .with_context(|| format!("computing the statistics of {name}"))?;
        stats.push(variable_stats);
    }
    Ok(serde_json::to_string(&stats)?)
}

/// The flags with their defaults filled in (`--tiny` has its own).
struct Settings {
    url: String,
    variables: Vec<String>,
    loader: Loader,
    batch_size: usize,
    warmup: usize,
    steps: usize,
    log_every: usize,
    patch: Option<u64>,
}

impl Settings {
    fn new(args: &Args) -> anyhow::Result<Self> {
        let tiny = args.tiny;
        let url = match (&args.url, tiny) {
            (Some(url), _) => url.clone(),
            (None, true) => zarrpipe::sample::ensure_sample(|_, _| {})?,
            (None, false) => bail!("--url is needed (or --tiny, which uses the embedded sample)"),
        };
        let names = if tiny {
            TINY_VARIABLES
        } else {
            SETUP_A_VARIABLES
        };
        let variables = match &args.vars {
            Some(variables) => variables.clone(),
            None => names.split(',').map(String::from).collect(),
        };
        let pick = |value: Option<usize>, default: usize, tiny_default: usize| {
            value.unwrap_or(if tiny { tiny_default } else { default })
        };
        let settings = Self {
            url,
            variables,
            loader: args
                .loader
                .unwrap_or(if tiny { Loader::Host } else { Loader::Gpu }),
            batch_size: pick(args.batch_size, 16, 4),
            warmup: pick(args.warmup, 5, 2),
            steps: pick(args.steps, 50, 6),
            log_every: pick(args.log_every, 10, 1),
            patch: args.patch.or(tiny.then_some(32)),
        };
        ensure!(settings.steps > 0, "--steps must be at least 1");
        ensure!(settings.batch_size > 0, "--batch-size must be at least 1");
        ensure!(settings.log_every > 0, "--log-every must be at least 1");
        if args.no_training && settings.loader == Loader::Synthetic {
            bail!("--no-training times a loader, and `synthetic` has none");
        }
        Ok(settings)
    }
}

// --- 3. The run: build, warm up, time the steps ---

/// Trains (or, with `--no-training`, loads) for `warmup + steps` steps and reports.
pub async fn run(args: Args) -> anyhow::Result<Report> {
    let settings = Settings::new(&args)?;
    let Settings {
        url,
        variables,
        loader,
        batch_size,
        warmup,
        steps,
        log_every,
        patch,
    } = settings;
    let device = training_device(args.device.as_deref(), args.tiny)?;
    let device_name = match device.location() {
        candle_core::DeviceLocation::Cuda { gpu_id } => format!("cuda:{gpu_id}"),
        other => format!("{other:?}").to_lowercase(),
    };

    // The layout fixes the model's channels and the grid: `[channels, latitude, longitude]`.
    let dataset = Arc::new(
        Dataset::open(&url)
            .await
            .with_context(|| format!("cannot open {url}"))?,
    );
    let mut spec = WindowSpec::new().forecast(1, [1]);
    if let Some(patch) = patch {
        spec = spec
            .window("latitude", patch, patch)
            .window("longitude", patch, patch);
    }
    let layout = SampleLayout::new(&dataset, &variables, &spec)
        .with_context(|| format!("variables {variables:?} of {url}"))?;
    let input_shape = layout.sample_shape();
    let target_shape = layout.target_shape().context("forecasting has targets")?;
    ensure!(
        input_shape.len() == 3,
        "the U-Net takes [channels, latitude, longitude] samples; {variables:?} of {url} gives \
         {input_shape:?} (a variable with other dimensions?)"
    );
    for (axis, &size) in input_shape[1..].iter().enumerate() {
        ensure!(
            size % unet::DIVISOR == 0,
            "the U-Net halves the grid five times, so its sides must divide by {}: {} is {size} \
             (pick --patch to crop)",
            unet::DIVISOR,
            ["latitude", "longitude"][axis]
        );
    }
    println!(
        "{url}: {} samples of {input_shape:?} -> {target_shape:?}, batch {}, on {device_name}",
        layout.num_samples(),
        batch_size
    );

    // The model and the optimiser.
    let varmap = VarMap::new();
    let model = unet::Unet::new(
        VarBuilder::from_varmap(&varmap, DType::F32, &device),
        input_shape[0],
        target_shape[0],
    )?;
    let parameters: usize = varmap.all_vars().iter().map(|v| v.elem_count()).sum();
    println!(
        "U-Net (resnet18 encoder): {:.2} M values (parameters and BN statistics)",
        parameters as f64 / 1e6
    );
    let mut optimizer = candle_nn::AdamW::new(
        varmap.all_vars(),
        candle_nn::ParamsAdamW {
            lr: 1e-3,
            weight_decay: 1e-4,
            ..Default::default()
        },
    )?;

    // The loader.
    let mut batches = match loader {
        Loader::Synthetic => {
            let batch = |shape: &[usize]| {
                let dims: Vec<usize> = std::iter::once(batch_size)
                    .chain(shape.iter().copied())
                    .collect();
                Tensor::randn(0f32, 1f32, dims, &device)
            };
            Batches::Synthetic {
                inputs: batch(&input_shape)?,
                targets: batch(&target_shape)?,
            }
        }
        loader => {
            let stats_json = statistics(&dataset, &variables, args.normalize.as_ref()).await?;
            let config = DataConfig {
                dataset: dataset.clone(),
                variables: variables.clone(),
                patch,
                batch_size,
                prefetch: args.prefetch,
                seed: args.seed,
                stats_json,
            };
            zarrpipe_batches(config, loader, &device, args.gpu_share).await?
        }
    };

    // Warm-up steps, then the timed ones; the device is synchronised at the end of each.
    let mut losses = Vec::new();
    let mut waited = Duration::ZERO;
    let mut started = Instant::now();
    let mut gpu_at_start = Duration::ZERO;
    for step in 0..warmup + steps {
        if step == warmup {
            device.synchronize()?;
            started = Instant::now();
            waited = Duration::ZERO;
            gpu_at_start = batches.gpu_busy();
        }
        let asked = Instant::now();
        let (inputs, targets) = batches.next(&device).await?;
        waited += asked.elapsed();
        if args.no_training {
            // The batch is on the device once the device has caught up.
            device.synchronize()?;
            continue;
        }
        let predicted = model.forward(&inputs, true)?;
        let loss = candle_nn::loss::mse(&predicted, &targets)?;
        optimizer.backward_step(&loss)?;
        let loss = loss.to_scalar::<f32>()?; // synchronises the device
        losses.push(loss);
        if (step + 1) % log_every == 0 || step + 1 == warmup + steps {
            let phase = if step < warmup { " (warm-up)" } else { "" };
            println!("step {:>4}{phase}: loss {loss:.4}", step + 1);
        }
    }
    device.synchronize()?;
    let seconds = started.elapsed().as_secs_f64();

    // --- 4. The figures ---
    let loader_gpu = (batches.gpu_busy() - gpu_at_start).as_secs_f64();
    let report = Report {
        loader: format!("{:?}", loader).to_lowercase(),
        training: !args.no_training,
        device: device_name,
        batch_size,
        input_shape,
        warmup_steps: warmup,
        timed_steps: steps,
        seconds,
        samples_per_second: (steps * batch_size) as f64 / seconds,
        step_ms: 1e3 * seconds / steps as f64,
        data_wait_fraction: (waited.as_secs_f64() / seconds).min(1.0),
        loader_gpu_seconds: loader_gpu,
        loader_gpu_fraction: loader_gpu / seconds,
        losses,
    };
    println!(
        "{} ({}): {:.2} samples/s, {:.1} ms a step, waiting for data {:.1}% of the time, \
         loader GPU time {:.3} s ({:.1}% of the wall time)",
        report.loader,
        if report.training {
            "training"
        } else {
            "loading only"
        },
        report.samples_per_second,
        report.step_ms,
        100.0 * report.data_wait_fraction,
        report.loader_gpu_seconds,
        100.0 * report.loader_gpu_fraction,
    );
    Ok(report)
}

/// The pipeline for a zarrpipe loader.
async fn zarrpipe_batches(
    config: DataConfig,
    loader: Loader,
    device: &Device,
    gpu_share: Option<f64>,
) -> anyhow::Result<Batches> {
    let decode_on = match loader {
        Loader::Host => {
            let stream = config.builder(0).build().await?;
            return Ok(Batches::Host {
                config,
                epoch: 0,
                stream,
                past_gpu: Duration::ZERO,
            });
        }
        Loader::Synthetic => unreachable!("synthetic batches need no pipeline"),
        Loader::Gpu => DecodeOn::Gpu,
        Loader::Cpu => DecodeOn::Cpu,
        Loader::Split => DecodeOn::Split,
        Loader::Auto => DecodeOn::Auto { gpu_share },
    };
    #[cfg(feature = "candle")]
    {
        let Device::Cuda(cuda) = device else {
            bail!("--loader {loader:?} delivers GPU batches: train on a cuda device (--device cuda:N)");
        };
        let ordinal = cuda.cuda_stream().context().ordinal();
        let options = GpuOptions {
            device: ordinal,
            ..Default::default()
        };
        let gpu = GpuDevice::open(options, 16 << 30)?;
        let stream = gpu_stream(&config, &gpu, decode_on, 0).await?;
        Ok(Batches::Gpu {
            config,
            gpu,
            decode_on,
            epoch: 0,
            stream,
            past_gpu: Duration::ZERO,
        })
    }
    #[cfg(not(feature = "candle"))]
    {
        let _ = (config, device, decode_on);
        bail!(
            "--loader {loader:?} hands GPU batches to candle: build with --features candle \
             (scripts/cuda-build-env.sh); without it, use --loader host or synthetic"
        )
    }
}

/// `--tiny`'s check: every loss finite, and the last three steps' mean below the first three's.
pub fn check_loss_falls(losses: &[f32]) -> anyhow::Result<()> {
    ensure!(
        losses.len() >= 6,
        "need at least 6 steps to see the loss fall, got {}",
        losses.len()
    );
    if let Some(step) = losses.iter().position(|loss| !loss.is_finite()) {
        bail!("the loss at step {} is {}", step + 1, losses[step]);
    }
    let mean = |values: &[f32]| values.iter().sum::<f32>() / values.len() as f32;
    let (first, last) = (mean(&losses[..3]), mean(&losses[losses.len() - 3..]));
    ensure!(
        last < first,
        "the loss did not fall: the first three steps averaged {first:.4}, the last three {last:.4}"
    );
    println!("loss fell from {first:.4} (first three steps) to {last:.4} (last three)");
    Ok(())
}

fn main() -> anyhow::Result<()> {
    let args = Args::parse();
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .max_blocking_threads(zarrpipe::MAX_BLOCKING_THREADS)
        .build()?;
    let check = args.tiny && !args.no_training;
    let report = runtime.block_on(run(args))?;
    println!("{}", serde_json::to_string(&report)?);
    if check {
        check_loss_falls(&report.losses)?;
    }
    Ok(())
}
