//! The GPU decoder: batches of encoded chunks in, decoded chunks in device memory out. With
//! the `cuda` feature off, a stand-in of the same API reports that CUDA is unavailable.

use std::time::Duration;

use zarrpipe_store::ChunkRequest;

use crate::DecodePath;

#[cfg(feature = "cuda")]
mod cuda;
#[cfg(feature = "cuda")]
mod decode_stage;
#[cfg(feature = "cuda")]
mod device_batches;
#[cfg(feature = "cuda")]
mod kernels;
#[cfg(feature = "cuda")]
mod memory_pool;
#[cfg(feature = "cuda")]
mod nvcomp;
#[cfg(feature = "cuda")]
mod slots;
#[cfg(not(feature = "cuda"))]
mod stand_in;
#[cfg(feature = "cuda")]
mod tables;

#[cfg(feature = "cuda")]
pub use cuda::{DeviceMemory, GpuDecoder};
#[cfg(feature = "cuda")]
pub use cudarc;
#[cfg(feature = "cuda")]
pub use device_batches::{DeviceBatch, PendingBatch, PlannedBatch};
#[cfg(feature = "cuda")]
pub use kernels::{kernel, load_module};
#[cfg(feature = "cuda")]
pub use memory_pool::trim_memory_pool;
#[cfg(not(feature = "cuda"))]
pub use stand_in::{DeviceBatch, GpuDecoder, PendingBatch, PlannedBatch};

/// How a [`GpuDecoder`] runs.
#[derive(Clone, Debug)]
pub struct GpuOptions {
    /// CUDA device ordinal.
    pub device: usize,
    /// Refuse chunks the GPU cannot decode instead of decoding them on the CPU.
    pub strict: bool,
    /// Most temporary device memory nvCOMP may use at once; larger batches of a codec are
    /// decompressed in several calls.
    pub temp_budget: usize,
    /// Also check the entropy tables of every compressed zstd block on the CPU before nvCOMP
    /// sees it (corrupt Huffman tables can make nvCOMP 6 write out of bounds). On by default:
    /// it costs about 4 GB/s of compressed bytes per core, run on every core while a batch
    /// is planned.
    pub check_zstd_tables: bool,
    /// Decoded bytes per pipelined group: a batch is split into groups so that one uploads
    /// while another decodes. Larger groups give nvCOMP more chunks per call.
    pub group_bytes: usize,
    /// Streams batches decode on, so this many decode at once. nvCOMP's zstd gives each chunk
    /// one thread block, so a call over few large chunks leaves most of the GPU idle; batches
    /// on other streams fill it. Each stream keeps its own nvCOMP scratch memory.
    pub decode_streams: usize,
    /// Most stored bytes of the batches being decoded at once, which sit in pinned host
    /// memory until their batch is decoded (one batch always goes through, however large).
    pub pinned_memory: usize,
}

impl Default for GpuOptions {
    fn default() -> Self {
        Self {
            device: 0,
            strict: false,
            temp_budget: 4 << 30,
            check_zstd_tables: true,
            group_bytes: 1 << 30,
            decode_streams: 3,
            pinned_memory: 8 << 30,
        }
    }
}

/// One decoded chunk of a [`DeviceBatch`]: `len` bytes at `offset` of the batch's buffer, in
/// C order and native byte order, like [`crate::DecodedChunk::bytes`].
#[derive(Clone, Debug)]
pub struct DeviceChunk {
    /// The chunk decoded.
    pub request: ChunkRequest,
    /// Where its bytes start in the batch's buffer.
    pub offset: usize,
    /// Its length in bytes.
    pub len: usize,
    /// How it was decoded.
    pub path: DecodePath,
    /// Bytes the chunk took in the store (0 when missing).
    pub stored_len: usize,
    /// Time spent reading the chunk.
    pub fetch_time: Duration,
}

/// Where a batch's time went, on the host clock.
#[derive(Clone, Copy, Debug, Default)]
pub struct BatchTimings {
    /// Reading frames, planning, and CPU fallbacks.
    pub plan: Duration,
    /// Filling the pinned staging buffer.
    pub stage: Duration,
    /// Upload, decompression and kernels, until the stream finished (host clock, waits
    /// behind other batches included).
    pub device: Duration,
    /// The GPU time the batch's decoding took on its stream, from its first kernel to its
    /// last (CUDA events): what it took from other work on the GPU.
    pub gpu: Duration,
}
