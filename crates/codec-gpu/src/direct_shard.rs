//! Shards (`sharding_indexed`) whose inner chunks the codec libraries decode ([`DirectChain`]),
//! decoded straight into the caller's memory as zarrs' sharding codec decodes them: the index
//! is read and bounded first ([`frames::shard_index`]), each stored inner chunk is decoded
//! with the inner chain, and each missing one is the fill value (not stored, or left out of a
//! read of some inner chunks: the store then hands over a compact shard whose index marks the
//! others missing).
//!
//! A shard is cut into slabs: runs of the decoded shard that hold whole inner chunks (each
//! slab one inner chunk, where inner chunks are runs of the shard). An inner chunk that is its
//! whole slab decodes straight into it; any other decodes into the thread's scratch memory and
//! is copied into its slab a run at a time. Slabs are disjoint pieces of the output, so the
//! slabs of a large shard decode at once on the calling rayon pool, without `unsafe`.

use std::cell::RefCell;
use std::ops::Range;

use rayon::prelude::*;

use crate::chain::ShardSpec;
use crate::direct::{fill, CodecFailure, DirectChain};
use crate::frame_check::{is_contiguous_block, ravel, shard_grid, unravel};
use crate::frames::{self, FrameError};

/// Decoded bytes each task of a shard decoded on several threads takes at least; a shard of
/// fewer than two such tasks decodes on the calling thread.
const PARALLEL_TASK_BYTES: usize = 1 << 20;

/// A shard layout whose inner chunks decode with a [`DirectChain`], ready to decode shards of
/// it into a given buffer.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct DirectShard {
    inner: DirectChain,
    index_crc32c: bool,
    index_at_end: bool,
    /// Inner chunks in a shard, and in one slab (the last axes of the shard's grid of them).
    count: usize,
    per_slab: usize,
    /// Decoded bytes of one inner chunk, and of one slab.
    inner_len: usize,
    slab_len: usize,
    /// Where each inner chunk of a slab starts in it, in bytes, in C order.
    starts: Vec<usize>,
    /// How an inner chunk lies in its slab.
    runs: Runs,
}

/// A C-order block in a larger C-order array: `count` runs of `len` bytes, each contiguous in
/// both, in C order (where each lies in the array: [`Runs::at`]).
#[derive(Clone, Debug, PartialEq, Eq)]
struct Runs {
    len: usize,
    count: usize,
    /// The block's extent along the axes before the run's, and the array's stride (bytes)
    /// along each.
    extent: Vec<u64>,
    strides: Vec<usize>,
}

/// Why a shard did not decode.
#[derive(Debug)]
pub(crate) enum ShardFailure {
    /// The shard is shorter than its index, or the index fails its checksum or names bytes
    /// past the shard.
    Index(FrameError),
    /// Inner chunk `number` (C order in the shard's grid) did not decode.
    Inner {
        number: usize,
        failure: CodecFailure,
    },
}

thread_local! {
    /// Each thread's memory for inner chunks that are not runs of their shard: grown as
    /// needed, never shrunk.
    static SCRATCH: RefCell<Vec<u8>> = const { RefCell::new(Vec::new()) };
}

impl DirectShard {
    /// Shards of `shard_shape` (elements of `element_size` bytes) laid out as `spec` says, if
    /// its inner chain is a [`DirectChain`] and its inner chunks tile the shard.
    pub fn of(spec: &ShardSpec, shard_shape: &[u64], element_size: usize) -> Option<Self> {
        let inner = DirectChain::of(&spec.inner, element_size)?;
        let inner_shape = &spec.inner_shape;
        let grid = shard_grid(inner_shape, shard_shape).ok()?;
        // A slab spans the inner chunks' extent along the first `axes` axes and the shard's
        // along the others: the most axes for which that is one run of the shard (none
        // always is: the whole shard).
        let slab_shape = |axes: usize| -> Vec<u64> {
            let (head, tail) = (&inner_shape[..axes], &shard_shape[axes..]);
            head.iter().chain(tail).copied().collect()
        };
        let axes = (0..=grid.len())
            .rev()
            .find(|&axes| is_contiguous_block(&slab_shape(axes), shard_shape))
            .unwrap_or(0);
        let slab = slab_shape(axes);
        let in_slab = &grid[axes..];
        let count = usize::try_from(grid.iter().product::<u64>()).ok()?;
        let per_slab = usize::try_from(in_slab.iter().product::<u64>()).ok()?;
        let inner_elements = usize::try_from(inner_shape.iter().product::<u64>()).ok()?;
        let inner_len = inner_elements.checked_mul(element_size)?;
        let slab_len = inner_len.checked_mul(per_slab)?;
        if slab_len == 0 {
            return None;
        }
        let starts = (0..per_slab as u64)
            .map(|number| {
                let within = unravel(number, in_slab);
                let at = (within.iter().zip(&inner_shape[axes..])).map(|(at, extent)| at * extent);
                let at: Vec<u64> = std::iter::repeat_n(0, axes).chain(at).collect();
                ravel(&at, &slab) as usize * element_size
            })
            .collect();
        Some(Self {
            inner,
            index_crc32c: spec.index_crc32c,
            index_at_end: spec.index_at_end,
            count,
            per_slab,
            inner_len,
            slab_len,
            starts,
            runs: Runs::of(inner_shape, &slab, element_size),
        })
    }

    /// Bytes of one decoded inner chunk.
    pub fn inner_len(&self) -> usize {
        self.inner_len
    }

    /// Decodes the stored shard `stored` into `out`, the decoded shard, writing every byte of
    /// it (reading none it has not written); missing inner chunks get `fill`, the fill value's
    /// bytes. With `parallel`, a large shard's slabs decode on the calling rayon pool at once.
    pub fn decode_into(
        &self,
        stored: &[u8],
        fill: &[u8],
        out: &mut [u8],
        parallel: bool,
    ) -> Result<(), ShardFailure> {
        assert_eq!(
            out.len(),
            self.slab_len * (self.count / self.per_slab),
            "a shard decodes into a buffer of its size"
        );
        let index = frames::shard_index(stored, self.count, self.index_crc32c, self.index_at_end)
            .map_err(ShardFailure::Index)?;
        let slab = |(slab, out): (usize, &mut [u8])| {
            let first = slab * self.per_slab;
            self.decode_slab(
                first,
                &index[first..first + self.per_slab],
                stored,
                fill,
                out,
            )
        };
        if parallel && self.count > self.per_slab && out.len() >= 2 * PARALLEL_TASK_BYTES {
            out.par_chunks_mut(self.slab_len)
                .enumerate()
                .with_min_len(PARALLEL_TASK_BYTES.div_ceil(self.slab_len))
                .try_for_each(slab)
        } else {
            out.chunks_exact_mut(self.slab_len)
                .enumerate()
                .try_for_each(slab)
        }
    }

    /// Decodes the slab whose inner chunks start at number `first` and lie in the shard at
    /// `entries`.
    fn decode_slab(
        &self,
        first: usize,
        entries: &[Option<Range<usize>>],
        stored: &[u8],
        fill_value: &[u8],
        out: &mut [u8],
    ) -> Result<(), ShardFailure> {
        let decode = |number: usize, range: &Range<usize>, out: &mut [u8]| {
            self.inner
                .decode_into(&stored[range.clone()], out)
                .map_err(|failure| ShardFailure::Inner { number, failure })
        };
        // The inner chunk is the slab.
        if let [entry] = entries {
            match entry {
                Some(range) => decode(first, range, out)?,
                None => fill(out, fill_value),
            }
            return Ok(());
        }
        with_scratch(self.inner_len, |scratch| {
            for (number, (entry, &start)) in (first..).zip(entries.iter().zip(&self.starts)) {
                let runs = self.runs.at(start);
                match entry {
                    Some(range) => {
                        decode(number, range, scratch)?;
                        for (run, from) in runs.zip(scratch.chunks_exact(self.runs.len)) {
                            out[run].copy_from_slice(from);
                        }
                    }
                    None => runs.for_each(|run| fill(&mut out[run], fill_value)),
                }
            }
            Ok(())
        })
    }
}

impl Runs {
    /// The runs of a C-order `block` in a C-order array of `outer` (as many axes), elements of
    /// `element_size` bytes.
    fn of(block: &[u64], outer: &[u64], element_size: usize) -> Self {
        // The trailing axes the block spans whole lie in one run, with the axis before them.
        let whole = (block.iter().rev())
            .zip(outer.iter().rev())
            .take_while(|(b, o)| b == o)
            .count();
        let axis = block.len().saturating_sub(whole + 1);
        let extent = block[..axis].to_vec();
        let strides = (0..axis)
            .map(|dim| outer[dim + 1..].iter().product::<u64>() as usize * element_size)
            .collect();
        Self {
            len: block[axis..].iter().product::<u64>() as usize * element_size,
            count: extent.iter().product::<u64>() as usize,
            extent,
            strides,
        }
    }

    /// Each run's bytes in the array, in C order, for the block starting at byte `start`.
    fn at(&self, start: usize) -> impl Iterator<Item = Range<usize>> + '_ {
        (0..self.count as u64).map(move |run| {
            let (mut rest, mut at) = (run, start);
            for (&extent, &stride) in self.extent.iter().zip(&self.strides).rev() {
                at += (rest % extent) as usize * stride;
                rest /= extent;
            }
            at..at + self.len
        })
    }
}

/// Runs `work` on `len` bytes of the thread's scratch memory. The memory is taken out while in
/// use, so a task run meanwhile on this thread finds none and makes its own.
fn with_scratch<R>(len: usize, work: impl FnOnce(&mut [u8]) -> R) -> R {
    let mut scratch = SCRATCH.take();
    if scratch.len() < len {
        scratch.resize(len, 0);
    }
    let result = work(&mut scratch[..len]);
    SCRATCH.set(scratch);
    result
}

#[cfg(test)]
#[path = "direct_shard_zarrs.rs"]
mod against_zarrs;

#[cfg(test)]
mod tests {
    use super::*;
    use crate::chain::{Compressor, GpuChain, Step};

    fn spec(inner_shape: &[u64], steps: Vec<Step>, crc: bool, at_end: bool) -> ShardSpec {
        ShardSpec {
            inner_shape: inner_shape.to_vec(),
            inner: GpuChain { steps },
            index_crc32c: crc,
            index_at_end: at_end,
        }
    }

    /// The decoded shard, each element its C-order number (one byte, wrapping).
    fn numbered(shape: &[u64]) -> Vec<u8> {
        (0..shape.iter().product::<u64>())
            .map(|n| n as u8)
            .collect()
    }

    /// Inner chunk `number` of `decoded` (of `shape`, one-byte elements), cut out in C order.
    fn cut(decoded: &[u8], shape: &[u64], inner_shape: &[u64], number: u64) -> Vec<u8> {
        let grid: Vec<u64> = shape.iter().zip(inner_shape).map(|(s, i)| s / i).collect();
        let start: Vec<u64> = (unravel(number, &grid).iter())
            .zip(inner_shape)
            .map(|(g, i)| g * i)
            .collect();
        (0..inner_shape.iter().product::<u64>())
            .map(|element| {
                let within = unravel(element, inner_shape);
                let at: Vec<u64> = within.iter().zip(&start).map(|(w, s)| w + s).collect();
                decoded[ravel(&at, shape) as usize]
            })
            .collect()
    }

    /// A shard of `decoded`'s inner chunks, each encoded by `encode` (`None`: left out),
    /// stored in reverse order, index at the start or end, with or without a checksum.
    fn shard(
        decoded: &[u8],
        shape: &[u64],
        spec: &ShardSpec,
        encode: impl Fn(u64, &[u8]) -> Option<Vec<u8>>,
    ) -> Vec<u8> {
        let grid = shard_grid(&spec.inner_shape, shape).unwrap();
        let count = grid.iter().product::<u64>();
        let index_len = count * 16 + if spec.index_crc32c { 4 } else { 0 };
        let base = if spec.index_at_end { 0 } else { index_len };
        let mut payload = Vec::new();
        let mut index = vec![(u64::MAX, u64::MAX); count as usize];
        for number in (0..count).rev() {
            let inner = cut(decoded, shape, &spec.inner_shape, number);
            if let Some(bytes) = encode(number, &inner) {
                index[number as usize] = (base + payload.len() as u64, bytes.len() as u64);
                payload.extend(bytes);
            }
        }
        let mut encoded_index: Vec<u8> = (index.iter())
            .flat_map(|(offset, len)| [offset.to_le_bytes(), len.to_le_bytes()])
            .flatten()
            .collect();
        if spec.index_crc32c {
            let checksum = crc32c::crc32c(&encoded_index);
            encoded_index.extend(checksum.to_le_bytes());
        }
        match spec.index_at_end {
            true => [payload, encoded_index].concat(),
            false => [encoded_index, payload].concat(),
        }
    }

    /// The shard decoded, sequentially and (when large) on several threads: both the same.
    fn decode(spec: &ShardSpec, shape: &[u64], stored: &[u8]) -> Result<Vec<u8>, ShardFailure> {
        let direct = DirectShard::of(spec, shape, 1).unwrap();
        let len = shape.iter().product::<u64>() as usize;
        let mut out = vec![0xEE; len];
        direct.decode_into(stored, &[0xF1], &mut out, false)?;
        let mut parallel = vec![0xDD; len];
        direct.decode_into(stored, &[0xF1], &mut parallel, true)?;
        assert!(
            out == parallel,
            "decoded on several threads, the shard differs"
        );
        Ok(out)
    }

    #[test]
    fn slabs_are_the_longest_runs_that_hold_whole_inner_chunks() {
        let direct = |inner: &[u64], shard: &[u64]| {
            DirectShard::of(&spec(inner, vec![], false, true), shard, 4).unwrap()
        };
        // Inner chunks that are runs of the shard: one per slab, no runs to copy.
        let rows = direct(&[1, 1, 160, 1280], &[4, 13, 640, 1280]);
        assert_eq!((rows.per_slab, rows.slab_len), (1, 160 * 1280 * 4));
        assert_eq!(rows.runs.count, 1);
        // W1's: a slab is a band of 160 rows holding 4 inner chunks, each 160 runs of 320.
        let w1 = direct(&[1, 1, 160, 320], &[4, 13, 640, 1280]);
        assert_eq!((w1.count, w1.per_slab), (4 * 13 * 16, 4));
        assert_eq!(w1.starts, [0, 1280, 2560, 3840]);
        assert_eq!((w1.runs.count, w1.runs.len), (160, 1280));
        let runs: Vec<_> = w1.runs.at(1280).take(2).collect();
        assert_eq!(runs, [1280..2560, 1280 * 5..1280 * 6]);
        // Blocks of a 2-D shard: a slab is a band of 8 rows holding 2 inner chunks.
        let blocks = direct(&[8, 10], &[16, 20]);
        assert_eq!((blocks.count, blocks.per_slab), (4, 2));
        assert_eq!(blocks.starts, [0, 40]);
        assert_eq!((blocks.runs.count, blocks.runs.len), (8, 40));
        // Inner chunks spanning the last axes whole, but not the first: runs of two axes.
        let planes = direct(&[2, 3, 5], &[4, 6, 5]);
        assert_eq!(
            (planes.per_slab, planes.runs.count, planes.runs.len),
            (2, 2, 60)
        );
        // Not tiling the shard, or a chain the codec libraries cannot decode alone: none.
        assert!(DirectShard::of(&spec(&[3], vec![], false, true), &[4], 1).is_none());
        let transpose = vec![Step::Transpose {
            encoded_order: vec![1, 0],
        }];
        assert!(DirectShard::of(&spec(&[2, 2], transpose, false, true), &[4, 4], 1).is_none());
    }

    #[test]
    fn inner_chunks_land_where_the_grid_puts_them() {
        let zstd = || vec![Step::Decompress(Compressor::Zstd)];
        for (shape, inner) in [
            (vec![12u64], vec![4u64]),
            (vec![6, 8], vec![3, 4]),
            (vec![6, 8], vec![1, 8]),
            (vec![6, 8], vec![2, 8]),
            (vec![6, 8], vec![6, 1]),
            (vec![4, 6, 10], vec![2, 3, 5]),
            (vec![4, 6, 10], vec![1, 3, 10]),
            (vec![2, 3, 4, 10], vec![1, 1, 2, 5]),
            (vec![5], vec![5]),
        ] {
            for (crc, at_end) in [(false, true), (true, true), (false, false), (true, false)] {
                let spec = spec(&inner, zstd(), crc, at_end);
                let decoded = numbered(&shape);
                // Every other inner chunk left out: those are the fill value.
                let encode = |number: u64, inner: &[u8]| {
                    number
                        .is_multiple_of(2)
                        .then(|| zstd::bulk::compress(inner, 1).unwrap())
                };
                let stored = shard(&decoded, &shape, &spec, encode);
                let out = decode(&spec, &shape, &stored).unwrap();
                let grid = shard_grid(&inner, &shape).unwrap();
                for number in 0..grid.iter().product::<u64>() {
                    let expected = match number % 2 {
                        0 => cut(&decoded, &shape, &inner, number),
                        _ => vec![0xF1; inner.iter().product::<u64>() as usize],
                    };
                    assert_eq!(
                        cut(&out, &shape, &inner, number),
                        expected,
                        "{shape:?} in {inner:?}, inner chunk {number}, crc {crc}, at end {at_end}"
                    );
                }
            }
        }
    }

    #[test]
    fn large_shards_decode_on_several_threads_as_on_one() {
        // 4 MiB in bands of 4 inner chunks, and in runs of inner chunks.
        for inner in [[1u64, 64, 256], [1, 128, 1024]] {
            let shape = [16u64, 256, 1024];
            let spec = spec(&inner, vec![Step::Decompress(Compressor::Lz4)], true, true);
            let decoded = numbered(&shape);
            let encode = |number: u64, inner: &[u8]| {
                let mut stored = (inner.len() as u32).to_le_bytes().to_vec();
                stored.extend(lz4_flex::block::compress(inner));
                (number % 7 != 3).then_some(stored)
            };
            let stored = shard(&decoded, &shape, &spec, encode);
            let out = decode(&spec, &shape, &stored).unwrap();
            assert_eq!(
                cut(&out, &shape, &inner, 0),
                cut(&decoded, &shape, &inner, 0)
            );
            assert!(cut(&out, &shape, &inner, 3).iter().all(|&b| b == 0xF1));
        }
    }

    #[test]
    fn corrupt_indexes_and_inner_chunks_are_errors() {
        let shape = [6u64, 8];
        let spec = spec(&[3, 4], vec![], true, true);
        let stored = shard(&numbered(&shape), &shape, &spec, |_, inner| {
            Some(inner.to_vec())
        });
        assert!(decode(&spec, &shape, &stored).is_ok());
        // A flipped checksum, a cut index, an entry past the end, an inner chunk too short.
        let mut flipped = stored.clone();
        *flipped.last_mut().unwrap() ^= 1;
        let cut_short = &stored[stored.len() - 10..];
        let mut past = stored.clone();
        let index_start = stored.len() - 4 * 16 - 4;
        past[index_start + 8..index_start + 16].copy_from_slice(&u64::MAX.to_le_bytes());
        for (what, bytes) in [("checksum", &flipped[..]), ("short", cut_short)] {
            assert!(
                matches!(decode(&spec, &shape, bytes), Err(ShardFailure::Index(_))),
                "{what}"
            );
        }
        let checksum = crc32c::crc32c(&past[index_start..past.len() - 4]);
        let end = past.len();
        past[end - 4..].copy_from_slice(&checksum.to_le_bytes());
        assert!(matches!(
            decode(&spec, &shape, &past),
            Err(ShardFailure::Index(FrameError::OutOfBounds { .. }))
        ));
        let mut short = stored.clone();
        short[index_start + 8 + 16..index_start + 16 + 16].copy_from_slice(&11u64.to_le_bytes());
        let checksum = crc32c::crc32c(&short[index_start..short.len() - 4]);
        let end = short.len();
        short[end - 4..].copy_from_slice(&checksum.to_le_bytes());
        assert!(matches!(
            decode(&spec, &shape, &short),
            Err(ShardFailure::Inner {
                number: 1,
                failure: CodecFailure::Size { actual: 11 }
            })
        ));
    }
}
