//! Whole chunk files of a local store read by the thread that decodes them, just before it
//! does, into memory it reuses: the stored bytes are still in its core's cache when the codec
//! reads them, and no thread of the fetch stage reads and hands them over. The fetch stage
//! hands a plain file's chunk on unread ([`EncodedChunk::stored`]) when the memory it would
//! read into asks for it ([`ReadMemory::reads_at_decode`](crate::ReadMemory::reads_at_decode)),
//! and asks the kernel to start reading the file then, so a store that is not in the page
//! cache is still read ahead of its decoding. A missing file is a missing chunk there, and
//! anything else is read as usual.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;

use crate::io::StoreIo;
use crate::local_read::{probe_and_read_ahead, read_whole_into, Probe};
use crate::{ChunkRequest, EncodedChunk, Error, Result};

/// A chunk's file, read when the chunk is decoded.
#[derive(Clone, Debug)]
pub struct ChunkFile {
    path: PathBuf,
    io: Arc<StoreIo>,
}

/// A chunk's stored bytes as its decoder sees them.
#[derive(Debug)]
pub struct Stored<'a> {
    /// The bytes; `None` for a chunk that is not in the store.
    pub bytes: Option<&'a [u8]>,
    /// Time spent reading them now (zero when the fetch stage had read them).
    pub read_time: Duration,
    /// Whether they were read now, so that the read is counted where it happened.
    pub read_now: bool,
}

impl ChunkFile {
    /// The file of `request`'s whole chunk when its store reads local files directly.
    pub(crate) fn of(request: &ChunkRequest, key: &str) -> Option<Self> {
        let io = request.variable.io();
        let path = io.local_path(key)?;
        Some(Self {
            path,
            io: io.clone(),
        })
    }

    /// Looks at the file, and where it is a plain file asks the kernel to start reading it
    /// into the page cache. A missing one is counted as a read that found nothing.
    pub(crate) fn probe(&self) -> Probe {
        let probe = probe_and_read_ahead(&self.path);
        if probe == Probe::Missing {
            self.io.count_local_read(0);
        }
        probe
    }
}

impl EncodedChunk {
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
                read_now: false,
            });
        };
        let started = Instant::now();
        let key = || self.request.key();
        let read = read_whole_into(&file.path, buffer).map_err(|source| Error::Fetch {
            url: file.io.url.clone(),
            variable: self.request.variable.name().to_string(),
            key: key(),
            source: object_store::Error::Generic {
                store: "LocalFileSystem",
                source: Box::new(source),
            },
        })?;
        let bytes = read.map(|len| {
            file.io.count_local_read(len as u64);
            &buffer[..len]
        });
        if bytes.is_none() {
            file.io.count_local_read(0);
        }
        Ok(Stored {
            bytes,
            read_time: started.elapsed(),
            read_now: true,
        })
    }

    /// The chunk with its stored bytes in memory of their own, read now if it was handed on
    /// unread: for decoders that do not read it themselves.
    pub fn read_now(self) -> Result<Self> {
        if self.at_decode.is_none() {
            return Ok(self);
        }
        let started = Instant::now();
        let mut buffer = Vec::new();
        let bytes = self.stored(&mut buffer)?.bytes.map(|b| b.len());
        let bytes = bytes.map(|len| {
            buffer.truncate(len);
            Bytes::from(buffer)
        });
        Ok(Self {
            bytes,
            fetch_time: started.elapsed(),
            at_decode: None,
            ..self
        })
    }
}
