//! One GPU's stages: its decoder (nvCOMP, kernels, pinned staging) and its tensor pool, shared
//! by the pipelines that run on it.

use std::sync::{Arc, Mutex};

use zarrpipe_batcher::SampleLayout;
use zarrpipe_codec_gpu::{CpuDecoder, GpuDecoder, GpuOptions, SplitDecoder, SplitPolicy};
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
    /// Split decoders made so far, one per policy, kept so that what they learnt (rates,
    /// throttle) carries over from epoch to epoch.
    splits: Mutex<Vec<Arc<SplitDecoder>>>,
}

impl std::fmt::Debug for GpuDevice {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("GpuDevice")
            .field("decoder", &self.decoder)
            .field("pool", &self.pool)
            .finish_non_exhaustive()
    }
}

impl GpuDevice {
    /// Opens CUDA device `options.device`. Batch tensors handed out at once (delivered and
    /// not yet dropped, or being collated) stay under `tensor_memory` bytes.
    pub fn open(options: GpuOptions, tensor_memory: usize) -> Result<Arc<Self>> {
        let decoder = Arc::new(GpuDecoder::new(options)?);
        let pool = TensorPool::on_device(tensor_memory, decoder.memory());
        Ok(Arc::new(Self {
            decoder,
            pool,
            splits: Mutex::new(Vec::new()),
        }))
    }

    /// This device's split decoder with `policy` (made on first use, then the same one): the
    /// CPU side on a rayon pool of its own, so the GPU side's planning, on rayon's global
    /// pool, never queues behind its chunks.
    pub fn split_decoder(&self, policy: SplitPolicy) -> Result<Arc<SplitDecoder>> {
        let mut splits = self.splits.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(split) = splits.iter().find(|split| split.policy() == policy) {
            return Ok(split.clone());
        }
        let pool = rayon::ThreadPoolBuilder::new()
            .thread_name(|n| format!("zarrpipe-split-cpu{n}"))
            .start_handler(|_| yield_to_the_gpu_side())
            .build()
            .map_err(|error| Error::Gpu {
                what: "starting the split decoder's CPU threads".into(),
                source: Box::new(error),
            })?;
        let cpu = Arc::new(CpuDecoder::with_pool(Arc::new(pool)));
        let split = Arc::new(SplitDecoder::new(cpu, self.decoder.clone(), policy));
        splits.push(split.clone());
        Ok(split)
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
        Ok(DeviceCollator::new(
            layout,
            options,
            stream,
            self.pool.clone(),
        )?)
    }

    /// The device's tensor pool.
    pub fn pool(&self) -> &TensorPool {
        &self.pool
    }
}

/// Lowers the calling thread's priority, so the threads that feed the GPU (planning, frame
/// checks, staging) run first when the split decoder's CPU side keeps every core busy:
/// starved, the GPU side slows down more than the CPU side gains.
fn yield_to_the_gpu_side() {
    #[cfg(target_os = "linux")]
    // SAFETY: setpriority reads no memory of ours; on Linux, `who = 0` names the calling
    // thread. Failing (no permission) only leaves the priority as it was.
    unsafe {
        libc::setpriority(libc::PRIO_PROCESS, 0, 10);
    }
}

impl Drop for GpuDevice {
    fn drop(&mut self) {
        // Kept tensor buffers go back to the device's pool before the decoder trims it.
        self.pool.release_free();
    }
}
