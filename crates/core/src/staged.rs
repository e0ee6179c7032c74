//! One batch between two stages: its number in the epoch, what the stages before it made of
//! it, and what that cost. Every stage adapter takes and yields these, so a stage can be
//! swapped without its neighbours noticing.

use std::ops::AddAssign;
use std::sync::Arc;
use std::time::Duration;

use crate::Pace;

/// A batch on its way through the chain: `samples` says what it holds (the batcher's samples
/// in a pipeline), `payload` is the previous stage's output (chunk requests, encoded chunks,
/// decoded chunks), `stats` what the stages so far cost.
#[derive(Clone, Debug)]
pub struct Staged<M, T> {
    /// The batch's number in the epoch.
    pub index: u64,
    /// The epoch it belongs to (a chain may carry several epochs in a row).
    pub epoch: u64,
    /// What the batch holds (in a pipeline, its samples).
    pub samples: M,
    /// The previous stage's output.
    pub payload: T,
    /// What the stages so far cost, carried to the end of the chain, where the pipeline's
    /// metrics add it up.
    pub stats: BatchStats,
    /// Where the end of the chain records the consumer's pace when this batch is handed over,
    /// for a stage that adapts to it (a split decoder under auto sets it; the others carry
    /// it on).
    pub pace: Option<Arc<Pace>>,
}

impl<M, T> Staged<M, T> {
    /// A batch entering the chain (in epoch 0; see [`in_epoch`](Self::in_epoch)).
    pub fn new(index: u64, samples: M, payload: T) -> Self {
        Self {
            index,
            epoch: 0,
            samples,
            payload,
            stats: BatchStats::default(),
            pace: None,
        }
    }

    /// The same batch, of epoch `epoch`.
    pub fn in_epoch(mut self, epoch: u64) -> Self {
        self.epoch = epoch;
        self
    }

    /// The same batch with the next stage's output.
    pub fn with_payload<U>(self, payload: U) -> Staged<M, U> {
        Staged {
            index: self.index,
            epoch: self.epoch,
            samples: self.samples,
            payload,
            stats: self.stats,
            pace: self.pace,
        }
    }
}

/// What one batch cost in each stage. Busy times add up the time of each chunk, so with many
/// chunks in flight they exceed the wall-clock time.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct BatchStats {
    /// Chunks read (missing ones included).
    pub chunks: u64,
    /// Chunks absent from the store (decoded as the fill value).
    pub missing_chunks: u64,
    /// Bytes the chunks took in the store.
    pub stored_bytes: u64,
    /// Bytes of the decoded chunks.
    pub decoded_bytes: u64,
    /// Chunks decoded on the CPU (fallbacks of a GPU decoder included).
    pub cpu_decoded_chunks: u64,
    /// Chunks decoded on the GPU.
    pub gpu_decoded_chunks: u64,
    /// Chunks decoded on the CPU into memory of their own and then copied into the batch:
    /// chains zarrpipe's CPU path does not decode in place (sharding, transposes, filters
    /// other than shuffle) go through zarrs.
    pub cpu_copied_chunks: u64,
    /// Time reading chunks, summed over chunks.
    pub fetch_busy: Duration,
    /// Time decoding chunks on the CPU, summed over chunks.
    pub decode_busy: Duration,
    /// CPU time the threads decoding chunks ran, summed over chunks: less than `decode_busy`
    /// where they waited for a core.
    pub decode_cpu: Duration,
    /// Host time planning and staging chunks for the GPU.
    pub gpu_planning: Duration,
    /// Time collating the batch.
    pub collate_busy: Duration,
    /// Device time the batch took on the GPU (uploads, decompression, kernels, collation).
    pub gpu_busy: Duration,
}

impl AddAssign for BatchStats {
    fn add_assign(&mut self, other: Self) {
        self.chunks += other.chunks;
        self.missing_chunks += other.missing_chunks;
        self.stored_bytes += other.stored_bytes;
        self.decoded_bytes += other.decoded_bytes;
        self.cpu_decoded_chunks += other.cpu_decoded_chunks;
        self.gpu_decoded_chunks += other.gpu_decoded_chunks;
        self.cpu_copied_chunks += other.cpu_copied_chunks;
        self.fetch_busy += other.fetch_busy;
        self.decode_busy += other.decode_busy;
        self.decode_cpu += other.decode_cpu;
        self.gpu_planning += other.gpu_planning;
        self.collate_busy += other.collate_busy;
        self.gpu_busy += other.gpu_busy;
    }
}
