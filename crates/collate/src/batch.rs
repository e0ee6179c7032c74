//! The one batch type: `[batch, channel, window...]` tensors and what goes with them, generic
//! over where the tensors live ([`Host`], `Gpu` with the `cuda` feature, `Candle` with
//! `candle`).

use std::sync::Arc;

use ndarray::ArrayD;
use zarrpipe_batcher::Sample;
use zarrpipe_codec_gpu::DecodedChunks;
use zarrpipe_core::{BatchStats, Device, Pace, Staged};

/// Where a batch's tensors live, and what they are there.
pub trait Place: Send + 'static {
    /// The value tensors (inputs, targets, latitude weights).
    type Tensor: Send + std::fmt::Debug;
    /// The u8 masks (padding, NaN).
    type Mask: Send + std::fmt::Debug;
    /// What tells the consumer the tensors are complete (a CUDA event on the GPU).
    type Ready: Send + std::fmt::Debug;

    /// Bytes of a tensor's elements.
    fn tensor_bytes(tensor: &Self::Tensor) -> usize;

    /// The device a tensor's memory is on.
    fn tensor_device(tensor: &Self::Tensor) -> Device;
}

/// Host memory: float32 `ndarray`s, complete when delivered.
#[derive(Clone, Copy, Debug)]
pub struct Host;

impl Place for Host {
    type Tensor = ArrayD<f32>;
    type Mask = ArrayD<u8>;
    type Ready = ();

    fn tensor_bytes(tensor: &ArrayD<f32>) -> usize {
        tensor.len() * std::mem::size_of::<f32>()
    }

    fn tensor_device(_tensor: &ArrayD<f32>) -> Device {
        Device::Cpu
    }
}

/// One batch of samples, its tensors in `P`'s memory.
#[derive(Debug)]
pub struct Batch<P: Place = Host> {
    /// The batch's number in the epoch.
    pub index: u64,
    /// The epoch it belongs to (a stream may deliver several in a row).
    pub epoch: u64,
    /// `[batch, channel, window...]`, float32 on the host; on the GPU in the collator's type
    /// (f32, bf16 or f16).
    pub inputs: P::Tensor,
    /// With forecasting pairs: `[batch, leads x channels, window...]`, the same windows at
    /// each lead time.
    pub targets: Option<P::Tensor>,
    /// With padded windows ([`Edge::Pad`](zarrpipe_batcher::Edge)): `[batch, window...]`, 1
    /// where `inputs` holds data, 0 where it holds the pad value.
    pub mask: Option<P::Mask>,
    /// With [`CollateOptions::nan_mask`](crate::CollateOptions::nan_mask): the inputs' shape,
    /// 0 where the value was NaN.
    pub nan_mask: Option<P::Mask>,
    /// With [`CollateOptions::latitude_weights`](crate::CollateOptions::latitude_weights):
    /// `[batch, latitude window]`, float32.
    pub latitude_weights: Option<P::Tensor>,
    /// The samples, in the batch's order.
    pub samples: Vec<Sample>,
    /// Complete once this has: on the GPU, an event to wait on (see `Batch::<Gpu>::wait_on`).
    pub ready: P::Ready,
    /// What each stage cost for this batch.
    pub stats: BatchStats,
    /// Where the consumer's pace is recorded when the batch is handed over (see
    /// [`Staged::pace`](zarrpipe_core::Staged)).
    pub pace: Option<Arc<Pace>>,
}

impl<P: Place> Batch<P> {
    /// Bytes of the input and target tensors.
    pub fn tensor_bytes(&self) -> usize {
        P::tensor_bytes(&self.inputs) + self.targets.as_ref().map_or(0, P::tensor_bytes)
    }
}

impl Clone for Batch<Host> {
    fn clone(&self) -> Self {
        Self {
            index: self.index,
            epoch: self.epoch,
            inputs: self.inputs.clone(),
            targets: self.targets.clone(),
            mask: self.mask.clone(),
            nan_mask: self.nan_mask.clone(),
            latitude_weights: self.latitude_weights.clone(),
            samples: self.samples.clone(),
            ready: (),
            stats: self.stats,
            pace: self.pace.clone(),
        }
    }
}

/// The input of collation: a batch's samples and its decoded chunks, on either side.
pub type DecodedBatch = Staged<Vec<Sample>, DecodedChunks>;
