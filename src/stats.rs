//! Statistics for training: per channel (a level of a level variable is a channel, as the
//! pipeline stacks it), the mean, standard deviation, min and max of the values and of their
//! tendencies (the difference between consecutive time steps), over a range of time steps (the
//! training split), in one streaming pass: chunks are read through the library's own fetch and
//! decode stages, a few at a time, and summed into Welford accumulators per chunk that are
//! merged (Chan et al.) into the channel's, in f64. Memory holds the chunks in flight and one
//! time step of a chunk column (for the tendencies), whatever the store's size.
//!
//! Missing time steps are left out (see `zarrpipe_pipeline::find_missing_steps`): steps whose
//! field is absent, and tendencies across a gap in the time coordinate. NaN values are counted
//! apart and left out of the moments. The [`StatsReport`] records what it was computed over,
//! and is what `--normalize` reads (per channel).

use std::collections::HashSet;
use std::ops::Range;
use std::sync::Arc;

use futures::{stream, TryStreamExt};
use rayon::prelude::*;
use serde::Serialize;
use zarrpipe_batcher::{MissingSteps, SampleLayout, WindowSpec};
use zarrpipe_codec_gpu::{ChunkDecoder, DecodeExt, DecodedChunk};
use zarrpipe_core::{decoded_values_f64, DType};
use zarrpipe_store::{ChunkRequest, Dataset, FetchExt, Variable};

/// The JSON's format tag.
pub const FORMAT: &str = zarrpipe_collate::STATS_FORMAT;

/// What `zarrpipe stats --json` writes.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct StatsReport {
    /// The format tag, [`FORMAT`].
    pub format: &'static str,
    /// What the statistics were computed over.
    pub computed_over: ComputedOver,
    /// Per channel, in the pipeline's channel order.
    pub channels: Vec<ChannelStats>,
    /// Per variable, its channels pooled (what `--normalize` read before channels existed).
    pub variables: Vec<VariableStats>,
}

/// What the statistics were computed over.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct ComputedOver {
    /// The dataset's URL or path.
    pub url: String,
    /// The variables, in channel order.
    pub variables: Vec<String>,
    /// The time dimension the range and the tendencies run along (`None`: no variable has it).
    pub dim: Option<String>,
    /// The range as given (dates or coordinate values), `None` for an open end.
    pub start: Option<String>,
    /// The range's end as given, `None` for an open end.
    pub end: Option<String>,
    /// The steps `[first, end)` along `dim` the statistics cover.
    pub steps: Option<[u64; 2]>,
    /// Missing steps inside the range, left out (dates).
    pub missing_left_out: Vec<String>,
    /// What was not checked for missing steps, and why.
    pub unchecked: Vec<String>,
    /// `decoded`: the values xarray gives (CF packing and missing values decoded);
    /// `stored`: the stored values (`--raw-values`).
    pub values: &'static str,
    /// When the statistics were computed (UTC, RFC 3339).
    pub created: String,
    /// The zarrpipe version that computed them.
    pub zarrpipe: &'static str,
}

/// Statistics of one channel. `count` counts its numbers (NaN left out, counted in
/// `nan_count`); `mean` and the others are `None` without any.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct ChannelStats {
    /// The pipeline's label: `t2m`, `z[level=3]`.
    pub channel: String,
    /// The channel's variable.
    pub variable: String,
    /// Numbers counted (NaN left out).
    pub count: u64,
    /// NaNs counted.
    pub nan_count: u64,
    /// Mean of the numbers.
    pub mean: Option<f64>,
    /// Population standard deviation.
    pub std: Option<f64>,
    /// Smallest number.
    pub min: Option<f64>,
    /// Largest number.
    pub max: Option<f64>,
    /// Of `value[t + 1] - value[t]` over consecutive steps (no gap between them, neither
    /// absent, neither NaN); `None` for variables without the time dimension.
    pub tendency: Option<Summary>,
}

/// Moments of a set of numbers.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Summary {
    /// Numbers counted.
    pub count: u64,
    /// Their mean.
    pub mean: Option<f64>,
    /// Their population standard deviation.
    pub std: Option<f64>,
    /// The smallest.
    pub min: Option<f64>,
    /// The largest.
    pub max: Option<f64>,
}

/// Statistics of one variable, its channels pooled. `min`, `max` and `mean` are over the
/// non-NaN values and are `None` when there are none.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct VariableStats {
    /// The variable's name.
    pub variable: String,
    /// Its element type.
    pub dtype: DType,
    /// Its shape.
    pub shape: Vec<u64>,
    /// Elements covered, NaNs included.
    pub count: u64,
    /// NaNs among them.
    pub nan_count: u64,
    /// Smallest non-NaN value.
    pub min: Option<f64>,
    /// Largest non-NaN value.
    pub max: Option<f64>,
    /// Mean of the non-NaN values.
    pub mean: Option<f64>,
    /// Population standard deviation of the non-NaN values.
    pub std: Option<f64>,
}

/// What to compute statistics over.
#[derive(Clone, Debug)]
pub struct StatsOptions {
    /// Variables, in channel order (empty: every data variable, sorted by name).
    pub variables: Vec<String>,
    /// The dimension the range and the tendencies run along (`None`: the dataset's time
    /// dimension, [`Dataset::time_dim`]).
    pub dim: Option<String>,
    /// Steps along `dim` (`None`: all), and the range as given, for the record.
    pub steps: Option<Range<u64>>,
    /// The range's start as given.
    pub start: Option<String>,
    /// The range's end as given.
    pub end: Option<String>,
    /// Chunks fetched and decoded at once.
    pub concurrency: usize,
}

impl Default for StatsOptions {
    fn default() -> Self {
        Self {
            variables: Vec::new(),
            dim: None,
            steps: None,
            start: None,
            end: None,
            concurrency: 2 * rayon::current_num_threads(),
        }
    }
}

/// Errors of statistics: reading, laying out channels, finding missing steps.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum StatsError {
    /// Reading or decoding a variable's chunks failed.
    #[error("statistics of `{variable}`")]
    Read {
        /// The variable's name.
        variable: String,
        /// The fetch or decode error.
        #[source]
        source: zarrpipe_codec_gpu::Error,
    },
    /// Laying out a variable's channels failed.
    #[error("statistics: laying out the channels")]
    Layout(#[from] zarrpipe_batcher::Error),
    /// Reading the coordinates that name the channels failed.
    #[error("statistics: naming the channels by their coordinates")]
    Labels(#[source] zarrpipe_pipeline::Error),
    /// Finding the missing steps failed.
    #[error("statistics: finding missing steps")]
    Missing(#[from] zarrpipe_pipeline::Error),
    /// `--dim` names a dimension none of the variables has.
    #[error("statistics: no variable has dimension `{dim}` (their dimensions: {available})")]
    NoSuchDim {
        /// The dimension asked for.
        dim: String,
        /// The variables' dimensions.
        available: String,
    },
    /// A step range that is empty or reaches past the dimension.
    #[error("statistics: steps {start}..{end} of `{dim}`, which has {length}")]
    BadSteps {
        /// The time dimension.
        dim: String,
        /// The range's first step.
        start: u64,
        /// The range's end (exclusive).
        end: u64,
        /// The dimension's length.
        length: u64,
    },
}

/// The dimension statistics and their step range run along: `dim` when given, else the
/// dataset's time dimension ([`Dataset::time_dim`]), else `time`.
pub fn stats_dim(dataset: &Dataset, dim: Option<&str>) -> String {
    match (dim, dataset.time_dim()) {
        (Some(dim), _) => dim.to_string(),
        (None, Some(time)) => time.name.clone(),
        (None, None) => "time".to_string(),
    }
}

/// Per-channel statistics of `options.variables` over `options.steps`, in one pass.
pub async fn channel_stats(
    dataset: &Dataset,
    decoder: Arc<dyn ChunkDecoder>,
    options: &StatsOptions,
) -> Result<StatsReport, StatsError> {
    let names = match options.variables.is_empty() {
        true => dataset.data_variable_names(),
        false => options.variables.clone(),
    };
    // Each variable laid out as a pipeline of its own lays it out by default: its channels are
    // its dims but time and the last two (so variables of different shapes need not share
    // a layout).
    let dim = &stats_dim(dataset, options.dim.as_deref());
    let has = |name: &String| {
        dataset
            .variable(name)
            .is_ok_and(|variable| variable.axis(dim).is_some())
    };
    if options.dim.is_some() && !names.iter().any(has) {
        let mut available: Vec<String> = names
            .iter()
            .filter_map(|name| dataset.variable(name).ok())
            .flat_map(|variable| variable.dims().to_vec())
            .collect();
        available.sort();
        available.dedup();
        return Err(StatsError::NoSuchDim {
            dim: dim.clone(),
            available: available.join(", "),
        });
    }
    // `dim` is iterated, whatever its name, so that its steps are never stacked as channels.
    let layouts: Vec<SampleLayout> = names
        .iter()
        .map(|name| {
            let spec = WindowSpec {
                iterate: Some(if has(name) {
                    vec![dim.clone()]
                } else {
                    Vec::new()
                }),
                ..WindowSpec::new()
            };
            SampleLayout::new(dataset, &[name], &spec)
        })
        .collect::<Result<_, _>>()?;
    let mut layouts = layouts;
    for layout in &mut layouts {
        zarrpipe_pipeline::label_channels(dataset, layout)
            .await
            .map_err(StatsError::Labels)?;
    }
    let has_dim = layouts.iter().any(|l| l.variables()[0].axis(dim).is_some());
    let missing = match has_dim {
        true => Some(zarrpipe_pipeline::find_missing_steps(dataset, &names, dim).await?),
        false => None,
    };
    let length = missing.as_ref().map_or(0, |m| m.length);
    let steps = options.steps.clone().unwrap_or(0..length);
    if has_dim && (steps.start >= steps.end || steps.end > length) {
        return Err(StatsError::BadSteps {
            dim: dim.clone(),
            start: steps.start,
            end: steps.end,
            length,
        });
    }
    let mut channels = Vec::new();
    let mut variables = Vec::new();
    for layout in &layouts {
        let (number, variable) = (0, &layout.variables()[0]);
        let own = match (&missing, variable.axis(dim)) {
            (Some(_), Some(_)) => {
                let name = [variable.name()];
                Some(zarrpipe_pipeline::find_missing_steps(dataset, &name, dim).await?)
            }
            _ => None,
        };
        let pass = VariablePass::new(layout, number, dim, &steps, own.as_ref());
        let (values, tendencies) = pass
            .run(decoder.clone(), options.concurrency)
            .await
            .map_err(|source| StatsError::Read {
                variable: variable.name().into(),
                source,
            })?;
        let labels = layout.channels()[layout.channel_range(number)].iter();
        for ((channel, moments), tendency) in labels.zip(&values).zip(&tendencies) {
            channels.push(ChannelStats {
                channel: channel.label(),
                variable: variable.name().into(),
                count: moments.count,
                nan_count: moments.nan,
                mean: moments.mean(),
                std: moments.std(),
                min: moments.min(),
                max: moments.max(),
                tendency: pass.time_axis.map(|_| tendency.summary()),
            });
        }
        let pooled = values.iter().fold(Moments::default(), |mut all, m| {
            all.merge(m);
            all
        });
        variables.push(VariableStats {
            variable: variable.name().into(),
            dtype: variable.dtype(),
            shape: variable.shape().to_vec(),
            count: pooled.count + pooled.nan,
            nan_count: pooled.nan,
            min: pooled.min(),
            max: pooled.max(),
            mean: pooled.mean(),
            std: pooled.std(),
        });
    }
    let (missing_left_out, unchecked) = match &missing {
        Some(missing) => (in_range(missing, &steps), missing.unchecked.clone()),
        None => (Vec::new(), Vec::new()),
    };
    Ok(StatsReport {
        format: FORMAT,
        computed_over: ComputedOver {
            url: dataset.url().into(),
            variables: names,
            dim: has_dim.then(|| dim.clone()),
            start: options.start.clone(),
            end: options.end.clone(),
            steps: has_dim.then_some([steps.start, steps.end]),
            missing_left_out,
            unchecked,
            values: match dataset.mask_and_scale() {
                true => "decoded",
                false => "stored",
            },
            created: humantime::format_rfc3339_seconds(std::time::SystemTime::now()).to_string(),
            zarrpipe: env!("CARGO_PKG_VERSION"),
        },
        channels,
        variables,
    })
}

/// Statistics of one whole variable, its channels pooled: every chunk, missing chunks read as
/// their fill value (as zarr-python reads them), edge chunks clipped to the array.
///
/// ```no_run
/// # async fn demo() -> Result<(), Box<dyn std::error::Error>> {
/// use std::sync::Arc;
/// let dataset = zarrpipe::store::Dataset::open("data/sample.zarr").await?;
/// let t2m = dataset.variable("t2m")?;
/// let decoder = Arc::new(zarrpipe::codec::CpuDecoder::new());
/// let stats = zarrpipe::stats::variable_stats(t2m, decoder, 16).await?;
/// println!("mean {:?}, std {:?}", stats.mean, stats.std);
/// # Ok(()) }
/// ```
pub async fn variable_stats(
    variable: &Arc<Variable>,
    decoder: Arc<dyn ChunkDecoder>,
    concurrency: usize,
) -> Result<VariableStats, zarrpipe_codec_gpu::Error> {
    let pass = VariablePass {
        variable: variable.clone(),
        time_axis: None,
        steps: 0..1,
        absent: HashSet::new(),
        gap_after: HashSet::new(),
        channel_strides: vec![0; variable.shape().len()],
        channels: 1,
    };
    let (values, _) = pass.run(decoder, concurrency).await?;
    let all = values[0];
    Ok(VariableStats {
        variable: variable.name().into(),
        dtype: variable.dtype(),
        shape: variable.shape().to_vec(),
        count: all.count + all.nan,
        nan_count: all.nan,
        min: all.min(),
        max: all.max(),
        mean: all.mean(),
        std: all.std(),
    })
}

/// The missing dates inside `steps`: absent steps in it, and gaps between two of its steps.
fn in_range(missing: &MissingSteps, steps: &Range<u64>) -> Vec<String> {
    let mut dates: Vec<String> = Vec::new();
    for gap in &missing.gaps {
        if steps.start <= gap.after && gap.after + 1 < steps.end {
            dates.extend(gap.dates.iter().cloned());
        }
    }
    let absent = missing.absent.iter().filter(|s| steps.contains(&s.index));
    dates.extend(absent.map(|s| s.date.clone()));
    dates.sort();
    dates
}

/// Welford's running moments, merged with Chan et al.'s formula.
#[derive(Clone, Copy, Debug, Default)]
pub struct Moments {
    count: u64,
    nan: u64,
    mean: f64,
    m2: f64,
    min: f64,
    max: f64,
}

impl Moments {
    /// Counts a value: NaN apart, a number into the moments.
    pub fn add(&mut self, value: f64) {
        if value.is_nan() {
            self.nan += 1;
            return;
        }
        self.count += 1;
        if self.count == 1 {
            (self.min, self.max) = (value, value);
        } else {
            self.min = self.min.min(value);
            self.max = self.max.max(value);
        }
        let delta = value - self.mean;
        self.mean += delta / self.count as f64;
        self.m2 += delta * (value - self.mean);
    }

    /// Adds the values `other` counted.
    pub fn merge(&mut self, other: &Moments) {
        let nan = self.nan + other.nan;
        if other.count == 0 {
            self.nan = nan;
            return;
        }
        if self.count == 0 {
            *self = *other;
            self.nan = nan;
            return;
        }
        let (a, b) = (self.count as f64, other.count as f64);
        let n = a + b;
        let delta = other.mean - self.mean;
        self.mean += delta * b / n;
        self.m2 += other.m2 + delta * delta * a * b / n;
        self.min = self.min.min(other.min);
        self.max = self.max.max(other.max);
        self.count += other.count;
        self.nan = nan;
    }

    fn some(&self, value: f64) -> Option<f64> {
        (self.count > 0).then_some(value)
    }

    /// Mean of the numbers; `None` without any.
    pub fn mean(&self) -> Option<f64> {
        self.some(self.mean)
    }

    /// Population standard deviation.
    pub fn std(&self) -> Option<f64> {
        self.some((self.m2 / self.count.max(1) as f64).max(0.0).sqrt())
    }

    /// Smallest number; `None` without any.
    pub fn min(&self) -> Option<f64> {
        self.some(self.min)
    }

    /// Largest number; `None` without any.
    pub fn max(&self) -> Option<f64> {
        self.some(self.max)
    }

    fn summary(&self) -> Summary {
        Summary {
            count: self.count,
            mean: self.mean(),
            std: self.std(),
            min: self.min(),
            max: self.max(),
        }
    }
}

/// One variable's pass: its chunks column by column (every chunk position but the time axis),
/// each column's time chunks in order, so a tendency needs only the previous step.
struct VariablePass {
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
    fn new(
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

    /// Per channel of the variable: the values' moments and the tendencies'.
    async fn run(
        &self,
        decoder: Arc<dyn ChunkDecoder>,
        concurrency: usize,
    ) -> zarrpipe_codec_gpu::Result<(Vec<Moments>, Vec<Moments>)> {
        let mut values = vec![Moments::default(); self.channels];
        let mut tendencies = vec![Moments::default(); self.channels];
        let mut chunks = Box::pin(
            stream::iter(self.requests())
                .fetch(concurrency)
                .decode(decoder, concurrency),
        );
        // The last step of the column so far: its number and values.
        let mut previous: Option<(Vec<u64>, u64, Vec<f64>)> = None;
        while let Some(chunk) = chunks.try_next().await? {
            self.add_chunk(&chunk, &mut values, &mut tendencies, &mut previous)?;
        }
        Ok((values, tendencies))
    }

    fn add_chunk(
        &self,
        chunk: &DecodedChunk,
        values: &mut [Moments],
        tendencies: &mut [Moments],
        previous: &mut Option<(Vec<u64>, u64, Vec<f64>)>,
    ) -> zarrpipe_store::Result<()> {
        let variable = &self.variable;
        let (start, shape) = variable.chunk_region(&chunk.request.indices)?;
        let rank = shape.len();
        let inside: Vec<u64> = (0..rank)
            .map(|a| shape[a].min(variable.shape()[a].saturating_sub(start[a])))
            .collect();
        let decoded = decoded_values_f64(chunk.dtype(), variable.decoding(), &chunk.bytes);
        if rank == 0 {
            decoded.iter().for_each(|&v| values[0].add(v));
            return Ok(());
        }
        // The column: the chunk's position on every axis but time.
        let column: Vec<u64> = (0..rank)
            .map(|a| match Some(a) == self.time_axis {
                true => 0,
                false => chunk.request.indices[a],
            })
            .collect();
        if previous.as_ref().is_some_and(|(c, _, _)| *c != column) {
            *previous = None;
        }
        // Elements of one step: C order over every axis but time, inside the array.
        let others: Vec<usize> = (0..rank).filter(|&a| Some(a) != self.time_axis).collect();
        let per_step: u64 = others.iter().map(|&a| inside[a]).product();
        // Where each element of a step lies in the chunk, and its channel (on every core: as
        // slow as counting the values on one).
        let (offsets, channel_of): (Vec<usize>, Vec<usize>) = (0..per_step)
            .into_par_iter()
            .map_init(
                || vec![0u64; rank],
                |local, flat| {
                    let mut rest = flat;
                    for &a in others.iter().rev() {
                        local[a] = rest % inside[a];
                        rest /= inside[a];
                    }
                    let offset = (0..rank).fold(0u64, |o, a| o * shape[a] + local[a]);
                    let channel = (0..rank)
                        .map(|a| (start[a] + local[a]) as usize * self.channel_strides[a])
                        .sum::<usize>();
                    (offset as usize, channel)
                },
            )
            .unzip();
        let mut partial = vec![Moments::default(); self.channels];
        let mut partial_tendency = vec![Moments::default(); self.channels];
        let (time_stride, times) = match self.time_axis {
            Some(axis) => {
                let stride: u64 = shape[axis + 1..].iter().product();
                let first = self.steps.start.max(start[axis]);
                let end = self.steps.end.min(start[axis] + inside[axis]);
                (stride as usize, first..end.max(first))
            }
            None => (0, 0..1),
        };
        let time_start = self.time_axis.map_or(0, |axis| start[axis]);
        for step in times {
            if self.absent.contains(&step) {
                *previous = None;
                continue;
            }
            let base = (step - time_start) as usize * time_stride;
            let slice: Vec<f64> = offsets.par_iter().map(|&o| decoded[base + o]).collect();
            let follows = previous
                .as_ref()
                .is_some_and(|(_, last, _)| *last + 1 == step && !self.gap_after.contains(last));
            let before = match (follows, previous.as_ref()) {
                (true, Some((_, _, before))) => Some(before.as_slice()),
                _ => None,
            };
            let step_moments = StepMoments {
                slice: &slice,
                before,
                channel_of: &channel_of,
                channels: self.channels,
            };
            step_moments.add_to(&mut partial, &mut partial_tendency);
            if self.time_axis.is_some() {
                *previous = Some((column.clone(), step, slice));
            }
        }
        for (all, part) in values.iter_mut().zip(&partial) {
            all.merge(part);
        }
        for (all, part) in tendencies.iter_mut().zip(&partial_tendency) {
            all.merge(part);
        }
        Ok(())
    }
}

/// Elements of one step a core counts at a time. Blocks are merged in their order, so the
/// moments do not depend on the number of cores.
const STEP_BLOCK: usize = 1 << 16;

/// One step of a chunk column: its values, the step before (for the tendencies) and each
/// value's channel. Counted on every core, a block of elements each (Welford's update per
/// value is the slow part: about 90 MB/s on one core).
struct StepMoments<'a> {
    slice: &'a [f64],
    before: Option<&'a [f64]>,
    channel_of: &'a [usize],
    channels: usize,
}

impl StepMoments<'_> {
    fn add_to(&self, values: &mut [Moments], tendencies: &mut [Moments]) {
        let len = self.slice.len();
        let blocks: Vec<(Vec<Moments>, Vec<Moments>)> = (0..len.div_ceil(STEP_BLOCK))
            .into_par_iter()
            .map(|block| self.block(block * STEP_BLOCK..((block + 1) * STEP_BLOCK).min(len)))
            .collect();
        for (block_values, block_tendencies) in &blocks {
            for (all, part) in values.iter_mut().zip(block_values) {
                all.merge(part);
            }
            for (all, part) in tendencies.iter_mut().zip(block_tendencies) {
                all.merge(part);
            }
        }
    }

    fn block(&self, elements: Range<usize>) -> (Vec<Moments>, Vec<Moments>) {
        let mut values = vec![Moments::default(); self.channels];
        let mut tendencies = vec![Moments::default(); self.channels];
        for index in elements {
            let (value, channel) = (self.slice[index], self.channel_of[index]);
            values[channel].add(value);
            if let Some(before) = self.before {
                let difference = value - before[index];
                if !difference.is_nan() {
                    tendencies[channel].add(difference);
                }
            }
        }
        (values, tendencies)
    }
}

#[cfg(test)]
mod tests {
    use super::{Moments, StepMoments, STEP_BLOCK};

    #[test]
    fn merged_moments_equal_one_pass() {
        let values: Vec<f64> = (0..1000)
            .map(|i| ((i * 37) % 101) as f64 * 0.5 + 1e6)
            .collect();
        let mut whole = Moments::default();
        values.iter().for_each(|&v| whole.add(v));
        let mut merged = Moments::default();
        for part in values.chunks(77) {
            let mut moments = Moments::default();
            part.iter().for_each(|&v| moments.add(v));
            merged.merge(&moments);
        }
        let mean = values.iter().sum::<f64>() / 1000.0;
        let var = values.iter().map(|v| (v - mean).powi(2)).sum::<f64>() / 1000.0;
        for m in [whole, merged] {
            assert!((m.mean().unwrap() - mean).abs() < 1e-9);
            assert!((m.std().unwrap() - var.sqrt()).abs() < 1e-9);
            assert_eq!(m.min(), Some(1e6));
        }
        let mut nan = Moments::default();
        nan.add(f64::NAN);
        merged.merge(&nan);
        assert_eq!(merged.nan, 1);
        assert_eq!(Moments::default().mean(), None);
    }

    #[test]
    fn a_step_counted_in_blocks_equals_one_pass() {
        // Three channels interleaved over several blocks, NaNs among the values and the step
        // before, as one core would count them.
        let len = 3 * STEP_BLOCK + 5;
        let value = |i: usize, shift: f64| match i % 997 {
            0 => f64::NAN,
            _ => ((i * 37) % 1013) as f64 * 0.25 + 280.0 + shift,
        };
        let slice: Vec<f64> = (0..len).map(|i| value(i, 0.0)).collect();
        let before: Vec<f64> = (0..len).map(|i| value(i + 1, -1.5)).collect();
        let channel_of: Vec<usize> = (0..len).map(|i| i % 3).collect();
        let mut one_pass = (vec![Moments::default(); 3], vec![Moments::default(); 3]);
        for i in 0..len {
            one_pass.0[channel_of[i]].add(slice[i]);
            let difference = slice[i] - before[i];
            if !difference.is_nan() {
                one_pass.1[channel_of[i]].add(difference);
            }
        }
        let mut blocks = (vec![Moments::default(); 3], vec![Moments::default(); 3]);
        let step = StepMoments {
            slice: &slice,
            before: Some(&before),
            channel_of: &channel_of,
            channels: 3,
        };
        step.add_to(&mut blocks.0, &mut blocks.1);
        let pairs = one_pass.0.iter().zip(&blocks.0);
        for (a, b) in pairs.chain(one_pass.1.iter().zip(&blocks.1)) {
            assert_eq!(
                (a.count, a.nan, a.min(), a.max()),
                (b.count, b.nan, b.min(), b.max())
            );
            assert!((a.mean().unwrap() - b.mean().unwrap()).abs() < 1e-9);
            assert!((a.std().unwrap() - b.std().unwrap()).abs() < 1e-9);
        }
    }
}
