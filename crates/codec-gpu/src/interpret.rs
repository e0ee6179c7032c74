//! A CPU interpreter of batch plans, for tests: it runs every op the way the GPU kernels and
//! nvCOMP do, so plan logic (blosc blocks and splits, shuffles, shards, transposes) is checked
//! against zarrs on machines without a GPU.

use std::io::Read;

use crate::chain::{Element, ScaleOffset};
use crate::frame_check::{ravel, unravel};
use crate::plan::{BatchPlan, Codec, Op, Region, Space};

struct Buffers {
    input: Vec<u8>,
    scratch: Vec<u8>,
    output: Vec<u8>,
}

impl Buffers {
    fn get(&self, region: Region) -> &[u8] {
        let buffer = match region.space {
            Space::Input => &self.input,
            Space::Scratch => &self.scratch,
            Space::Output => &self.output,
        };
        &buffer[region.offset..region.offset + region.len]
    }

    fn get_mut(&mut self, region: Region) -> &mut [u8] {
        let buffer = match region.space {
            Space::Input => &mut self.input,
            Space::Scratch => &mut self.scratch,
            Space::Output => &mut self.output,
        };
        &mut buffer[region.offset..region.offset + region.len]
    }
}

/// Runs `plan`; returns the output buffer and the ops that failed, by chunk.
pub(crate) fn run(plan: &BatchPlan) -> (Vec<u8>, Vec<(usize, String)>) {
    let mut buffers = Buffers {
        input: vec![0; plan.input_len],
        scratch: vec![0; plan.scratch_len],
        output: vec![0; plan.output_len],
    };
    for (bytes, offset) in &plan.uploads {
        buffers.input[*offset..offset + bytes.len()].copy_from_slice(bytes);
    }
    let mut failures = Vec::new();
    for (chunk, op) in plan.ops() {
        if let Err(reason) = apply(&mut buffers, op) {
            failures.push((*chunk, reason));
        }
    }
    (buffers.output, failures)
}

fn apply(buffers: &mut Buffers, op: &Op) -> Result<(), String> {
    match op {
        Op::Decompress { codec, src, dst } => {
            let input = buffers.get(*src).to_vec();
            let decoded = decompress(*codec, &input, dst.len)?;
            if decoded.len() != dst.len {
                return Err(format!("{} bytes, expected {}", decoded.len(), dst.len));
            }
            buffers.get_mut(*dst).copy_from_slice(&decoded);
        }
        Op::Copy { src, dst } => {
            let input = buffers.get(*src).to_vec();
            buffers.get_mut(*dst).copy_from_slice(&input);
        }
        Op::Fill { dst, pattern } => {
            for (i, byte) in buffers.get_mut(*dst).iter_mut().enumerate() {
                *byte = pattern[i % pattern.len()];
            }
        }
        Op::Unshuffle {
            src,
            planes,
            dst,
            type_size,
        } => {
            let input = buffers.get(*src).to_vec();
            let out = buffers.get_mut(*dst);
            let count = out.len() / type_size;
            for (i, byte) in out.iter_mut().enumerate() {
                let logical = if i < count * type_size {
                    (i % type_size) * count + i / type_size
                } else {
                    i
                };
                *byte = input[planes.physical(logical)];
            }
        }
        Op::BitUnshuffle {
            src,
            planes,
            dst,
            type_size,
        } => {
            let input = buffers.get(*src).to_vec();
            let out = buffers.get_mut(*dst);
            let count = out.len() / type_size;
            let shuffled = if count.is_multiple_of(8) { count } else { 0 };
            for (i, byte) in out.iter_mut().enumerate() {
                let (element, within) = (i / type_size, i % type_size);
                *byte = if element < shuffled {
                    (0..8).fold(0u8, |acc, bit| {
                        let at = (within * 8 + bit) * shuffled + element;
                        let source = input[planes.physical(at / 8)];
                        acc | (((source >> (at % 8)) & 1) << bit)
                    })
                } else {
                    input[planes.physical(i)]
                };
            }
        }
        Op::SwapBytes {
            region,
            element_size,
        } => {
            for element in buffers.get_mut(*region).chunks_exact_mut(*element_size) {
                element.reverse();
            }
        }
        Op::Transpose {
            src,
            dst,
            encoded_shape,
            encoded_order,
            element_size,
        } => {
            let input = buffers.get(*src).to_vec();
            let mut decoded_shape = vec![0; encoded_shape.len()];
            for (axis, &decoded_axis) in encoded_order.iter().enumerate() {
                decoded_shape[decoded_axis] = encoded_shape[axis];
            }
            let out = buffers.get_mut(*dst);
            for (element, target) in out.chunks_exact_mut(*element_size).enumerate() {
                let decoded = unravel(element as u64, &decoded_shape);
                let encoded: Vec<u64> = encoded_order.iter().map(|&a| decoded[a]).collect();
                let from = ravel(&encoded, encoded_shape) as usize * element_size;
                target.copy_from_slice(&input[from..from + element_size]);
            }
        }
        Op::ScaleOffset { src, dst, spec } => {
            let input = buffers.get(*src).to_vec();
            unscale(spec, &input, buffers.get_mut(*dst));
        }
        Op::PlaceBlock {
            src,
            dst,
            block,
            outer,
            start,
            element_size,
        } => {
            let input = buffers.get(*src).to_vec();
            let out = buffers.get_mut(*dst);
            for (element, value) in input.chunks_exact(*element_size).enumerate() {
                let within = unravel(element as u64, block);
                let at: Vec<u64> = within.iter().zip(start).map(|(w, s)| w + s).collect();
                let to = ravel(&at, outer) as usize * element_size;
                out[to..to + element_size].copy_from_slice(value);
            }
        }
    }
    Ok(())
}

/// A stored element as f32, as zarrs casts it (Rust `as`).
fn stored_as_f32(astype: Element, bytes: &[u8]) -> f32 {
    macro_rules! read {
        ($ty:ty) => {
            <$ty>::from_ne_bytes(bytes[..size_of::<$ty>()].try_into().unwrap()) as f32
        };
    }
    match astype {
        Element::I8 => read!(i8),
        Element::U8 => read!(u8),
        Element::I16 => read!(i16),
        Element::U16 => read!(u16),
        Element::I32 => read!(i32),
        Element::U32 => read!(u32),
        Element::I64 => read!(i64),
        Element::U64 => read!(u64),
        Element::F32 => read!(f32),
        Element::F64 => read!(f64),
    }
}

/// `fixedscaleoffset` decoding, written as zarrs writes it.
fn unscale(spec: &ScaleOffset, src: &[u8], dst: &mut [u8]) {
    let stored = spec.stored_size();
    macro_rules! unscale {
        ($ty:ty, $float:ty) => {{
            const SIZE: usize = size_of::<$ty>();
            for (i, out) in dst.chunks_exact_mut(SIZE).enumerate() {
                let at = &src[i * stored..];
                let value = match spec.astype {
                    Some(astype) => stored_as_f32(astype, at) as $ty,
                    None => <$ty>::from_ne_bytes(at[..SIZE].try_into().unwrap()),
                };
                let value =
                    ((value as $float / spec.scale as $float) + spec.offset as $float) as $ty;
                out.copy_from_slice(&value.to_ne_bytes());
            }
        }};
    }
    match spec.dtype {
        Element::I8 => unscale!(i8, f32),
        Element::U8 => unscale!(u8, f32),
        Element::I16 => unscale!(i16, f32),
        Element::U16 => unscale!(u16, f32),
        Element::I32 => unscale!(i32, f64),
        Element::U32 => unscale!(u32, f64),
        Element::I64 => unscale!(i64, f64),
        Element::U64 => unscale!(u64, f64),
        Element::F32 => unscale!(f32, f32),
        Element::F64 => unscale!(f64, f64),
    }
}

fn decompress(codec: Codec, input: &[u8], capacity: usize) -> Result<Vec<u8>, String> {
    match codec {
        Codec::Zstd => zstd::bulk::decompress(input, capacity).map_err(|e| e.to_string()),
        Codec::Lz4 => lz4_flex::block::decompress(input, capacity).map_err(|e| e.to_string()),
        Codec::Snappy => snap::raw::Decoder::new()
            .decompress_vec(input)
            .map_err(|e| e.to_string()),
        Codec::Deflate => {
            let mut out = Vec::new();
            flate2::read::DeflateDecoder::new(input)
                .read_to_end(&mut out)
                .map_err(|e| e.to_string())?;
            Ok(out)
        }
    }
}

/// Decodes a batch the way the GPU decoder does, with this interpreter in place of the GPU.
pub(crate) fn decode_batch(
    chunks: Vec<zarrpipe_store::EncodedChunk>,
    strict: bool,
) -> Vec<crate::Result<crate::DecodedChunk>> {
    let mut prepared = crate::batch::prepare(chunks, strict, 0);
    let (output, failures) = run(&prepared.plan);
    crate::batch::record_failures(&mut prepared.chunks, failures);
    host_chunks(prepared.chunks, &output)
}

/// The decoded chunks of a prepared batch, given its whole output buffer on the host.
fn host_chunks(
    chunks: Vec<crate::batch::PreparedChunk>,
    output: &[u8],
) -> Vec<crate::Result<crate::DecodedChunk>> {
    chunks
        .into_iter()
        .map(|chunk| {
            let (region, path) = chunk.outcome?;
            Ok(crate::DecodedChunk {
                bytes: output[region.offset..region.offset + region.len].to_vec(),
                stored_len: chunk.stored_len,
                missing: path == crate::DecodePath::Fill,
                request: chunk.request,
                fetch_time: chunk.fetch_time,
                decode_time: std::time::Duration::ZERO,
                decode_cpu_time: std::time::Duration::ZERO,
            })
        })
        .collect()
}
