//! Decoding one chunk on the calling thread: the codec libraries straight into the given
//! memory for the chains they cover ([`DirectChain`]), zarrs' codecs for the others, after the
//! same frame checks the GPU path makes.

use std::borrow::Cow;
use std::time::Instant;

use zarrpipe_core::panic_message;
use zarrpipe_store::EncodedChunk;
use zarrs::array::{ArrayBytes, ArrayToBytesCodecTraits, CodecOptions};

use crate::chain::GpuChain;
use crate::direct::{CodecFailure, DirectChain};
use crate::frame_check::check_chunk;
use crate::frames::{self, FrameError};
use crate::{DecodedChunk, Error, Result};

/// Decodes one chunk on the calling thread; a missing chunk becomes the fill value. A panic
/// while decoding (corrupt bytes can reach a codec's unchecked arithmetic) is caught here and
/// becomes [`Error::Panicked`] naming the chunk: rayon aborts the process on a panic in a
/// spawned task, and this runs in one.
pub fn decode_on_cpu(chunk: EncodedChunk) -> Result<DecodedChunk> {
    let request = chunk.request.clone();
    std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| decode_unguarded(chunk)))
        .unwrap_or_else(|payload| {
            Err(Error::Panicked {
                variable: request.variable.name().to_string(),
                key: request.key(),
                message: panic_message(payload.as_ref()),
            })
        })
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
        .and_then(|chain| DirectChain::of(chain, variable.dtype().size()));
    if let Some(direct) = direct {
        return decode_direct(chunk, direct);
    }
    check_frames(&chunk, chain.as_ref())?;
    let started = Instant::now();
    let EncodedChunk {
        request,
        bytes,
        fetch_time,
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
    Ok(DecodedChunk {
        bytes: decoded.into_owned(),
        stored_len,
        missing: bytes.is_none(),
        request,
        fetch_time,
        decode_time: started.elapsed(),
    })
}

/// `variable`'s chain, if the codec libraries decode it straight into a given buffer.
pub(crate) fn direct_chain(variable: &zarrpipe_store::Variable) -> Option<DirectChain> {
    let chain = GpuChain::of(variable).ok()?;
    DirectChain::of(&chain, variable.dtype().size())
}

/// Decodes a chunk of a [`DirectChain`] into a buffer of its own. The codec writes at most
/// the chunk's size, whatever a frame header declares, so no frame check is needed first.
fn decode_direct(chunk: EncodedChunk, chain: DirectChain) -> Result<DecodedChunk> {
    let started = Instant::now();
    let mut bytes = vec![0; chunk.request.variable.decoded_chunk_bytes() as usize];
    write_chunk(&chunk, chain, &mut bytes)?;
    Ok(DecodedChunk {
        bytes,
        stored_len: chunk.stored_len(),
        missing: chunk.bytes.is_none(),
        request: chunk.request,
        fetch_time: chunk.fetch_time,
        decode_time: started.elapsed(),
    })
}

/// Decodes `chunk` with `chain` into `out`, or writes its fill value when it is missing.
pub(crate) fn write_chunk(chunk: &EncodedChunk, chain: DirectChain, out: &mut [u8]) -> Result<()> {
    let variable = &chunk.request.variable;
    match &chunk.bytes {
        Some(stored) => chain
            .decode_into(stored, out)
            .map_err(|failure| match failure {
                CodecFailure::Refused { codec, message } => Error::Codec {
                    variable: variable.name().to_string(),
                    key: chunk.request.key(),
                    codec,
                    message,
                },
                CodecFailure::Size { actual } => Error::DecodedSize {
                    variable: variable.name().to_string(),
                    key: chunk.request.key(),
                    expected: out.len(),
                    actual,
                },
            }),
        None => {
            let fill = variable.array().fill_value().as_ne_bytes();
            match fill.iter().all(|&byte| byte == fill[0]) {
                true => out.fill(fill[0]),
                false => out
                    .chunks_exact_mut(fill.len())
                    .for_each(|element| element.copy_from_slice(fill)),
            }
            Ok(())
        }
    }
}
