//! Open Zarr v2 and v3 datasets the way xarray sees them (variables, dimension names,
//! coordinates, attributes) on local disk or object storage, and fetch encoded chunks
//! concurrently as a `futures::Stream`: chunk by chunk ([`FetchExt::fetch`]) or batch by
//! batch, the first stage of a chain ([`FetchBatchesExt::fetch_batches`]).
//!
//! ```no_run
//! use futures::{stream, TryStreamExt};
//! use zarrpipe_store::{ChunkRequest, Dataset, FetchExt};
//!
//! # async fn demo() -> zarrpipe_store::Result<()> {
//! let dataset = Dataset::open("data/sample.zarr").await?;
//! let t2m = dataset.variable("t2m")?.clone();
//! let requests = (0..4).map(|t| ChunkRequest::new(t2m.clone(), vec![t, 0, 0]));
//! let chunks: Vec<_> = stream::iter(requests).fetch(16).try_collect().await?;
//! println!("{} bytes stored", chunks.iter().map(|c| c.stored_len()).sum::<usize>());
//! # Ok(()) }
//! ```
//!
//! Local paths, `file://`, `memory://`, `http(s)://` and cloud buckets (`s3://`, `gs://`,
//! `az://`, credentials from the environment) are supported; the scheme picks the
//! object_store backend, and [`StoreOptions`] add options, retries, timeouts, a request limit
//! and a local chunk cache. Sharded arrays are read by inner chunk: the shard index once, then
//! the byte ranges a batch needs. This crate has no GPU code.

#![warn(missing_docs)]

mod anemoi;
mod cache;
mod cf_attributes;
mod chunk;
mod cloud;
mod dataset;
mod error;
mod fetch;
mod fetch_batches;
mod io;
mod local_read;
mod location;
mod metadata;
mod options;
mod ranges;
mod read_at_decode;
mod read_memory;
mod read_queue;
mod reused_read_memory;
mod time_dim;
mod variable;

use std::sync::Arc;

use futures::Stream;
use zarrpipe_core::Staged;

pub use cache::DiskCache;
pub use cf_attributes::Encoding;
pub use chunk::{ChunkRequest, EncodedChunk};
pub use dataset::Dataset;
pub use error::{Error, Result};
pub use fetch::{fetch_chunk, fetch_chunk_into, Fetch};
pub use fetch_batches::FetchBatches;
pub use io::IoStats;
pub use location::Location;
pub use options::{CacheOptions, StoreOptions};
pub use read_at_decode::Stored;
pub use read_memory::{ReadBuffer, ReadMemory};
pub use reused_read_memory::ReusedReadMemory;
pub use time_dim::{cf_unit_seconds, TimeDim, TimeDimReason};
pub use variable::{Variable, ZarrArray, MAX_CHUNK_BYTES};

/// Stream adapters of the store stage.
pub trait FetchExt: Stream<Item = ChunkRequest> + Sized {
    /// Fetches each requested chunk's stored bytes, up to `concurrency` at once, in request
    /// order.
    fn fetch(self, concurrency: usize) -> Fetch<Self> {
        Fetch::new(self, concurrency)
    }
}

impl<St: Stream<Item = ChunkRequest>> FetchExt for St {}

/// The fetch stage at batch level: for a stream of batches (each a [`Staged`] holding its
/// chunk requests, as a batcher's read plans give them).
pub trait FetchBatchesExt<M>: Stream<Item = Staged<M, Vec<ChunkRequest>>> + Sized {
    /// Reads each batch's chunks, `batches_at_once` batches at once sharing `reads` chunk
    /// reads in flight, the oldest batch's first (so batches complete in order, one after
    /// another); the batch's stats count the chunks, their stored bytes and read time.
    fn fetch_batches(self, batches_at_once: usize, reads: usize) -> FetchBatches<Self, M>
    where
        M: Send + 'static,
    {
        fetch_batches::fetch_batches(self, batches_at_once, reads, None)
    }

    /// Like [`Self::fetch_batches`], reading whole chunks of a local store into buffers of
    /// `memory` when it has them to give (a GPU decoder's pinned memory:
    /// `BatchDecoder::read_memory` in `zarrpipe-codec-gpu`).
    fn fetch_batches_into(
        self,
        batches_at_once: usize,
        reads: usize,
        memory: Option<Arc<dyn ReadMemory>>,
    ) -> FetchBatches<Self, M>
    where
        M: Send + 'static,
    {
        fetch_batches::fetch_batches(self, batches_at_once, reads, memory)
    }
}

impl<M, St: Stream<Item = Staged<M, Vec<ChunkRequest>>>> FetchBatchesExt<M> for St {}
