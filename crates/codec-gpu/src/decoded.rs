use std::time::Duration;

use zarrpipe_core::{BatchStats, DType};
use zarrpipe_store::ChunkRequest;

/// A decoded chunk in host memory: the full (unclipped) chunk shape in C order, elements in
/// native byte order.
#[derive(Clone, Debug)]
pub struct DecodedChunk {
    /// The chunk decoded.
    pub request: ChunkRequest,
    /// The decoded elements.
    pub bytes: Vec<u8>,
    /// Bytes the chunk took in the store (0 when missing).
    pub stored_len: usize,
    /// True when the chunk was not in the store and holds the fill value.
    pub missing: bool,
    /// Time spent reading the chunk (from [`zarrpipe_store::EncodedChunk::fetch_time`]).
    pub fetch_time: Duration,
    /// Time spent decoding it.
    pub decode_time: Duration,
    /// CPU time its decoding thread ran while decoding it (`decode_time` where the GPU
    /// decoded it).
    pub decode_cpu_time: Duration,
}

impl DecodedChunk {
    /// The element type (the variable's).
    pub fn dtype(&self) -> DType {
        self.request.variable.dtype()
    }

    /// The chunk's shape, which is also the shape of `bytes`.
    pub fn shape(&self) -> Vec<u64> {
        self.request.variable.chunk_shape()
    }

    /// What decoding `chunks` cost.
    pub(crate) fn stats_of(chunks: &[DecodedChunk]) -> BatchStats {
        let mut stats = BatchStats::default();
        for chunk in chunks {
            stats.decoded_bytes += chunk.bytes.len() as u64;
            stats.decode_busy += chunk.decode_time;
            stats.decode_cpu += chunk.decode_cpu_time;
            stats.cpu_decoded_chunks += 1;
        }
        stats
    }
}
