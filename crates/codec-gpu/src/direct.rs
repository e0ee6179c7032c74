//! Codec chains the CPU decodes straight into the caller's memory: a checksum, one
//! whole-chunk compressor, a byte shuffle and a byte swap, each optional, in that decode
//! order (what zarr-python, xarray and zarrpipe write unless they transpose; inside shards,
//! the inner chunks' chain: see `direct_shard`). Each thread keeps one context per codec
//! library and one scratch buffer, so decoding a chunk allocates nothing and writes its output
//! pages once. Other chains go through zarrs.

use std::cell::RefCell;
use std::io::Read;

use crate::chain::{Compressor, GpuChain, Step};

/// A chain of [the shape above](self), ready to decode into a given buffer.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct DirectChain {
    crc32c: bool,
    compressor: Option<Compressor>,
    /// numcodecs `shuffle`'s element size.
    shuffle: Option<usize>,
    /// Elements of this size are swapped to this machine's byte order.
    swap: Option<usize>,
}

/// Why a chunk did not decode.
#[derive(Debug)]
pub(crate) enum CodecFailure {
    /// A codec library refused it: the codec's name and its message.
    Refused {
        codec: &'static str,
        message: String,
    },
    /// It decoded to `actual` bytes where its chunk holds another number.
    Size { actual: usize },
}

fn failure(codec: &'static str, message: impl ToString) -> CodecFailure {
    CodecFailure::Refused {
        codec,
        message: message.to_string(),
    }
}

/// One thread's codec contexts and scratch memory, reused from chunk to chunk.
struct Contexts {
    zstd: Option<zstd::bulk::Decompressor<'static>>,
    zlib: flate2::Decompress,
    scratch: Vec<u8>,
}

thread_local! {
    static CONTEXTS: RefCell<Contexts> = RefCell::new(Contexts {
        zstd: None,
        zlib: flate2::Decompress::new(true),
        scratch: Vec::new(),
    });
}

impl DirectChain {
    /// The chain of `chain`'s steps with `element_size`-byte elements, if it has the shape
    /// this module decodes.
    pub fn of(chain: &GpuChain, element_size: usize) -> Option<Self> {
        let mut steps = chain.steps.iter().peekable();
        let crc32c = steps.next_if(|step| matches!(step, Step::Crc32c)).is_some();
        let compressor = steps.next_if(|step| matches!(step, Step::Decompress(_)));
        let compressor = compressor.map(|step| match step {
            Step::Decompress(compressor) => *compressor,
            _ => unreachable!("matched above"),
        });
        let shuffle = match steps.next_if(|step| matches!(step, Step::Shuffle { .. })) {
            Some(Step::Shuffle { element_size }) => Some(*element_size),
            _ => None,
        };
        let swap = steps
            .next_if(|step| matches!(step, Step::SwapBytes))
            .map(|_| element_size);
        steps.next().is_none().then_some(Self {
            crc32c,
            compressor,
            shuffle: shuffle.filter(|&size| size > 1),
            swap: swap.filter(|&size| size > 1),
        })
    }

    /// Whether the chunks decode faster into the thread's scratch memory, copied into place
    /// with streaming stores, than into their place: every decompressor here writes its output
    /// with ordinary stores (and zstd and lz4 read back from it), so each line of a place new
    /// to the caches is read from memory before it is written, where the scratch memory stays
    /// in the cache and the streaming copy writes whole lines. On an H200 host's 16 cores
    /// (2026-11-30, six interleaved rounds) decoding through scratch memory was faster in the
    /// median by 5-8% on blosc-lz4 and W1 of 64 steps, and within the rounds' spread on
    /// w1-small (`docs/benchmarks.md`, "Chunks through scratch memory").
    pub fn decodes_faster_through_scratch(&self) -> bool {
        cfg!(target_arch = "x86_64") && self.compressor.is_some()
    }

    /// Decodes the stored bytes `stored` into `out`, which must end up exactly full.
    pub fn decode_into(&self, stored: &[u8], out: &mut [u8]) -> Result<(), CodecFailure> {
        let stored = match self.crc32c {
            true => check_crc32c(stored)?,
            false => stored,
        };
        CONTEXTS.with_borrow_mut(|contexts| {
            match self.shuffle {
                // A shuffled chunk decompresses into scratch and unshuffles into place.
                Some(element_size) => {
                    let mut scratch = std::mem::take(&mut contexts.scratch);
                    scratch.resize(out.len(), 0);
                    let decompressed = self.decompress(stored, &mut scratch, contexts);
                    if decompressed.is_ok() {
                        unshuffle(&scratch, out, element_size);
                    }
                    contexts.scratch = scratch;
                    decompressed?;
                }
                None => self.decompress(stored, out, contexts)?,
            }
            if let Some(size) = self.swap {
                out.chunks_exact_mut(size).for_each(<[u8]>::reverse);
            }
            Ok(())
        })
    }

    fn decompress(
        &self,
        stored: &[u8],
        out: &mut [u8],
        contexts: &mut Contexts,
    ) -> Result<(), CodecFailure> {
        let expected = out.len();
        let written = match self.compressor {
            None => {
                let written = stored.len();
                if written == expected {
                    out.copy_from_slice(stored);
                }
                written
            }
            Some(Compressor::Zstd) => {
                let zstd = match &mut contexts.zstd {
                    Some(zstd) => zstd,
                    empty => empty
                        .insert(zstd::bulk::Decompressor::new().map_err(|e| failure("zstd", e))?),
                };
                // Writes at most `out.len()` bytes: a frame declaring more fails here, where
                // a decoder that allocates what the header says could abort the process.
                zstd.decompress_to_buffer(stored, out)
                    .map_err(|error| failure("zstd", error))?
            }
            Some(Compressor::Blosc) => blosc_decompress(stored, out)?,
            Some(Compressor::Zlib) => {
                let zlib = &mut contexts.zlib;
                zlib.reset(true);
                let status = zlib
                    .decompress(stored, out, flate2::FlushDecompress::Finish)
                    .map_err(|error| failure("zlib", error))?;
                if status != flate2::Status::StreamEnd {
                    return Err(failure(
                        "zlib",
                        format!("the stream holds more than the chunk's {expected} bytes, or ends early"),
                    ));
                }
                zlib.total_out() as usize
            }
            Some(Compressor::Gzip) => gunzip(stored, out)?,
            Some(Compressor::Lz4) => lz4_decompress(stored, out)?,
        };
        match written == expected {
            true => Ok(()),
            false => Err(CodecFailure::Size { actual: written }),
        }
    }
}

/// Fills `out` with copies of `pattern`, one element's bytes (a fill value).
pub(crate) fn fill(out: &mut [u8], pattern: &[u8]) {
    match pattern {
        [first, rest @ ..] if rest.iter().all(|byte| byte == first) => out.fill(*first),
        _ => out
            .chunks_exact_mut(pattern.len())
            .for_each(|element| element.copy_from_slice(pattern)),
    }
}

/// The bytes before a crc32c trailer that matches them.
fn check_crc32c(stored: &[u8]) -> Result<&[u8], CodecFailure> {
    let Some(split) = stored.len().checked_sub(4) else {
        return Err(failure("crc32c", "shorter than its 4-byte checksum"));
    };
    let (data, trailer) = stored.split_at(split);
    let expected = u32::from_le_bytes(trailer.try_into().expect("4 bytes"));
    let actual = crc32c::crc32c(data);
    match actual == expected {
        true => Ok(data),
        false => Err(failure(
            "crc32c",
            format!("checksum {actual:#010x} does not match the stored {expected:#010x}"),
        )),
    }
}

/// numcodecs `shuffle` undone: byte `b` of element `e` was stored at `b * count + e`.
fn unshuffle(shuffled: &[u8], out: &mut [u8], element_size: usize) {
    let count = out.len() / element_size;
    for (byte, plane) in shuffled[..count * element_size]
        .chunks_exact(count)
        .enumerate()
    {
        for (element, &value) in plane.iter().enumerate() {
            out[element * element_size + byte] = value;
        }
    }
    // A tail shorter than one element is stored as it is.
    let (tail, end) = (count * element_size, out.len());
    out[tail..].copy_from_slice(&shuffled[tail..end]);
}

fn gunzip(stored: &[u8], out: &mut [u8]) -> Result<usize, CodecFailure> {
    let mut decoder = flate2::read::GzDecoder::new(stored);
    let mut written = 0;
    while written < out.len() {
        match decoder.read(&mut out[written..]) {
            Ok(0) => return Ok(written),
            Ok(n) => written += n,
            Err(error) => return Err(failure("gzip", error)),
        }
    }
    // Anything past the chunk's size is an error too, not silently dropped.
    let mut extra = [0u8; 1];
    match decoder.read(&mut extra) {
        Ok(0) => Ok(written),
        Ok(_) => Ok(written + 1),
        Err(error) => Err(failure("gzip", error)),
    }
}

/// numcodecs `lz4`: a 4-byte little-endian decoded size, then one LZ4 block.
fn lz4_decompress(stored: &[u8], out: &mut [u8]) -> Result<usize, CodecFailure> {
    let (Some(header), Some(block)) = (stored.get(..4), stored.get(4..)) else {
        return Err(failure("lz4", "shorter than its 4-byte size header"));
    };
    let declared = u32::from_le_bytes(header.try_into().expect("4 bytes")) as usize;
    if declared != out.len() {
        return Ok(declared);
    }
    lz4_flex::block::decompress_into(block, out).map_err(|error| failure("lz4", error))
}

/// A blosc 1 frame, decompressed (and unshuffled) by c-blosc on the calling thread.
fn blosc_decompress(stored: &[u8], out: &mut [u8]) -> Result<usize, CodecFailure> {
    let mut declared = 0usize;
    // SAFETY: c-blosc reads the header within `stored.len()` bytes and writes `declared`.
    let valid = unsafe {
        blosc_src::blosc_cbuffer_validate(stored.as_ptr().cast(), stored.len(), &mut declared)
    };
    if valid != 0 {
        return Err(failure(
            "blosc",
            "not a blosc frame, or one longer than its bytes",
        ));
    }
    if declared != out.len() {
        return Ok(declared);
    }
    // SAFETY: the frame was validated against its length, and `out` holds the `declared`
    // bytes it decompresses to; one internal thread, the caller's.
    let written = unsafe {
        blosc_src::blosc_decompress_ctx(
            stored.as_ptr().cast(),
            out.as_mut_ptr().cast(),
            out.len(),
            1,
        )
    };
    usize::try_from(written)
        .ok()
        .filter(|&written| written > 0 || out.is_empty())
        .ok_or_else(|| failure("blosc", format!("c-blosc refused the frame ({written})")))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn chain(steps: Vec<Step>) -> Option<DirectChain> {
        DirectChain::of(&GpuChain { steps }, 4)
    }

    #[test]
    fn takes_the_chains_it_decodes_and_leaves_the_rest() {
        let zstd = Step::Decompress(Compressor::Zstd);
        assert!(chain(vec![]).is_some());
        assert!(chain(vec![Step::Crc32c, zstd.clone()]).is_some());
        assert!(chain(vec![
            zstd.clone(),
            Step::Shuffle { element_size: 4 },
            Step::SwapBytes
        ])
        .is_some());
        assert!(chain(vec![Step::SwapBytes, zstd.clone()]).is_none());
        assert!(chain(vec![zstd.clone(), zstd.clone()]).is_none());
        let transpose = Step::Transpose {
            encoded_order: vec![1, 0],
        };
        assert!(chain(vec![zstd, transpose]).is_none());
    }

    #[test]
    fn decodes_each_compressor_into_the_given_buffer() {
        let data: Vec<u8> = (0..4096u32).flat_map(|i| (i / 7).to_le_bytes()).collect();
        let zstd_frame = zstd::bulk::compress(&data, 3).unwrap();
        let mut zlib = flate2::write::ZlibEncoder::new(Vec::new(), flate2::Compression::fast());
        std::io::Write::write_all(&mut zlib, &data).unwrap();
        let mut gzip = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
        std::io::Write::write_all(&mut gzip, &data).unwrap();
        let mut lz4 = (data.len() as u32).to_le_bytes().to_vec();
        lz4.extend(lz4_flex::block::compress(&data));
        let cases = [
            (Compressor::Zstd, zstd_frame),
            (Compressor::Zlib, zlib.finish().unwrap()),
            (Compressor::Gzip, gzip.finish().unwrap()),
            (Compressor::Lz4, lz4),
        ];
        for (compressor, stored) in cases {
            let chain = chain(vec![Step::Decompress(compressor)]).unwrap();
            let mut out = vec![0xAB; data.len()];
            chain.decode_into(&stored, &mut out).unwrap();
            assert_eq!(out, data, "{compressor:?}");
            // A buffer of the wrong size is an error naming the codec, not a short chunk.
            let mut short = vec![0; data.len() - 4];
            assert!(
                chain.decode_into(&stored, &mut short).is_err(),
                "{compressor:?}"
            );
            // So is a truncated stream.
            let mut out = vec![0; data.len()];
            assert!(
                chain
                    .decode_into(&stored[..stored.len() / 2], &mut out)
                    .is_err(),
                "{compressor:?}"
            );
        }
    }

    #[test]
    #[cfg(target_endian = "little")]
    fn unshuffles_swaps_and_checks_the_checksum() {
        let values: Vec<u32> = (0..1001u32).map(|i| i.wrapping_mul(2654435761)).collect();
        let big_endian: Vec<u8> = values.iter().flat_map(|v| v.to_be_bytes()).collect();
        let count = values.len();
        let mut shuffled = vec![0u8; big_endian.len()];
        for (element, bytes) in big_endian.chunks_exact(4).enumerate() {
            for (byte, &value) in bytes.iter().enumerate() {
                shuffled[byte * count + element] = value;
            }
        }
        let mut stored = shuffled.clone();
        stored.extend(crc32c::crc32c(&shuffled).to_le_bytes());
        let steps = vec![
            Step::Crc32c,
            Step::Shuffle { element_size: 4 },
            Step::SwapBytes,
        ];
        let chain = chain(steps).unwrap();
        let mut out = vec![0; big_endian.len()];
        chain.decode_into(&stored, &mut out).unwrap();
        // Stored big-endian; the swap step exists because this machine is little-endian.
        let swapped: Vec<u8> = values.iter().flat_map(|v| v.to_le_bytes()).collect();
        assert_eq!(out, swapped);
        *stored.last_mut().unwrap() ^= 1;
        let error = chain.decode_into(&stored, &mut out).unwrap_err();
        assert!(matches!(
            error,
            CodecFailure::Refused {
                codec: "crc32c",
                ..
            }
        ));
    }
}
