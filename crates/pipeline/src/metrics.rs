use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

/// Counters a pipeline updates as it runs; read them with [`Metrics::snapshot`].
///
/// Busy times add up the time each chunk or batch spent in a stage, so with many chunks in
/// flight a stage's busy time can exceed the wall-clock time.
#[derive(Debug, Default)]
pub struct Metrics {
    fetch_nanos: AtomicU64,
    decode_nanos: AtomicU64,
    collate_nanos: AtomicU64,
    wait_nanos: AtomicU64,
    chunks: AtomicU64,
    missing_chunks: AtomicU64,
    stored_bytes: AtomicU64,
    decoded_bytes: AtomicU64,
    delivered_bytes: AtomicU64,
    samples: AtomicU64,
    batches: AtomicU64,
}

/// A copy of the counters at one moment.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct MetricsSnapshot {
    pub fetch_busy: Duration,
    pub decode_busy: Duration,
    pub collate_busy: Duration,
    /// Time the consumer spent waiting for the next batch.
    pub consumer_wait: Duration,
    pub chunks: u64,
    pub missing_chunks: u64,
    pub stored_bytes: u64,
    pub decoded_bytes: u64,
    /// Bytes of float32 batch tensors handed to the consumer.
    pub delivered_bytes: u64,
    pub samples: u64,
    pub batches: u64,
}

fn add(counter: &AtomicU64, value: u64) {
    counter.fetch_add(value, Ordering::Relaxed);
}

fn nanos(duration: Duration) -> u64 {
    duration.as_nanos().min(u64::MAX as u128) as u64
}

impl Metrics {
    pub(crate) fn add_fetch(&self, busy: Duration, stored: usize, missing: bool) {
        add(&self.fetch_nanos, nanos(busy));
        add(&self.chunks, 1);
        add(&self.stored_bytes, stored as u64);
        add(&self.missing_chunks, missing as u64);
    }

    pub(crate) fn add_decode(&self, busy: Duration, decoded: usize) {
        add(&self.decode_nanos, nanos(busy));
        add(&self.decoded_bytes, decoded as u64);
    }

    pub(crate) fn add_collate(&self, busy: Duration) {
        add(&self.collate_nanos, nanos(busy));
    }

    pub(crate) fn add_delivered(&self, samples: usize, bytes: usize, waited: Duration) {
        add(&self.samples, samples as u64);
        add(&self.batches, 1);
        add(&self.delivered_bytes, bytes as u64);
        add(&self.wait_nanos, nanos(waited));
    }

    pub fn snapshot(&self) -> MetricsSnapshot {
        let load = |counter: &AtomicU64| counter.load(Ordering::Relaxed);
        let time = |counter: &AtomicU64| Duration::from_nanos(load(counter));
        MetricsSnapshot {
            fetch_busy: time(&self.fetch_nanos),
            decode_busy: time(&self.decode_nanos),
            collate_busy: time(&self.collate_nanos),
            consumer_wait: time(&self.wait_nanos),
            chunks: load(&self.chunks),
            missing_chunks: load(&self.missing_chunks),
            stored_bytes: load(&self.stored_bytes),
            decoded_bytes: load(&self.decoded_bytes),
            delivered_bytes: load(&self.delivered_bytes),
            samples: load(&self.samples),
            batches: load(&self.batches),
        }
    }
}
