//! [`BatchStream`]: the end of a chain, whether the builder made it or a user composed it. It
//! counts what the consumer receives into [`Metrics`] (each batch carries what its stages
//! cost) and knows the epoch's position, so any chain gets metrics and a resumable state.

use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Instant;

use futures::stream::{BoxStream, FusedStream, Stream, StreamExt};
use zarrpipe_batcher::{Batcher, SampleLayout, SamplerState};
use zarrpipe_collate::{Batch, Host, Place};
use zarrpipe_core::{Device, Pace};
use zarrpipe_store::Dataset;

use crate::{Error, Metrics, MetricsSnapshot, Result};

/// The stream of batches of one epoch. Dropping it stops the chain behind it.
#[must_use = "streams do nothing unless polled"]
pub struct BatchStream<P: Place = Host> {
    inner: BoxStream<'static, Result<Batch<P>>>,
    dataset: Arc<Dataset>,
    layout: Arc<SampleLayout>,
    batcher: Batcher,
    /// Batches of the epoch delivered so far (a resumed epoch starts past zero).
    delivered: u64,
    num_batches: u64,
    device: Device,
    metrics: Arc<Metrics>,
    pace: Arc<Pace>,
    waiting_since: Option<Instant>,
    done: bool,
}

impl<P: Place> std::fmt::Debug for BatchStream<P> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("BatchStream")
            .field("dataset", &self.dataset.url())
            .field("device", &self.device)
            .field("num_batches", &self.num_batches)
            .field("delivered", &self.delivered)
            .finish_non_exhaustive()
    }
}

impl<P: Place> BatchStream<P> {
    /// Wraps a chain that delivers the batches of `batcher`'s epoch, in order, from
    /// `dataset`, into `device`'s memory (see the crate's example).
    pub fn new<St, E>(batches: St, dataset: Arc<Dataset>, batcher: Batcher, device: Device) -> Self
    where
        St: Stream<Item = std::result::Result<Batch<P>, E>> + Send + 'static,
        E: Into<Error>,
    {
        Self {
            inner: batches.map(|batch| batch.map_err(Into::into)).boxed(),
            dataset,
            layout: batcher.layout().clone(),
            num_batches: batcher.num_batches(),
            delivered: batcher.first_batch(),
            batcher,
            device,
            metrics: Arc::new(Metrics::default()),
            pace: Arc::new(Pace::default()),
            waiting_since: None,
            done: false,
        }
    }

    /// Records in `pace` whether the consumer waited for each batch, for the stages that
    /// adapt to it (a [`SplitDecoder`](zarrpipe_codec_gpu::SplitDecoder) in `Auto`).
    pub fn with_pace(mut self, pace: Arc<Pace>) -> Self {
        self.pace = pace;
        self
    }

    /// The dataset the batches come from.
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
    /// (pass it to [`PipelineBuilder::resume`](crate::PipelineBuilder::resume) or
    /// [`Batcher::resume`]).
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

impl<P: Place> Stream for BatchStream<P> {
    type Item = Result<Batch<P>>;

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
                    self.delivered = batch.index + 1;
                    self.pace.record(waited);
                    self.metrics.add_batch(
                        &batch.stats,
                        batch.samples.len(),
                        batch.tensor_bytes(),
                        waited,
                    );
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

impl<P: Place> FusedStream for BatchStream<P> {
    fn is_terminated(&self) -> bool {
        self.done
    }
}
