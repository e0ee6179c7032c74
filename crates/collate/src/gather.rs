//! The gather plan of a batch: for every (sample, step, variable) window, the boxes of its
//! chunks to copy into the batch tensor, as flat element offsets and strides. The GPU
//! collator launches one kernel over these pieces; [`GatherPlan::run_on_host`] runs them on
//! the CPU, so the plan is tested against [`HostCollator`](crate::HostCollator) without a GPU.
//! A static variable's window is one box of its whole array
//! ([`StaticFields`](crate::StaticFields)), which counts as a chunk after the batch's chunks.
//! Derived channels are not gathered ([`DerivedPlan`](crate::DerivedPlan)).

use std::collections::HashMap;

use zarrpipe_batcher::{clip, Sample, SampleLayout};
use zarrpipe_core::{decode_to_f32, CfDecoding, DType};
use zarrpipe_store::{ChunkRequest, Variable};

use crate::{Error, Result};

/// Most axes of a piece after merging contiguous ones (the GPU kernel's limit).
pub const MAX_AXES: usize = 8;

/// One box of one chunk, copied into the tensor.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Piece {
    /// Which of the batch's chunks (the position in the list given to the planner).
    pub chunk: usize,
    /// The number of the chunk's variable among the layout's (its CF decoding is
    /// [`GatherPlan::decodings`]`[variable]`).
    pub variable: usize,
    /// The chunk's element type.
    pub dtype: DType,
    /// First element of the box in the chunk (C order, elements).
    pub src_start: u64,
    /// First element of the box in the tensor.
    pub dst_start: u64,
    /// Box size per axis; axes of size 1 dropped and contiguous axes merged.
    pub extent: Vec<u64>,
    /// Chunk strides per axis of `extent`, in elements.
    pub src_strides: Vec<u64>,
    /// Tensor strides per axis of `extent`, in elements.
    pub dst_strides: Vec<u64>,
}

impl Piece {
    /// Elements in the box.
    pub fn len(&self) -> u64 {
        self.extent.iter().product()
    }

    /// Whether the box holds no element.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// The pieces of a batch's input tensor and, with forecasting pairs, its target tensor.
#[derive(Clone, Debug, Default)]
pub struct GatherPlan {
    /// The pieces of the input tensor.
    pub inputs: Vec<Piece>,
    /// The input tensor's shape.
    pub input_shape: Vec<usize>,
    /// The target tensor's pieces and shape, with forecasting pairs.
    pub targets: Option<(Vec<Piece>, Vec<usize>)>,
    /// Each layout variable's CF decoding (`None`: values as stored).
    pub decodings: Vec<Option<CfDecoding>>,
}

impl GatherPlan {
    /// Plans the gather of `samples` from the chunks `chunks` (any order; each piece names
    /// its chunk's position there). Pieces of static variables name position
    /// `chunks.len() + k` for the `k`-th static variable
    /// ([`SampleLayout::static_variables`]): their whole arrays follow the chunks.
    pub fn new(
        layout: &SampleLayout,
        samples: &[Sample],
        chunks: &[&ChunkRequest],
    ) -> Result<Self> {
        let index = chunk_index(layout, chunks)?;
        let index = (index, chunks.len());
        let (inputs, input_shape) = plan_steps(layout, samples, layout.input_offsets(), &index)?;
        let targets = match layout.target_offsets() {
            [] => None,
            leads => Some(plan_steps(layout, samples, leads, &index)?),
        };
        let decodings = layout
            .variables()
            .iter()
            .map(|variable| variable.decoding().cloned())
            .collect();
        Ok(Self {
            inputs,
            input_shape,
            targets,
            decodings,
        })
    }

    /// Runs pieces on the CPU into a float32 tensor of `len` elements prefilled with
    /// `background`, CF-decoding each with `decodings` (the CPU reference of the GPU kernel's
    /// copy).
    pub fn run_on_host(
        pieces: &[Piece],
        decodings: &[Option<CfDecoding>],
        chunks: &[&[u8]],
        len: usize,
        background: f32,
    ) -> Vec<f32> {
        let mut out = vec![background; len];
        for piece in pieces {
            let size = piece.dtype.size();
            let bytes = chunks[piece.chunk];
            let cf = decodings.get(piece.variable).and_then(Option::as_ref);
            for element in 0..piece.len() {
                let (src, dst) = piece.offsets(element);
                let value = &bytes[src as usize * size..(src as usize + 1) * size];
                decode_to_f32(piece.dtype, cf, value, &mut out[dst as usize..], 1);
            }
        }
        out
    }
}

impl Piece {
    /// The chunk and tensor offsets of element `element` of the box (C order over `extent`).
    pub fn offsets(&self, element: u64) -> (u64, u64) {
        let (mut src, mut dst, mut rest) = (self.src_start, self.dst_start, element);
        for axis in (0..self.extent.len()).rev() {
            let coord = rest % self.extent[axis];
            rest /= self.extent[axis];
            src += coord * self.src_strides[axis];
            dst += coord * self.dst_strides[axis];
        }
        (src, dst)
    }
}

type ChunkIndex<'a> = HashMap<(usize, &'a [u64]), (usize, &'a ChunkRequest)>;

fn chunk_index<'a>(layout: &SampleLayout, chunks: &[&'a ChunkRequest]) -> Result<ChunkIndex<'a>> {
    chunks
        .iter()
        .enumerate()
        .map(|(position, request)| {
            let variable = variable_number(layout, request)?;
            Ok(((variable, request.indices.as_slice()), (position, *request)))
        })
        .collect()
}

/// The number of a chunk's variable among the layout's variables.
pub(crate) fn variable_number(layout: &SampleLayout, request: &ChunkRequest) -> Result<usize> {
    layout
        .variables()
        .iter()
        .position(|v| v.name() == request.variable.name())
        .ok_or_else(|| Error::UnknownVariable {
            variable: request.variable.name().into(),
            indices: request.indices.clone(),
        })
}

/// Pieces of `[batch, steps x channels, window...]`, in the host collator's order.
fn plan_steps(
    layout: &SampleLayout,
    samples: &[Sample],
    offsets: &[i64],
    index: &(ChunkIndex<'_>, usize),
) -> Result<(Vec<Piece>, Vec<usize>)> {
    let plane: usize = layout.sample_shape()[1..].iter().product();
    let step_len = layout.channels().len() * plane;
    let mut shape = vec![samples.len(), layout.channels().len() * offsets.len()];
    shape.extend(&layout.sample_shape()[1..]);
    let strides: Vec<Vec<usize>> = (0..layout.variables().len())
        .map(|variable| destination_strides(layout, variable))
        .collect();
    let steps = samples
        .iter()
        .flat_map(|sample| offsets.iter().map(|&o| layout.shifted(sample, o)));
    let mut pieces = Vec::new();
    for (slab, step) in steps.enumerate() {
        for (number, strides) in strides.iter().enumerate() {
            let base = slab * step_len + layout.channel_range(number).start * plane;
            plan_window(
                layout,
                &step,
                number,
                base as u64,
                strides,
                index,
                &mut pieces,
            )?;
        }
    }
    Ok((pieces, shape))
}

/// The pieces of variable `number`'s channels of one sample, whose block starts at `base`.
fn plan_window(
    layout: &SampleLayout,
    sample: &Sample,
    number: usize,
    base: u64,
    dst_strides: &[usize],
    (chunks, count): &(ChunkIndex<'_>, usize),
    pieces: &mut Vec<Piece>,
) -> Result<()> {
    let static_position = layout
        .static_variables()
        .iter()
        .position(|&kept| kept == number)
        .map(|k| count + k);
    // One part per run of selected channels (the whole region without selections).
    let plane: u64 = layout.sample_shape()[1..].iter().product::<usize>() as u64;
    for (region, first) in layout.region_parts(number, sample) {
        let base = base + first as u64 * plane;
        let part = (region.as_slice(), base, static_position);
        plan_part(layout, sample, number, part, dst_strides, chunks, pieces)?;
    }
    Ok(())
}

/// The pieces of one part of variable `number`'s region (`region_parts`), whose first
/// channel starts at `base`.
fn plan_part(
    layout: &SampleLayout,
    sample: &Sample,
    number: usize,
    (region, base, static_position): (&[std::ops::Range<u64>], u64, Option<usize>),
    dst_strides: &[usize],
    chunks: &ChunkIndex<'_>,
    pieces: &mut Vec<Piece>,
) -> Result<()> {
    let variable = &layout.variables()[number];
    let boxes = match static_position {
        Some(position) => static_box(variable, region)
            .map(|whole| (position, whole))
            .into_iter()
            .collect(),
        None => window_boxes(layout, number, region)?
            .into_iter()
            .map(|chunk| {
                let &(position, _) = chunks
                    .get(&(number, chunk.indices.as_slice()))
                    .ok_or_else(|| missing_chunk(sample, variable, &chunk.indices))?;
                Ok((position, chunk))
            })
            .collect::<Result<Vec<_>>>()?,
    };
    for (position, chunk) in boxes {
        let src_strides = chunk.strides();
        let rank = region.len();
        let src_start = (0..rank)
            .map(|a| (chunk.lo[a] - chunk.start[a]) * src_strides[a])
            .sum();
        let dst_start = base
            + (0..rank)
                .map(|a| (chunk.lo[a] - region[a].start) * dst_strides[a] as u64)
                .sum::<u64>();
        let axes = (0..rank).map(|a| {
            let extent = chunk.hi[a] - chunk.lo[a];
            (extent, src_strides[a], dst_strides[a] as u64)
        });
        let (extent, src_strides, dst_strides) = merge_axes(axes);
        if extent.len() > MAX_AXES {
            return Err(Error::TooManyAxes {
                variable: variable.name().into(),
                axes: extent.len(),
            });
        }
        pieces.push(Piece {
            chunk: position,
            variable: number,
            dtype: variable.dtype(),
            src_start,
            dst_start,
            extent,
            src_strides,
            dst_strides,
        });
    }
    Ok(())
}

/// A static variable's whole array as one box, and the part of it inside `region` (`None`
/// when a padded window lies wholly outside it).
pub(crate) fn static_box(
    variable: &Variable,
    region: &[std::ops::Range<u64>],
) -> Option<WindowBox> {
    let shape = variable.shape().to_vec();
    let lo: Vec<u64> = region.iter().map(|range| range.start).collect();
    let hi: Vec<u64> = region
        .iter()
        .zip(&shape)
        .map(|(range, &length)| range.end.min(length))
        .collect();
    (0..shape.len()).all(|a| lo[a] < hi[a]).then(|| WindowBox {
        indices: vec![0; shape.len()],
        start: vec![0; shape.len()],
        shape,
        lo,
        hi,
    })
}

/// A chunk that a window touches, and the part of it inside the window (array coordinates,
/// `lo..hi` per axis, clipped to the array: edge chunks and padded windows reach past it).
pub(crate) struct WindowBox {
    pub indices: Vec<u64>,
    pub start: Vec<u64>,
    pub shape: Vec<u64>,
    pub lo: Vec<u64>,
    pub hi: Vec<u64>,
}

impl WindowBox {
    /// The chunk's C-order strides, in elements.
    pub fn strides(&self) -> Vec<u64> {
        let rank = self.shape.len();
        let mut strides = vec![1u64; rank];
        for a in (0..rank.saturating_sub(1)).rev() {
            strides[a] = strides[a + 1] * self.shape[a + 1];
        }
        strides
    }
}

/// The chunks of variable `number` with a non-empty part inside `region`.
pub(crate) fn window_boxes(
    layout: &SampleLayout,
    number: usize,
    region: &[std::ops::Range<u64>],
) -> Result<Vec<WindowBox>> {
    let variable = &layout.variables()[number];
    let rank = region.len();
    let mut boxes = Vec::new();
    for indices in variable.chunks_in(&clip(region, variable.shape())) {
        let (start, shape) = variable.chunk_region(&indices)?;
        let lo: Vec<u64> = (0..rank).map(|a| region[a].start.max(start[a])).collect();
        let hi: Vec<u64> = (0..rank)
            .map(|a| {
                let chunk_end = start[a] + shape[a];
                region[a].end.min(chunk_end).min(variable.shape()[a])
            })
            .collect();
        if (0..rank).all(|a| lo[a] < hi[a]) {
            boxes.push(WindowBox {
                indices,
                start,
                shape,
                lo,
                hi,
            });
        }
    }
    Ok(boxes)
}

/// A window's chunk that is not among the batch's decoded chunks.
pub(crate) fn missing_chunk(sample: &Sample, variable: &Variable, indices: &[u64]) -> Error {
    Error::MissingChunk {
        sample: sample.index,
        variable: variable.name().into(),
        indices: indices.to_vec(),
    }
}

/// Drops axes of size 1 and merges an axis into the next when both sides are contiguous
/// across them, so a whole-chunk copy becomes one run.
fn merge_axes(axes: impl Iterator<Item = (u64, u64, u64)>) -> (Vec<u64>, Vec<u64>, Vec<u64>) {
    let mut merged: Vec<(u64, u64, u64)> = Vec::new();
    for (extent, src, dst) in axes.filter(|&(extent, _, _)| extent != 1) {
        if let Some(last) = merged.last_mut() {
            if last.1 == extent * src && last.2 == extent * dst {
                *last = (last.0 * extent, src, dst);
                continue;
            }
        }
        merged.push((extent, src, dst));
    }
    (
        merged.iter().map(|m| m.0).collect(),
        merged.iter().map(|m| m.1).collect(),
        merged.iter().map(|m| m.2).collect(),
    )
}

/// For each axis of variable number `variable`, the step in the sample tensor per element.
pub(crate) fn destination_strides(layout: &SampleLayout, number: usize) -> Vec<usize> {
    let window_dims: Vec<&str> = layout
        .sample_dims()
        .iter()
        .filter(|d| !d.iterated)
        .map(|d| d.name.as_str())
        .collect();
    let sample_shape = layout.sample_shape();
    let plane: usize = sample_shape[1..].iter().product();
    let variable = &layout.variables()[number];
    let mut channel_stride = plane;
    let mut strides = vec![0; variable.dims().len()];
    // Stacked dims in reverse C order: the last one varies fastest between channels.
    for (axis, name) in variable.dims().iter().enumerate().rev() {
        if let Some(position) = window_dims.iter().position(|dim| dim == name) {
            strides[axis] = sample_shape[position + 2..].iter().product();
        } else if layout.sample_axis(name).is_none() {
            strides[axis] = channel_stride;
            channel_stride *= layout.stacked_len(number, axis) as usize;
        }
        // Iterated dims keep stride 0: the sample holds one step.
    }
    strides
}
