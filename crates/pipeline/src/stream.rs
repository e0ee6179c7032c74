//! [`BatchStream`]: the end of a chain, whether the builder made it or a user composed it. It
//! counts what the consumer receives into [`Metrics`] (each batch carries what its stages
//! cost) and knows the epoch's position, so any chain gets metrics and a resumable state. A
//! chain may carry several epochs in a row; the stream then follows their boundaries. Each
//! batch is checked against the batcher and device the stream was given, and the consumer's
//! pace is recorded where the batch says a stage reads it ([`Batch::pace`]).

use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Instant;

use futures::stream::{BoxStream, FusedStream, Stream, StreamExt};
use zarrpipe_batcher::{Batcher, SampleLayout, SamplerState};
use zarrpipe_collate::{Batch, Host, Place};
use zarrpipe_core::Device;
use zarrpipe_store::Dataset;

use crate::{Error, Metrics, MetricsSnapshot, Result};

/// The stream of batches of one epoch, or of several in a row
/// ([`PipelineBuilder::epochs`](crate::PipelineBuilder::epochs)). Dropping it stops the chain
/// behind it.
#[must_use = "streams do nothing unless polled"]
pub struct BatchStream<P: Place = Host> {
    inner: BoxStream<'static, Result<Batch<P>>>,
    dataset: Arc<Dataset>,
    layout: Arc<SampleLayout>,
    /// The first epoch's batcher: the batch count and state of every epoch.
    batcher: Batcher,
    /// The batcher of the epoch last checked, whose batches' samples are checked.
    checked_epoch: Batcher,
    /// The epoch whose batches come next (the last one's once all are delivered); the chain
    /// plans its order, the stream only counts.
    epoch: u64,
    /// Batches of that epoch delivered so far (a resumed epoch starts past zero).
    delivered: u64,
    /// Epochs the chain carries after `epoch`.
    epochs_after: u64,
    device: Device,
    metrics: Arc<Metrics>,
    /// The counters of the epoch of the last batch delivered, and that epoch.
    epoch_metrics: Metrics,
    epoch_metrics_of: Option<u64>,
    waiting_since: Option<Instant>,
    /// When the last batch was handed over: the consumer's step runs from there.
    handed_over: Option<Instant>,
    done: bool,
}

impl<P: Place> std::fmt::Debug for BatchStream<P> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("BatchStream")
            .field("dataset", &self.dataset.url())
            .field("device", &self.device)
            .field("epoch", &self.epoch)
            .field("num_batches", &self.num_batches())
            .field("delivered", &self.delivered)
            .field("epochs_after", &self.epochs_after)
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
            delivered: batcher.first_batch(),
            epoch: batcher.epoch(),
            checked_epoch: batcher.clone(),
            batcher,
            epochs_after: 0,
            device,
            metrics: Arc::new(Metrics::default()),
            epoch_metrics: Metrics::default(),
            epoch_metrics_of: None,
            waiting_since: None,
            handed_over: None,
            done: false,
        }
    }

    /// For a chain that delivers `count` epochs in a row, the batcher's and those after it (as
    /// [`Batcher::read_plans_with_epochs_after`] plans them; at least one).
    pub fn epochs(mut self, count: u64) -> Self {
        self.epochs_after = count.max(1) - 1;
        self.roll_over_finished_epoch();
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

    /// Batches in this rank's epoch (those delivered before a resume included); every epoch
    /// has as many.
    pub fn num_batches(&self) -> u64 {
        self.batcher.num_batches()
    }

    /// The epoch whose batches come next (once the stream is over, its last epoch).
    pub fn epoch(&self) -> u64 {
        self.epoch
    }

    /// Batches of [`epoch`](Self::epoch) not yet delivered.
    pub fn batches_left_in_epoch(&self) -> u64 {
        self.batcher.num_batches().saturating_sub(self.delivered)
    }

    /// Epochs still to come after [`epoch`](Self::epoch)'s.
    pub fn epochs_after(&self) -> u64 {
        self.epochs_after
    }

    /// What to save to resume later with exactly the batches not yet delivered: those of
    /// [`epoch`](Self::epoch) (pass it to
    /// [`PipelineBuilder::resume`](crate::PipelineBuilder::resume) or [`Batcher::resume`]).
    pub fn state(&self) -> SamplerState {
        self.batcher.state_in_epoch(self.epoch, self.delivered)
    }

    /// Where batches are delivered.
    pub fn device(&self) -> Device {
        self.device
    }

    /// The counters so far, over every epoch delivered.
    pub fn metrics(&self) -> MetricsSnapshot {
        self.metrics.snapshot()
    }

    /// The counters of the epoch of the last batch delivered (its first batch's wait
    /// included, which with epochs in a row overlaps the epoch before).
    pub fn epoch_metrics(&self) -> MetricsSnapshot {
        self.epoch_metrics.snapshot()
    }

    /// The live counters, which outlive the stream.
    pub fn metrics_handle(&self) -> Arc<Metrics> {
        self.metrics.clone()
    }
}

impl<P: Place> BatchStream<P> {
    /// Checks that `batch` is one the batcher plans, in its order of epochs, on the device.
    fn check(&mut self, batch: &Batch<P>) -> Result<()> {
        let mismatch = |what: String| Err(Error::ChainMismatch { what });
        let name = format!("batch {} of epoch {}", batch.index, batch.epoch);
        let device = P::tensor_device(&batch.inputs);
        if device != self.device {
            return mismatch(format!(
                "{name} is on {device}, the stream's device is {}",
                self.device
            ));
        }
        if batch.epoch < self.epoch || batch.index >= self.batcher.num_batches() {
            return mismatch(format!(
                "{name} is not among the batcher's {} batches from epoch {}",
                self.batcher.num_batches(),
                self.epoch
            ));
        }
        while self.checked_epoch.epoch() < batch.epoch {
            match self.checked_epoch.next_epoch() {
                Some(next) => self.checked_epoch = next,
                None => return mismatch(format!("{name} comes after the batcher's last epoch")),
            }
        }
        if batch.samples != self.checked_epoch.batch(batch.index) {
            return mismatch(format!("{name} holds other samples than the batcher's"));
        }
        Ok(())
    }

    /// Counts a delivered batch into the stream's and its epoch's counters, and moves the
    /// position past it.
    fn count_batch(&mut self, batch: &Batch<P>, waited: std::time::Duration) {
        if self.epoch_metrics_of != Some(batch.epoch) {
            self.epoch_metrics = Metrics::default();
            self.epoch_metrics_of = Some(batch.epoch);
        }
        let (samples, bytes) = (batch.samples.len(), batch.tensor_bytes());
        for metrics in [&*self.metrics, &self.epoch_metrics] {
            metrics.add_batch(&batch.stats, samples, bytes, waited);
        }
        // A composed chain may skip ahead; the builder's delivers every epoch in order.
        while batch.epoch > self.epoch && self.next_epoch() {}
        self.delivered = batch.index + 1;
        self.roll_over_finished_epoch();
    }

    /// Once an epoch is delivered whole and another follows, the position is that one's start.
    fn roll_over_finished_epoch(&mut self) {
        if self.delivered >= self.batcher.num_batches() {
            self.next_epoch();
        }
    }

    /// Moves to the next epoch the chain carries, if any.
    fn next_epoch(&mut self) -> bool {
        let next = match self.epochs_after {
            0 => None,
            _ => self.epoch.checked_add(1),
        };
        let Some(next) = next else { return false };
        self.epoch = next;
        self.delivered = 0;
        self.epochs_after -= 1;
        true
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
                    if let Err(error) = self.check(batch) {
                        self.done = true;
                        return Poll::Ready(Some(Err(error)));
                    }
                    // The first batch's wait is the chain filling up, not the consumer's pace.
                    let now = Instant::now();
                    let step = self.handed_over.replace(now).map(|before| now - before);
                    match (&batch.pace, step) {
                        (Some(pace), Some(step)) => pace.record(waited, step),
                        (Some(pace), None) => pace.record_first(),
                        (None, _) => {}
                    }
                    if let Some(step) = step {
                        tracing::debug!(
                            target: "zarrpipe::timeline",
                            "batch {} taken after a wait of {:.2} ms in a step of {:.1} ms",
                            batch.index,
                            waited.as_secs_f64() * 1e3,
                            step.as_secs_f64() * 1e3
                        );
                    }
                    self.count_batch(batch, waited);
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
