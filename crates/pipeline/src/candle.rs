//! GPU batches as candle tensors (feature `candle`), without a copy.

use zarrpipe_batcher::Sample;
use zarrpipe_collate::candle_core::{Device, Tensor};
use zarrpipe_collate::DeviceTensor;

use crate::{GpuBatch, Result};

/// A [`GpuBatch`] whose tensors belong to candle: same shapes and types, same device memory.
#[derive(Debug)]
pub struct CandleBatch {
    pub index: u64,
    /// `[batch, channel, window...]` in the pipeline's type (f32, bf16 or f16).
    pub inputs: Tensor,
    pub targets: Option<Tensor>,
    /// Padding mask `[batch, window...]`, u8.
    pub mask: Option<Tensor>,
    /// NaN mask of the inputs' shape, u8.
    pub nan_mask: Option<Tensor>,
    /// Latitude weights `[batch, latitude window]`, f32.
    pub latitude_weights: Option<Tensor>,
    pub samples: Vec<Sample>,
}

impl GpuBatch {
    /// Hands the batch to candle on `device`, the `candle_core::Device` the model runs on (it
    /// must be on the pipeline's GPU). candle's stream waits for the batch on the device, so
    /// this does not block. The tensors leave the pipeline's pool: candle frees them.
    pub fn into_candle(self, device: &Device) -> Result<CandleBatch> {
        let ready = &self.ready;
        let hand = |tensor: DeviceTensor| tensor.into_candle(device, ready);
        let optional = |tensor: Option<DeviceTensor>| tensor.map(hand).transpose();
        Ok(CandleBatch {
            index: self.index,
            inputs: hand(self.inputs)?,
            targets: optional(self.targets)?,
            mask: optional(self.mask)?,
            nan_mask: optional(self.nan_mask)?,
            latitude_weights: optional(self.latitude_weights)?,
            samples: self.samples,
        })
    }
}
