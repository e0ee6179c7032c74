//! The GPU pipeline: chunks are read and planned for the GPU as Tokio tasks (`prefetch`
//! batches ahead), then one worker thread per device submits each batch's still-compressed
//! bytes to the [`GpuDecoder`] (staged through reused pinned buffers, uploaded on a copy stream) and
//! enqueues its collation right behind the decoding on the same stream. The worker keeps
//! several batches on the GPU (`gpu_in_flight`): it stages and uploads batch k+1 while the
//! ones before decode, and only then waits for the oldest and checks its chunks.

use std::collections::VecDeque;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Instant;

use futures::channel::oneshot;
use futures::stream::{self, StreamExt, TryStreamExt};
use tokio::runtime::Handle;
use tokio::sync::mpsc;
use zarrpipe_batcher::{Batcher, Sample};
use zarrpipe_codec_gpu::cudarc::driver::sys::CUevent_flags;
use zarrpipe_codec_gpu::cudarc::driver::{CudaEvent, CudaStream};
use zarrpipe_codec_gpu::{GpuDecoder, GpuOptions, PendingBatch, PlannedBatch};
use zarrpipe_collate::{DeviceCollator, DeviceTensor, DeviceTensors, TensorPool};
use zarrpipe_store::{Dataset, EncodedChunk, FetchExt};

use crate::stream::{spawn_batch, BatchStream, Delivered, StageConfig};
use crate::{Error, Metrics, Result};

/// A batch in device memory. Its tensors are complete once [`GpuBatch::ready`] has: make
/// the consumer's stream wait on it ([`GpuBatch::wait_on`]) or synchronise it. Dropping the
/// batch returns its tensors' memory to the pipeline's pool.
#[derive(Debug)]
pub struct GpuBatch {
    pub index: u64,
    /// `[batch, channel, window...]` in the chosen type (f32, bf16 or f16).
    pub inputs: DeviceTensor,
    pub targets: Option<DeviceTensor>,
    /// Padding mask `[batch, window...]`, u8.
    pub mask: Option<DeviceTensor>,
    /// NaN mask of the inputs' shape, u8.
    pub nan_mask: Option<DeviceTensor>,
    /// Latitude weights `[batch, latitude window]`, f32.
    pub latitude_weights: Option<DeviceTensor>,
    pub samples: Vec<Sample>,
    /// Recorded on the pipeline's stream after the batch's last kernel.
    pub ready: CudaEvent,
}

impl GpuBatch {
    /// Makes `stream` wait (on the device, not the host) until the batch is complete.
    pub fn wait_on(&self, stream: &CudaStream) -> Result<()> {
        stream.wait(&self.ready).map_err(|error| Error::Gpu {
            what: "waiting for a batch".into(),
            source: Box::new(error),
        })
    }

    /// Blocks the calling thread until the batch is complete.
    pub fn synchronize(&self) -> Result<()> {
        self.ready.synchronize().map_err(|error| Error::Gpu {
            what: "waiting for a batch".into(),
            source: Box::new(error),
        })
    }
}

impl Delivered for GpuBatch {
    fn index(&self) -> u64 {
        self.index
    }

    fn num_samples(&self) -> usize {
        self.samples.len()
    }

    fn tensor_bytes(&self) -> usize {
        self.inputs.byte_len() + self.targets.as_ref().map_or(0, DeviceTensor::byte_len)
    }
}

/// One GPU's decoder (kernels, nvCOMP, pinned staging and device buffers) and tensor pool,
/// shared by the pipelines that run on it. Opening one costs pinned allocations and kernel
/// loads, so reuse it across epochs ([`PipelineBuilder::gpu`](crate::PipelineBuilder::gpu)).
/// Its memory goes back to the driver when the last pipeline and handle are dropped.
pub struct GpuDevice {
    decoder: GpuDecoder,
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
        let decoder = GpuDecoder::new(options)?;
        let pool = TensorPool::new(tensor_memory);
        Ok(Arc::new(Self { decoder, pool }))
    }

    pub fn decoder(&self) -> &GpuDecoder {
        &self.decoder
    }
}

impl Drop for GpuDevice {
    fn drop(&mut self) {
        // Kept tensor buffers go back to the device's pool before the decoder trims it.
        self.pool.release_free();
    }
}

/// One batch's chunks, read, planned and waiting for the GPU.
struct Job {
    index: u64,
    samples: Vec<Sample>,
    planned: PlannedBatch,
    /// The batch's stored bytes, which it will hold in pinned host memory.
    pinned: usize,
    reply: oneshot::Sender<Result<GpuBatch>>,
}

/// A batch on the GPU: decoding and collation enqueued, not yet checked.
struct Running {
    job_index: u64,
    samples: Vec<Sample>,
    reply: oneshot::Sender<Result<GpuBatch>>,
    pending: PendingBatch,
    tensors: Result<Option<DeviceTensors>>,
    started: CudaEvent,
    ended: Option<CudaEvent>,
    /// The batch's stored bytes, staged in pinned host memory until it finishes.
    pinned: usize,
}

pub(crate) fn start(
    runtime: Handle,
    dataset: Arc<Dataset>,
    batcher: Batcher,
    stages: StageConfig,
    gpu: Arc<GpuDevice>,
    limits: InFlightLimits,
) -> Result<BatchStream<GpuBatch>> {
    let stream = gpu.decoder.stream().clone();
    let layout = batcher.layout().clone();
    let collator = DeviceCollator::new(layout, stages.collate.clone(), stream, gpu.pool.clone())?;
    let ordinal = gpu.decoder.stream().context().ordinal();
    let metrics = Arc::new(Metrics::default());
    let (jobs, queue) = mpsc::channel::<Job>(stages.prefetch);
    let waiting = Arc::new(AtomicUsize::new(0));
    let planner = gpu.clone();
    let worker = Worker {
        gpu,
        collator,
        metrics: metrics.clone(),
        waiting: waiting.clone(),
        limits,
    };
    std::thread::Builder::new()
        .name(format!("zarrpipe-gpu{ordinal}"))
        .spawn(move || worker.run(queue))
        .map_err(|error| Error::Gpu {
            what: "starting the GPU worker thread".into(),
            source: Box::new(error),
        })?;
    let fetch_metrics = metrics.clone();
    let layout = batcher.layout().clone();
    let inner = stream::iter(batcher.batches())
        .map(move |(index, samples)| {
            let requests = layout.read_plan(&samples);
            let (jobs, metrics, waiting) = (jobs.clone(), fetch_metrics.clone(), waiting.clone());
            let planner = planner.clone();
            let concurrency = stages.fetch_concurrency;
            let load = async move {
                let chunks: Vec<EncodedChunk> = stream::iter(requests)
                    .fetch(concurrency)
                    .inspect_ok(|chunk| {
                        let stored = chunk.bytes.as_ref().map_or(0, |bytes| bytes.len());
                        metrics.add_fetch(chunk.fetch_time, stored, chunk.bytes.is_none())
                    })
                    .try_collect()
                    .await?;
                // Planning is CPU work: batches plan here, several at once, while the worker
                // stages and uploads the ones before.
                let pinned = chunks.iter().map(EncodedChunk::stored_len).sum();
                let planning = Instant::now();
                let planned = tokio::task::spawn_blocking(move || planner.decoder.plan(chunks))
                    .await
                    .map_err(|error| Error::Gpu {
                        what: "planning a batch".into(),
                        source: Box::new(error),
                    })?;
                metrics.add_gpu_planning(planning.elapsed());
                let (reply, answer) = oneshot::channel();
                waiting.fetch_add(1, Ordering::Relaxed);
                let job = Job {
                    index,
                    samples,
                    planned,
                    pinned,
                    reply,
                };
                if jobs.send(job).await.is_err() {
                    return Err(Error::WorkerStopped);
                }
                answer.await.unwrap_or(Err(Error::WorkerStopped))
            };
            spawn_batch(&runtime, index, load)
        })
        .buffered(stages.prefetch)
        .boxed();
    let device = stages.device;
    Ok(BatchStream::new(inner, dataset, batcher, device, metrics))
}

struct Worker {
    gpu: Arc<GpuDevice>,
    collator: DeviceCollator,
    metrics: Arc<Metrics>,
    /// Batches read and queued for this worker.
    waiting: Arc<AtomicUsize>,
    limits: InFlightLimits,
}

/// How much the GPU worker keeps on the device at once.
#[derive(Clone, Copy, Debug)]
pub(crate) struct InFlightLimits {
    /// Batches submitted and not yet finished: one finishing while the next ones plan and
    /// upload.
    pub batches: usize,
    /// Stored bytes of those batches, which sit in pinned host memory until they finish (one
    /// batch is always let through, however large).
    pub pinned_bytes: usize,
}

impl Worker {
    /// Runs until the stream (every job sender) is gone, then frees the device memory.
    fn run(self, mut queue: mpsc::Receiver<Job>) {
        let mut running: VecDeque<Running> = VecDeque::new();
        loop {
            let job = if running.is_empty() {
                queue.blocking_recv()
            } else {
                match queue.try_recv() {
                    Ok(job) => Some(job),
                    Err(mpsc::error::TryRecvError::Empty) => {
                        self.finish(running.pop_front().expect("a running batch"));
                        continue;
                    }
                    Err(mpsc::error::TryRecvError::Disconnected) => None,
                }
            };
            let Some(job) = job else { break };
            // Backpressure on pinned memory: finish older batches until this one fits.
            let needed = job.pinned;
            while !running.is_empty()
                && running.iter().map(|batch| batch.pinned).sum::<usize>() + needed
                    > self.limits.pinned_bytes
            {
                self.finish(running.pop_front().expect("a running batch"));
            }
            let queued = self.waiting.fetch_sub(1, Ordering::Relaxed);
            self.metrics.add_queue_depth(queued, running.len());
            if job.reply.is_canceled() {
                continue; // the consumer dropped the stream
            }
            match self.submit(job) {
                Ok(batch) => running.push_back(batch),
                Err((reply, error)) => {
                    let _ = reply.send(Err(error));
                }
            }
            if running.len() >= self.limits.batches {
                self.finish(running.pop_front().expect("a running batch"));
            }
        }
        for batch in running {
            self.finish(batch);
        }
        // Tensor buffers go back to the device's memory pool before the decoder trims it.
        let Worker { gpu, collator, .. } = self;
        drop(collator);
        drop(gpu);
    }

    /// Enqueues a batch's decoding, then its collation behind it on the same stream.
    #[allow(clippy::result_large_err)]
    fn submit(
        &self,
        job: Job,
    ) -> std::result::Result<Running, (oneshot::Sender<Result<GpuBatch>>, Error)> {
        let pinned = job.pinned;
        let started = match self
            .gpu
            .decoder
            .next_stream()
            .record_event(Some(CUevent_flags::CU_EVENT_DEFAULT))
        {
            Ok(event) => event,
            Err(error) => return Err((job.reply, gpu_error("recording an event", error))),
        };
        let planning = Instant::now();
        let pending = match self.gpu.decoder.submit_planned(job.planned) {
            Ok(pending) => pending,
            Err(error) => return Err((job.reply, error.into())),
        };
        self.metrics.add_gpu_planning(planning.elapsed());
        if zarrpipe_codec_gpu::trace() {
            eprintln!(
                "gpu: batch {} submitted in {:?}",
                job.index,
                planning.elapsed()
            );
        }
        let base = pending.buffer_address();
        // A chunk that failed while planning fails the batch: nothing to collate.
        let placed: Option<Vec<_>> = pending
            .planned()
            .iter()
            .map(|placed| {
                let (request, offset) = placed.as_ref()?;
                Some((request.clone(), base + *offset as u64))
            })
            .collect();
        let stream = pending.stream().clone();
        let tensors = match placed {
            Some(chunks) => self
                .collator
                .collate(&job.samples, &chunks, &stream)
                .map(Some)
                .map_err(Error::from),
            None => Ok(None),
        };
        let ended = stream
            .record_event(Some(CUevent_flags::CU_EVENT_DEFAULT))
            .ok();
        Ok(Running {
            job_index: job.index,
            samples: job.samples,
            reply: job.reply,
            pending,
            tensors,
            started,
            ended,
            pinned,
        })
    }

    /// Waits for a batch, checks every chunk, and delivers it.
    fn finish(&self, running: Running) {
        let Running {
            job_index,
            samples,
            reply,
            pending,
            tensors,
            started,
            ended,
            ..
        } = running;
        let waiting = Instant::now();
        let decoded = self.gpu.decoder.complete(pending);
        if zarrpipe_codec_gpu::trace() {
            eprintln!(
                "gpu: batch {job_index} completed after waiting {:?}",
                waiting.elapsed()
            );
        }
        let result = (|| {
            let decoded = decoded?;
            let mut bytes = 0;
            for chunk in decoded.chunks {
                bytes += chunk?.len;
            }
            let tensors = tensors?.expect("collated when every chunk was planned");
            let busy = ended.map_or(0.0, |ended| started.elapsed_ms(&ended).unwrap_or(0.0));
            self.metrics.add_gpu(
                std::time::Duration::from_secs_f32(busy.max(0.0) / 1e3),
                bytes,
            );
            Ok(GpuBatch {
                index: job_index,
                inputs: tensors.inputs,
                targets: tensors.targets,
                mask: tensors.mask,
                nan_mask: tensors.nan_mask,
                latitude_weights: tensors.latitude_weights,
                samples,
                ready: tensors.ready,
            })
        })();
        let _ = reply.send(result);
    }
}

fn gpu_error(what: &str, error: impl std::error::Error + Send + Sync + 'static) -> Error {
    Error::Gpu {
        what: what.into(),
        source: Box::new(error),
    }
}
