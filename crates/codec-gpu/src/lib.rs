//! Decode Zarr chunks: on the CPU in parallel on every core ([`CpuDecoder`]), common chains
//! (crc32c, zstd, gzip, zlib, blosc, numcodecs lz4, shuffle, byte order), and shards of inner
//! chunks of them, with the codec libraries straight into the memory the collator places them
//! in ([`PendingChunks`]), the others (transpose, fixedscaleoffset and the other numcodecs
//! codecs zarrs supports, shards of inner chunks of those) with zarrs' codecs; on the GPU in
//! batches with nvCOMP 6 and zarrpipe's own kernels ([`GpuDecoder`], feature `cuda`); or both
//! at once, each batch shared out by measured rates ([`SplitDecoder`]). The swap point is
//! [`BatchDecoder`]: each decodes a batch into [`DecodedChunks`] in host or device memory, or
//! pending, or (a split's GPU part) still decoding, and both collators take each.
//!
//! ```no_run
//! use std::sync::Arc;
//! use futures::{stream, TryStreamExt};
//! use zarrpipe_batcher::{Batcher, SampleLayout, WindowSpec};
//! use zarrpipe_codec_gpu::{BatchDecoder, CpuDecoder, DecodeBatchesExt, DecodedChunks};
//! use zarrpipe_store::{Dataset, FetchBatchesExt};
//!
//! # async fn demo() -> Result<(), Box<dyn std::error::Error>> {
//! let dataset = Dataset::open("data/sample.zarr").await?;
//! let layout = Arc::new(SampleLayout::new(&dataset, &["t2m"], &WindowSpec::new())?);
//! let batcher = Batcher::new(layout, 4, false)?;
//! // With `cuda`: `Arc::new(GpuDecoder::new(GpuOptions::default())?)` decodes on the GPU.
//! let decoder: Arc<dyn BatchDecoder> = Arc::new(CpuDecoder::new());
//! let batches: Vec<_> = stream::iter(batcher.read_plans())
//!     .fetch_batches(2, 64)
//!     .decode_batches(decoder)
//!     .try_collect()
//!     .await?;
//! // The CPU decoder leaves each batch for the collator to decode into its tensor.
//! assert!(matches!(batches[0].payload, DecodedChunks::Pending(_)));
//! # Ok(()) }
//! ```
//!
//! Chunk by chunk, [`DecodeExt::decode`] decodes a stream of encoded chunks on the CPU.

#![warn(missing_docs)]

mod auto_reads;
mod auto_share;
mod auto_trial;
mod backlog;
// Planning GPU batches is plain Rust, unit-tested everywhere against a CPU interpreter.
#[cfg(any(feature = "cuda", test))]
mod batch;
mod batch_decoder;
mod busy_time;
mod chain;
mod chunk_decode;
mod cpu;
mod decode;
mod decode_batches;
mod decode_clock;
mod decode_path;
mod decoded;
mod decoding_part;
mod direct;
mod direct_shard;
mod error;
mod frame_check;
mod frame_error;
mod frames;
mod gpu;
#[cfg(test)]
mod interpret;
mod last_batches;
mod placement;
#[cfg(any(feature = "cuda", test))]
mod plan;
mod read;
mod split;
mod split_trial;
#[cfg(any(test, feature = "testing"))]
pub mod testing;
#[cfg(test)]
mod tests;
mod zstd_tables;

use std::sync::Arc;

use futures::future::BoxFuture;
use futures::Stream;
use zarrpipe_core::Staged;
use zarrpipe_store::EncodedChunk;

pub use batch_decoder::{BatchDecoder, DecodedChunks};
pub use chunk_decode::decode_on_cpu;
pub use cpu::CpuDecoder;
pub use decode::Decode;
pub use decode_batches::DecodeBatches;
pub use decode_path::DecodePath;
pub use decoded::DecodedChunk;
pub use decoding_part::DecodingPart;
pub use error::{Error, Result};
pub use frames::{enable_zstd_table_checks, FrameError};
pub use gpu::{
    BatchTimings, DeviceBatch, DeviceChunk, GpuDecoder, GpuOptions, PendingBatch, PlannedBatch,
};
pub use placement::{ChunkPlacement, ChunkRuns, PendingChunks};
pub use read::{decode_every_chunk, read_array};
pub use split::{SplitDecoder, SplitPolicy};

/// Something that turns a chunk's stored bytes into its decoded elements.
pub trait ChunkDecoder: Send + Sync + std::fmt::Debug {
    /// Decodes one chunk; the decoder picks where the work runs ([`CpuDecoder`]: its thread pool).
    fn decode(&self, chunk: EncodedChunk) -> BoxFuture<'static, Result<DecodedChunk>>;
}

/// Stream adapters of the decode stage.
pub trait DecodeExt: Stream<Item = zarrpipe_store::Result<EncodedChunk>> + Sized {
    /// Decodes each chunk with `decoder`, up to `concurrency` chunks at once, in input order.
    /// Fetch errors pass through in their place.
    fn decode(self, decoder: Arc<dyn ChunkDecoder>, concurrency: usize) -> Decode<Self> {
        Decode::new(self, decoder, concurrency)
    }
}

impl<St: Stream<Item = zarrpipe_store::Result<EncodedChunk>>> DecodeExt for St {}

/// The decode stage at batch level, for a stream of fetched batches
/// ([`FetchBatchesExt::fetch_batches`](zarrpipe_store::FetchBatchesExt::fetch_batches)).
pub trait DecodeBatchesExt<M, E>:
    Stream<Item = std::result::Result<Staged<M, Vec<EncodedChunk>>, E>> + Sized
{
    /// Decodes each batch with `decoder` (the CPU's, the GPU's, or a split of both), a few
    /// batches at once as the decoder asks, in order. Errors before this stage pass through.
    fn decode_batches(self, decoder: Arc<dyn BatchDecoder>) -> DecodeBatches<Self, M>
    where
        M: Send + 'static,
        E: Into<Error> + Send + 'static,
    {
        decode_batches::decode_batches(self, decoder)
    }
}

impl<M, E, St> DecodeBatchesExt<M, E> for St where
    St: Stream<Item = std::result::Result<Staged<M, Vec<EncodedChunk>>, E>>
{
}
