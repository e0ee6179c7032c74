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
    gpu_planning_nanos: AtomicU64,
    gpu_nanos: AtomicU64,
    queue_depth_sum: AtomicU64,
    on_device_sum: AtomicU64,
    queue_samples: AtomicU64,
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
    /// GPU pipeline: host time planning and staging batches for the GPU.
    pub gpu_planning_busy: Duration,
    /// GPU pipeline: device time from a batch's start on its decode stream to its collated
    /// tensors (upload wait, decompression, kernels, collation), summed over batches; two
    /// batches decode at once, so this can exceed the wall-clock time.
    pub gpu_busy: Duration,
    /// GPU pipeline: mean number of batches read and waiting for the GPU worker, and mean
    /// number on the GPU, seen each time the worker took a batch.
    pub mean_queue_depth: f64,
    pub mean_on_device: f64,
}

impl MetricsSnapshot {
    /// The fraction of the wall-clock `seconds` the consumer spent waiting for batches.
    pub fn wait_fraction(&self, seconds: f64) -> f64 {
        if seconds <= 0.0 {
            return 0.0;
        }
        (self.consumer_wait.as_secs_f64() / seconds).min(1.0)
    }
}

fn add(counter: &AtomicU64, value: u64) {
    counter.fetch_add(value, Ordering::Relaxed);
}

fn mean(sum: u64, count: u64) -> f64 {
    if count == 0 {
        0.0
    } else {
        sum as f64 / count as f64
    }
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

    #[cfg_attr(not(feature = "cuda"), allow(dead_code))]
    pub(crate) fn add_gpu_planning(&self, busy: Duration) {
        add(&self.gpu_planning_nanos, nanos(busy));
    }

    #[cfg_attr(not(feature = "cuda"), allow(dead_code))]
    pub(crate) fn add_gpu(&self, busy: Duration, decoded: usize) {
        add(&self.gpu_nanos, nanos(busy));
        add(&self.decoded_bytes, decoded as u64);
    }

    #[cfg_attr(not(feature = "cuda"), allow(dead_code))]
    pub(crate) fn add_queue_depth(&self, waiting: usize, on_device: usize) {
        add(&self.queue_depth_sum, waiting as u64);
        add(&self.on_device_sum, on_device as u64);
        add(&self.queue_samples, 1);
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
            gpu_planning_busy: time(&self.gpu_planning_nanos),
            gpu_busy: time(&self.gpu_nanos),
            mean_queue_depth: mean(load(&self.queue_depth_sum), load(&self.queue_samples)),
            mean_on_device: mean(load(&self.on_device_sum), load(&self.queue_samples)),
        }
    }
}
