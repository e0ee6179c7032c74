use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use zarrpipe_core::BatchStats;

/// Counters a pipeline updates as it runs; read them with [`Metrics::snapshot`].
///
/// Busy times add up the time each chunk or batch spent in a stage, so with many chunks in
/// flight a stage's busy time can exceed the wall-clock time.
#[derive(Debug, Default)]
pub struct Metrics {
    fetch_nanos: AtomicU64,
    decode_nanos: AtomicU64,
    decode_cpu_nanos: AtomicU64,
    collate_nanos: AtomicU64,
    wait_nanos: AtomicU64,
    first_wait_nanos: AtomicU64,
    chunks: AtomicU64,
    missing_chunks: AtomicU64,
    stored_bytes: AtomicU64,
    decoded_bytes: AtomicU64,
    delivered_bytes: AtomicU64,
    samples: AtomicU64,
    batches: AtomicU64,
    gpu_planning_nanos: AtomicU64,
    gpu_nanos: AtomicU64,
    cpu_decoded_chunks: AtomicU64,
    gpu_decoded_chunks: AtomicU64,
    cpu_copied_chunks: AtomicU64,
}

/// A copy of the counters at one moment.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct MetricsSnapshot {
    /// Time reading chunks, summed over chunks.
    pub fetch_busy: Duration,
    /// Time decoding chunks on the CPU, summed over chunks.
    pub decode_busy: Duration,
    /// Of that, the CPU time the decoding threads ran: less where they waited for a core
    /// (beside a training loop, or other work on the host).
    pub decode_cpu: Duration,
    /// Time collating batches, summed over batches.
    pub collate_busy: Duration,
    /// Time the consumer spent waiting for the next batch.
    pub consumer_wait: Duration,
    /// Of that, the wait for the first batch (the pipeline filling up).
    pub first_wait: Duration,
    /// Chunks read (missing ones included).
    pub chunks: u64,
    /// Chunks absent from the store (decoded as the fill value).
    pub missing_chunks: u64,
    /// Bytes the chunks took in the store.
    pub stored_bytes: u64,
    /// Bytes of the decoded chunks.
    pub decoded_bytes: u64,
    /// Bytes of float32 batch tensors handed to the consumer.
    pub delivered_bytes: u64,
    /// Samples handed to the consumer.
    pub samples: u64,
    /// Batches handed to the consumer.
    pub batches: u64,
    /// Host time planning and staging batches for the GPU decoder.
    pub gpu_planning_busy: Duration,
    /// GPU time the batches took, summed over batches and measured with CUDA events on their
    /// streams: decoding from its first kernel to its last, collation from its first upload
    /// or kernel to its last. Batches on different streams overlap, so this can exceed the
    /// wall-clock time; over the wall time it says how much of the GPU the loader held.
    pub gpu_busy: Duration,
    /// Chunks decoded on the CPU (a GPU decoder's CPU fallbacks included).
    pub cpu_decoded_chunks: u64,
    /// Chunks decoded on the GPU.
    pub gpu_decoded_chunks: u64,
    /// Chunks decoded on the CPU into memory of their own and copied into the batch (chains
    /// the CPU path does not decode in place, through zarrs).
    pub cpu_copied_chunks: u64,
}

impl MetricsSnapshot {
    /// The fraction of the wall-clock `seconds` the consumer spent waiting for batches.
    pub fn wait_fraction(&self, seconds: f64) -> f64 {
        if seconds <= 0.0 {
            return 0.0;
        }
        (self.consumer_wait.as_secs_f64() / seconds).min(1.0)
    }

    /// What was counted between `earlier` (a snapshot of the same counters) and this one: the
    /// counters of a span of a long stream, such as some epochs in a row. `first_wait` is
    /// the stream's first batch's, when the span holds it.
    pub fn since(&self, earlier: &MetricsSnapshot) -> MetricsSnapshot {
        let time = |now: Duration, then: Duration| now.saturating_sub(then);
        let count = |now: u64, then: u64| now.saturating_sub(then);
        MetricsSnapshot {
            fetch_busy: time(self.fetch_busy, earlier.fetch_busy),
            decode_busy: time(self.decode_busy, earlier.decode_busy),
            decode_cpu: time(self.decode_cpu, earlier.decode_cpu),
            collate_busy: time(self.collate_busy, earlier.collate_busy),
            consumer_wait: time(self.consumer_wait, earlier.consumer_wait),
            first_wait: time(self.first_wait, earlier.first_wait),
            chunks: count(self.chunks, earlier.chunks),
            missing_chunks: count(self.missing_chunks, earlier.missing_chunks),
            stored_bytes: count(self.stored_bytes, earlier.stored_bytes),
            decoded_bytes: count(self.decoded_bytes, earlier.decoded_bytes),
            delivered_bytes: count(self.delivered_bytes, earlier.delivered_bytes),
            samples: count(self.samples, earlier.samples),
            batches: count(self.batches, earlier.batches),
            gpu_planning_busy: time(self.gpu_planning_busy, earlier.gpu_planning_busy),
            gpu_busy: time(self.gpu_busy, earlier.gpu_busy),
            cpu_decoded_chunks: count(self.cpu_decoded_chunks, earlier.cpu_decoded_chunks),
            gpu_decoded_chunks: count(self.gpu_decoded_chunks, earlier.gpu_decoded_chunks),
            cpu_copied_chunks: count(self.cpu_copied_chunks, earlier.cpu_copied_chunks),
        }
    }

    /// The fraction of the wall-clock `seconds` after the first batch that the consumer spent
    /// waiting: the steady state, without the pipeline filling up.
    pub fn steady_wait_fraction(&self, seconds: f64) -> f64 {
        let first = self.first_wait.as_secs_f64();
        if seconds <= first {
            return 0.0;
        }
        let waited = self.consumer_wait.as_secs_f64() - first;
        (waited / (seconds - first)).clamp(0.0, 1.0)
    }
}

fn add(counter: &AtomicU64, value: u64) {
    counter.fetch_add(value, Ordering::Relaxed);
}

fn nanos(duration: Duration) -> u64 {
    duration.as_nanos().min(u64::MAX as u128) as u64
}

impl Metrics {
    /// Counts a delivered batch: what its stages cost, its samples and tensor bytes, and how
    /// long the consumer waited for it.
    pub(crate) fn add_batch(
        &self,
        stats: &BatchStats,
        samples: usize,
        tensor_bytes: usize,
        waited: Duration,
    ) {
        add(&self.fetch_nanos, nanos(stats.fetch_busy));
        add(&self.chunks, stats.chunks);
        add(&self.stored_bytes, stats.stored_bytes);
        add(&self.missing_chunks, stats.missing_chunks);
        add(&self.decode_nanos, nanos(stats.decode_busy));
        add(&self.decode_cpu_nanos, nanos(stats.decode_cpu));
        add(&self.decoded_bytes, stats.decoded_bytes);
        add(&self.collate_nanos, nanos(stats.collate_busy));
        add(&self.gpu_planning_nanos, nanos(stats.gpu_planning));
        add(&self.gpu_nanos, nanos(stats.gpu_busy));
        add(&self.cpu_decoded_chunks, stats.cpu_decoded_chunks);
        add(&self.gpu_decoded_chunks, stats.gpu_decoded_chunks);
        add(&self.cpu_copied_chunks, stats.cpu_copied_chunks);
        add(&self.samples, samples as u64);
        if self.batches.fetch_add(1, Ordering::Relaxed) == 0 {
            add(&self.first_wait_nanos, nanos(waited));
        }
        add(&self.delivered_bytes, tensor_bytes as u64);
        add(&self.wait_nanos, nanos(waited));
    }

    /// The counters now.
    pub fn snapshot(&self) -> MetricsSnapshot {
        let load = |counter: &AtomicU64| counter.load(Ordering::Relaxed);
        let time = |counter: &AtomicU64| Duration::from_nanos(load(counter));
        MetricsSnapshot {
            fetch_busy: time(&self.fetch_nanos),
            decode_busy: time(&self.decode_nanos),
            decode_cpu: time(&self.decode_cpu_nanos),
            collate_busy: time(&self.collate_nanos),
            consumer_wait: time(&self.wait_nanos),
            first_wait: time(&self.first_wait_nanos),
            chunks: load(&self.chunks),
            missing_chunks: load(&self.missing_chunks),
            stored_bytes: load(&self.stored_bytes),
            decoded_bytes: load(&self.decoded_bytes),
            delivered_bytes: load(&self.delivered_bytes),
            samples: load(&self.samples),
            batches: load(&self.batches),
            gpu_planning_busy: time(&self.gpu_planning_nanos),
            gpu_busy: time(&self.gpu_nanos),
            cpu_decoded_chunks: load(&self.cpu_decoded_chunks),
            gpu_decoded_chunks: load(&self.gpu_decoded_chunks),
            cpu_copied_chunks: load(&self.cpu_copied_chunks),
        }
    }
}
