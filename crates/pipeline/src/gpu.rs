//! One GPU's stages: its decoder (nvCOMP, kernels, pinned staging) and its tensor pool, shared
//! by the pipelines that run on it.

use std::sync::Arc;

use zarrpipe_batcher::SampleLayout;
use zarrpipe_codec_gpu::{GpuDecoder, GpuOptions};
use zarrpipe_collate::{CollateOptions, DeviceCollator, Gpu, TensorPool};

use crate::{Error, Result};

/// A batch in device memory: its tensors are complete once its `ready` event has (make the
/// consumer's stream wait on it with [`Batch::wait_on`](zarrpipe_collate::Batch::wait_on),
/// or synchronise it). Dropping the batch returns its tensors' memory to the pipeline's pool.
pub type GpuBatch = zarrpipe_collate::Batch<Gpu>;

/// One GPU's decoder (kernels, nvCOMP, pinned staging and device buffers) and tensor pool,
/// shared by the pipelines that run on it. Opening one costs pinned allocations and kernel
/// loads, so reuse it across epochs ([`PipelineBuilder::gpu`](crate::PipelineBuilder::gpu)).
/// Its memory goes back to the driver when the last pipeline and handle are dropped.
pub struct GpuDevice {
    decoder: Arc<GpuDecoder>,
    pool: TensorPool,
}

impl std::fmt::Debug for GpuDevice {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("GpuDevice")
            .field("decoder", &self.decoder)
            .field("pool", &self.pool)
            .finish()
    }
}

impl GpuDevice {
    /// Opens CUDA device `options.device`. Batch tensors handed out at once (delivered and
    /// not yet dropped, or being collated) stay under `tensor_memory` bytes.
    pub fn open(options: GpuOptions, tensor_memory: usize) -> Result<Arc<Self>> {
        let decoder = Arc::new(GpuDecoder::new(options)?);
        let pool = TensorPool::new(tensor_memory);
        Ok(Arc::new(Self { decoder, pool }))
    }

    /// The device's decoder: the decode stage on this GPU.
    pub fn decoder(&self) -> Arc<GpuDecoder> {
        self.decoder.clone()
    }

    /// A collator into this device's tensor pool: the collate stage on this GPU. Chunks
    /// decoded on the CPU are uploaded on a stream of its own.
    pub fn collator(
        &self,
        layout: Arc<SampleLayout>,
        options: CollateOptions,
    ) -> Result<DeviceCollator> {
        let stream = self
            .decoder
            .context()
            .new_stream()
            .map_err(|error| Error::Gpu {
                what: "creating the collator's stream".into(),
                source: Box::new(error),
            })?;
        Ok(DeviceCollator::new(layout, options, stream, self.pool.clone())?)
    }

    /// The device's tensor pool.
    pub fn pool(&self) -> &TensorPool {
        &self.pool
    }
}

impl Drop for GpuDevice {
    fn drop(&mut self) {
        // Kept tensor buffers go back to the device's pool before the decoder trims it.
        self.pool.release_free();
    }
}
