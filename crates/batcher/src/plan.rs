use serde::Serialize;

use crate::Batcher;

/// What an epoch reads and delivers, from the read plans of its batches.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct PlanSummary {
    /// Samples in the epoch, every rank's.
    pub samples: u64,
    /// Batches in this rank's epoch.
    pub batches: u64,
    /// Chunk reads over the epoch: each batch reads the chunks it needs once (for sharded
    /// arrays read by inner chunk: each shard it needs once, only the inner chunks needed).
    pub chunk_reads: u64,
    /// Decoded bytes of those chunk reads (of the inner chunks read, for shards).
    pub bytes_read: u64,
    /// Bytes of the windows delivered, in the variables' own data types.
    pub bytes_delivered: u64,
    /// `bytes_read / bytes_delivered`: 1.0 when every chunk read is delivered exactly once.
    pub read_amplification: f64,
    /// Batches actually planned: all of them, or the first [`PlanSummary::MAX_PLANNED`] of a
    /// longer epoch, whose reads are then scaled up to the whole epoch (`estimated`).
    pub planned_batches: u64,
    /// Whether the reads are scaled up from the first batches rather than counted.
    pub estimated: bool,
}

impl PlanSummary {
    /// The most batches [`of_epoch`](Self::of_epoch) plans one by one; planning costs time in
    /// proportion to the batches planned, and an epoch may have more than a lifetime's worth.
    pub const MAX_PLANNED: u64 = 1 << 16;

    /// Plans the batches of the epoch (no I/O): every one, or the first
    /// [`MAX_PLANNED`](Self::MAX_PLANNED), scaled up to the whole epoch.
    pub fn of_epoch(batcher: &Batcher) -> Self {
        let layout = batcher.layout();
        let mut summary = Self {
            samples: layout.num_samples(),
            batches: batcher.num_batches(),
            chunk_reads: 0,
            bytes_read: 0,
            bytes_delivered: 0,
            read_amplification: 0.0,
            planned_batches: 0,
            estimated: false,
        };
        if summary.samples == 0 {
            return summary;
        }
        // Each variable delivers its channels over the sample's windows (whatever the sample:
        // a step filled for a gap reads nothing but is delivered all the same).
        let window: u64 = layout.sample_shape()[1..]
            .iter()
            .map(|&n| n as u64)
            .product();
        let per_sample: u64 = (0..layout.variables().len())
            .map(|variable| {
                let channels = layout.channel_range(variable).len() as u64;
                channels * window * layout.variables()[variable].dtype().size() as u64
            })
            .sum::<u64>()
            * (layout.input_offsets().len() + layout.target_offsets().len()) as u64;
        let mut planned_samples = 0u64;
        for (_, samples) in batcher.batches().take(Self::MAX_PLANNED as usize) {
            summary.planned_batches += 1;
            planned_samples += samples.len() as u64;
            summary.bytes_delivered += per_sample * samples.len() as u64;
            for request in layout.read_plan(&samples) {
                summary.chunk_reads += 1;
                summary.bytes_read += request.decoded_bytes();
            }
        }
        let to_plan = summary.batches - batcher.first_batch();
        if summary.planned_batches < to_plan && planned_samples > 0 {
            // Scale the counts up by the batches of the epoch over those planned (the last
            // batch may be short: a negligible error over more than MAX_PLANNED batches).
            let factor = to_plan as f64 / summary.planned_batches as f64;
            let scale = |value: u64| (value as f64 * factor) as u64;
            summary.chunk_reads = scale(summary.chunk_reads);
            summary.bytes_read = scale(summary.bytes_read);
            summary.bytes_delivered = scale(summary.bytes_delivered);
            summary.estimated = true;
        }
        summary.read_amplification =
            summary.bytes_read as f64 / summary.bytes_delivered.max(1) as f64;
        summary
    }
}
