//! Turning a batch of encoded chunks into GPU work: every byte range to upload, every
//! decompression and kernel, with the device buffer regions they read and write. Planning runs
//! on the CPU and checks every frame first (see `frames`); executing a plan is the GPU's job
//! (`gpu::execute`), or the test interpreter's.
//!
//! A plan is a list of rounds. Each chunk contributes a lane of steps; round `r` holds step `r`
//! of every lane, so one round's ops are independent and ops of one kind run as one batched
//! call (one nvCOMP call per codec, one kernel launch per kind).

use bytes::Bytes;

use crate::chain::{Compressor, GpuChain, ScaleOffset, ShardSpec, Step};
pub(crate) use crate::frame_check::MAX_DIMS;
use crate::frame_check::{
    check_len, element_sizes, encoded_shapes, is_contiguous_block, ravel, shard_grid, step_lens,
    unravel, MAX_DECOMPRESSED,
};
use crate::frames::{self, BloscCodec, BloscFrame, BloscShuffle, FrameError};

/// Device buffers a plan addresses: uploaded input, scratch, and the decoded output.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub(crate) enum Space {
    Input,
    Scratch,
    Output,
}

/// A byte range of one device buffer.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Region {
    pub space: Space,
    pub offset: usize,
    pub len: usize,
}

impl Region {
    pub fn slice(self, offset: usize, len: usize) -> Region {
        debug_assert!(offset + len <= self.len);
        Region {
            space: self.space,
            offset: self.offset + offset,
            len,
        }
    }
}

/// A decompressor nvCOMP runs.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub(crate) enum Codec {
    Zstd,
    Lz4,
    Snappy,
    Deflate,
}

impl Codec {
    /// The alignment nvCOMP 6 asks of each compressed input (the `input` of its
    /// `nvcompBatched*DecompressGetRequiredAlignments`, checked when the library is loaded).
    pub(crate) fn input_align(self) -> usize {
        match self {
            Codec::Zstd | Codec::Lz4 | Codec::Snappy => 1,
            Codec::Deflate => 4,
        }
    }
}

/// A region read as `planes` of `plane_len` bytes laid `plane_stride` apart (blosc streams
/// decompressed into aligned slots); contiguous when the two are equal.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Planes {
    pub plane_len: usize,
    pub plane_stride: usize,
}

impl Planes {
    pub fn contiguous(len: usize) -> Self {
        Self {
            plane_len: len.max(1),
            plane_stride: len.max(1),
        }
    }

    /// Where logical byte `at` lies.
    #[cfg(test)]
    pub fn physical(self, at: usize) -> usize {
        at / self.plane_len * self.plane_stride + at % self.plane_len
    }
}

/// One unit of GPU work.
#[derive(Clone, Debug, PartialEq)]
pub(crate) enum Op {
    /// Decompress `src` into exactly `dst.len` bytes.
    Decompress {
        codec: Codec,
        src: Region,
        dst: Region,
    },
    Copy {
        src: Region,
        dst: Region,
    },
    /// Repeat `pattern` (one element) over `dst`.
    Fill {
        dst: Region,
        pattern: Vec<u8>,
    },
    /// Undo a byte shuffle of `type_size`-byte elements (blosc, numcodecs `shuffle`).
    Unshuffle {
        src: Region,
        planes: Planes,
        dst: Region,
        type_size: usize,
    },
    /// Undo a blosc bit shuffle.
    BitUnshuffle {
        src: Region,
        planes: Planes,
        dst: Region,
        type_size: usize,
    },
    SwapBytes {
        region: Region,
        element_size: usize,
    },
    /// `src` holds the array with shape `encoded_shape`, axis `i` being decoded axis
    /// `encoded_order[i]`; `dst` gets it in decoded (C) order.
    Transpose {
        src: Region,
        dst: Region,
        encoded_shape: Vec<u64>,
        encoded_order: Vec<usize>,
        element_size: usize,
    },
    /// numcodecs `fixedscaleoffset`: `src` holds the stored elements, `dst` gets the values.
    ScaleOffset {
        src: Region,
        dst: Region,
        spec: ScaleOffset,
    },
    /// Copy the C-order block `src` (shape `block`) into `dst` (shape `outer`) at `start`.
    PlaceBlock {
        src: Region,
        dst: Region,
        block: Vec<u64>,
        outer: Vec<u64>,
        start: Vec<u64>,
        element_size: usize,
    },
}

/// Nothing is decompressed into or read from addresses of lesser alignment (nvCOMP asks 8).
pub(crate) const ALIGN: usize = 256;
pub(crate) const DECOMPRESS_ALIGN: usize = 8;
/// Uploads our kernels read in place (they load whole elements) start 16-byte aligned.
const KERNEL_INPUT_ALIGN: usize = 16;
/// The copy kernel reads from any address (it moves 16-byte words only where both sides allow).
const COPY_INPUT_ALIGN: usize = 1;
/// Host bytes that start at most this far after the previous upload's end keep that distance
/// in the input buffer, so that both travel in one copy (a shard's inner chunks, a blosc
/// chunk's streams, neighbouring reads): thousands of copies a batch cost milliseconds each.
pub(crate) const MOST_UPLOAD_GAP: usize = 4096;

/// One chunk to plan.
pub(crate) struct ChunkInput<'a> {
    pub bytes: Option<&'a Bytes>,
    pub chain: &'a GpuChain,
    /// The decoded (full, unclipped) chunk shape.
    pub shape: &'a [u64],
    pub element_size: usize,
    /// The fill value, one element in native byte order.
    pub fill: &'a [u8],
}

/// A planned batch.
#[derive(Debug, Default)]
pub(crate) struct BatchPlan {
    /// Host bytes to upload and where they go in the input buffer.
    pub uploads: Vec<(Bytes, usize)>,
    pub input_len: usize,
    pub scratch_len: usize,
    pub output_len: usize,
    /// Ops of each round, with the chunk each belongs to.
    pub rounds: Vec<Vec<(usize, Op)>>,
}

impl BatchPlan {
    /// Plans chunk number `chunk`; its decoded bytes will be at the returned output region.
    /// On error nothing of the chunk is planned.
    pub fn add(&mut self, chunk: usize, input: &ChunkInput) -> Result<Region, FrameError> {
        let len = input.shape.iter().product::<u64>() as usize * input.element_size;
        let mut planner = LanePlanner {
            plan: self,
            scratch_len: self.scratch_len,
            uploads: Vec::new(),
            input_len: self.input_len,
            lane: Vec::new(),
        };
        let output = Region {
            space: Space::Output,
            offset: planner.plan.output_len,
            len,
        };
        planner.chunk(input, 0, output)?;
        let LanePlanner {
            scratch_len,
            uploads,
            input_len,
            lane,
            ..
        } = planner;
        self.scratch_len = scratch_len;
        self.input_len = input_len;
        self.uploads.extend(uploads);
        self.output_len = (output.offset + len).next_multiple_of(ALIGN);
        if self.rounds.len() < lane.len() {
            self.rounds.resize_with(lane.len(), Vec::new);
        }
        for (round, ops) in lane.into_iter().enumerate() {
            self.rounds[round].extend(ops.into_iter().map(|op| (chunk, op)));
        }
        Ok(output)
    }

    /// Ops of all rounds.
    #[cfg(test)]
    pub fn ops(&self) -> impl Iterator<Item = &(usize, Op)> {
        self.rounds.iter().flatten()
    }
}

/// Plans one chunk's lane; commits to the batch only when the whole chunk planned.
struct LanePlanner<'p> {
    plan: &'p BatchPlan,
    scratch_len: usize,
    input_len: usize,
    uploads: Vec<(Bytes, usize)>,
    lane: Vec<Vec<Op>>,
}

/// Where a chunk's bytes are while its steps run.
enum Data {
    Host(Bytes),
    Device(Region),
}

impl LanePlanner<'_> {
    fn push(&mut self, step: usize, op: Op) {
        if self.lane.len() <= step {
            self.lane.resize_with(step + 1, Vec::new);
        }
        self.lane[step].push(op);
    }

    fn scratch(&mut self, len: usize) -> Region {
        let offset = self.scratch_len;
        self.scratch_len = (offset + len).next_multiple_of(ALIGN);
        Region {
            space: Space::Scratch,
            offset,
            len,
        }
    }

    /// Places `bytes` in the input buffer at a multiple of `align`, what their reader needs:
    /// right after the previous upload when they follow it closely on the host, else at the
    /// next 16-byte boundary.
    fn upload(&mut self, bytes: Bytes, align: usize) -> Region {
        let previous = self.uploads.last().or(self.plan.uploads.last());
        let following = previous.and_then(|(before, before_offset)| {
            let before_end = before.as_ptr() as usize + before.len();
            let gap = (bytes.as_ptr() as usize).checked_sub(before_end)?;
            (gap <= MOST_UPLOAD_GAP).then_some(before_offset + before.len() + gap)
        });
        let offset = match following {
            Some(offset) if offset >= self.input_len && offset.is_multiple_of(align) => offset,
            _ => self
                .input_len
                .next_multiple_of(KERNEL_INPUT_ALIGN.max(align)),
        };
        let len = bytes.len();
        self.input_len = offset + len;
        self.uploads.push((bytes, offset));
        Region {
            space: Space::Input,
            offset,
            len,
        }
    }

    /// Plans `input` from step `step` on, so that its decoded bytes end in `output`; returns
    /// the step after its last.
    fn chunk(
        &mut self,
        input: &ChunkInput,
        step: usize,
        output: Region,
    ) -> Result<usize, FrameError> {
        let Some(bytes) = input.bytes else {
            self.push(
                step,
                Op::Fill {
                    dst: output,
                    pattern: input.fill.to_vec(),
                },
            );
            return Ok(step + 1);
        };
        let steps = &input.chain.steps;
        let shapes = encoded_shapes(steps, input.shape);
        // Bytes of one element as each step reads it (a scale-offset step changes the size).
        let sizes = element_sizes(steps, input.element_size);
        let (len_in, len_out) = step_lens(&sizes, input.element_size, output.len);
        // The last step that writes a new buffer writes straight into `output`.
        let last_new_buffer = last_new_buffer(steps);
        let mut data = Data::Host(bytes.clone());
        let mut step = step;
        for (index, chain_step) in steps.iter().enumerate() {
            let dst_for = |planner: &mut Self| {
                if Some(index) == last_new_buffer {
                    output
                } else {
                    planner.scratch(len_out[index])
                }
            };
            data = match (chain_step, data) {
                (Step::Crc32c, Data::Host(bytes)) => {
                    let body = frames::strip_crc32c(&bytes)?;
                    Data::Host(bytes.slice(body))
                }
                (Step::Decompress(compressor), Data::Host(bytes)) => {
                    let dst = dst_for(self);
                    step = self.decompress(*compressor, &bytes, step, dst)?;
                    Data::Device(dst)
                }
                (Step::Sharding(spec), Data::Host(bytes)) => {
                    let dst = dst_for(self);
                    step = self.shard(spec, &bytes, input, &shapes[index], step, dst)?;
                    Data::Device(dst)
                }
                (Step::Shuffle { element_size }, data) => {
                    let dst = dst_for(self);
                    let (data, next) =
                        self.kernel_step(data, step, len_in[index], dst, |src| Op::Unshuffle {
                            src,
                            planes: Planes::contiguous(src.len / element_size.max(&1)),
                            dst,
                            type_size: *element_size,
                        })?;
                    step = next;
                    data
                }
                (Step::SwapBytes, data) => {
                    let into_output = last_new_buffer.is_none_or(|last| last < index);
                    let (region, at) =
                        self.in_place(data, step, into_output, output, len_in[index])?;
                    self.push(
                        at,
                        Op::SwapBytes {
                            region,
                            element_size: sizes[index],
                        },
                    );
                    step = at + 1;
                    Data::Device(region)
                }
                (Step::Transpose { encoded_order }, _) if encoded_order.len() > MAX_DIMS => {
                    return Err(FrameError::NeedsCpu(format!(
                        "transpose of {} dimensions",
                        encoded_order.len()
                    )))
                }
                (Step::Transpose { encoded_order }, data) => {
                    let dst = dst_for(self);
                    let (data, next) =
                        self.kernel_step(data, step, len_in[index], dst, |src| Op::Transpose {
                            src,
                            dst,
                            encoded_shape: shapes[index].clone(),
                            encoded_order: encoded_order.clone(),
                            element_size: sizes[index],
                        })?;
                    step = next;
                    data
                }
                (Step::ScaleOffset(spec), data) => {
                    let dst = dst_for(self);
                    let (data, next) =
                        self.kernel_step(data, step, len_in[index], dst, |src| Op::ScaleOffset {
                            src,
                            dst,
                            spec: *spec,
                        })?;
                    step = next;
                    data
                }
                (other, Data::Device(_)) => {
                    return Err(FrameError::NeedsCpu(format!(
                        "{other:?} after a decoding step"
                    )))
                }
            };
        }
        // A chain of host-only steps (none, or crc32c alone): upload into the output.
        match data {
            Data::Host(bytes) => {
                check_len(&bytes, output.len)?;
                let src = self.upload(bytes, COPY_INPUT_ALIGN);
                self.push(step, Op::Copy { src, dst: output });
                Ok(step + 1)
            }
            Data::Device(region) => {
                debug_assert_eq!(region, output);
                Ok(step)
            }
        }
    }

    /// A kernel from `data` (uploaded first if still on the host, `len` bytes) into the new
    /// buffer `dst`: the op `op` makes of its source. Returns the data and the next step.
    fn kernel_step(
        &mut self,
        data: Data,
        step: usize,
        len: usize,
        dst: Region,
        op: impl FnOnce(Region) -> Op,
    ) -> Result<(Data, usize), FrameError> {
        let (src, at) = self.on_device(data, step, len)?;
        self.push(at, op(src));
        Ok((Data::Device(dst), at + 1))
    }

    /// Uploads host data (the chain had nothing to decompress) so a kernel can read it.
    fn on_device(
        &mut self,
        data: Data,
        step: usize,
        len: usize,
    ) -> Result<(Region, usize), FrameError> {
        Ok(match data {
            Data::Device(region) => (region, step),
            Data::Host(bytes) => {
                check_len(&bytes, len)?;
                (self.upload(bytes, KERNEL_INPUT_ALIGN), step)
            }
        })
    }

    /// A device region an in-place kernel may change: the data itself once decoded, else an
    /// upload copied into `output` (when no later step writes a new buffer) or scratch.
    fn in_place(
        &mut self,
        data: Data,
        step: usize,
        into_output: bool,
        output: Region,
        len: usize,
    ) -> Result<(Region, usize), FrameError> {
        Ok(match data {
            Data::Device(region) => (region, step),
            Data::Host(bytes) => {
                check_len(&bytes, len)?;
                let dst = if into_output {
                    output
                } else {
                    self.scratch(len)
                };
                let src = self.upload(bytes, COPY_INPUT_ALIGN);
                self.push(step, Op::Copy { src, dst });
                (dst, step + 1)
            }
        })
    }

    fn decompress(
        &mut self,
        compressor: Compressor,
        bytes: &Bytes,
        step: usize,
        dst: Region,
    ) -> Result<usize, FrameError> {
        let (codec, payload) = match compressor {
            Compressor::Zstd => {
                frames::check_zstd(bytes, dst.len)?;
                (Codec::Zstd, 0..bytes.len())
            }
            Compressor::Gzip => (Codec::Deflate, frames::gzip_payload(bytes, dst.len)?),
            Compressor::Zlib => (Codec::Deflate, frames::zlib_payload(bytes)?),
            Compressor::Lz4 => (Codec::Lz4, frames::lz4_payload(bytes, dst.len)?),
            Compressor::Blosc => return self.blosc(bytes, step, dst),
        };
        if dst.len == 0 {
            return Ok(step);
        }
        if dst.len > MAX_DECOMPRESSED {
            return Err(FrameError::NeedsCpu(format!(
                "{} decoded bytes, more than nvCOMP decompresses at once",
                dst.len
            )));
        }
        let src = self.upload(bytes.slice(payload), codec.input_align());
        self.push(step, Op::Decompress { codec, src, dst });
        Ok(step + 1)
    }

    fn blosc(&mut self, bytes: &Bytes, step: usize, dst: Region) -> Result<usize, FrameError> {
        let frame = BloscFrame::parse(bytes, dst.len)?;
        if let Some(stored) = frame.memcpyed {
            let src = self.upload(bytes.slice(stored), COPY_INPUT_ALIGN);
            self.push(step, Op::Copy { src, dst });
            return Ok(step + 1);
        }
        let codec = match frame.codec {
            BloscCodec::Lz4 => Codec::Lz4,
            BloscCodec::Snappy => Codec::Snappy,
            BloscCodec::Zstd => Codec::Zstd,
            BloscCodec::Zlib => Codec::Deflate,
        };
        let mut last = step;
        for block in &frame.blocks {
            let block_dst = dst.slice(block.offset, block.len);
            let split_len = block.len / block.splits.len();
            let direct = block.shuffle == BloscShuffle::None
                && block.splits.len() == 1
                && block_dst.offset.is_multiple_of(DECOMPRESS_ALIGN);
            // Streams land in aligned slots; a kernel or copy then assembles the block.
            let stride = split_len.next_multiple_of(DECOMPRESS_ALIGN);
            let slots = if direct {
                block_dst
            } else {
                self.scratch(stride * block.splits.len())
            };
            for (index, split) in block.splits.iter().enumerate() {
                let slot = slots.slice(index * stride, split_len);
                let stream = bytes.slice(split.bytes.clone());
                let src = if split.raw {
                    self.upload(stream, COPY_INPUT_ALIGN)
                } else {
                    let payload = frame.payload(&stream, split_len)?;
                    self.upload(stream.slice(payload), codec.input_align())
                };
                let op = if split.raw {
                    Op::Copy { src, dst: slot }
                } else {
                    Op::Decompress {
                        codec,
                        src,
                        dst: slot,
                    }
                };
                self.push(step, op);
            }
            if direct {
                continue;
            }
            let planes = Planes {
                plane_len: split_len,
                plane_stride: stride,
            };
            let type_size = frame.type_size;
            let gather = match block.shuffle {
                BloscShuffle::Byte => vec![Op::Unshuffle {
                    src: slots,
                    planes,
                    dst: block_dst,
                    type_size,
                }],
                BloscShuffle::Bit => vec![Op::BitUnshuffle {
                    src: slots,
                    planes,
                    dst: block_dst,
                    type_size,
                }],
                BloscShuffle::None => (0..block.splits.len())
                    .map(|index| Op::Copy {
                        src: slots.slice(index * stride, split_len),
                        dst: block_dst.slice(index * split_len, split_len),
                    })
                    .collect(),
            };
            for op in gather {
                self.push(step + 1, op);
            }
            last = step + 1;
        }
        Ok(last + 1)
    }

    /// Plans each inner chunk of a shard into `dst`, which has shape `shard_shape`.
    fn shard(
        &mut self,
        spec: &ShardSpec,
        bytes: &Bytes,
        outer: &ChunkInput,
        shard_shape: &[u64],
        step: usize,
        dst: Region,
    ) -> Result<usize, FrameError> {
        let inner_shape = &spec.inner_shape;
        let grid = shard_grid(inner_shape, shard_shape)?;
        let count = grid.iter().product::<u64>() as usize;
        let index = frames::shard_index(bytes, count, spec.index_crc32c, spec.index_at_end)?;
        let element_size = outer.element_size;
        let inner_len = inner_shape.iter().product::<u64>() as usize * element_size;
        let contiguous = is_contiguous_block(inner_shape, shard_shape);
        let mut end = step;
        let mut places = Vec::new();
        // In the order they lie in the shard (writers need not keep the grid's), so that each
        // inner chunk's upload follows the one before and a shard travels in one copy.
        let mut index: Vec<_> = index.into_iter().enumerate().collect();
        index.sort_by_key(|(_, stored)| stored.as_ref().map(|range| range.start));
        for (position, stored) in index {
            let start = unravel(position as u64, &grid)
                .iter()
                .zip(inner_shape)
                .map(|(g, i)| g * i)
                .collect::<Vec<_>>();
            let inner_bytes = stored.map(|range| bytes.slice(range));
            let inner = ChunkInput {
                bytes: inner_bytes.as_ref(),
                chain: &spec.inner,
                shape: inner_shape,
                element_size,
                fill: outer.fill,
            };
            let target = if contiguous {
                dst.slice(
                    ravel(&start, shard_shape) as usize * element_size,
                    inner_len,
                )
            } else {
                self.scratch(inner_len)
            };
            end = end.max(self.chunk(&inner, step, target)?);
            if !contiguous {
                places.push(Op::PlaceBlock {
                    src: target,
                    dst,
                    block: inner_shape.clone(),
                    outer: shard_shape.to_vec(),
                    start,
                    element_size,
                });
            }
        }
        if places.is_empty() {
            return Ok(end);
        }
        for op in places {
            self.push(end, op);
        }
        Ok(end + 1)
    }
}

/// Index of the last step that writes a new buffer (decompressions, shuffles, transposes,
/// shards); in-place steps after it work on the output.
fn last_new_buffer(steps: &[Step]) -> Option<usize> {
    steps.iter().rposition(|step| {
        matches!(
            step,
            Step::Decompress(_)
                | Step::Shuffle { .. }
                | Step::Transpose { .. }
                | Step::Sharding(_)
                | Step::ScaleOffset(_)
        )
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn uploads_that_follow_on_the_host_follow_on_the_device_when_their_reader_allows() {
        let plan = BatchPlan::default();
        let mut planner = LanePlanner {
            plan: &plan,
            scratch_len: 0,
            input_len: 0,
            uploads: Vec::new(),
            lane: Vec::new(),
        };
        let shard = Bytes::from(vec![0u8; 10_000]);
        let offset = |planner: &mut LanePlanner, range: std::ops::Range<usize>, align| {
            planner.upload(shard.slice(range), align).offset
        };
        // A shard's inner chunks, back to back: one range on both sides.
        assert_eq!(offset(&mut planner, 0..100, 1), 0);
        assert_eq!(offset(&mut planner, 100..333, 1), 100);
        // A short gap is kept; a long one is not.
        assert_eq!(offset(&mut planner, 340..401, 1), 340);
        let far = 401 + MOST_UPLOAD_GAP + 1;
        // Starts afresh at the next 16-byte boundary, and ends at 1918.
        assert_eq!(offset(&mut planner, far..far + 1502, 1), 416);
        // A reader that needs alignment gets it: deflate's 4 (1918 is not), then 4 again
        // (1920 + 100 is), our kernels' 16 (2120 is not).
        let deflate = Codec::Deflate.input_align();
        assert_eq!(offset(&mut planner, far + 1502..far + 1602, deflate), 1920);
        assert_eq!(offset(&mut planner, far + 1602..far + 1702, deflate), 2020);
        assert_eq!(
            offset(&mut planner, far + 1702..far + 1802, KERNEL_INPUT_ALIGN),
            2128
        );
        // Bytes before the previous upload's end start afresh, aligned.
        assert_eq!(offset(&mut planner, 0..10, 1), 2240);
    }

    #[test]
    fn a_shards_inner_chunks_upload_in_the_order_they_lie_in_it() {
        // Inner chunk 1 stored first, then inner chunk 0, then the index (at the end, no crc).
        let mut stored = vec![3u8, 4, 1, 2];
        for (offset, len) in [(2u64, 2u64), (0, 2)] {
            stored.extend(offset.to_le_bytes());
            stored.extend(len.to_le_bytes());
        }
        let shard = Bytes::from(stored);
        let chain = GpuChain {
            steps: vec![Step::Sharding(Box::new(ShardSpec {
                inner_shape: vec![2],
                inner: GpuChain::default(),
                index_crc32c: false,
                index_at_end: true,
            }))],
        };
        let mut plan = BatchPlan::default();
        let input = ChunkInput {
            bytes: Some(&shard),
            chain: &chain,
            shape: &[4],
            element_size: 1,
            fill: &[0],
        };
        plan.add(0, &input).unwrap();
        let at = |n: usize| plan.uploads[n].0.as_ptr() as usize - shard.as_ptr() as usize;
        assert_eq!((at(0), at(1)), (0, 2));
        assert_eq!(plan.uploads[1].1 - plan.uploads[0].1, 2);
        // Each lands where the grid puts it: the first stored (inner chunk 1) at byte 2.
        let copies: Vec<_> = plan
            .ops()
            .filter_map(|(_, op)| match op {
                Op::Copy { src, dst } => Some((src.offset, dst.offset)),
                _ => None,
            })
            .collect();
        let first = plan.uploads[0].1;
        assert_eq!(copies, [(first, 2), (first + 2, 0)]);
    }
}
