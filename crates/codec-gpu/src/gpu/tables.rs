//! Descriptor tables of a batch plan: where each round's nvCOMP calls and kernel launches
//! find their ops in the table area, and how the plan is staged into pinned memory.

use std::collections::BTreeMap;

use rayon::prelude::*;

use super::kernels::{self, MAX_DIMS};
use super::nvcomp::status_name;
use super::staging_layout::{Placed, StagingLayout};
use super::upload_runs::{Source, UploadRuns};
use crate::plan::{BatchPlan, Codec, Op, Region, Space};

/// Device addresses of the plan's spaces.
pub(super) struct Bases {
    pub(super) input: u64,
    pub(super) scratch: u64,
    pub(super) output: u64,
}

impl Bases {
    pub(super) fn address(&self, region: Region) -> u64 {
        let base = match region.space {
            Space::Input => self.input,
            Space::Scratch => self.scratch,
            Space::Output => self.output,
        };
        base + region.offset as u64
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub(super) enum KernelKind {
    Copy,
    Fill,
    Unshuffle,
    BitUnshuffle,
    Swap,
    Transpose,
    Place,
    ScaleOffset,
}

impl KernelKind {
    pub(super) fn descriptor_size(self) -> usize {
        use std::mem::size_of;
        match self {
            KernelKind::Copy => size_of::<kernels::CopyOp>(),
            KernelKind::Fill => size_of::<kernels::FillOp>(),
            KernelKind::Unshuffle | KernelKind::BitUnshuffle => size_of::<kernels::ShuffleOp>(),
            KernelKind::Swap => size_of::<kernels::SwapOp>(),
            KernelKind::Transpose => size_of::<kernels::TransposeOp>(),
            KernelKind::Place => size_of::<kernels::PlaceOp>(),
            KernelKind::ScaleOffset => size_of::<kernels::ScaleOffsetOp>(),
        }
    }
}

/// One nvCOMP call's tables (offsets in the table area) and the ops it covers.
pub(super) struct DecompressGroup {
    pub(super) ops: Vec<(usize, Op)>,
    pub(super) count: usize,
    pub(super) inputs: usize,
    pub(super) input_sizes: usize,
    pub(super) output_sizes: usize,
    pub(super) outputs: usize,
    pub(super) max_outputs: Vec<usize>,
    /// Index of the group's first op among all decompressions (its results slot).
    pub(super) result_index: usize,
}

pub(super) struct Launch {
    pub(super) kind: KernelKind,
    pub(super) ops: Vec<(usize, Op)>,
    pub(super) count: usize,
    pub(super) table: usize,
    /// Thread blocks (of 256 threads) the largest op of the launch keeps busy.
    pub(super) blocks: usize,
}

#[derive(Default)]
pub(super) struct RoundTables {
    pub(super) decompress: BTreeMap<Codec, DecompressGroup>,
    pub(super) launches: Vec<Launch>,
}

/// Where every descriptor table of a batch goes in the table area after the uploads.
pub(super) struct Tables {
    pub(super) rounds: Vec<RoundTables>,
    pub(super) len: usize,
    pub(super) decompressions: usize,
    /// (chunk, what) of each decompression, by result slot.
    pub(super) decompressed: Vec<(usize, Codec, usize)>,
}

impl Tables {
    pub(super) fn build(plan: &BatchPlan) -> Self {
        let mut len = 0usize;
        let mut take = |bytes: usize| {
            let at = len;
            len = (len + bytes).next_multiple_of(16);
            at
        };
        let mut decompressed = Vec::new();
        let mut rounds = Vec::new();
        for round in &plan.rounds {
            let mut by_codec: BTreeMap<Codec, Vec<(usize, Op)>> = BTreeMap::new();
            let mut by_kind: BTreeMap<KernelKind, Vec<(usize, Op)>> = BTreeMap::new();
            for (chunk, op) in round {
                let kind = match op {
                    Op::Decompress { codec, .. } => {
                        by_codec
                            .entry(*codec)
                            .or_default()
                            .push((*chunk, op.clone()));
                        continue;
                    }
                    Op::Copy { .. } => KernelKind::Copy,
                    Op::Fill { .. } => KernelKind::Fill,
                    Op::Unshuffle { .. } => KernelKind::Unshuffle,
                    Op::BitUnshuffle { .. } => KernelKind::BitUnshuffle,
                    Op::SwapBytes { .. } => KernelKind::Swap,
                    Op::Transpose { .. } => KernelKind::Transpose,
                    Op::PlaceBlock { .. } => KernelKind::Place,
                    Op::ScaleOffset { .. } => KernelKind::ScaleOffset,
                };
                by_kind.entry(kind).or_default().push((*chunk, op.clone()));
            }
            let mut tables = RoundTables::default();
            for (codec, ops) in by_codec {
                let count = ops.len();
                let max_outputs = ops
                    .iter()
                    .map(|(_, op)| match op {
                        Op::Decompress { dst, .. } => dst.len,
                        _ => 0,
                    })
                    .collect();
                let result_index = decompressed.len();
                decompressed.extend(ops.iter().map(|(chunk, op)| (*chunk, codec, op_len(op))));
                tables.decompress.insert(
                    codec,
                    DecompressGroup {
                        count,
                        inputs: take(8 * count),
                        input_sizes: take(8 * count),
                        output_sizes: take(8 * count),
                        outputs: take(8 * count),
                        max_outputs,
                        result_index,
                        ops,
                    },
                );
            }
            for (kind, ops) in by_kind {
                let count = ops.len();
                let blocks = ops.iter().map(|(_, op)| op_blocks(op)).max().unwrap_or(1);
                tables.launches.push(Launch {
                    kind,
                    count,
                    table: take(kind.descriptor_size() * count),
                    blocks,
                    ops,
                });
            }
            rounds.push(tables);
        }
        Self {
            rounds,
            len,
            decompressions: decompressed.len(),
            decompressed,
        }
    }

    /// Actual sizes (8 bytes each), then statuses (4 bytes each).
    pub(super) fn results_len(&self) -> usize {
        self.status_offset() + 4 * self.decompressions
    }

    pub(super) fn status_offset(&self) -> usize {
        8 * self.decompressions
    }

    /// The decompressions that failed or produced the wrong size, by chunk.
    pub(super) fn failures(&self, results: &[u8]) -> Vec<(usize, String)> {
        let mut failures = Vec::new();
        for (slot, &(chunk, codec, expected)) in self.decompressed.iter().enumerate() {
            let actual =
                u64::from_ne_bytes(results[8 * slot..8 * slot + 8].try_into().expect("8 bytes"));
            let at = self.status_offset() + 4 * slot;
            let status = i32::from_ne_bytes(results[at..at + 4].try_into().expect("4 bytes"));
            if status != 0 {
                failures.push((
                    chunk,
                    format!(
                        "{codec:?} stream: nvCOMP status {status} ({})",
                        status_name(status)
                    ),
                ));
            } else if actual != expected as u64 {
                failures.push((
                    chunk,
                    format!("{codec:?} stream decoded to {actual} bytes, expected {expected}"),
                ));
            }
        }
        failures
    }
}

/// The length that sizes an op's launch (bytes, or elements for element kernels).
pub(super) fn op_len(op: &Op) -> usize {
    match op {
        Op::Decompress { dst, .. } | Op::Copy { dst, .. } | Op::Fill { dst, .. } => dst.len,
        Op::Unshuffle { dst, .. } | Op::BitUnshuffle { dst, .. } => dst.len,
        Op::SwapBytes { region, .. } => region.len,
        Op::Transpose { dst, .. } | Op::ScaleOffset { dst, .. } => dst.len,
        Op::PlaceBlock { src: block, .. } => block.len,
    }
}

/// Where a plan's descriptor tables start in its input buffer: after the uploads, 256-aligned.
pub(super) fn table_start(plan: &BatchPlan) -> usize {
    plan.input_len.next_multiple_of(256)
}

/// Thread blocks an op keeps busy: `place_block` gives each warp (8 to a block) a segment of
/// up to 4096 bytes of one row; the other kernels give each thread about 8 elements.
fn op_blocks(op: &Op) -> usize {
    const PLACE_SEGMENT: usize = 4096; // as in kernels.cu
    match op {
        Op::PlaceBlock {
            src,
            block,
            element_size,
            ..
        } => {
            let row_bytes = block.last().map_or(1, |&len| len as usize) * element_size;
            let rows = src.len / row_bytes.max(1);
            (rows * row_bytes.div_ceil(PLACE_SEGMENT)).div_ceil(8)
        }
        _ => op_len(op).div_ceil(256 * 8),
    }
}

/// Fills the pinned staging buffer as `layout` lays it out: uploads not read into pinned
/// memory (copied in parallel), then every table; returns the group's copies.
pub(super) fn stage(
    plan: &BatchPlan,
    tables: &Tables,
    bases: &Bases,
    staging: &mut [u8],
    layout: &StagingLayout,
) -> UploadRuns {
    let staging_address = staging.as_ptr() as usize;
    let mut runs = UploadRuns::default();
    let (uploads, table_area) = staging.split_at_mut(layout.tables);
    // Hand each staged upload its own disjoint slice, then copy them on every core; the
    // others upload from where they were read.
    let mut rest = uploads;
    let mut consumed = 0;
    let mut pieces = Vec::with_capacity(plan.uploads.len());
    for ((bytes, offset), placed) in plan.uploads.iter().zip(&layout.uploads) {
        let at = match *placed {
            Placed::Slab(slab) => {
                runs.push(
                    bytes.as_ptr() as usize,
                    *offset,
                    bytes.len(),
                    Source::Slab(slab),
                );
                continue;
            }
            Placed::Staged(at) => at,
        };
        runs.push(staging_address + at, *offset, bytes.len(), Source::Staging);
        let (_, tail) = rest.split_at_mut(at - consumed);
        let (piece, tail) = tail.split_at_mut(bytes.len());
        pieces.push((piece, bytes));
        consumed = at + bytes.len();
        rest = tail;
    }
    pieces
        .into_par_iter()
        .with_min_len(4)
        .for_each(|(piece, bytes)| piece.copy_from_slice(bytes));
    runs.push(
        staging_address + layout.tables,
        table_start(plan),
        tables.len,
        Source::Staging,
    );

    let put = |area: &mut [u8], at: usize, bytes: &[u8]| {
        area[at..at + bytes.len()].copy_from_slice(bytes)
    };
    for round in &tables.rounds {
        for group in round.decompress.values() {
            let mut inputs = Vec::with_capacity(group.count);
            let mut input_sizes = Vec::with_capacity(group.count);
            let mut output_sizes = Vec::with_capacity(group.count);
            let mut outputs = Vec::with_capacity(group.count);
            for (_, op) in &group.ops {
                if let Op::Decompress { src, dst, .. } = op {
                    inputs.push(bases.address(*src));
                    input_sizes.push(src.len as u64);
                    output_sizes.push(dst.len as u64);
                    outputs.push(bases.address(*dst));
                }
            }
            put(table_area, group.inputs, kernels::as_bytes(&inputs));
            put(
                table_area,
                group.input_sizes,
                kernels::as_bytes(&input_sizes),
            );
            put(
                table_area,
                group.output_sizes,
                kernels::as_bytes(&output_sizes),
            );
            put(table_area, group.outputs, kernels::as_bytes(&outputs));
        }
        for launch in &round.launches {
            let bytes = descriptors(launch, bases);
            put(table_area, launch.table, &bytes);
        }
    }
    runs
}

/// The descriptor table of one launch, as bytes.
pub(super) fn descriptors(launch: &Launch, bases: &Bases) -> Vec<u8> {
    let address = |region: Region| bases.address(region);
    let dims = |values: &[u64]| {
        let mut out = [0u64; MAX_DIMS];
        out[..values.len()].copy_from_slice(values);
        out
    };
    let mut bytes = Vec::with_capacity(launch.kind.descriptor_size() * launch.count);
    for (_, op) in &launch.ops {
        match op {
            Op::Copy { src, dst } => {
                bytes.extend_from_slice(kernels::as_bytes(&[kernels::CopyOp {
                    src: address(*src),
                    dst: address(*dst),
                    len: dst.len as u64,
                }]))
            }
            Op::Fill { dst, pattern } => {
                let mut fixed = [0u8; 16];
                fixed[..pattern.len()].copy_from_slice(pattern);
                bytes.extend_from_slice(kernels::as_bytes(&[kernels::FillOp {
                    dst: address(*dst),
                    len: dst.len as u64,
                    pattern_len: pattern.len().max(1) as u64,
                    pattern: fixed,
                }]))
            }
            Op::Unshuffle {
                src,
                planes,
                dst,
                type_size,
            }
            | Op::BitUnshuffle {
                src,
                planes,
                dst,
                type_size,
            } => bytes.extend_from_slice(kernels::as_bytes(&[kernels::ShuffleOp {
                src: address(*src),
                dst: address(*dst),
                len: dst.len as u64,
                type_size: *type_size as u64,
                plane_len: planes.plane_len as u64,
                plane_stride: planes.plane_stride as u64,
            }])),
            Op::SwapBytes {
                region,
                element_size,
            } => bytes.extend_from_slice(kernels::as_bytes(&[kernels::SwapOp {
                ptr: address(*region),
                len: region.len as u64,
                element_size: *element_size as u64,
            }])),
            Op::Transpose {
                src,
                dst,
                encoded_shape,
                encoded_order,
                element_size,
            } => {
                let order: Vec<u64> = encoded_order.iter().map(|&a| a as u64).collect();
                bytes.extend_from_slice(kernels::as_bytes(&[kernels::TransposeOp {
                    src: address(*src),
                    dst: address(*dst),
                    elements: (dst.len / element_size) as u64,
                    element_size: *element_size as u64,
                    ndim: encoded_shape.len() as u64,
                    shape: dims(encoded_shape),
                    order: dims(&order),
                }]))
            }
            Op::PlaceBlock {
                src,
                dst,
                block,
                outer,
                start,
                element_size,
            } => bytes.extend_from_slice(kernels::as_bytes(&[kernels::PlaceOp {
                src: address(*src),
                dst: address(*dst),
                elements: (src.len / element_size) as u64,
                element_size: *element_size as u64,
                ndim: block.len() as u64,
                block: dims(block),
                outer: dims(outer),
                start: dims(start),
            }])),
            Op::ScaleOffset { src, dst, spec } => {
                bytes.extend_from_slice(kernels::as_bytes(&[kernels::ScaleOffsetOp {
                    src: address(*src),
                    dst: address(*dst),
                    elements: (dst.len / spec.dtype.size()) as u64,
                    dtype: spec.dtype as u32,
                    astype: spec.astype.unwrap_or(spec.dtype) as u32,
                    cast: spec.astype.is_some() as u32,
                    offset_bits: spec.offset.to_bits(),
                    scale_bits: spec.scale.to_bits(),
                    pad: 0,
                }]))
            }
            Op::Decompress { .. } => unreachable!("decompressions go to nvCOMP, not a kernel"),
        }
    }
    bytes
}
