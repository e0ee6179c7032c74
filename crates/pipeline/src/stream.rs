use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Instant;

use futures::stream::{self, BoxStream, FusedStream, Stream, StreamExt, TryStreamExt};
use ndarray::ArrayD;
use tokio::runtime::Handle;
use tokio::task::JoinHandle;
use zarrpipe_batcher::{Batcher, Sample, SampleLayout, SamplerState};
use zarrpipe_codec_gpu::{ChunkDecoder, DecodeExt, DecodedChunk};
use zarrpipe_collate::{collate_on_rayon, CollateOptions, DecodedBatch, HostCollator};
use zarrpipe_core::Device;
use zarrpipe_store::{Dataset, FetchExt};

use crate::{Error, Metrics, MetricsSnapshot, Result};

/// One batch of samples: `inputs` is `[batch, channel, window...]` float32 in host memory.
#[derive(Clone, Debug)]
pub struct Batch {
    /// The batch's number in the epoch.
    pub index: u64,
    pub inputs: ArrayD<f32>,
    /// With forecasting pairs: `[batch, leads x channels, window...]`, the same windows at each
    /// lead time.
    pub targets: Option<ArrayD<f32>>,
    /// With padded windows ([`Edge::Pad`](zarrpipe_batcher::Edge)): `[batch, window...]`, 1
    /// where `inputs` holds data, 0 where it holds the pad value.
    pub mask: Option<ArrayD<u8>>,
    /// With [`CollateOptions::nan_mask`]: the inputs' shape, 0 where the value was NaN.
    pub nan_mask: Option<ArrayD<u8>>,
    /// With [`CollateOptions::latitude_weights`]: `[batch, latitude window]`.
    pub latitude_weights: Option<ArrayD<f32>>,
    pub samples: Vec<Sample>,
}

/// What a stream delivers: host [`Batch`]es, or device batches with the `cuda` feature.
pub trait Delivered: Send + 'static {
    /// The batch's number in the epoch.
    fn index(&self) -> u64;
    fn num_samples(&self) -> usize;
    /// Bytes of the input and target tensors.
    fn tensor_bytes(&self) -> usize;
}

impl Delivered for Batch {
    fn index(&self) -> u64 {
        self.index
    }

    fn num_samples(&self) -> usize {
        self.samples.len()
    }

    fn tensor_bytes(&self) -> usize {
        let targets = self.targets.as_ref().map_or(0, |targets| targets.len());
        (self.inputs.len() + targets) * std::mem::size_of::<f32>()
    }
}

/// How the stages run.
#[derive(Clone, Debug)]
pub(crate) struct StageConfig {
    pub decoder: Arc<dyn ChunkDecoder>,
    pub fetch_concurrency: usize,
    pub decode_concurrency: usize,
    pub prefetch: usize,
    pub device: Device,
    pub collate: CollateOptions,
}

/// The stream of batches of one epoch. Batches are loaded `prefetch` ahead as Tokio tasks;
/// dropping the stream aborts them, and queued decode work is skipped.
#[must_use = "streams do nothing unless polled"]
pub struct BatchStream<B: Delivered = Batch> {
    inner: BoxStream<'static, Result<B>>,
    dataset: Arc<Dataset>,
    layout: Arc<SampleLayout>,
    batcher: Batcher,
    /// Batches of the epoch delivered so far (a resumed epoch starts past zero).
    delivered: u64,
    num_batches: u64,
    device: Device,
    metrics: Arc<Metrics>,
    waiting_since: Option<Instant>,
    done: bool,
}

impl<B: Delivered> std::fmt::Debug for BatchStream<B> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("BatchStream")
            .field("dataset", &self.dataset.url())
            .field("device", &self.device)
            .field("num_batches", &self.num_batches)
            .field("delivered", &self.delivered)
            .finish_non_exhaustive()
    }
}

/// Aborts the batch's task when the stream drops it before it finished.
struct AbortOnDrop<T>(JoinHandle<T>);

impl<T> Drop for AbortOnDrop<T> {
    fn drop(&mut self) {
        self.0.abort();
    }
}

/// Runs batch `index`'s loading as a Tokio task; the returned future gives its result, and
/// dropping that future (the stream dropped the batch) aborts the task.
pub(crate) fn spawn_batch<T: Send + 'static>(
    runtime: &Handle,
    index: u64,
    load: impl std::future::Future<Output = Result<T>> + Send + 'static,
) -> impl std::future::Future<Output = Result<T>> {
    let mut task = AbortOnDrop(runtime.spawn(load));
    async move {
        (&mut task.0).await.map_err(|source| Error::TaskFailed {
            batch: index,
            source,
        })?
    }
}

impl BatchStream<Batch> {
    pub(crate) fn start(
        runtime: Handle,
        dataset: Arc<Dataset>,
        batcher: Batcher,
        stages: StageConfig,
    ) -> Result<Self> {
        let layout = batcher.layout().clone();
        let metrics = Arc::new(Metrics::default());
        let collator = Arc::new(HostCollator::with_options(
            layout.clone(),
            stages.collate.clone(),
        )?);
        let prefetch = stages.prefetch;
        let device = stages.device;
        let task_metrics = metrics.clone();
        let batches = batcher.batches();
        let inner = stream::iter(batches)
            .map(move |(index, samples)| {
                let load = load_batch(
                    index,
                    samples,
                    stages.clone(),
                    collator.clone(),
                    task_metrics.clone(),
                );
                spawn_batch(&runtime, index, load)
            })
            .buffered(prefetch)
            .boxed();
        Ok(Self::new(inner, dataset, batcher, device, metrics))
    }
}

impl<B: Delivered> BatchStream<B> {
    pub(crate) fn new(
        inner: BoxStream<'static, Result<B>>,
        dataset: Arc<Dataset>,
        batcher: Batcher,
        device: Device,
        metrics: Arc<Metrics>,
    ) -> Self {
        Self {
            inner,
            dataset,
            layout: batcher.layout().clone(),
            num_batches: batcher.num_batches(),
            delivered: batcher.first_batch(),
            batcher,
            device,
            metrics,
            waiting_since: None,
            done: false,
        }
    }

    pub fn dataset(&self) -> &Arc<Dataset> {
        &self.dataset
    }

    /// The sample layout: dimensions, channels, sample shape.
    pub fn layout(&self) -> &Arc<SampleLayout> {
        &self.layout
    }

    /// Batches in this rank's epoch (those delivered before a resume included).
    pub fn num_batches(&self) -> u64 {
        self.num_batches
    }

    /// What to save to resume this epoch later with exactly the batches not yet delivered
    /// (pass it to [`PipelineBuilder::resume`](crate::PipelineBuilder::resume)).
    pub fn state(&self) -> SamplerState {
        self.batcher.state(self.delivered)
    }

    /// Where batches are delivered.
    pub fn device(&self) -> Device {
        self.device
    }

    /// The counters so far.
    pub fn metrics(&self) -> MetricsSnapshot {
        self.metrics.snapshot()
    }

    /// The live counters, which outlive the stream.
    pub fn metrics_handle(&self) -> Arc<Metrics> {
        self.metrics.clone()
    }
}

impl<B: Delivered> Stream for BatchStream<B> {
    type Item = Result<B>;

    fn poll_next(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        if self.done {
            return Poll::Ready(None);
        }
        let waiting_since = *self.waiting_since.get_or_insert_with(Instant::now);
        let poll = self.inner.poll_next_unpin(cx);
        if let Poll::Ready(item) = &poll {
            let waited = waiting_since.elapsed();
            self.waiting_since = None;
            match item {
                Some(Ok(batch)) => {
                    self.delivered = batch.index() + 1;
                    self.metrics
                        .add_delivered(batch.num_samples(), batch.tensor_bytes(), waited);
                }
                Some(Err(_)) => {}
                None => self.done = true,
            }
        }
        poll
    }

    fn size_hint(&self) -> (usize, Option<usize>) {
        self.inner.size_hint()
    }
}

impl<B: Delivered> FusedStream for BatchStream<B> {
    fn is_terminated(&self) -> bool {
        self.done
    }
}

/// Reads, decodes and collates one batch.
async fn load_batch(
    index: u64,
    samples: Vec<Sample>,
    stages: StageConfig,
    collator: Arc<HostCollator>,
    metrics: Arc<Metrics>,
) -> Result<Batch> {
    let requests = collator.layout().read_plan(&samples);
    let chunks: Vec<DecodedChunk> = stream::iter(requests)
        .fetch(stages.fetch_concurrency)
        .decode(stages.decoder.clone(), stages.decode_concurrency)
        .inspect_ok(|chunk| {
            metrics.add_fetch(chunk.fetch_time, chunk.stored_len, chunk.missing);
            metrics.add_decode(chunk.decode_time, chunk.bytes.len());
        })
        .try_collect()
        .await?;
    let started = Instant::now();
    let collated = collate_on_rayon(collator, DecodedBatch { samples, chunks }).await?;
    metrics.add_collate(started.elapsed());
    Ok(Batch {
        index,
        inputs: collated.tensor,
        targets: collated.targets,
        mask: collated.mask,
        nan_mask: collated.nan_mask,
        latitude_weights: collated.latitude_weights,
        samples: collated.samples,
    })
}
