use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;

use crate::Variable;

/// One chunk of one variable to read.
#[derive(Clone, Debug)]
pub struct ChunkRequest {
    pub variable: Arc<Variable>,
    pub indices: Vec<u64>,
}

impl ChunkRequest {
    pub fn new(variable: Arc<Variable>, indices: Vec<u64>) -> Self {
        Self { variable, indices }
    }

    /// The chunk's store key.
    pub fn key(&self) -> String {
        self.variable.chunk_key(&self.indices)
    }
}

impl fmt::Display for ChunkRequest {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{} chunk {:?} ({})",
            self.variable.name(),
            self.indices,
            self.key()
        )
    }
}

/// A chunk's bytes as stored, before decoding. `bytes` is `None` for a chunk that is not in
/// the store, which Zarr reads as the fill value.
#[derive(Clone, Debug)]
pub struct EncodedChunk {
    pub request: ChunkRequest,
    pub bytes: Option<Bytes>,
    /// Time spent reading the chunk.
    pub fetch_time: Duration,
}

impl EncodedChunk {
    /// Stored size in bytes (0 for a missing chunk).
    pub fn stored_len(&self) -> usize {
        self.bytes.as_ref().map_or(0, Bytes::len)
    }
}
