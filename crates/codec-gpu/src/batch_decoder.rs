//! The decode stage's swap point: a [`BatchDecoder`] turns one batch's encoded chunks into
//! decoded chunks, in host memory ([`CpuDecoder`]) or in device memory (`GpuDecoder`, feature
//! `cuda`), or hands them on to be decoded where the collator places them ([`CpuDecoder`], by
//! default: see [`placement`](crate::ChunkPlacement)). Collators take each, so a user swaps
//! the decoder by swapping a value.

use std::sync::Arc;

use futures::future::BoxFuture;
use futures::FutureExt;
use zarrpipe_core::{BatchStats, Pace};
use zarrpipe_store::{EncodedChunk, ReadMemory};

use crate::{
    ChunkDecoder, CpuDecoder, DecodePath, DecodedChunk, DecodingPart, DeviceBatch, PendingChunks,
    Result,
};

/// One batch's decoded chunks, where the decoder left them.
#[derive(Debug)]
pub enum DecodedChunks {
    /// In host memory, one buffer per chunk, in the order of the batch's chunks.
    Host(Vec<DecodedChunk>),
    /// In device memory: one buffer that owns the chunks and the stream that wrote them, so
    /// work on them is ordered after the decoding and the buffer outlives it.
    Device(DeviceBatch),
    /// Read, not yet decoded: the collator has a CPU decoder decode them into the batch's
    /// memory ([`PendingChunks::decode_into`]), each into its place.
    Pending(PendingChunks),
    /// Decoded by several decoders (a [`SplitDecoder`](crate::SplitDecoder)): each part
    /// where its decoder left it. Chunks are found by their request, so order does not matter.
    Split(Vec<DecodedChunks>),
    /// Still decoding on a task of its own (a split decoder's GPU part beside a pending CPU
    /// part): the collator waits for it once it has decoded the rest ([`DecodingPart`]).
    Decoding(DecodingPart),
}

impl DecodedChunks {
    /// Moves every chunk to host memory (chunks decoded on the GPU are copied back).
    pub fn into_host(self) -> Result<Vec<DecodedChunk>> {
        match self {
            Self::Host(chunks) => Ok(chunks),
            Self::Pending(pending) => pending.into_host(),
            Self::Device(batch) => batch.into_host()?.into_iter().collect(),
            Self::Decoding(part) => part.wait()?.into_host(),
            Self::Split(parts) => {
                let mut chunks = Vec::new();
                for part in parts {
                    chunks.extend(part.into_host()?);
                }
                Ok(chunks)
            }
        }
    }

    /// The same chunks with every part still decoding ([`DecodedChunks::Decoding`]) waited
    /// for, where it decoded them.
    pub fn finished(self) -> BoxFuture<'static, Result<DecodedChunks>> {
        async move {
            Ok(match self {
                Self::Decoding(part) => part.finished().await?.finished().await?,
                Self::Split(parts) => {
                    let mut finished = Vec::with_capacity(parts.len());
                    for part in parts {
                        finished.push(part.finished().await?);
                    }
                    Self::Split(finished)
                }
                done => done,
            })
        }
        .boxed()
    }

    /// Number of chunks.
    pub fn len(&self) -> usize {
        match self {
            Self::Host(chunks) => chunks.len(),
            Self::Pending(pending) => pending.chunks().len(),
            Self::Device(batch) => batch.chunks.len(),
            Self::Split(parts) => parts.iter().map(Self::len).sum(),
            Self::Decoding(part) => part.requests().len(),
        }
    }

    /// True when the batch has no chunk.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// What decoding cost: decoded bytes, chunks per side, CPU and GPU time (nothing yet for
    /// pending chunks, [`PendingChunks::decode_into`] tells, nor for a part still decoding,
    /// whose own `stats` tell once it is done).
    pub fn stats(&self) -> BatchStats {
        let mut stats = BatchStats::default();
        match self {
            Self::Host(chunks) => stats = DecodedChunk::stats_of(chunks),
            Self::Pending(_) | Self::Decoding(_) => {}
            Self::Device(batch) => {
                for chunk in batch.chunks.iter().flatten() {
                    stats.decoded_bytes += chunk.len as u64;
                    match chunk.path {
                        DecodePath::CpuFallback { .. } => stats.cpu_decoded_chunks += 1,
                        DecodePath::Gpu | DecodePath::Fill => stats.gpu_decoded_chunks += 1,
                    }
                }
                stats.gpu_planning = batch.timings.plan + batch.timings.stage;
                stats.gpu_busy = batch.timings.gpu;
            }
            Self::Split(parts) => {
                for part in parts {
                    stats += part.stats();
                }
            }
        }
        stats
    }
}

/// Decodes whole batches. Implemented by [`CpuDecoder`] (host memory) and, with the `cuda`
/// feature, by `GpuDecoder` (device memory); a pipeline holds an `Arc<dyn BatchDecoder>`.
pub trait BatchDecoder: Send + Sync + std::fmt::Debug {
    /// Decodes `chunks` (one batch's, in its order). A chunk that fails fails the batch, with
    /// the chunk's variable and key in the error.
    fn decode_chunks(
        self: Arc<Self>,
        chunks: Vec<EncodedChunk>,
    ) -> BoxFuture<'static, Result<DecodedChunks>>;

    /// Batches worth decoding at once to keep this decoder busy.
    fn batches_in_flight(&self) -> usize {
        2
    }

    /// Memory the fetch stage should read chunks into for this decoder
    /// ([`FetchBatchesExt::fetch_batches_into`](zarrpipe_store::FetchBatchesExt)): a GPU
    /// decoder's pinned memory, which its uploads read without staging. `None`: any.
    fn read_memory(&self) -> Option<Arc<dyn ReadMemory>> {
        None
    }

    /// Where this decoder reads the consumer's pace, when it adapts to it (a
    /// [`SplitDecoder`](crate::SplitDecoder) under auto): the decode stage attaches it to each
    /// batch ([`Staged::pace`](zarrpipe_core::Staged)) and the end of the chain records into it.
    fn consumer_pace(&self) -> Option<Arc<Pace>> {
        None
    }
}

impl BatchDecoder for CpuDecoder {
    /// The batch's chunks handed on for the collator to place
    /// ([`DecodedChunks::Pending`]); decoding at once, every chunk is queued on the decoder's
    /// rayon pool at once.
    fn decode_chunks(
        self: Arc<Self>,
        chunks: Vec<EncodedChunk>,
    ) -> BoxFuture<'static, Result<DecodedChunks>> {
        if !self.decodes_at_once() {
            let pending = PendingChunks::new(chunks, (*self).clone());
            return futures::future::ready(Ok(DecodedChunks::Pending(pending))).boxed();
        }
        let decodes: Vec<_> = chunks
            .into_iter()
            .map(|chunk| ChunkDecoder::decode(&*self, chunk))
            .collect();
        async move {
            let chunks = futures::future::try_join_all(decodes).await?;
            Ok(DecodedChunks::Host(chunks))
        }
        .boxed()
    }

    /// Reused heap buffers: a read into fresh memory faults its pages in, zeroed.
    fn read_memory(&self) -> Option<Arc<dyn ReadMemory>> {
        Some(self.reads())
    }
}
