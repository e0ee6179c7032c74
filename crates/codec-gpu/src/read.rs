use std::sync::Arc;

use futures::{stream, Stream, TryStreamExt};
use zarrpipe_store::{ChunkRequest, FetchExt, Variable};

use crate::{ChunkDecoder, DecodeExt, DecodedChunk, Result};

/// Reads a whole variable through the fetch and decode stages: C-order, native-endian bytes,
/// missing chunks as the fill value. For coordinates and small arrays; batches are cut by the
/// pipeline instead.
pub async fn read_array(
    variable: &Arc<Variable>,
    decoder: Arc<dyn ChunkDecoder>,
    concurrency: usize,
) -> Result<Vec<u8>> {
    let shape = variable.shape().to_vec();
    let size = variable.dtype().size();
    let len = variable
        .decoded_bytes()
        .and_then(|bytes| usize::try_from(bytes).ok())
        .ok_or_else(|| zarrpipe_store::Error::SizeOverflow {
            variable: variable.name().to_string(),
            what: "the whole array's size",
            shape: shape.clone(),
        })?;
    let mut whole = Vec::new();
    whole
        .try_reserve_exact(len)
        .map_err(|_| zarrpipe_store::Error::SizeOverflow {
            variable: variable.name().to_string(),
            what: "the whole array's size (more than memory holds)",
            shape: shape.clone(),
        })?;
    whole.resize(len, 0u8);
    let mut chunks = decode_every_chunk(variable, decoder, concurrency);
    while let Some(chunk) = chunks.try_next().await? {
        let (start, chunk_shape) = variable.chunk_region(&chunk.request.indices)?;
        copy_into(&chunk.bytes, &start, &chunk_shape, &shape, size, &mut whole);
    }
    Ok(whole)
}

/// Every chunk of `variable`, fetched and decoded (up to `concurrency` at once), in C order.
pub fn decode_every_chunk(
    variable: &Arc<Variable>,
    decoder: Arc<dyn ChunkDecoder>,
    concurrency: usize,
) -> impl Stream<Item = Result<DecodedChunk>> + Send + 'static {
    // Requests are made as the stream goes: a grid may have more chunks than memory holds.
    let variable_ = variable.clone();
    let requests = variable
        .every_chunk()
        .map(move |indices| ChunkRequest::new(variable_.clone(), indices));
    stream::iter(requests)
        .fetch(concurrency)
        .decode(decoder, concurrency)
}

/// Copies the part of a chunk (at `start`, of `chunk` shape) inside the array into `out`.
fn copy_into(src: &[u8], start: &[u64], chunk: &[u64], shape: &[u64], size: usize, out: &mut [u8]) {
    let rank = shape.len();
    if rank == 0 {
        out.copy_from_slice(&src[..size]);
        return;
    }
    let inside: Vec<u64> = (0..rank)
        .map(|a| chunk[a].min(shape[a] - start[a]))
        .collect();
    let rows: u64 = inside[..rank - 1].iter().product();
    let row = inside[rank - 1] as usize * size;
    for flat in 0..rows {
        let mut rest = flat;
        let mut coord = vec![0u64; rank];
        for a in (0..rank - 1).rev() {
            coord[a] = rest % inside[a];
            rest /= inside[a];
        }
        let src_offset = (0..rank).fold(0, |o, a| o * chunk[a] + coord[a]) as usize * size;
        let dst_offset =
            (0..rank).fold(0, |o, a| o * shape[a] + start[a] + coord[a]) as usize * size;
        out[dst_offset..dst_offset + row].copy_from_slice(&src[src_offset..src_offset + row]);
    }
}
