use serde::Serialize;

use crate::Batcher;

/// What an epoch reads and delivers, from the read plans of its batches.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct PlanSummary {
    pub samples: u64,
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
}

impl PlanSummary {
    /// Plans every batch of the epoch (no I/O).
    pub fn of_epoch(batcher: &Batcher) -> Self {
        let layout = batcher.layout();
        let mut summary = Self {
            samples: layout.num_samples(),
            batches: batcher.num_batches(),
            chunk_reads: 0,
            bytes_read: 0,
            bytes_delivered: 0,
            read_amplification: 0.0,
        };
        if summary.samples == 0 {
            return summary;
        }
        let per_sample: u64 = (0..layout.variables().len())
            .map(|variable| {
                let region = layout.region(variable, &layout.sample(0));
                let elements: u64 = region.iter().map(|range| range.end - range.start).product();
                elements * layout.variables()[variable].dtype().size() as u64
            })
            .sum::<u64>()
            * (layout.input_offsets().len() + layout.target_offsets().len()) as u64;
        for (_, samples) in batcher.batches() {
            summary.bytes_delivered += per_sample * samples.len() as u64;
            for request in layout.read_plan(&samples) {
                summary.chunk_reads += 1;
                summary.bytes_read += request.decoded_bytes();
            }
        }
        summary.read_amplification =
            summary.bytes_read as f64 / summary.bytes_delivered.max(1) as f64;
        summary
    }
}
