use std::collections::HashMap;
use std::ops::Range;
use std::sync::Arc;

use ndarray::{ArrayD, IxDyn};
use rayon::prelude::*;
use zarrpipe_batcher::{Sample, SampleDim, SampleLayout};
use zarrpipe_codec_gpu::{DecodedChunk, DecodedChunks, PendingChunks};
use zarrpipe_core::{decode_to_f32, BatchStats, CfDecoding, DType};

use crate::gather::{
    destination_strides, missing_chunk, static_box, variable_number, window_boxes, WindowBox,
};
use crate::host_placement::TensorPlacement;
use crate::options::{finish_on_host, CollateOptions};
use crate::TensorDType;
use crate::{Batch, DecodedBatch, Error, GatherPlan, Piece, Result, StaticField};

/// Gathers the windows of a batch from decoded chunks into one contiguous float32 tensor on
/// the CPU, samples in parallel (chunks a CPU decoder left pending are decoded straight into
/// the tensor, chunks in parallel); static variables' windows come from their fields read once,
/// derived channels are computed ([`CollateOptions::static_fields`],
/// [`CollateOptions::derived`]).
#[derive(Clone, Debug)]
pub struct HostCollator {
    layout: Arc<SampleLayout>,
    options: CollateOptions,
}

type ChunkIndex<'a> = HashMap<(usize, &'a [u64]), &'a DecodedChunk>;

impl HostCollator {
    /// A collator without normalisation or NaN handling (float32 tensors).
    pub fn new(layout: Arc<SampleLayout>) -> Self {
        Self {
            layout,
            options: CollateOptions::default(),
        }
    }

    /// With normalisation and NaN handling; the tensor type must be float32.
    pub fn with_options(layout: Arc<SampleLayout>, options: CollateOptions) -> Result<Self> {
        options.check(&layout)?;
        if options.dtype != TensorDType::F32 {
            return Err(Error::HostTensorType(options.dtype));
        }
        Ok(Self { layout, options })
    }

    /// What the collator does beyond gathering.
    pub fn options(&self) -> &CollateOptions {
        &self.options
    }

    /// How samples are cut.
    pub fn layout(&self) -> &Arc<SampleLayout> {
        &self.layout
    }

    /// Builds the `[batch, channel, window...]` input tensor of `batch`, and with forecasting
    /// the target tensor. Chunks decoded on the GPU are copied to the host first. A layout
    /// with static variables or derived channels needs a collator made
    /// [`with_options`](Self::with_options) that hold them.
    pub fn collate(&self, batch: DecodedBatch) -> Result<Batch> {
        let DecodedBatch {
            index: batch_index,
            epoch,
            samples,
            payload,
            stats,
            pace,
        } = batch;
        self.options.check_channels(&self.layout)?;
        let mut stats = stats;
        let (mut tensor, mut targets) = match payload {
            DecodedChunks::Pending(pending) => {
                let (inputs, targets, decoded) = self.decode_in_place(&samples, pending)?;
                stats += decoded;
                (inputs, targets)
            }
            payload => {
                let chunks = payload.into_host()?;
                let index = self.index_chunks(&chunks)?;
                let tensor = self.gather_steps(&samples, self.layout.input_offsets(), &index)?;
                let targets = match self.layout.target_offsets() {
                    [] => None,
                    leads => Some(self.gather_steps(&samples, leads, &index)?),
                };
                (tensor, targets)
            }
        };
        let (plane, channels) = (self.plane_len(), self.layout.channels().len());
        let nan_mask = self.finish(&mut tensor, plane, channels);
        if let Some(targets) = &mut targets {
            self.finish(targets, plane, channels);
        }
        let nan_mask = nan_mask.map(|mask| {
            ArrayD::from_shape_vec(tensor.raw_dim(), mask).expect("mask matches the tensor")
        });
        let mask = self.layout.padded().then(|| self.mask(&samples));
        let latitude_weights = match &self.options.latitude_weights {
            Some(weights) => Some(weights.batch(&self.layout, &samples)?),
            None => None,
        };
        Ok(Batch {
            index: batch_index,
            epoch,
            inputs: tensor,
            targets,
            mask,
            nan_mask,
            latitude_weights,
            samples,
            ready: (),
            stats,
            pace,
        })
    }

    /// The input and target tensors of `samples`, their chunks decoded straight into them
    /// (see [`TensorPlacement`]), and what decoding cost.
    fn decode_in_place(
        &self,
        samples: &[Sample],
        pending: PendingChunks,
    ) -> Result<(ArrayD<f32>, Option<ArrayD<f32>>, BatchStats)> {
        let requests = pending.requests();
        let plan = GatherPlan::new(&self.layout, samples, &requests)?;
        let chunks = requests.len();
        drop(requests);
        let input_pieces = Some(plan.inputs.as_slice());
        let mut inputs = self.new_tensor(&plan.input_shape, input_pieces);
        let target_pieces = plan.targets.as_ref().map(|(pieces, _)| pieces.as_slice());
        let mut targets =
            (plan.targets.as_ref()).map(|(_, shape)| self.new_tensor(shape, target_pieces));
        let stats = {
            let placement = TensorPlacement::new(
                &plan,
                chunks,
                inputs.spare_capacity_mut(),
                targets.as_mut().map(Vec::spare_capacity_mut),
            );
            for (k, number) in self.layout.static_variables().into_iter().enumerate() {
                let field = self.static_field(number)?;
                placement.put_static(&plan, chunks + k, &field.bytes);
            }
            pending.decode_into(&placement)?
        };
        // SAFETY: every element is written: prefilled by `new_tensor`, or by the pieces,
        // which cover the whole tensor there without overlapping (`GatherPlan`).
        unsafe {
            inputs.set_len(inputs.capacity());
            if let Some(targets) = &mut targets {
                targets.set_len(targets.capacity());
            }
        }
        let derive = |tensor: &mut Vec<f32>, offsets: &[i64]| {
            if let Some(derived) = &self.options.derived {
                derived
                    .plan(&self.layout, samples, offsets)
                    .run_on_host(tensor);
            }
        };
        derive(&mut inputs, self.layout.input_offsets());
        if let Some(targets) = &mut targets {
            derive(targets, self.layout.target_offsets());
        }
        let shaped = |shape: &[usize], data| {
            ArrayD::from_shape_vec(IxDyn(shape), data).expect("shape matches length")
        };
        let targets = plan
            .targets
            .as_ref()
            .zip(targets)
            .map(|((_, shape), data)| shaped(shape, data));
        Ok((shaped(&plan.input_shape, inputs), targets, stats))
    }

    /// An empty vector with room for a tensor of `shape` whose room holds the pad value
    /// where padding or gaps leave elements unwritten, zeros where `pieces` leave some
    /// (derived channels), and nothing where they write every element: the decoding threads
    /// write its pages once, and reused memory is not zeroed first.
    fn new_tensor(&self, shape: &[usize], pieces: Option<&[Piece]>) -> Vec<f32> {
        let len = shape.iter().product();
        let covered: u64 = pieces.into_iter().flatten().map(Piece::len).sum();
        if !self.layout.prefilled() && covered == len as u64 {
            return Vec::with_capacity(len);
        }
        let mut tensor = self.filled_tensor(len);
        // The values stay in the room; only the length goes.
        tensor.clear();
        tensor
    }

    /// A tensor of `len` elements holding the pad value where padding or gaps leave elements
    /// unwritten, zeros otherwise (zeroed pages from the allocator, not written twice).
    fn filled_tensor(&self, len: usize) -> Vec<f32> {
        match self.layout.prefilled() {
            true => vec![self.layout.pad_value(); len],
            false => vec![0f32; len],
        }
    }

    /// The static field of variable number `number`.
    fn static_field(&self, number: usize) -> Result<&StaticField> {
        let fields = self.options.static_fields.as_ref();
        let field = fields
            .and_then(|fields| Some(&fields.fields()[fields.field_of(&self.layout, number)?]));
        field.ok_or_else(|| Error::BadOptions {
            reason: format!(
                "no static field for variable `{}`",
                self.layout.variables()[number].name()
            ),
        })
    }

    fn finish(&self, tensor: &mut ArrayD<f32>, plane: usize, channels: usize) -> Option<Vec<u8>> {
        let values = tensor
            .as_slice_mut()
            .expect("collated tensors are contiguous");
        finish_on_host(values, plane, channels, &self.options)
    }

    /// `[batch, steps x channels, window...]`: for each sample, the windows at each step offset
    /// (along the forecast dimension), every channel. Each (sample, step, variable) fills its own
    /// channels, so they run in parallel.
    fn gather_steps(
        &self,
        samples: &[Sample],
        offsets: &[i64],
        index: &ChunkIndex<'_>,
    ) -> Result<ArrayD<f32>> {
        let plane = self.plane_len();
        let step_len = self.layout.channels().len() * plane;
        let mut shape = vec![samples.len(), self.layout.channels().len() * offsets.len()];
        shape.extend(&self.layout.sample_shape()[1..]);
        let len = samples.len() * offsets.len() * step_len;
        let mut data = self.filled_tensor(len);
        let mut pieces =
            Vec::with_capacity(data.len() / step_len.max(1) * self.layout.variables().len());
        let steps = samples
            .iter()
            .flat_map(|sample| offsets.iter().map(|&o| self.layout.shifted(sample, o)));
        // Each variable's channels, in channel order (derived channels lie between them).
        let mut variables: Vec<usize> = (0..self.layout.variables().len()).collect();
        variables.sort_by_key(|&variable| self.layout.channel_range(variable).start);
        for (slab, step) in data.chunks_mut(step_len.max(1)).zip(steps) {
            let (mut rest, mut at) = (slab, 0);
            for &variable in &variables {
                let range = self.layout.channel_range(variable);
                let (_, tail) = rest.split_at_mut((range.start - at) * plane);
                let (channels_of_variable, tail) = tail.split_at_mut(range.len() * plane);
                pieces.push((step.clone(), variable, channels_of_variable));
                (rest, at) = (tail, range.end);
            }
        }
        pieces
            .into_par_iter()
            .try_for_each(|(step, variable, out)| self.gather(&step, variable, index, out))?;
        if let Some(derived) = &self.options.derived {
            derived
                .plan(&self.layout, samples, offsets)
                .run_on_host(&mut data);
        }
        Ok(ArrayD::from_shape_vec(IxDyn(&shape), data).expect("shape matches length"))
    }

    /// `[batch, window...]`: 1 where every window coordinate lies inside its dimension.
    pub(crate) fn mask(&self, samples: &[Sample]) -> ArrayD<u8> {
        let windows: Vec<(usize, &SampleDim)> = self
            .layout
            .sample_dims()
            .iter()
            .enumerate()
            .filter(|(_, dim)| !dim.iterated)
            .collect();
        let mut shape = vec![samples.len()];
        shape.extend(windows.iter().map(|(_, dim)| dim.size as usize));
        ArrayD::from_shape_fn(IxDyn(&shape), |index| {
            let sample = &samples[index[0]];
            let inside = windows.iter().enumerate().all(|(position, (axis, dim))| {
                sample.origin[*axis] + (index[position + 1] as u64) < dim.length
            });
            inside as u8
        })
    }

    fn index_chunks<'a>(&self, chunks: &'a [DecodedChunk]) -> Result<ChunkIndex<'a>> {
        chunks
            .iter()
            .map(|chunk| {
                let variable = variable_number(&self.layout, &chunk.request)?;
                Ok(((variable, chunk.request.indices.as_slice()), chunk))
            })
            .collect()
    }

    /// Writes the channels of variable number `number` for one sample into `out`.
    fn gather(
        &self,
        sample: &Sample,
        number: usize,
        chunks: &ChunkIndex<'_>,
        out: &mut [f32],
    ) -> Result<()> {
        let variable = &self.layout.variables()[number];
        let strides = destination_strides(&self.layout, number);
        let plane = self.plane_len();
        let field = match self.layout.is_static(number) {
            true => Some(self.static_field(number)?),
            false => None,
        };
        // One part per run of selected channels (the whole region without selections).
        for (region, first) in self.layout.region_parts(number, sample) {
            let out = &mut out[first * plane..];
            if let Some(field) = field {
                if let Some(whole) = static_box(variable, &region) {
                    let copy = BoxCopy {
                        region: &region,
                        chunk: &whole,
                    };
                    let (dtype, cf) = (field.dtype, variable.decoding());
                    copy.run(dtype, cf, &field.bytes, &strides, out);
                }
                continue;
            }
            for window_box in window_boxes(&self.layout, number, &region)? {
                let chunk = chunks
                    .get(&(number, window_box.indices.as_slice()))
                    .ok_or_else(|| missing_chunk(sample, variable, &window_box.indices))?;
                let copy = BoxCopy {
                    region: &region,
                    chunk: &window_box,
                };
                let (dtype, cf) = (chunk.dtype(), variable.decoding());
                copy.run(dtype, cf, &chunk.bytes, &strides, out);
            }
        }
        Ok(())
    }

    /// Elements of one channel of a sample.
    fn plane_len(&self) -> usize {
        self.layout.sample_shape()[1..].iter().product()
    }
}

/// Copies the part of one chunk that falls inside a sample's region.
struct BoxCopy<'a> {
    region: &'a [Range<u64>],
    chunk: &'a WindowBox,
}

impl BoxCopy<'_> {
    /// From the decoded bytes `bytes` of the box's chunk, elements of `dtype`, CF-decoded
    /// with `cf`.
    fn run(
        &self,
        dtype: DType,
        cf: Option<&CfDecoding>,
        bytes: &[u8],
        dst_strides: &[usize],
        out: &mut [f32],
    ) {
        let rank = self.region.len();
        if rank == 0 {
            decode_to_f32(dtype, cf, bytes, out, 1);
            return;
        }
        let (lo, hi) = (&self.chunk.lo, &self.chunk.hi);
        let src_strides: Vec<usize> = self.chunk.strides().iter().map(|&s| s as usize).collect();
        let size = dtype.size();
        let last = rank - 1;
        let run_len = (hi[last] - lo[last]) as usize;
        let mut coord = lo.clone();
        loop {
            let src: usize = (0..rank)
                .map(|a| (coord[a] - self.chunk.start[a]) as usize * src_strides[a])
                .sum();
            let dst: usize = (0..rank)
                .map(|a| (coord[a] - self.region[a].start) as usize * dst_strides[a])
                .sum();
            let run = &bytes[src * size..(src + run_len) * size];
            decode_to_f32(dtype, cf, run, &mut out[dst..], dst_strides[last].max(1));
            // Advance the odometer over every axis but the last.
            let mut axis = last;
            loop {
                if axis == 0 {
                    return;
                }
                axis -= 1;
                coord[axis] += 1;
                if coord[axis] < hi[axis] {
                    break;
                }
                coord[axis] = lo[axis];
            }
        }
    }
}
