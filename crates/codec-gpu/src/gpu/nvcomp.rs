//! nvCOMP 6's batched decompressors, loaded at run time from `libnvcomp.so.6` (`NVCOMP_LIB`,
//! else the library search path), so building needs no nvCOMP.

use std::ffi::c_void;
use std::path::PathBuf;

use libloading::Library;
use zarrpipe_cuda::cudarc::driver::sys::CUstream;

use crate::plan::{Codec, DECOMPRESS_ALIGN};
use crate::{Error, Result};

/// Every nvCOMP 6 decompression option struct is 64 bytes; all zero selects the defaults
/// (automatic backend, bytes as `char`, no bit shuffle).
#[repr(C)]
#[derive(Clone, Copy)]
struct DecompressOpts {
    bytes: [u8; 64],
}

const DEFAULT_OPTS: DecompressOpts = DecompressOpts { bytes: [0; 64] };

type TempSizeFn =
    unsafe extern "C" fn(usize, usize, DecompressOpts, *mut usize, usize, CUstream) -> i32;

type DecompressFn = unsafe extern "C" fn(
    *const *const c_void, // device pointers to compressed chunks
    *const usize,         // their sizes
    *const usize,         // output buffer sizes
    *mut usize,           // actual decompressed sizes (written)
    usize,                // number of chunks
    *mut c_void,          // temporary memory
    usize,                // its size
    *const *mut c_void,   // device pointers to output buffers
    DecompressOpts,
    *mut i32, // per-chunk statuses (written)
    CUstream,
) -> i32;

/// `nvcompAlignmentRequirements_t`: the alignment each input, output and temporary buffer needs.
#[repr(C)]
#[derive(Default)]
struct Alignments {
    input: usize,
    output: usize,
    temp: usize,
}

type AlignmentsFn = unsafe extern "C" fn(DecompressOpts, *mut Alignments) -> i32;

/// Device allocations (temporary memory included) start at least this aligned.
const ALLOCATION_ALIGN: usize = 256;

struct Entry {
    temp_size: TempSizeFn,
    decompress: DecompressFn,
    alignments: AlignmentsFn,
}

/// The loaded library and its four decompressors.
pub(crate) struct Nvcomp {
    entries: [Entry; 4],
    pub path: String,
    _library: Library,
}

/// Where to install nvCOMP from, for the message shown when it is missing.
pub(crate) const INSTALL_HINT: &str =
    "nvCOMP 6 was not found: `pip install nvidia-libnvcomp-cu13` \
    (or unpack its wheel) and set NVCOMP_LIB to the path of libnvcomp.so.6";

impl Nvcomp {
    pub fn load() -> Result<Self> {
        let candidates: Vec<PathBuf> = match std::env::var_os("NVCOMP_LIB") {
            Some(path) => vec![path.into()],
            None => vec!["libnvcomp.so.6".into(), "libnvcomp.so".into()],
        };
        let mut last_error = None;
        for candidate in &candidates {
            // SAFETY: loading nvCOMP runs its initialisers, which only register CUDA
            // kernels; the library stays loaded for as long as `Nvcomp` lives.
            match unsafe { Library::new(candidate) } {
                Ok(library) => return Self::bind(library, candidate.display().to_string()),
                Err(error) => last_error = Some(error),
            }
        }
        Err(Error::unavailable(format!(
            "{INSTALL_HINT} (tried {candidates:?}: {})",
            last_error.map_or_else(String::new, |error| error.to_string())
        )))
    }

    fn bind(library: Library, path: String) -> Result<Self> {
        let entry = |name: &str| -> Result<Entry> {
            let symbol = |suffix: &str| format!("nvcompBatched{name}{suffix}\0");
            // SAFETY: the symbols have exactly these C signatures in nvCOMP 6 (`zstd.h`,
            // `lz4.h`, `snappy.h`, `deflate.h`); the function pointers are only called while
            // `library` is held by the same `Nvcomp`.
            unsafe {
                let temp_size = *library
                    .get::<TempSizeFn>(symbol("DecompressGetTempSize").as_bytes())
                    .map_err(|error| missing_symbol(&path, error))?;
                let decompress = *library
                    .get::<DecompressFn>(symbol("DecompressAsync").as_bytes())
                    .map_err(|error| missing_symbol(&path, error))?;
                let alignments = *library
                    .get::<AlignmentsFn>(symbol("DecompressGetRequiredAlignments").as_bytes())
                    .map_err(|error| missing_symbol(&path, error))?;
                Ok(Entry {
                    temp_size,
                    decompress,
                    alignments,
                })
            }
        };
        let nvcomp = Self {
            entries: [
                entry("Zstd")?,
                entry("LZ4")?,
                entry("Snappy")?,
                entry("Deflate")?,
            ],
            path,
            _library: library,
        };
        for codec in [Codec::Zstd, Codec::Lz4, Codec::Snappy, Codec::Deflate] {
            nvcomp.check_alignments(codec)?;
        }
        Ok(nvcomp)
    }

    /// Refuses a library that asks more alignment than the plans give (inputs are packed as
    /// tightly as `Codec::input_align` allows): its calls would be undefined behaviour.
    fn check_alignments(&self, codec: Codec) -> Result<()> {
        let mut asked = Alignments::default();
        // SAFETY: options by value, one struct written through a valid pointer.
        let status = unsafe { (self.entry(codec).alignments)(DEFAULT_OPTS, &mut asked) };
        check("DecompressGetRequiredAlignments", status)?;
        let given = [
            ("input", asked.input, codec.input_align()),
            ("output", asked.output, DECOMPRESS_ALIGN),
            ("temporary", asked.temp, ALLOCATION_ALIGN),
        ];
        match given
            .into_iter()
            .find(|&(_, asked, given)| asked == 0 || given % asked != 0)
        {
            None => Ok(()),
            Some((what, asked, given)) => Err(Error::unavailable(format!(
                "{} asks {codec:?} {what} buffers aligned to {asked} bytes; zarrpipe's plans \
                 give {given}",
                self.path
            ))),
        }
    }

    fn entry(&self, codec: Codec) -> &Entry {
        &self.entries[match codec {
            Codec::Zstd => 0,
            Codec::Lz4 => 1,
            Codec::Snappy => 2,
            Codec::Deflate => 3,
        }]
    }

    /// Temporary device bytes one call needs for `count` chunks.
    pub fn temp_bytes(
        &self,
        codec: Codec,
        count: usize,
        max_chunk: usize,
        total: usize,
        stream: CUstream,
    ) -> Result<usize> {
        let mut bytes = 0usize;
        // SAFETY: plain values in, one `size_t` written through a valid pointer.
        let status = unsafe {
            (self.entry(codec).temp_size)(count, max_chunk, DEFAULT_OPTS, &mut bytes, total, stream)
        };
        check("DecompressGetTempSize", status)?;
        Ok(bytes)
    }

    /// Enqueues one batched decompression on `stream`.
    ///
    /// # Safety
    /// 1. Every pointer argument is a device address of an array of `count` elements, valid
    ///    until the stream has run the call.
    /// 2. Each input range lies inside one allocation, and each output buffer holds at least
    ///    its declared size.
    /// 3. `temp` holds at least `temp_bytes` bytes, aligned as nvCOMP asks (256 suffices).
    #[allow(clippy::too_many_arguments)]
    pub unsafe fn decompress(
        &self,
        codec: Codec,
        count: usize,
        inputs: u64,
        input_sizes: u64,
        output_sizes: u64,
        actual_sizes: u64,
        outputs: u64,
        statuses: u64,
        temp: u64,
        temp_bytes: usize,
        stream: CUstream,
    ) -> Result<()> {
        // SAFETY: the caller's contract above.
        let status = unsafe {
            (self.entry(codec).decompress)(
                inputs as *const *const c_void,
                input_sizes as *const usize,
                output_sizes as *const usize,
                actual_sizes as *mut usize,
                count,
                temp as *mut c_void,
                temp_bytes,
                outputs as *const *mut c_void,
                DEFAULT_OPTS,
                statuses as *mut i32,
                stream,
            )
        };
        check("DecompressAsync", status)
    }
}

fn missing_symbol(path: &str, error: libloading::Error) -> Error {
    Error::unavailable(format!("{path} is not nvCOMP 6 ({error}); {INSTALL_HINT}"))
}

fn check(call: &'static str, status: i32) -> Result<()> {
    if status == 0 {
        return Ok(());
    }
    Err(Error::Nvcomp {
        call,
        status,
        name: status_name(status),
    })
}

/// nvCOMP's name for a status code (`shared_types.h`).
pub(crate) fn status_name(status: i32) -> &'static str {
    match status {
        0 => "success",
        10 => "invalid value",
        11 => "not supported",
        12 => "cannot decompress",
        13 => "bad checksum",
        14 => "cannot verify checksums",
        15 => "output buffer too small",
        16 => "wrong header length",
        17 => "alignment",
        18 => "chunk size too large",
        20 => "wrong input length",
        21 => "batch size too large",
        1000 => "CUDA error",
        10000 => "internal error",
        _ => "unknown status",
    }
}
