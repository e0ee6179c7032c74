//! The CPU's own bound on reading and decoding a store: each of N threads takes the next chunk
//! file, reads it into a buffer it reuses and decompresses it with the codec library alone
//! (libzstd, c-blosc, zlib, lz4: the ones zarrpipe links) into another buffer it reuses. No
//! zarrpipe stage runs, so what a pipeline delivers on the same cores can be judged against
//! it (`zarrpipe bound`, the peer harness's `cpu-bound` row).
//!
//! A buffer a thread reuses stays in the cores' caches; a batch does not. With `into_place`,
//! each thread decodes its files one after the other into a region of its own of one large
//! buffer instead (a pass's decoded bytes, at most [`MOST_PLACE_BYTES`]), as zarrpipe decodes
//! each chunk into its place in a batch: the same work with the output in memory, not cache.

use std::io::Read;
use std::path::PathBuf;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Instant;

use anyhow::{bail, Context};
use serde::Serialize;
use zarrpipe_store::{Dataset, Variable};

/// The largest buffer `into_place` decodes into: larger than any batch of the workloads'
/// (W1's batch is 564 MB of float32) and than any host's caches.
pub const MOST_PLACE_BYTES: usize = 4 << 30;

/// What to measure.
#[derive(Clone, Debug)]
pub struct BoundOptions {
    /// Variables whose chunk files are read (empty: every data variable).
    pub variables: Vec<String>,
    /// Threads reading and decoding at once.
    pub threads: usize,
    /// Timed passes over every chunk file, after one untimed pass that warms the page cache;
    /// the best is reported.
    pub passes: usize,
    /// Also time decoding alone, the stored bytes already in memory.
    pub decode_only: bool,
    /// Decode into places in one large buffer, not a buffer each thread reuses.
    pub into_place: bool,
}

/// The bound, in decoded bytes per second.
#[derive(Clone, Debug, Serialize)]
pub struct BoundReport {
    /// The store.
    pub url: String,
    /// The codec every chunk file is decompressed with.
    pub codec: String,
    /// Threads reading and decoding at once.
    pub threads: usize,
    /// Chunk files read in one pass.
    pub chunks: usize,
    /// Their stored bytes.
    pub stored_bytes: u64,
    /// Their decoded bytes.
    pub decoded_bytes: u64,
    /// The best pass, reading and decoding: seconds.
    pub seconds: f64,
    /// Decoded GB/s of that pass.
    pub decoded_gb_per_s: f64,
    /// Decoded GB/s of every timed pass together: like a pipeline's epochs timed in a row,
    /// where a slower pass counts too.
    pub passes_gb_per_s: f64,
    /// Decoded GB/s of the best pass decoding bytes already in memory (with `decode_only`).
    pub decode_only_gb_per_s: Option<f64>,
    /// Whether the threads decoded into places in one large buffer.
    pub into_place: bool,
}

/// A whole-chunk codec, applied by its library.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Codec {
    None,
    Zstd,
    Blosc,
    Gzip,
    Zlib,
    /// numcodecs `lz4`: a 4-byte little-endian decoded size, then an LZ4 block.
    Lz4,
}

/// One chunk file: where it is and what it decodes to.
struct ChunkFile {
    path: PathBuf,
    decoded: usize,
}

/// Measures `dataset`'s bound with `options`; the store must be a local directory whose
/// variables share one whole-chunk codec (no filters, no sharding).
pub fn measure(dataset: &Dataset, options: &BoundOptions) -> anyhow::Result<BoundReport> {
    let root = PathBuf::from(dataset.url());
    if !root.is_dir() {
        bail!(
            "{}: `bound` reads the chunk files of a local store",
            dataset.url()
        );
    }
    let names = match options.variables.is_empty() {
        true => dataset.data_variable_names(),
        false => options.variables.clone(),
    };
    let mut codec = None;
    let mut files = Vec::new();
    for name in &names {
        let variable = dataset.variable(name)?;
        let this = codec_of(variable)?;
        if codec.is_some_and(|codec| codec != this) {
            bail!("the variables use different codecs: measure them one at a time (--var)");
        }
        codec = Some(this);
        let decoded = usize::try_from(variable.decoded_chunk_bytes())?;
        for indices in variable.every_chunk() {
            let path = root.join(variable.chunk_key(&indices));
            if path.is_file() {
                files.push(ChunkFile { path, decoded });
            }
        }
    }
    let codec = codec.context("no variable to read")?;
    if files.is_empty() {
        bail!("{}: no chunk file to read", dataset.url());
    }
    let threads = options.threads.max(1);
    let mut places = Places::new(&files, threads, options.into_place);
    let mut pass = || run_pass(&files, codec, None, &mut places);
    let (stored_bytes, decoded_bytes, _) = pass()?;
    let (mut best, mut all) = (f64::INFINITY, 0.0);
    for _ in 0..options.passes.max(1) {
        let seconds = pass()?.2;
        best = best.min(seconds);
        all += seconds;
    }
    let decode_only = match options.decode_only {
        true => {
            let stored: Vec<Vec<u8>> = files
                .iter()
                .map(|file| std::fs::read(&file.path))
                .collect::<Result<_, _>>()?;
            let mut best = f64::INFINITY;
            for _ in 0..options.passes.max(1) {
                best = best.min(run_pass(&files, codec, Some(&stored), &mut places)?.2);
            }
            Some(decoded_bytes as f64 / best / 1e9)
        }
        false => None,
    };
    Ok(BoundReport {
        url: dataset.url().to_string(),
        codec: format!("{codec:?}").to_lowercase(),
        threads,
        chunks: files.len(),
        stored_bytes,
        decoded_bytes,
        seconds: best,
        decoded_gb_per_s: decoded_bytes as f64 / best / 1e9,
        passes_gb_per_s: (options.passes.max(1) as u64 * decoded_bytes) as f64 / all / 1e9,
        decode_only_gb_per_s: decode_only,
        into_place: options.into_place,
    })
}

/// Where the threads decode: a buffer each reuses, or a region each of one large buffer.
struct Places {
    /// The large buffer (empty when each thread reuses its own).
    buffer: Vec<u8>,
    threads: usize,
}

impl Places {
    fn new(files: &[ChunkFile], threads: usize, into_place: bool) -> Self {
        if !into_place {
            return Self {
                buffer: Vec::new(),
                threads,
            };
        }
        let largest = files.iter().map(|file| file.decoded).max().unwrap_or(0);
        let total: usize = files.iter().map(|file| file.decoded).sum();
        let len = total.min(MOST_PLACE_BYTES).max(largest * threads);
        Self {
            buffer: vec![0; len],
            threads,
        }
    }

    /// One entry per thread: its region, or `None` when the threads reuse their own buffers.
    fn regions(&mut self) -> Vec<Option<&mut [u8]>> {
        if self.buffer.is_empty() {
            return (0..self.threads).map(|_| None).collect();
        }
        let region = (self.buffer.len() / self.threads).max(1);
        self.buffer
            .chunks_mut(region)
            .take(self.threads)
            .map(Some)
            .collect()
    }
}

/// The whole-chunk codec of `variable`'s chain.
fn codec_of(variable: &Variable) -> anyhow::Result<Codec> {
    if variable.reads_inner_chunks() {
        bail!(
            "`{}` is sharded: `bound` reads whole chunk files",
            variable.name()
        );
    }
    let names = variable.codec_names();
    let compressors: Vec<&str> = names
        .iter()
        .map(String::as_str)
        .filter(|name| *name != "bytes")
        .collect();
    Ok(match compressors.as_slice() {
        [] => Codec::None,
        ["zstd"] => Codec::Zstd,
        ["blosc"] => Codec::Blosc,
        ["gzip"] => Codec::Gzip,
        ["zlib"] => Codec::Zlib,
        ["lz4"] => Codec::Lz4,
        other => bail!(
            "`{}`: codec chain {other:?} (`bound` measures one whole-chunk compressor)",
            variable.name()
        ),
    })
}

/// One pass over `files` on a thread per place of `places`, from disk or from `stored`: (stored
/// bytes, decoded bytes, seconds).
fn run_pass(
    files: &[ChunkFile],
    codec: Codec,
    stored: Option<&[Vec<u8>]>,
    places: &mut Places,
) -> anyhow::Result<(u64, u64, f64)> {
    let next = AtomicUsize::new(0);
    let regions = places.regions();
    let started = Instant::now();
    let totals = std::thread::scope(|scope| {
        let next = &next;
        let workers: Vec<_> = regions
            .into_iter()
            .map(|region| scope.spawn(move || worker(files, codec, stored, next, region)))
            .collect();
        workers
            .into_iter()
            .map(|worker| worker.join().expect("a bound worker panicked"))
            .collect::<anyhow::Result<Vec<(u64, u64)>>>()
    })?;
    let seconds = started.elapsed().as_secs_f64();
    let stored_bytes = totals.iter().map(|t| t.0).sum();
    let decoded_bytes = totals.iter().map(|t| t.1).sum();
    Ok((stored_bytes, decoded_bytes, seconds))
}

/// One thread: takes files until none is left, reusing its input buffer and codec context,
/// and decoding into a buffer it reuses or, one after the other, into `region`.
fn worker(
    files: &[ChunkFile],
    codec: Codec,
    stored: Option<&[Vec<u8>]>,
    next: &AtomicUsize,
    mut region: Option<&mut [u8]>,
) -> anyhow::Result<(u64, u64)> {
    let mut input = Vec::new();
    let mut output = Vec::new();
    let mut at = 0usize;
    let mut zstd = zstd::bulk::Decompressor::new()?;
    let mut zlib = flate2::Decompress::new(true);
    let (mut stored_bytes, mut decoded_bytes) = (0u64, 0u64);
    loop {
        let index = next.fetch_add(1, Ordering::Relaxed);
        let Some(file) = files.get(index) else {
            return Ok((stored_bytes, decoded_bytes));
        };
        let bytes: &[u8] = match stored {
            Some(stored) => &stored[index],
            None => {
                input.clear();
                std::fs::File::open(&file.path)?.read_to_end(&mut input)?;
                &input
            }
        };
        let out = match region.as_deref_mut() {
            Some(region) => {
                if at + file.decoded > region.len() {
                    at = 0;
                }
                let place = &mut region[at..at + file.decoded];
                at = (at + file.decoded).next_multiple_of(64);
                place
            }
            None => {
                if output.len() < file.decoded {
                    output.resize(file.decoded, 0);
                }
                &mut output[..file.decoded]
            }
        };
        let written = match codec {
            Codec::None => bytes.len(),
            Codec::Zstd => zstd.decompress_to_buffer(bytes, out)?,
            Codec::Blosc => blosc_decompress(bytes, out)?,
            Codec::Zlib => {
                zlib.reset(true);
                zlib.decompress(bytes, out, flate2::FlushDecompress::Finish)?;
                zlib.total_out() as usize
            }
            Codec::Gzip => {
                let mut decoder = flate2::read::GzDecoder::new(bytes);
                decoder.read_exact(out)?;
                out.len()
            }
            Codec::Lz4 => {
                let block = bytes
                    .get(4..)
                    .context("an lz4 chunk shorter than its header")?;
                lz4_flex::block::decompress_into(block, out)?
            }
        };
        if written != file.decoded {
            bail!(
                "{}: decoded {written} bytes, expected {}",
                file.path.display(),
                file.decoded
            );
        }
        stored_bytes += bytes.len() as u64;
        decoded_bytes += written as u64;
    }
}

/// c-blosc's context API (no global lock), one internal thread: the threads are ours.
fn blosc_decompress(src: &[u8], dest: &mut [u8]) -> anyhow::Result<usize> {
    let mut decoded = 0usize;
    // SAFETY: `src` is valid for `src.len()` bytes; c-blosc checks the header against that
    // length and writes the decoded size it declares into `decoded`.
    let valid =
        unsafe { blosc_src::blosc_cbuffer_validate(src.as_ptr().cast(), src.len(), &mut decoded) };
    if valid != 0 || decoded > dest.len() {
        bail!("not a blosc frame of at most {} bytes", dest.len());
    }
    // SAFETY: `src` and `dest` are valid for their lengths and do not overlap; the frame was
    // validated against `src.len()` above, and c-blosc writes at most `dest.len()` bytes.
    let written = unsafe {
        blosc_src::blosc_decompress_ctx(
            src.as_ptr().cast(),
            dest.as_mut_ptr().cast(),
            dest.len(),
            1,
        )
    };
    match usize::try_from(written) {
        Ok(written) if written > 0 => Ok(written),
        _ => bail!("c-blosc could not decompress a frame ({written})"),
    }
}
