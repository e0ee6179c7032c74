//! One variable's pass over its chunks: read, decoded, and counted on the rayon pool a few
//! chunks at a time, merged in the pass's order.

use std::collections::HashSet;
use std::ops::Range;
use std::sync::Arc;

use futures::channel::oneshot;
use futures::{stream, Future, StreamExt, TryStreamExt};
use zarrpipe_batcher::{MissingSteps, SampleLayout};
use zarrpipe_codec_gpu::{ChunkDecoder, DecodeExt, DecodedChunk};
use zarrpipe_core::decoded_values_f64;
use zarrpipe_store::{ChunkRequest, FetchExt, Variable};

use super::chunk_layout::ChunkLayout;
use super::moments::Moments;
use super::step_moments::{StepMoments, StepValues};

/// One variable's pass: its chunks column by column (every chunk position but the time axis),
/// each column's time chunks in order, so a tendency needs only the previous step.
pub(super) struct VariablePass {
    variable: Arc<Variable>,
    time_axis: Option<usize>,
    /// Steps along the time axis covered.
    steps: Range<u64>,
    /// Steps left out (absent), and stored steps followed by a gap.
    absent: HashSet<u64>,
    gap_after: HashSet<u64>,
    /// Per axis: the channel stride of a stacked axis (0 for the others).
    channel_strides: Vec<usize>,
    channels: usize,
}

impl VariablePass {
    /// A pass over every chunk of `variable`, its channels pooled into one, without
    /// tendencies.
    pub(super) fn whole(variable: &Arc<Variable>) -> Self {
        Self {
            variable: variable.clone(),
            time_axis: None,
            steps: 0..1,
            absent: HashSet::new(),
            gap_after: HashSet::new(),
            channel_strides: vec![0; variable.shape().len()],
            channels: 1,
        }
    }

    /// Whether the pass runs along a time axis (and counts tendencies).
    pub(super) fn has_time_axis(&self) -> bool {
        self.time_axis.is_some()
    }

    pub(super) fn new(
        layout: &SampleLayout,
        number: usize,
        dim: &str,
        steps: &Range<u64>,
        missing: Option<&MissingSteps>,
    ) -> Self {
        let variable = layout.variables()[number].clone();
        let time_axis = variable.axis(dim);
        let mut channel_strides = vec![0; variable.shape().len()];
        let mut stride = 1;
        for (axis, name) in variable.dims().iter().enumerate().rev() {
            if layout.sample_axis(name).is_none() {
                channel_strides[axis] = stride;
                stride *= variable.shape()[axis] as usize;
            }
        }
        let (absent, gap_after) = match missing {
            Some(m) => (
                m.absent.iter().map(|s| s.index).collect(),
                m.gaps.iter().map(|g| g.after).collect(),
            ),
            None => Default::default(),
        };
        let steps = match time_axis {
            Some(_) => steps.clone(),
            None => 0..1,
        };
        Self {
            variable,
            time_axis,
            steps,
            absent,
            gap_after,
            channel_strides,
            channels: layout.channel_range(number).len(),
        }
    }

    /// The chunks of the pass, in its order: column by column, time chunks in order.
    fn requests(&self) -> impl Iterator<Item = ChunkRequest> + Send + 'static {
        let grid = self.variable.chunk_grid_shape().to_vec();
        let (axis, times) = match self.time_axis {
            Some(axis) => {
                let chunk = self.variable.chunk_shape()[axis].max(1);
                let first = self.steps.start / chunk;
                let end = (self.steps.end - 1) / chunk + 1;
                (Some(axis), first..end)
            }
            None => (None, 0..1),
        };
        let others: Vec<usize> = (0..grid.len()).filter(|&a| Some(a) != axis).collect();
        let columns: u64 = others.iter().map(|&a| grid[a]).product();
        let variable = self.variable.clone();
        (0..columns).flat_map(move |column| {
            let mut indices = vec![0u64; grid.len()];
            let mut rest = column;
            for &a in others.iter().rev() {
                indices[a] = rest % grid[a];
                rest /= grid[a];
            }
            let variable = variable.clone();
            times.clone().map(move |time| {
                let mut indices = indices.clone();
                if let Some(axis) = axis {
                    indices[axis] = time;
                }
                ChunkRequest::new(variable.clone(), indices)
            })
        })
    }

    /// Per channel of the variable: the values' moments and the tendencies'. Chunks are
    /// counted on the rayon pool, several at once, and merged in the pass's order, so the
    /// result does not depend on the number of cores.
    pub(super) async fn run(
        &self,
        decoder: Arc<dyn ChunkDecoder>,
        concurrency: usize,
    ) -> zarrpipe_codec_gpu::Result<(Vec<Moments>, Vec<Moments>)> {
        let mut values = vec![Moments::default(); self.channels];
        let mut tendencies = vec![Moments::default(); self.channels];
        let mut order = PassOrder::default();
        let mut counted = Box::pin(
            stream::iter(self.requests())
                .fetch(concurrency)
                .decode(decoder, concurrency)
                .map(|chunk| chunk.and_then(|chunk| self.job(chunk, &mut order)))
                .map_ok(ChunkJob::spawn)
                .try_buffered(concurrency.max(1)),
        );
        while let Some((chunk_values, chunk_tendencies)) = counted.try_next().await? {
            Moments::merge_each(&mut values, &chunk_values);
            Moments::merge_each(&mut tendencies, &chunk_tendencies);
        }
        Ok((values, tendencies))
    }

    /// What counting `chunk` takes: its layout, its steps in the range, and the step before
    /// its first. Called on the chunks in the pass's order, which `order` follows.
    fn job(
        &self,
        chunk: DecodedChunk,
        order: &mut PassOrder,
    ) -> zarrpipe_codec_gpu::Result<ChunkJob> {
        let variable = &self.variable;
        let (start, shape) = variable.chunk_region(&chunk.request.indices)?;
        let rank = shape.len();
        let inside: Vec<u64> = (0..rank)
            .map(|a| shape[a].min(variable.shape()[a].saturating_sub(start[a])))
            .collect();
        // Checked here so that counting, on the rayon pool, never indexes past the bytes.
        let size = chunk.dtype().size();
        let expected = shape.iter().product::<u64>() as usize * size;
        if chunk.bytes.len() < expected {
            return Err(zarrpipe_codec_gpu::Error::DecodedSize {
                variable: variable.name().into(),
                key: chunk.request.key(),
                expected,
                actual: chunk.bytes.len(),
            });
        }
        // The column: the chunk's position on every axis but time.
        let column: Vec<u64> = (0..rank)
            .map(|a| match Some(a) == self.time_axis {
                true => 0,
                false => chunk.request.indices[a],
            })
            .collect();
        if order
            .last
            .as_ref()
            .is_some_and(|last| last.column != column)
        {
            order.last = None;
        }
        // The chunks of a column share their layout: it is worked out once per column.
        let key = ChunkLayout::key(self.time_axis, &start, &shape, &inside);
        let layout = match &order.layout {
            Some(layout) if layout.key == key => layout.clone(),
            _ => {
                let strides = &self.channel_strides;
                let layout =
                    ChunkLayout::new(self.time_axis, strides, size, &start, &shape, &inside);
                let layout = Arc::new(layout);
                order.layout = Some(layout.clone());
                layout
            }
        };
        let chunk = Arc::new(chunk);
        let (time_start, times) = match self.time_axis {
            Some(axis) => {
                let first = self.steps.start.max(start[axis]);
                let end = self.steps.end.min(start[axis] + inside[axis]);
                (start[axis], first..end.max(first))
            }
            None => (0, 0..1),
        };
        let mut head = order.last.clone();
        let mut steps = Vec::new();
        for step in times {
            if self.absent.contains(&step) {
                order.last = None;
                continue;
            }
            let follows = order
                .last
                .as_ref()
                .is_some_and(|last| last.step + 1 == step && !self.gap_after.contains(&last.step));
            let at = (step - time_start) as usize;
            steps.push((at, follows));
            if self.time_axis.is_some() {
                order.last = Some(LastStep {
                    column: column.clone(),
                    step,
                    source: StepSource {
                        chunk: chunk.clone(),
                        layout: layout.clone(),
                        at,
                    },
                });
            }
        }
        if !steps.first().is_some_and(|&(_, follows)| follows) {
            head = None;
        }
        Ok(ChunkJob {
            chunk,
            layout,
            steps,
            head: head.map(|last| last.source),
            channels: self.channels,
        })
    }
}

/// Where the pass stands between chunks: the last step counted in the current column (the
/// step before the next one, for its tendencies) and the last chunk's layout.
#[derive(Default)]
struct PassOrder {
    last: Option<LastStep>,
    layout: Option<Arc<ChunkLayout>>,
}

#[derive(Clone)]
struct LastStep {
    column: Vec<u64>,
    step: u64,
    source: StepSource,
}

/// A step of a decoded chunk: its chunk, the chunk's layout and the step's place in it.
#[derive(Clone)]
struct StepSource {
    chunk: Arc<DecodedChunk>,
    layout: Arc<ChunkLayout>,
    at: usize,
}

impl StepSource {
    fn as_ref(&self) -> StepRef<'_> {
        StepRef {
            chunk: &self.chunk,
            layout: &self.layout,
            at: self.at,
        }
    }
}

/// A step of a decoded chunk, decoded a range at a time straight from the chunk's bytes (a
/// block stays in the core's cache; a whole step would not).
#[derive(Clone, Copy)]
struct StepRef<'a> {
    chunk: &'a DecodedChunk,
    layout: &'a ChunkLayout,
    at: usize,
}

impl StepValues for StepRef<'_> {
    fn values(&self, elements: Range<usize>) -> Vec<f64> {
        let (chunk, layout) = (self.chunk, self.layout);
        let (dtype, decoding) = (chunk.dtype(), chunk.request.variable.decoding());
        let decode = |(first, len): (usize, usize)| {
            let bytes = &chunk.bytes[first * layout.size..(first + len) * layout.size];
            decoded_values_f64(dtype, decoding, bytes)
        };
        let mut pieces = layout.pieces(self.at, elements.clone());
        match pieces.next() {
            Some(piece) if piece.1 == elements.len() => decode(piece),
            first => {
                let mut values = Vec::with_capacity(elements.len());
                first
                    .into_iter()
                    .chain(pieces)
                    .for_each(|piece| values.extend(decode(piece)));
                values
            }
        }
    }
}

/// Per channel, the moments of a chunk's values and of its tendencies.
type ChunkCounts = (Vec<Moments>, Vec<Moments>);

/// Counting one chunk: its steps in the range, each with whether it follows the step before
/// (the previous one of the chunk, or `head` for the first).
struct ChunkJob {
    chunk: Arc<DecodedChunk>,
    layout: Arc<ChunkLayout>,
    steps: Vec<(usize, bool)>,
    head: Option<StepSource>,
    channels: usize,
}

impl ChunkJob {
    /// Counts the chunk on the rayon pool (beside the chunks being decoded).
    fn spawn(self) -> impl Future<Output = zarrpipe_codec_gpu::Result<ChunkCounts>> {
        let (sender, receiver) = oneshot::channel();
        let request = self.chunk.request.clone();
        rayon::spawn(move || {
            // The receiver is gone when the pass was dropped: nothing to deliver then.
            let _ = sender.send(self.count());
        });
        async move {
            receiver
                .await
                .map_err(|_| zarrpipe_codec_gpu::Error::WorkerGone {
                    variable: request.variable.name().into(),
                    key: request.key(),
                })
        }
    }

    fn count(self) -> ChunkCounts {
        let mut values = vec![Moments::default(); self.channels];
        let mut tendencies = vec![Moments::default(); self.channels];
        let (chunk, layout) = (self.chunk.as_ref(), self.layout.as_ref());
        for (index, &(at, follows)) in self.steps.iter().enumerate() {
            // The step before is this chunk's previous one, or, for the first, `head`.
            let before = match (follows, index) {
                (false, _) => None,
                (true, 0) => self.head.as_ref().map(StepSource::as_ref),
                (true, _) => Some(StepRef {
                    chunk,
                    layout,
                    at: at - 1,
                }),
            };
            let step_moments = StepMoments {
                len: layout.per_step,
                values: &StepRef { chunk, layout, at },
                before: before.as_ref(),
                run: layout.run,
                run_channels: &layout.run_channels,
                channels: self.channels,
            };
            step_moments.add_to(&mut values, &mut tendencies);
        }
        (values, tendencies)
    }
}
