//! Checking a chunk's stored bytes without planning GPU work: each step of its chain reads
//! them as the GPU planner does (`plan`), with the same expected sizes and the same errors, so
//! the CPU path refuses exactly the frames the GPU path refuses. Both call the size and shard
//! grid arithmetic here.

use crate::chain::{Compressor, GpuChain, ShardSpec, Step};
use crate::frames::{self, BloscFrame, FrameError};

type Result<T = ()> = std::result::Result<T, FrameError>;

/// Dimensions the transpose and shard kernels index (`MAX_DIMS` in `kernels.cu`).
pub(crate) const MAX_DIMS: usize = 8;
/// nvCOMP's smallest limit on one decompressed stream (zstd and snappy: 2^31 - 1 bytes).
pub(crate) const MAX_DECOMPRESSED: usize = (1 << 31) - 1;

/// Checks `bytes`, a stored chunk of `shape` (full, unclipped) and `element_size`-byte
/// elements, as the planner reads them: `Ok` where `BatchPlan::add` plans the chunk, else the
/// error it gives ([`FrameError::NeedsCpu`] for what the GPU cannot decode).
pub(crate) fn check_chunk(
    bytes: &[u8],
    chain: &GpuChain,
    shape: &[u64],
    element_size: usize,
) -> Result {
    let steps = &chain.steps;
    let len = shape.iter().product::<u64>() as usize * element_size;
    let (read, written) = step_lens(&element_sizes(steps, element_size), element_size, len);
    // The bytes as stored, until a step decodes them.
    let mut stored = Some(bytes);
    for (index, step) in steps.iter().enumerate() {
        stored = match (step, stored) {
            (Step::Crc32c, Some(bytes)) => Some(&bytes[frames::strip_crc32c(bytes)?]),
            (Step::Decompress(compressor), Some(bytes)) => {
                decompress(*compressor, bytes, written[index])?;
                None
            }
            (Step::Sharding(spec), Some(bytes)) => {
                let shard_shape = &encoded_shapes(steps, shape)[index];
                shard(spec, bytes, shard_shape, element_size)?;
                None
            }
            (Step::Transpose { encoded_order }, _) if encoded_order.len() > MAX_DIMS => {
                return Err(FrameError::NeedsCpu(format!(
                    "transpose of {} dimensions",
                    encoded_order.len()
                )))
            }
            // A kernel, reading the stored bytes as they are if nothing decoded them.
            (
                Step::Shuffle { .. }
                | Step::SwapBytes
                | Step::Transpose { .. }
                | Step::ScaleOffset(_),
                stored,
            ) => {
                stored.map_or(Ok(()), |bytes| check_len(bytes, read[index]))?;
                None
            }
            // The GPU decodes bytes once: only kernels follow.
            (other, None) => {
                return Err(FrameError::NeedsCpu(format!(
                    "{other:?} after a decoding step"
                )))
            }
        };
    }
    stored.map_or(Ok(()), |bytes| check_len(bytes, len))
}

/// Checks a compressed frame that decodes to `len` bytes.
fn decompress(compressor: Compressor, bytes: &[u8], len: usize) -> Result {
    let checked = match compressor {
        Compressor::Zstd => frames::check_zstd(bytes, len),
        Compressor::Gzip => frames::gzip_payload(bytes, len).map(|_| ()),
        Compressor::Zlib => frames::zlib_payload(bytes).map(|_| ()),
        Compressor::Lz4 => frames::lz4_payload(bytes, len).map(|_| ()),
        Compressor::Blosc => {
            let frame = BloscFrame::parse(bytes, len)?;
            // A copied frame has no blocks; raw streams are copied as they are.
            for block in &frame.blocks {
                let split_len = block.len / block.splits.len();
                for split in block.splits.iter().filter(|split| !split.raw) {
                    frame.payload(&bytes[split.bytes.clone()], split_len)?;
                }
            }
            return Ok(());
        }
    };
    checked?;
    if len > MAX_DECOMPRESSED {
        return Err(FrameError::NeedsCpu(format!(
            "{len} decoded bytes, more than nvCOMP decompresses at once"
        )));
    }
    Ok(())
}

/// Checks a shard's index and its inner chunks, in the order they lie in it (the planner's).
fn shard(spec: &ShardSpec, bytes: &[u8], shard_shape: &[u64], element_size: usize) -> Result {
    let grid = shard_grid(&spec.inner_shape, shard_shape)?;
    let count = grid.iter().product::<u64>() as usize;
    let mut inner = frames::shard_index(bytes, count, spec.index_crc32c, spec.index_at_end)?;
    inner.sort_by_key(|stored| stored.as_ref().map(|range| range.start));
    // Missing inner chunks are filled.
    for range in inner.into_iter().flatten() {
        check_chunk(&bytes[range], &spec.inner, &spec.inner_shape, element_size)?;
    }
    Ok(())
}

/// The grid of `inner_shape` chunks in a shard of `shard_shape`, where they tile it in at most
/// [`MAX_DIMS`] dimensions (the GPU's kernels place no others).
pub(crate) fn shard_grid(inner_shape: &[u64], shard_shape: &[u64]) -> Result<Vec<u64>> {
    if inner_shape.len() != shard_shape.len()
        || shard_shape.len() > MAX_DIMS
        || inner_shape
            .iter()
            .zip(shard_shape)
            .any(|(&i, &s)| i == 0 || s % i != 0)
    {
        return Err(FrameError::NeedsCpu(format!(
            "inner chunks {inner_shape:?} do not tile the shard {shard_shape:?}"
        )));
    }
    Ok(shard_shape
        .iter()
        .zip(inner_shape)
        .map(|(s, i)| s / i)
        .collect())
}

/// True when a C-order block at any aligned start is one contiguous run of the outer array.
pub(crate) fn is_contiguous_block(block: &[u64], outer: &[u64]) -> bool {
    // Ones, then any extent on one axis, then whole axes.
    match block.iter().position(|&b| b != 1) {
        None => true,
        Some(axis) => block[axis + 1..] == outer[axis + 1..],
    }
}

/// The C-order multi-index of element `index` of `shape`.
pub(crate) fn unravel(mut index: u64, shape: &[u64]) -> Vec<u64> {
    let mut out = vec![0; shape.len()];
    for axis in (0..shape.len()).rev() {
        out[axis] = index % shape[axis];
        index /= shape[axis];
    }
    out
}

/// The C-order element number of `indices` in `shape`.
pub(crate) fn ravel(indices: &[u64], shape: &[u64]) -> u64 {
    indices.iter().zip(shape).fold(0, |acc, (i, n)| acc * n + i)
}

/// Stored bytes read as they are (by a kernel, or as the chunk itself when the chain decodes
/// nothing) must be `expected` bytes.
pub(crate) fn check_len(bytes: &[u8], expected: usize) -> Result {
    if bytes.len() != expected {
        return Err(FrameError::DeclaredSize {
            what: "uncompressed chunk",
            declared: bytes.len() as u64,
            expected: expected as u64,
        });
    }
    Ok(())
}

/// For each step, the bytes of one element of the data it reads: the array's, except before
/// (in decode order) a scale-offset step, which reads its stored type.
pub(crate) fn element_sizes(steps: &[Step], element_size: usize) -> Vec<usize> {
    let mut sizes = vec![element_size; steps.len()];
    let mut size = element_size;
    for (index, step) in steps.iter().enumerate().rev() {
        if let Step::ScaleOffset(spec) = step {
            size = spec.stored_size();
        }
        sizes[index] = size;
    }
    sizes
}

/// The bytes each step reads, and those it writes (what the next step reads; after the last,
/// the decoded chunk's `len`), for steps that read elements of `sizes` ([`element_sizes`]).
pub(crate) fn step_lens(
    sizes: &[usize],
    element_size: usize,
    len: usize,
) -> (Vec<usize>, Vec<usize>) {
    let elements = len / element_size.max(1);
    let read: Vec<usize> = sizes.iter().map(|size| elements * size).collect();
    let written = read.iter().skip(1).copied().chain([len]).collect();
    (read, written)
}

/// For each step, the shape of the array it reads when decoding (array steps only; bytes
/// steps see the shape of the first array step after them, unused).
pub(crate) fn encoded_shapes(steps: &[Step], decoded: &[u64]) -> Vec<Vec<u64>> {
    let mut shapes = vec![Vec::new(); steps.len()];
    let mut shape = decoded.to_vec();
    // Encoding applies the steps backwards: each transpose permutes the shape.
    for (index, step) in steps.iter().enumerate().rev() {
        if let Step::Transpose { encoded_order } = step {
            if encoded_order.len() == shape.len() {
                shape = encoded_order.iter().map(|&axis| shape[axis]).collect();
            }
        }
        shapes[index] = shape.clone();
    }
    shapes
}

#[cfg(test)]
mod tests {
    use bytes::Bytes;

    use super::*;
    use crate::chain::{Element, ScaleOffset};
    use crate::plan::{BatchPlan, ChunkInput};

    /// `check_chunk`'s verdict on `bytes`, after checking that it is the planner's.
    fn verdict(bytes: &[u8], steps: Vec<Step>, shape: &[u64], element_size: usize) -> Result {
        let chain = GpuChain { steps };
        let stored = Bytes::copy_from_slice(bytes);
        let input = ChunkInput {
            bytes: Some(&stored),
            chain: &chain,
            shape,
            element_size,
            fill: &[0; 8][..element_size],
        };
        let planned = BatchPlan::default().add(0, &input).map(|_| ());
        let checked = check_chunk(bytes, &chain, shape, element_size);
        assert_eq!(checked, planned, "{:?}", chain.steps);
        checked
    }

    fn zstd(len: usize) -> Vec<u8> {
        zstd::bulk::compress(&vec![7u8; len], 3).unwrap()
    }

    fn packed_f32() -> Step {
        Step::ScaleOffset(ScaleOffset {
            offset: 0.0,
            scale: 1.0,
            dtype: Element::F32,
            astype: Some(Element::U8),
        })
    }

    fn sharding(inner_shape: Vec<u64>, inner: Vec<Step>) -> Step {
        Step::Sharding(Box::new(ShardSpec {
            inner_shape,
            inner: GpuChain { steps: inner },
            index_crc32c: false,
            index_at_end: true,
        }))
    }

    /// A shard of `count` inner chunks, index at the end: `stored` (grid position, bytes) in
    /// that order, the others missing.
    fn shard(stored: &[(usize, Vec<u8>)], count: usize) -> Vec<u8> {
        let mut bytes = Vec::new();
        let mut index = vec![(u64::MAX, u64::MAX); count];
        for (position, inner) in stored {
            index[*position] = (bytes.len() as u64, inner.len() as u64);
            bytes.extend(inner);
        }
        for (offset, len) in index {
            bytes.extend(offset.to_le_bytes());
            bytes.extend(len.to_le_bytes());
        }
        bytes
    }

    #[test]
    fn contiguous_blocks() {
        assert!(is_contiguous_block(&[1, 1, 640, 1280], &[4, 1, 640, 1280]));
        assert!(is_contiguous_block(&[2, 640], &[8, 640]));
        assert!(!is_contiguous_block(&[10, 10], &[20, 40]));
        assert!(is_contiguous_block(&[1, 10], &[20, 40]));
    }

    #[test]
    fn each_step_reads_the_size_the_steps_after_it_leave() {
        let declared = |declared, expected| {
            Err(FrameError::DeclaredSize {
                what: "uncompressed chunk",
                declared,
                expected,
            })
        };
        assert_eq!(verdict(&[0; 16], vec![], &[4], 4), Ok(()));
        assert_eq!(verdict(&[0; 15], vec![], &[4], 4), declared(15, 16));
        let mut trailed = vec![1u8; 16];
        trailed.extend(crc32c::crc32c(&trailed).to_le_bytes());
        assert_eq!(verdict(&trailed, vec![Step::Crc32c], &[4], 4), Ok(()));
        trailed[0] = 2;
        assert!(matches!(
            verdict(&trailed, vec![Step::Crc32c], &[4], 4),
            Err(FrameError::Checksum { .. })
        ));
        // Stored as bytes, decoded to f32: the frame holds one byte an element.
        assert_eq!(verdict(&[0; 4], vec![packed_f32()], &[4], 4), Ok(()));
        assert_eq!(
            verdict(&[0; 16], vec![packed_f32()], &[4], 4),
            declared(16, 4)
        );
        let zstd_then_packed = || vec![Step::Decompress(Compressor::Zstd), packed_f32()];
        assert_eq!(verdict(&zstd(4), zstd_then_packed(), &[4], 4), Ok(()));
        assert!(matches!(
            verdict(&zstd(16), zstd_then_packed(), &[4], 4),
            Err(FrameError::DeclaredSize {
                declared: 16,
                expected: 4,
                ..
            })
        ));
        // Byte order and shuffles read the stored bytes as they are.
        let shuffled = || vec![Step::Shuffle { element_size: 2 }, Step::SwapBytes];
        assert_eq!(verdict(&[0; 8], shuffled(), &[2, 2], 2), Ok(()));
        assert_eq!(verdict(&[0; 9], shuffled(), &[2, 2], 2), declared(9, 8));
    }

    #[test]
    fn what_the_gpu_cannot_decode_is_left_to_the_cpu_unchecked() {
        let needs_cpu = |verdict: Result| assert!(verdict.unwrap_err().needs_cpu());
        // Nine dimensions: the stored size is not even looked at.
        let nine = Step::Transpose {
            encoded_order: (0..9).rev().collect(),
        };
        needs_cpu(verdict(&[0; 3], vec![nine], &[1; 9], 1));
        // A second decompression, or a checksum after one.
        let twice = vec![Step::Decompress(Compressor::Zstd); 2];
        needs_cpu(verdict(&zstd(4), twice, &[4], 1));
        let late_crc = vec![Step::Decompress(Compressor::Zstd), Step::Crc32c];
        needs_cpu(verdict(&zstd(4), late_crc, &[4], 1));
        // A frame declaring more than nvCOMP decompresses at once (2^31 bytes: content size
        // in 4 bytes, single segment, one RLE block).
        let mut huge = vec![0x28, 0xb5, 0x2f, 0xfd, 0xa0];
        huge.extend((1u32 << 31).to_le_bytes());
        huge.extend([0b1011, 0, 0, 7]);
        let zstd_step = vec![Step::Decompress(Compressor::Zstd)];
        let error = verdict(&huge, zstd_step, &[1 << 31], 1).unwrap_err();
        assert!(error.to_string().contains("nvCOMP"), "{error}");
        // Inner chunks that do not tile the shard: its index is not read.
        needs_cpu(verdict(&[9; 5], vec![sharding(vec![3], vec![])], &[4], 1));
    }

    #[test]
    fn inner_chunks_are_checked_in_the_order_they_lie_in_the_shard() {
        // Inner chunk 1 needs the CPU (decompressed twice), inner chunk 0 is corrupt: the
        // one stored first decides, for the planner and the check alike.
        let twice = || {
            vec![sharding(
                vec![4],
                vec![Step::Decompress(Compressor::Zstd); 2],
            )]
        };
        let cpu_first = shard(&[(1, zstd(4)), (0, vec![1, 2, 3])], 2);
        assert!(verdict(&cpu_first, twice(), &[8], 1)
            .unwrap_err()
            .needs_cpu());
        let corrupt_first = shard(&[(0, vec![1, 2, 3]), (1, zstd(4))], 2);
        assert!(matches!(
            verdict(&corrupt_first, twice(), &[8], 1),
            Err(FrameError::Truncated { .. })
        ));
        // Missing inner chunks are filled; stored ones are checked at their own size.
        let raw = || vec![sharding(vec![4], vec![])];
        assert_eq!(
            verdict(&shard(&[(1, vec![0; 4])], 2), raw(), &[8], 1),
            Ok(())
        );
        assert!(matches!(
            verdict(&shard(&[(1, vec![0; 5])], 2), raw(), &[8], 1),
            Err(FrameError::DeclaredSize { declared: 5, .. })
        ));
    }

    #[test]
    fn shards_inside_a_transpose_are_tiled_in_the_stored_order() {
        // Decoded [4, 6], stored transposed as [6, 4]: inner chunks of [3, 2] tile the latter.
        let steps = || {
            vec![
                sharding(vec![3, 2], vec![]),
                Step::Transpose {
                    encoded_order: vec![1, 0],
                },
            ]
        };
        let stored = shard(&(0..4).map(|n| (n, vec![0; 6])).collect::<Vec<_>>(), 4);
        assert_eq!(verdict(&stored, steps(), &[4, 6], 1), Ok(()));
        assert!(verdict(&stored, steps(), &[6, 4], 1)
            .unwrap_err()
            .needs_cpu());
        let zstd_then_transpose = [
            Step::Decompress(Compressor::Zstd),
            Step::Transpose {
                encoded_order: vec![2, 0, 1],
            },
        ];
        assert_eq!(
            encoded_shapes(&zstd_then_transpose, &[4, 4, 6])[1],
            [6, 4, 4]
        );
    }
}
