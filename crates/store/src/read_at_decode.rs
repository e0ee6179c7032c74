//! Whole chunk files of a local store read by the thread that decodes them, just before it
//! does, into memory it reuses: the stored bytes are still in its core's cache when the codec
//! reads them, and no thread of the fetch stage reads and hands them over. The fetch stage
//! hands a plain file's chunk on unread ([`EncodedChunk::stored`](crate::EncodedChunk::stored))
//! when the memory it would read into asks for it
//! ([`ReadMemory::reads_at_decode`](crate::ReadMemory::reads_at_decode)), and asks the kernel
//! to start reading the file then, so a store that is not in the page cache is still read
//! ahead of its decoding. A missing file is a missing chunk there, and anything else is read
//! as usual.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;

use crate::io::StoreIo;
use crate::local_read::{probe_and_read_ahead, read_local, read_whole_into, LocalRead, Probe};
use crate::ReadMemory;

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
}

impl ChunkFile {
    /// The file of the chunk at `key` when its store (`io`) reads local files directly.
    pub(crate) fn of(io: &Arc<StoreIo>, key: &str) -> Option<Self> {
        let path = io.local_path(key)?;
        Some(Self {
            path,
            io: io.clone(),
        })
    }

    /// Reads the whole file into `buffer` (grown as needed, never shrunk); its length, `None`
    /// when it is not there. Counted as the fetch stage counts its reads.
    pub(crate) fn read_into(&self, buffer: &mut Vec<u8>) -> std::io::Result<Option<usize>> {
        let read = read_whole_into(&self.path, buffer)?;
        self.io.count_local_read(read.map_or(0, |len| len as u64));
        Ok(read)
    }

    /// Reads the whole file into a buffer from `memory`, or into ordinary memory where there
    /// is none or it has none to give; `None` when the file is not there. Counted as the fetch
    /// stage counts its reads.
    pub(crate) fn read_into_memory(
        &self,
        memory: Option<&dyn ReadMemory>,
    ) -> std::io::Result<Option<Bytes>> {
        let direct = match memory {
            Some(memory) => read_local(&self.path, None, memory)?,
            None => LocalRead::Declined,
        };
        let read = match direct {
            LocalRead::Read(bytes) => Some(bytes),
            LocalRead::Missing => None,
            LocalRead::Declined => {
                let mut buffer = Vec::new();
                read_whole_into(&self.path, &mut buffer)?.map(|len| {
                    buffer.truncate(len);
                    Bytes::from(buffer)
                })
            }
        };
        self.io
            .count_local_read(read.as_ref().map_or(0, |bytes| bytes.len() as u64));
        Ok(read)
    }

    /// The store's URL, for errors.
    pub(crate) fn url(&self) -> &str {
        &self.io.url
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
