use std::fmt;
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;

use crate::local_read::local_error;
use crate::read_at_decode::{ChunkFile, Stored};
use crate::{Error, ReadMemory, Result, Variable};

/// One chunk of one variable to read.
#[derive(Clone, Debug)]
pub struct ChunkRequest {
    /// The variable the chunk belongs to.
    pub variable: Arc<Variable>,
    /// The chunk's position in the variable's chunk grid.
    pub indices: Vec<u64>,
    /// For a shard: the inner chunks needed (C-order numbers within the shard, sorted), so
    /// that only their byte ranges are read; `None` reads the whole chunk.
    pub inner: Option<Vec<u64>>,
}

impl ChunkRequest {
    /// A request for a whole chunk (or shard).
    pub fn new(variable: Arc<Variable>, indices: Vec<u64>) -> Self {
        Self {
            variable,
            indices,
            inner: None,
        }
    }

    /// A request for some inner chunks of a shard (see [`Variable::inner_chunks_in`]): only
    /// their byte ranges are read, and the rest of the shard decodes to the fill value.
    pub fn with_inner(variable: Arc<Variable>, indices: Vec<u64>, inner: Vec<u64>) -> Self {
        Self {
            variable,
            indices,
            inner: Some(inner),
        }
    }

    /// Decoded bytes of what the request reads: the whole chunk, or its inner chunks.
    pub fn decoded_bytes(&self) -> u64 {
        match (&self.inner, self.variable.inner_chunk_bytes()) {
            (Some(inner), Some(bytes)) => inner.len() as u64 * bytes,
            _ => self.variable.decoded_chunk_bytes(),
        }
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
    /// What was read.
    pub request: ChunkRequest,
    /// The stored bytes; `None` when the chunk is not in the store.
    pub bytes: Option<Bytes>,
    /// Time spent reading the chunk.
    pub fetch_time: Duration,
    /// For a chunk handed on unread: its file, read when it is decoded
    /// ([`stored`](Self::stored)); `bytes` are empty until then.
    pub(crate) at_decode: Option<ChunkFile>,
}

impl EncodedChunk {
    /// A chunk read: its `bytes` as stored, `None` when it is not in the store.
    pub fn new(request: ChunkRequest, bytes: Option<Bytes>, fetch_time: Duration) -> Self {
        Self {
            request,
            bytes,
            fetch_time,
            at_decode: None,
        }
    }

    /// Stored size in bytes (0 for a missing chunk).
    pub fn stored_len(&self) -> usize {
        self.bytes.as_ref().map_or(0, Bytes::len)
    }

    /// A chunk handed on unread, its file read when it is decoded. Its `bytes` are empty
    /// until then: a decoder that does not read it fails on them (an empty frame) instead of
    /// taking the chunk for a missing one.
    pub(crate) fn read_at_decode(request: ChunkRequest, file: ChunkFile) -> Self {
        Self {
            request,
            bytes: Some(Bytes::new()),
            fetch_time: Duration::ZERO,
            at_decode: Some(file),
        }
    }

    /// Whether the chunk's file is still to be read ([`stored`](Self::stored) reads it).
    pub fn is_read_at_decode(&self) -> bool {
        self.at_decode.is_some()
    }

    /// The chunk's stored bytes: those the fetch stage read, or, for a chunk handed on unread,
    /// its file read now into `buffer` (grown as needed, never shrunk, so a thread that keeps
    /// it reads every chunk into the same memory).
    pub fn stored<'a>(&'a self, buffer: &'a mut Vec<u8>) -> Result<Stored<'a>> {
        let Some(file) = &self.at_decode else {
            return Ok(Stored {
                bytes: self.bytes.as_deref(),
                read_time: Duration::ZERO,
            });
        };
        let started = Instant::now();
        let read = file
            .read_into(buffer)
            .map_err(|source| self.read_error(file, source))?;
        let bytes = read.map(|len| &buffer[..len]);
        Ok(Stored {
            bytes,
            read_time: started.elapsed(),
        })
    }

    /// The chunk with its stored bytes in memory of their own, read now if it was handed on
    /// unread: for decoders that do not read it themselves.
    pub fn read_now(self) -> Result<Self> {
        self.read_now_into(None)
    }

    /// As [`read_now`](Self::read_now), into a buffer from `memory` where it has one to give:
    /// a GPU decoder's pinned memory, from which the chunk uploads without a staging copy.
    pub fn read_now_into(self, memory: Option<&dyn ReadMemory>) -> Result<Self> {
        let Some(file) = &self.at_decode else {
            return Ok(self);
        };
        let started = Instant::now();
        let bytes = file
            .read_into_memory(memory)
            .map_err(|source| self.read_error(file, source))?;
        Ok(Self {
            bytes,
            fetch_time: started.elapsed(),
            at_decode: None,
            ..self
        })
    }

    /// The error of a failed read of this chunk's `file`.
    fn read_error(&self, file: &ChunkFile, source: std::io::Error) -> Error {
        Error::Fetch {
            url: file.url().to_string(),
            variable: self.request.variable.name().to_string(),
            key: self.request.key(),
            source: local_error(source),
        }
    }
}
