//! The GPU decoder: batches of encoded chunks in, decoded chunks in device memory out. With
//! the `cuda` feature off, a stand-in of the same API reports that CUDA is unavailable.

use std::time::Duration;

use zarrpipe_store::ChunkRequest;

use crate::DecodePath;

#[cfg(feature = "cuda")]
mod admission;
#[cfg(feature = "cuda")]
mod batch_gates;
#[cfg(feature = "cuda")]
mod completion;
#[cfg(feature = "cuda")]
mod decode_stage;
#[cfg(feature = "cuda")]
mod decoder;
#[cfg(feature = "cuda")]
mod device_batches;
#[cfg(feature = "cuda")]
mod fault;
#[cfg(feature = "cuda")]
mod kernels;
#[cfg(feature = "cuda")]
mod lanes;
#[cfg(feature = "cuda")]
mod launcher;
#[cfg(feature = "cuda")]
mod nvcomp;
#[cfg(feature = "cuda")]
mod read_memory;
#[cfg(feature = "cuda")]
mod slots;
#[cfg(feature = "cuda")]
mod staging;
#[cfg(not(feature = "cuda"))]
mod stand_in;
// Plain arithmetic, unit-tested without the `cuda` feature too.
#[cfg(any(feature = "cuda", test))]
mod staging_layout;
#[cfg(feature = "cuda")]
mod submission;
#[cfg(feature = "cuda")]
mod tables;
// Plain arithmetic, unit-tested without the `cuda` feature too.
#[cfg(any(feature = "cuda", test))]
mod upload_runs;

#[cfg(feature = "cuda")]
pub use decoder::GpuDecoder;
#[cfg(feature = "cuda")]
pub use device_batches::{DeviceBatch, PendingBatch, PlannedBatch};
#[cfg(not(feature = "cuda"))]
pub use stand_in::{DeviceBatch, GpuDecoder, PendingBatch, PlannedBatch};

/// How a [`GpuDecoder`] runs.
#[derive(Clone, Debug)]
pub struct GpuOptions {
    /// CUDA device ordinal.
    pub device: usize,
    /// Refuse chunks the GPU cannot decode instead of decoding them on the CPU.
    pub strict: bool,
    /// Most temporary device memory nvCOMP may use at once per decode stream (and at most a
    /// quarter of [`device_memory`](Self::device_memory)); larger batches of a codec are
    /// decompressed in several calls.
    pub temp_budget: usize,
    /// Most device memory the decoder's batches take at once: each batch's decoded chunks,
    /// until the collator lets go of them, and its stored bytes. A batch waits for room (one
    /// always goes through, however large), so fewer batches decode at once under a smaller
    /// budget instead of running out of memory beside a model.
    pub device_memory: usize,
    /// Also check the entropy tables of every compressed zstd block on the CPU before nvCOMP
    /// sees it (corrupt Huffman tables can make nvCOMP 6 write out of bounds). On by default:
    /// it reads about 17 GB/s of W1's stored bytes per core (H100, 2026-11-25), on every core
    /// while a batch is planned, and costs W1 in shards 39.16 / 38.40 GB/s against 37.27 /
    /// 38.32 without (H200, 2026-11-26; docs/benchmarks.md, "Defaults and the measurements
    /// behind them").
    pub check_zstd_tables: bool,
    /// Decoded bytes per pipelined group: a larger batch is split into groups, staged one after
    /// another (each decoding on a free stream when there is one), which bounds a group's
    /// staging and scratch memory. A batch of one
    /// group is faster and, beside the others in flight, took less device memory: W1 of 64
    /// steps in batches of 8 (1.1 GB) ran at 44 GB/s in one group with a 28 GB peak, at 26-28
    /// in two with 40 GB (H200, 2026-11-26; docs/benchmarks.md, "Defaults and the
    /// measurements behind them").
    pub group_bytes: usize,
    /// Most batches decoding at once, each on a stream of its own. nvCOMP's zstd gives each
    /// chunk one thread block, so a call over few large chunks leaves most of the GPU idle;
    /// batches on other streams fill it. Each stream in use keeps its own nvCOMP scratch memory.
    pub decode_streams: usize,
    /// Chunks to keep decoding at once: a batch of fewer chunks lets more batches decode
    /// beside it (at least 3, at most `decode_streams`), one more being planned. On an H100
    /// (2026-11-25), W1's 172 chunks of 3.3 MB a batch went from 14.0 GB/s with 3 batches to
    /// 16.9 with 6.
    /// With 1024, W1's 0.8 MB chunks (688 a batch) and its shards of 16 inner chunks (2752 a
    /// batch) decoded three batches at once; six ran at 50-53 GB/s against 46-48, and 41-42
    /// against 37-38 (H200, 2026-11-26: docs/benchmarks.md, "Defaults and the measurements behind them").
    pub chunks_in_flight: usize,
    /// Most stored bytes of the batches being decoded at once, which sit in pinned host
    /// memory until their batch is decoded (one batch always goes through, however large).
    pub pinned_memory: usize,
    /// Most pinned host memory that a pipeline's chunk reads of a local store land in (in
    /// slabs of 64 MiB; 0: none), so those chunks upload without a staging copy; with all of
    /// it in use, reads go to ordinary memory. A pipeline has the slabs it will hold (its
    /// batches read ahead and decoding) allocated ahead, on a thread of their own, from when
    /// it is built. Default: 16 GiB, at most a quarter of the host's memory.
    pub read_memory: usize,
}

impl Default for GpuOptions {
    fn default() -> Self {
        Self {
            device: 0,
            strict: false,
            temp_budget: 4 << 30,
            device_memory: 12 << 30,
            check_zstd_tables: true,
            group_bytes: 4 << 30,
            decode_streams: 6,
            chunks_in_flight: 16384,
            pinned_memory: 8 << 30,
            read_memory: default_read_memory(),
        }
    }
}

/// The default [`GpuOptions::read_memory`]: room for the reads of setup B's batches (1 GB
/// stored each, 12.8 GB with those a pipeline holds). With 4 GiB, most of its reads went to
/// ordinary memory and were staged through pinned buffers that grew, a gigabyte at a time,
/// while the model trained: each `cudaHostAlloc` held up its kernel launches for 0.3-0.7 s
/// (H200, 2026-11-29; docs/training-runs.md). At most a quarter of the host's memory is pinned.
fn default_read_memory() -> usize {
    const MOST: usize = 16 << 30;
    host_memory().map_or(4 << 30, |host| MOST.min(host / 4))
}

/// The host's physical memory, in bytes.
fn host_memory() -> Option<usize> {
    // SAFETY: `sysconf` only reads the system's configuration.
    let (pages, page_size) = unsafe {
        (
            libc::sysconf(libc::_SC_PHYS_PAGES),
            libc::sysconf(libc::_SC_PAGESIZE),
        )
    };
    let (pages, page_size) = (
        usize::try_from(pages).ok()?,
        usize::try_from(page_size).ok()?,
    );
    (pages > 0).then(|| pages.saturating_mul(page_size))
}

impl GpuOptions {
    /// nvCOMP's temporary memory per decode stream: [`temp_budget`](Self::temp_budget), at most
    /// a quarter of [`device_memory`](Self::device_memory) (at least 64 MiB).
    pub fn temp_memory(&self) -> usize {
        self.temp_budget.min((self.device_memory / 4).max(64 << 20))
    }

    /// How many batches of `pieces` pieces each ([`pieces`]) decode at once so that about
    /// `chunks_in_flight` are in flight: at least 3 (or `decode_streams`, if fewer), at most
    /// `decode_streams`.
    #[cfg(any(feature = "cuda", test))]
    pub(crate) fn batches_decoding(&self, pieces: usize) -> usize {
        let most = self.decode_streams.max(1);
        self.chunks_in_flight
            .div_ceil(pieces.max(1))
            .clamp(most.min(3), most)
    }
}

/// The pieces the GPU decodes of `chunks` side by side: a shard's inner chunks (those read, or
/// all of them), each its own compressed stream; one for any other chunk.
#[cfg(any(feature = "cuda", test))]
pub(crate) fn pieces(chunks: &[zarrpipe_store::EncodedChunk]) -> usize {
    chunks
        .iter()
        .map(|chunk| match &chunk.request.inner {
            Some(inner) => inner.len(),
            None => chunk
                .request
                .variable
                .inner_chunks_per_shard()
                .map_or(1, |count| count as usize),
        })
        .sum()
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

#[cfg(test)]
mod tests {
    use super::{host_memory, GpuOptions};

    #[test]
    fn the_default_read_memory_holds_setup_bs_reads_within_a_quarter_of_the_host() {
        let options = GpuOptions::default();
        let host = host_memory().expect("the host's memory");
        assert!(
            options.read_memory <= host / 4,
            "{} of {host}",
            options.read_memory
        );
        // Setup B's batches, 1.02 GB stored: two read ahead and those the decoder holds (its
        // streams and two), a quarter more as the slabs ask for.
        let held = (2 + options.decode_streams + 2) * 1_020_000_000;
        if host >= 64 << 30 {
            assert!(
                options.read_memory >= held + held / 4,
                "{}",
                options.read_memory
            );
        }
    }

    #[test]
    fn batches_of_fewer_chunks_decode_more_at_once() {
        let options = GpuOptions::default();
        // W1: 4 samples of 43 fields, one 3.3 MB chunk each.
        assert_eq!(options.batches_decoding(172), 6);
        // W1 in 0.8 MB chunks, and in shards of 16 inner chunks: 6 too; many more, 3.
        assert_eq!(options.batches_decoding(688), 6);
        assert_eq!(options.batches_decoding(2752), 6);
        assert_eq!(options.batches_decoding(8192), 3);
        // Never more than the streams, nor fewer than 3 of them.
        assert_eq!(options.batches_decoding(1), 6);
        assert_eq!(options.batches_decoding(0), 6);
        let two = GpuOptions {
            decode_streams: 2,
            ..GpuOptions::default()
        };
        assert_eq!(two.batches_decoding(10_000), 2);
        assert_eq!(two.batches_decoding(1), 2);
        let zero = GpuOptions {
            decode_streams: 0,
            ..GpuOptions::default()
        };
        assert_eq!(zero.batches_decoding(172), 1);
    }
}
