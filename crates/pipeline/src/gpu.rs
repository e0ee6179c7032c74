//! One GPU's stages: its decoder (nvCOMP, kernels, pinned staging) and its tensor pool, shared
//! by the pipelines that run on it.

use std::sync::{Arc, Mutex};

use zarrpipe_batcher::SampleLayout;
use zarrpipe_codec_gpu::{CpuDecoder, GpuDecoder, GpuOptions, SplitDecoder, SplitPolicy};
use zarrpipe_collate::{CollateOptions, DeviceCollator, Gpu, TensorPool};
use zarrpipe_cuda::cudarc;

use crate::{DecodeThreads, Error, GpuMemory, Result};

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
    memory: GpuMemory,
    /// Split decoders made so far, one per policy, kept so that what they learnt (rates,
    /// throttle) carries over from epoch to epoch.
    splits: Mutex<Vec<(DecodeThreads, Arc<SplitDecoder>)>>,
    /// CPU decoders feeding this GPU's collation, one per set of threads.
    cpu_decoders: Mutex<Vec<(DecodeThreads, Arc<CpuDecoder>)>>,
}

impl std::fmt::Debug for GpuDevice {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("GpuDevice")
            .field("decoder", &self.decoder)
            .field("pool", &self.pool)
            .field("memory", &self.memory)
            .finish_non_exhaustive()
    }
}

impl GpuDevice {
    /// Opens CUDA device `options.device`. The decoder's batches stay under
    /// `options.device_memory` bytes, and batch tensors handed out at once (delivered and not
    /// yet dropped, or being collated) under `tensor_memory`.
    pub fn open(options: GpuOptions, tensor_memory: usize) -> Result<Arc<Self>> {
        let memory = GpuMemory {
            budget: options.device_memory + tensor_memory,
            decoding: options.device_memory,
            tensors: tensor_memory,
        };
        Self::open_with(options, memory)
    }

    /// Opens CUDA device `options.device` with `budget` bytes of its memory for the pipelines
    /// on it (`None`: [`GpuMemory::default_for`] the device), shared between decoding and
    /// batch tensors ([`GpuMemory::within`]); `tensors`, when given, is the batch tensors'
    /// share instead of half the budget ([`GpuMemory::with_tensors`]).
    pub fn open_within(
        mut options: GpuOptions,
        budget: Option<usize>,
        tensors: Option<usize>,
    ) -> Result<Arc<Self>> {
        let memory = GpuMemory::for_device(options.device, budget)?;
        let memory = match tensors {
            Some(tensors) => memory.with_tensors(tensors),
            None => memory,
        };
        options.device_memory = memory.decoding;
        Self::open_with(options, memory)
    }

    fn open_with(options: GpuOptions, memory: GpuMemory) -> Result<Arc<Self>> {
        let decoder = Arc::new(GpuDecoder::new(options)?);
        let pool = TensorPool::on_device(memory.tensors, decoder.memory());
        tracing::debug!(target: "zarrpipe::gpu", "GPU memory: {memory}");
        Ok(Arc::new(Self {
            decoder,
            pool,
            memory,
            splits: Mutex::new(Vec::new()),
            cpu_decoders: Mutex::new(Vec::new()),
        }))
    }

    /// This device's split decoder with `policy`, its CPU side on `cpu_threads`, made on first
    /// use, then the same one. The CPU side has a rayon pool of its own, so the GPU side's
    /// planning, on rayon's global pool, never queues behind its chunks.
    pub fn split_decoder(
        &self,
        policy: SplitPolicy,
        cpu_threads: DecodeThreads,
    ) -> Result<Arc<SplitDecoder>> {
        let mut splits = self.splits.lock().unwrap_or_else(|p| p.into_inner());
        let same = |(threads, split): &&(DecodeThreads, Arc<SplitDecoder>)| {
            *threads == cpu_threads && split.policy() == policy
        };
        if let Some((_, split)) = splits.iter().find(same) {
            return Ok(split.clone());
        }
        let cpu = Arc::new(yielding_cpu_decoder(cpu_threads.clone(), "split")?);
        let threads = cpu.threads();
        let split = Arc::new(
            SplitDecoder::new(cpu, self.decoder.clone(), policy).with_cpu_threads(threads),
        );
        splits.push((cpu_threads, split.clone()));
        Ok(split)
    }

    /// A CPU decoder for batches this GPU collates, on `cpu_threads`, which yield to the
    /// process's other threads (the consumer's training loop, the GPU's feeders): made on
    /// first use, then the same one.
    pub fn cpu_decoder(&self, cpu_threads: DecodeThreads) -> Result<Arc<CpuDecoder>> {
        let mut decoders = self.cpu_decoders.lock().unwrap_or_else(|p| p.into_inner());
        if let Some((_, decoder)) = decoders.iter().find(|(n, _)| *n == cpu_threads) {
            return Ok(decoder.clone());
        }
        let decoder = Arc::new(yielding_cpu_decoder(cpu_threads.clone(), "cpu")?);
        decoders.push((cpu_threads, decoder.clone()));
        Ok(decoder)
    }

    /// The device's decoder: the decode stage on this GPU.
    pub fn decoder(&self) -> Arc<GpuDecoder> {
        self.decoder.clone()
    }

    /// A collator into this device's tensor pool: the collate stage on this GPU, on a stream
    /// of its own with the highest priority, so that a batch's gather runs between the
    /// decoding's thread blocks instead of after them.
    pub fn collator(
        &self,
        layout: Arc<SampleLayout>,
        options: CollateOptions,
    ) -> Result<DeviceCollator> {
        let context = self.decoder.context();
        let stream = context
            .bind_to_thread()
            .and_then(|()| cudarc::driver::result::stream::get_priority_range())
            .and_then(|(_least, greatest)| context.new_stream_with_priority(greatest))
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

    /// The device memory this GPU's pipelines take at most, and how it is shared.
    pub fn memory_budget(&self) -> GpuMemory {
        self.memory
    }
}

/// A CPU decoder on a rayon pool of its own (so the GPU side's planning, on rayon's global
/// pool, never queues behind its chunks) whose threads yield to every other thread and stay
/// on their cores.
fn yielding_cpu_decoder(threads: DecodeThreads, name: &'static str) -> Result<CpuDecoder> {
    let pool = rayon::ThreadPoolBuilder::new()
        .num_threads(threads.count())
        .thread_name(move |n| format!("zarrpipe-{name}-decode{n}"))
        .start_handler(move |_| {
            yield_to_the_gpu_side();
            threads.place_calling_thread();
        })
        .build()
        .map_err(|error| Error::Gpu {
            what: format!("starting the {name} decoder's CPU threads"),
            source: Box::new(error),
        })?;
    Ok(CpuDecoder::with_pool(Arc::new(pool)))
}

/// Lowers the calling thread's priority, so the threads that feed the GPU (planning, frame
/// checks, staging) and the consumer's own (a training loop launching kernels) run first
/// when CPU decoding keeps every core busy: starved, they slow down more than decoding gains.
/// CPU decoding on 16 threads at normal priority beside a U-Net's training loop cut training
/// from 80 to 57 samples/s while decoding alone delivered 102 (H100, 2026-11-24;
/// docs/benchmarks.md, "Defaults and the measurements behind them").
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
