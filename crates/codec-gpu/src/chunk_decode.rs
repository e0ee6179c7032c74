//! Decoding one chunk on the calling thread: the codec libraries straight into the given
//! memory for the chains they cover ([`DirectChain`], and shards of inner chunks of one:
//! [`DirectShard`]), zarrs' codecs for the others, after the same frame checks the GPU path
//! makes.

use std::borrow::Cow;
use std::mem::MaybeUninit;

use rayon::prelude::*;
use zarrpipe_core::panic_message;
use zarrpipe_store::{EncodedChunk, Variable};
use zarrs::array::{ArrayBytes, ArrayToBytesCodecTraits, CodecOptions};

use crate::chain::{GpuChain, Step};
use crate::decode_clock::DecodeClock;
use crate::direct::{fill, CodecFailure, DirectChain};
use crate::direct_shard::{DirectShard, ShardFailure};
use crate::frame_check::check_chunk;
use crate::frames::{self, FrameError};
use crate::{DecodedChunk, Error, Result};

/// Decodes one chunk on the calling thread (a large shard on several threads of the calling
/// rayon pool); a missing chunk becomes the fill value. A panic while decoding (corrupt bytes
/// can reach a codec's unchecked arithmetic) is caught here and becomes [`Error::Panicked`]
/// naming the chunk: rayon aborts the process on a panic in a spawned task, and this runs in
/// one.
pub fn decode_on_cpu(chunk: EncodedChunk) -> Result<DecodedChunk> {
    guarded(chunk, |chunk| decode_unguarded(chunk.read_now()?))
}

/// Decodes one chunk with zarrs' codecs whatever its chain, after the frame checks, a panic
/// caught as [`decode_on_cpu`] catches it: what the direct paths are checked against.
#[cfg(any(test, feature = "testing"))]
pub(crate) fn decode_with_zarrs(chunk: EncodedChunk) -> Result<DecodedChunk> {
    guarded(chunk, |chunk| {
        let chunk = chunk.read_now()?;
        let chain = GpuChain::of(&chunk.request.variable).ok();
        decode_through_zarrs(chunk, chain.as_ref())
    })
}

fn guarded(
    chunk: EncodedChunk,
    decode: impl FnOnce(EncodedChunk) -> Result<DecodedChunk>,
) -> Result<DecodedChunk> {
    let request = chunk.request.clone();
    std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| decode(chunk))).unwrap_or_else(
        |payload| {
            Err(Error::Panicked {
                variable: request.variable.name().to_string(),
                key: request.key(),
                message: panic_message(payload.as_ref()),
            })
        },
    )
}

/// Checks the frames of a chunk's stored bytes as the GPU path does (headers, declared sizes,
/// shard indexes; not zstd's entropy tables) before zarrs decodes them: zarrs' zstd codec
/// allocates whatever size a frame header declares, and a failed allocation aborts the
/// process, which no panic handler catches. `chain` is the chunk's chain as the GPU path
/// reads it; chains it cannot plan (`None`) are not checked.
fn check_frames(chunk: &EncodedChunk, chain: Option<&GpuChain>) -> Result<()> {
    let (Some(bytes), Some(chain)) = (&chunk.bytes, chain) else {
        return Ok(());
    };
    let variable = &chunk.request.variable;
    let shape = variable
        .chunk_region(&chunk.request.indices)
        .map(|(_, shape)| shape)
        .unwrap_or_else(|_| variable.chunk_shape());
    let element_size = variable.dtype().size();
    let checked =
        frames::with_table_checks(false, || check_chunk(bytes, chain, &shape, element_size));
    match checked {
        Ok(()) | Err(FrameError::NeedsCpu(_)) => Ok(()),
        Err(source) => Err(Error::Frame {
            variable: variable.name().to_string(),
            key: chunk.request.key(),
            source,
        }),
    }
}

fn decode_unguarded(chunk: EncodedChunk) -> Result<DecodedChunk> {
    // Read once: it tells both whether the chain decodes directly and how to check frames.
    let variable = &chunk.request.variable;
    let chain = GpuChain::of(variable).ok();
    let direct = chain
        .as_ref()
        .and_then(|chain| DirectDecoder::of(variable, chain));
    match direct {
        Some(direct) => decode_direct(chunk, &direct),
        None => decode_through_zarrs(chunk, chain.as_ref()),
    }
}

/// Decodes a chunk with zarrs' codecs into memory of its own, after checking its frames.
fn decode_through_zarrs(chunk: EncodedChunk, chain: Option<&GpuChain>) -> Result<DecodedChunk> {
    check_frames(&chunk, chain)?;
    let clock = DecodeClock::start();
    let EncodedChunk {
        request,
        bytes,
        fetch_time,
        ..
    } = chunk;
    let variable = &request.variable;
    let array = variable.array();
    let decode_error = |source| Error::Decode {
        variable: variable.name().to_string(),
        key: request.key(),
        source,
    };
    let shape = array.chunk_shape(&request.indices).map_err(|_| {
        Error::Store(zarrpipe_store::Error::ChunkOutOfGrid {
            variable: variable.name().to_string(),
            indices: request.indices.clone(),
            grid: variable.chunk_grid_shape().to_vec(),
        })
    })?;
    let elements: u64 = shape.iter().map(|n| n.get()).product();
    let expected = elements as usize * variable.dtype().size();
    let stored_len = bytes.as_ref().map_or(0, |bytes| bytes.len());
    let decoded = match &bytes {
        Some(bytes) => array
            .codecs()
            .decode(
                Cow::Borrowed(bytes),
                &shape,
                array.data_type(),
                array.fill_value(),
                &CodecOptions::default(),
            )
            .map_err(decode_error)?,
        None => ArrayBytes::new_fill_value(array.data_type(), elements, array.fill_value())
            .map_err(|error| decode_error(error.into()))?,
    };
    let decoded = decoded
        .into_fixed()
        .map_err(|error| decode_error(error.into()))?;
    if decoded.len() != expected {
        return Err(Error::DecodedSize {
            variable: variable.name().to_string(),
            key: request.key(),
            expected,
            actual: decoded.len(),
        });
    }
    let (decode_time, decode_cpu_time) = clock.read();
    Ok(DecodedChunk {
        bytes: decoded.into_owned(),
        stored_len,
        missing: bytes.is_none(),
        request,
        fetch_time,
        decode_time,
        decode_cpu_time,
    })
}

/// How a variable's chunks decode straight into a given buffer, by the codec libraries.
#[derive(Clone, Debug)]
pub(crate) enum DirectDecoder {
    /// Chunks of a [`DirectChain`].
    Chunk(DirectChain),
    /// Shards whose inner chunks are of a [`DirectChain`].
    Shard(Box<DirectShard>),
}

impl DirectDecoder {
    /// Whether a chunk decodes faster through the thread's scratch memory than into its place
    /// ([`DirectChain::decodes_faster_through_scratch`]).
    pub(crate) fn decodes_faster_through_scratch(&self) -> bool {
        match self {
            Self::Chunk(chain) => chain.decodes_faster_through_scratch(),
            Self::Shard(_) => false,
        }
    }

    /// The decoder of `variable`'s chunks, if the codec libraries decode its chain (`chain`,
    /// read from its metadata) into a given buffer.
    fn of(variable: &Variable, chain: &GpuChain) -> Option<Self> {
        let element_size = variable.dtype().size();
        if let Some(direct) = DirectChain::of(chain, element_size) {
            return Some(Self::Chunk(direct));
        }
        // The sharding codec alone, on a regular grid of shards (the arrays whose inner chunks
        // the store reads): every shard has the variable's chunk shape.
        match chain.steps.as_slice() {
            [Step::Sharding(spec)] if variable.reads_inner_chunks() => {
                DirectShard::of(spec, &variable.chunk_shape(), element_size)
                    .map(|shard| Self::Shard(Box::new(shard)))
            }
            _ => None,
        }
    }
}

/// `variable`'s direct decoder, if the codec libraries decode its chunks into a given buffer.
pub(crate) fn direct_decoder(variable: &Variable) -> Option<DirectDecoder> {
    let chain = GpuChain::of(variable).ok()?;
    DirectDecoder::of(variable, &chain)
}

/// Decodes a chunk of a [`DirectDecoder`] into a buffer of its own. The codecs write at most
/// the chunk's (or inner chunk's) size, whatever a frame header declares, and a shard's index
/// is bounded before it is read, so no frame check is needed first.
fn decode_direct(chunk: EncodedChunk, decoder: &DirectDecoder) -> Result<DecodedChunk> {
    let clock = DecodeClock::start();
    let mut bytes = zeroed(chunk.request.variable.decoded_chunk_bytes() as usize);
    write_chunk(&chunk, chunk.bytes.as_deref(), decoder, &mut bytes, true)?;
    let (decode_time, decode_cpu_time) = clock.read();
    Ok(DecodedChunk {
        bytes,
        stored_len: chunk.stored_len(),
        missing: chunk.bytes.is_none(),
        request: chunk.request,
        fetch_time: chunk.fetch_time,
        decode_time,
        decode_cpu_time,
    })
}

/// `len` zero bytes. Not `vec![0; len]`: a zeroed allocation is fresh memory, each page faulted
/// in and zeroed by the kernel, where a plain one may reuse a block the program's allocator
/// kept (`RetainingAllocator` keeps blocks of batch, shard and chunk size). Zeroed on the calling
/// rayon pool's threads, a megabyte at a time, so that fresh pages fault in on all of them.
fn zeroed(len: usize) -> Vec<u8> {
    let mut bytes = Vec::with_capacity(len);
    bytes.spare_capacity_mut()[..len]
        .par_chunks_mut(1 << 20)
        .for_each(|piece| piece.fill(MaybeUninit::new(0)));
    // SAFETY: the first `len` bytes of the capacity (it holds at least `len`) were all written
    // just above.
    unsafe { bytes.set_len(len) };
    bytes
}

/// Decodes `chunk`, whose stored bytes are `stored`, with `decoder` into `out`, or writes its
/// fill value when it is missing (`None`). With `parallel`, a large shard's inner chunks
/// decode on several threads of the calling rayon pool.
pub(crate) fn write_chunk(
    chunk: &EncodedChunk,
    stored: Option<&[u8]>,
    decoder: &DirectDecoder,
    out: &mut [u8],
    parallel: bool,
) -> Result<()> {
    let variable = &chunk.request.variable;
    let fill_value = variable.array().fill_value().as_ne_bytes();
    let Some(stored) = stored else {
        fill(out, fill_value);
        return Ok(());
    };
    let codec_error = |codec, message| Error::Codec {
        variable: variable.name().to_string(),
        key: chunk.request.key(),
        codec,
        message,
    };
    match decoder {
        DirectDecoder::Chunk(chain) => {
            chain
                .decode_into(stored, out)
                .map_err(|failure| match failure {
                    CodecFailure::Refused { codec, message } => codec_error(codec, message),
                    CodecFailure::Size { actual } => Error::DecodedSize {
                        variable: variable.name().to_string(),
                        key: chunk.request.key(),
                        expected: out.len(),
                        actual,
                    },
                })
        }
        DirectDecoder::Shard(shard) => shard
            .decode_into(stored, fill_value, out, parallel)
            .map_err(|failure| match failure {
                ShardFailure::Index(source) => Error::Frame {
                    variable: variable.name().to_string(),
                    key: chunk.request.key(),
                    source,
                },
                ShardFailure::Inner { number, failure } => match failure {
                    CodecFailure::Refused { codec, message } => {
                        codec_error(codec, format!("inner chunk {number}: {message}"))
                    }
                    CodecFailure::Size { actual } => codec_error(
                        "sharding_indexed",
                        format!(
                            "inner chunk {number} decoded to {actual} bytes, expected {}",
                            shard.inner_len()
                        ),
                    ),
                },
            }),
    }
}
