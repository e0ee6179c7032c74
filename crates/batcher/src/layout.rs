use std::collections::{BTreeMap, BTreeSet, HashSet};
use std::ops::Range;
use std::sync::Arc;

use zarrpipe_store::{ChunkRequest, Dataset, Variable};

use crate::missing::{check_fill, KeptUnits};
use crate::sampler::Fnv1a;
use crate::{Derived, Edge, Error, Forecast, Missing, MissingSteps, Result, Window, WindowSpec};

/// How samples are cut from a set of variables: the sample dimensions (iterated, then
/// windowed), the channels, and the shape of one sample, `[channels, window sizes...]`.
///
/// Channel order: variables in the order given; within a variable, its non-sample dimensions
/// (such as `level`) in C order. So `t2m, z(level=13)` gives `t2m, z[level=0], ..., z[level=12]`.
///
/// Two kinds of channels are not read batch by batch. *Static* variables, those without any
/// of the iterated dimensions (a land-sea mask `lsm(latitude, longitude)` when time is
/// iterated), give every sample the same field cut to its window: they are left out of the
/// read plans and read once, whole ([`is_static`](Self::is_static)). *Derived* channels are
/// names that are not variables of the dataset but [`Derived`] names (`cos_lat`,
/// `cos_zenith`, ...): computed on each sample's own grid and time, in the order given among
/// the variables' channels.
#[derive(Debug)]
pub struct SampleLayout {
    variables: Vec<Arc<Variable>>,
    /// Iterated dimensions first (window size 1, squeezed), then the windows in spec order.
    sample_dims: Vec<SampleDim>,
    channels: Vec<Channel>,
    /// The channels of each variable.
    channel_ranges: Vec<Range<usize>>,
    /// The derived channels: their position among the channels, and what they are.
    derived: Vec<(usize, Derived)>,
    /// The value of padded elements.
    pad_value: f32,
    /// Steps along the forecast dimension whose windows make the input (oldest first)...
    input_offsets: Vec<i64>,
    /// ... and the target (empty without forecasting).
    target_offsets: Vec<i64>,
    /// The sample dimension the offsets move along.
    forecast_axis: Option<usize>,
    /// Whether the layout fixes the batches (xbatcher's `batch_dims` / `concat_input_dims`).
    by_layout: bool,
    /// Batches along the sample dimensions' blocks, and samples in each (after missing
    /// steps are left out).
    groups: BatchGroups,
    /// The missing steps of the time dimension, and what samples touching them become.
    missing: Option<(Arc<MissingSteps>, Missing)>,
    /// Under [`Missing::Skip`]: the units (samples, or batches fixed by the layout) kept.
    kept: Option<KeptUnits>,
    /// Units left out because they touch a missing step.
    skipped: u64,
    /// Under [`Missing::Fill`] with gaps: the time axis laid out on the regular grid, and the
    /// stored step of each grid step (`None`: a gap's step, NaN in the batches).
    grid: Option<(usize, Arc<Vec<Option<u64>>>)>,
    /// Stacked dimensions cut to index lists ([`WindowSpec::stacked`]).
    stacked: Vec<(String, Vec<u64>)>,
}

/// Batches fixed by the layout (xbatcher's `batch_dims` / `concat_input_dims`): `count`
/// batches of `size` samples each, batch `b` holding samples `b * size .. (b + 1) * size`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct BatchGroups {
    /// Batches in the epoch.
    pub count: u64,
    /// Samples in each batch.
    pub size: u64,
}

/// How a sample dimension's positions are shared out among batches.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum BatchSpan {
    /// Each position on its own: batches cut by batch size, or, when the layout fixes the
    /// batches, one position per batch (xbatcher's input dims without `concat_input_dims`).
    Each,
    /// Every position in every batch (xbatcher's input dims with `concat_input_dims`, and
    /// dims outside `input_dims` and `batch_dims`, which xbatcher keeps whole).
    All,
    /// Blocks of this many elements (xbatcher's `batch_dims`): one batch per whole block,
    /// holding the positions whose windows lie inside it.
    Block(u64),
}

/// One dimension samples move along.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SampleDim {
    /// The dimension's name.
    pub name: String,
    /// Its length (on the regular grid when gaps are filled).
    pub length: u64,
    /// The window's size (1 for an iterated dimension).
    pub size: u64,
    /// How far the window moves between positions.
    pub stride: u64,
    /// Iterated dimensions are squeezed out of the sample tensor.
    pub iterated: bool,
    /// What happens at the end of the dimension.
    pub edge: Edge,
    /// Origins start here (forecast history needs earlier steps).
    pub start: u64,
    /// And leave this many elements after the window (forecast leads need later steps).
    pub end_margin: u64,
    /// How positions are shared out among batches.
    pub batch: BatchSpan,
}

impl SampleDim {
    /// Window positions along this dimension.
    pub fn positions(&self) -> u64 {
        let margins = self.start.saturating_add(self.end_margin);
        let Some(usable) = self.length.checked_sub(margins) else {
            return 0;
        };
        let Some(room) = usable.checked_sub(self.size) else {
            // Only a padded window may be larger than its dimension: one window, padded.
            return (self.edge == Edge::Pad) as u64;
        };
        let whole = room / self.stride + 1;
        let ragged = room % self.stride != 0;
        match self.edge {
            Edge::Drop => whole,
            Edge::Pad | Edge::Shift => whole + ragged as u64,
        }
    }

    /// Elements origins may lie in and windows extend over (after forecast margins and
    /// selections).
    fn usable(&self) -> u64 {
        self.length
            .saturating_sub(self.start)
            .saturating_sub(self.end_margin)
    }

    /// `(blocks, positions per block)`: batches along this dimension, and the positions each
    /// holds ([`BatchSpan`]). A block's positions are those whose windows fit inside it; a
    /// short last block is dropped (as xbatcher drops one).
    pub fn batch_split(&self) -> (u64, u64) {
        match self.batch {
            BatchSpan::Each => (self.positions(), 1),
            BatchSpan::All => (1, self.positions()),
            BatchSpan::Block(block) => {
                let per_block = match block.checked_sub(self.size) {
                    Some(room) => room / self.stride + 1,
                    None => 0,
                };
                (self.usable() / block, per_block)
            }
        }
    }

    /// The first element of position `within` of block `block` (see [`batch_split`]).
    ///
    /// [`batch_split`]: Self::batch_split
    pub fn block_origin(&self, block: u64, within: u64) -> u64 {
        match self.batch {
            BatchSpan::Each => self.origin(block),
            BatchSpan::All => self.origin(within),
            BatchSpan::Block(size) => self.start + block * size + within * self.stride,
        }
    }

    /// The first element of the window at `position`.
    pub fn origin(&self, position: u64) -> u64 {
        let start = self.start + position * self.stride;
        match self.edge {
            Edge::Shift => start.min((self.length - self.end_margin).saturating_sub(self.size)),
            Edge::Drop | Edge::Pad => start,
        }
    }
}

/// One channel of a sample: a variable, and its index along each stacked dimension.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Channel {
    /// The variable read (or the derived channel's name).
    pub variable: String,
    /// Its index along each stacked dimension, by name.
    pub index: Vec<(String, u64)>,
    /// The coordinate value at each index, as text, where the dimension has a coordinate
    /// (see [`SampleLayout::label_stacked`]); `None` where it has none.
    pub values: Vec<Option<String>>,
}

impl Channel {
    /// `t2m`, or for a stacked dimension `z[level=500]` (by its coordinate value), or
    /// `z[level=3]` (by index) where the dimension has no coordinate.
    pub fn label(&self) -> String {
        let values = self.index.iter().enumerate().map(|(at, (dim, i))| {
            match self.values.get(at).and_then(Option::as_ref) {
                Some(value) => format!("{dim}={value}"),
                None => format!("{dim}={i}"),
            }
        });
        self.labelled(values)
    }

    /// `z[level=3]`: by index, whatever the coordinate (how statistics files written before
    /// channels were named by value name them).
    pub fn index_label(&self) -> String {
        self.labelled(self.index.iter().map(|(dim, i)| format!("{dim}={i}")))
    }

    fn labelled(&self, parts: impl Iterator<Item = String>) -> String {
        let parts: Vec<String> = parts.collect();
        match parts.is_empty() {
            true => self.variable.clone(),
            false => format!("{}[{}]", self.variable, parts.join(",")),
        }
    }
}

/// One sample: its number in the epoch's natural order and its origin along each sample
/// dimension (same order as [`SampleLayout::sample_dims`]).
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Sample {
    /// Its number in the epoch's natural order.
    pub index: u64,
    /// The first element of its window along each sample dimension.
    pub origin: Vec<u64>,
}

impl SampleLayout {
    /// Lays out samples of `variables` (names in `dataset`, or [`Derived`] channel names that
    /// are not variables of it) cut by `spec`. With no windows, the last two non-iterated
    /// dimensions of the first variable are taken whole.
    pub fn new(
        dataset: &Dataset,
        variables: &[impl AsRef<str>],
        spec: &WindowSpec,
    ) -> Result<Self> {
        if variables.is_empty() {
            return Err(Error::NoVariables);
        }
        let mut named: HashSet<&str> = HashSet::new();
        for name in variables {
            if !named.insert(name.as_ref()) {
                return Err(Error::DuplicateVariable {
                    name: name.as_ref().to_string(),
                });
            }
        }
        let sources = channel_sources(dataset, variables)?;
        let variables: Vec<Arc<Variable>> = sources
            .iter()
            .filter_map(|source| match source {
                Source::Variable(variable) => Some(variable.clone()),
                Source::Derived(_) => None,
            })
            .collect();
        if variables.is_empty() {
            let names: Vec<&str> = derived_names(&sources);
            return Err(Error::OnlyDerivedChannels {
                names: names.join(", "),
            });
        }
        let mut iterate = match &spec.iterate {
            Some(dims) => dims.clone(),
            // Iterate time by default, unless the windows take it (as xbatcher's input_dims do).
            None => match dataset.time_dim() {
                Some(time)
                    if variables.iter().any(|v| v.axis(&time.name).is_some())
                        && !spec.windows.iter().any(|w| w.dim == time.name) =>
                {
                    vec![time.name.clone()]
                }
                _ => Vec::new(),
            },
        };
        for (dim, _) in &spec.batch_dims {
            // xbatcher's batch dims are always iterated when no window takes them.
            if !spec.windows.iter().any(|w| &w.dim == dim) && !iterate.contains(dim) {
                iterate.push(dim.clone());
            }
        }
        let windows = if spec.windows.is_empty() {
            whole_trailing_dims(&variables[0], &iterate)
        } else {
            spec.windows.clone()
        };
        let mut sample_dims = sample_dims(&variables, &iterate, &windows, spec.edge)?;
        // The variables agree among themselves (checked just above); their coordinates too.
        let names: Vec<&str> = variables.iter().map(|variable| variable.name()).collect();
        dataset.check_dimension_lengths(&names)?;
        apply_ranges(&spec.ranges, &mut sample_dims)?;
        let derived_count = sources.len() - variables.len();
        check_sample_size(&variables, derived_count, &sample_dims, spec)?;
        check_stacked(&spec.stacked, &variables, &sample_dims)?;
        let stacked = spec.stacked.clone();
        let (channels, channel_ranges, derived) = channels(&sources, &sample_dims, &stacked);
        let (input_offsets, target_offsets, forecast_axis) = match &spec.forecast {
            None => (vec![0], Vec::new(), None),
            Some(forecast) => forecast_offsets(forecast, &mut sample_dims)?,
        };
        apply_batch_dims(spec, &mut sample_dims)?;
        Ok(Self {
            variables,
            channels,
            channel_ranges,
            derived,
            pad_value: spec.pad_value.unwrap_or(f32::NAN),
            input_offsets,
            target_offsets,
            forecast_axis,
            by_layout: spec.batches_by_layout(),
            groups: groups(&sample_dims)?,
            sample_dims,
            missing: None,
            kept: None,
            skipped: 0,
            grid: None,
            stacked,
        })
    }

    /// This layout with the missing steps of its time dimension handled by `policy` (see
    /// [`Missing`]): under [`Missing::Skip`] the samples (or the batches the layout fixes)
    /// touching a missing step are left out, and sample numbers count the others; under
    /// [`Missing::Error`] such a sample is an error naming the dates; under [`Missing::Fill`]
    /// gaps become NaN steps of a regular time axis. Steps along a dimension that is not a
    /// sample dimension are refused unless filled. When the layout fixes the batches (batch
    /// dims, `concat_input_dims`), a batch touching a missing step is left out whole.
    /// [`Missing::Ignore`] leaves the layout as it is.
    pub fn with_missing_steps(mut self, steps: MissingSteps, policy: Missing) -> Result<Self> {
        if policy == Missing::Ignore {
            return Ok(self);
        }
        let steps = Arc::new(steps);
        self.missing = Some((steps.clone(), policy));
        if steps.is_empty() {
            return Ok(self);
        }
        let Some(axis) = self.sample_axis(&steps.dim) else {
            return match policy {
                Missing::Fill => Ok(self),
                _ => Err(steps.error(steps.dates())),
            };
        };
        if policy == Missing::Fill {
            return self.fill_gaps(axis, &steps);
        }
        let dim = &self.sample_dims[axis];
        let (along, per_block) = dim.batch_split();
        let inner = self.sample_dims[axis + 1..]
            .iter()
            .map(|dim| dim.batch_split().0)
            .product::<u64>();
        let offsets: Vec<i64> = match self.forecast_axis == Some(axis) {
            true => self
                .input_offsets
                .iter()
                .chain(&self.target_offsets)
                .copied()
                .collect(),
            false => vec![0],
        };
        let mut good = Vec::new();
        let mut touched = Vec::new();
        for unit in 0..along {
            let origins: Vec<u64> = match self.by_layout {
                true => (0..per_block)
                    .map(|within| dim.block_origin(unit, within))
                    .collect(),
                false => vec![dim.origin(unit)],
            };
            let used: Vec<(u64, u64)> = origins
                .iter()
                .flat_map(|&origin| {
                    offsets.iter().map(move |&offset| {
                        let first = origin.saturating_add_signed(offset);
                        (first, first + dim.size - 1)
                    })
                })
                .collect();
            if !steps.touches(&used) {
                good.push(unit);
            } else if policy == Missing::Error {
                touched.extend(steps.dates_touched(&used));
            }
        }
        if policy == Missing::Error {
            return match touched.is_empty() {
                true => Ok(self),
                false => Err(steps.error(touched)),
            };
        }
        let kept = KeptUnits { along, inner, good };
        let count = kept.count(self.groups.count);
        self.skipped = self.groups.count - count;
        self.groups.count = count;
        self.kept = Some(kept);
        Ok(self)
    }

    /// [`Missing::Fill`]: lays the time axis out on the coordinate's regular grid, so a gap's
    /// steps are samples, history and leads of their own (read as NaN).
    fn fill_gaps(mut self, axis: usize, steps: &MissingSteps) -> Result<Self> {
        if steps.gaps.is_empty() {
            return Ok(self);
        }
        let dim = &self.sample_dims[axis];
        check_fill(steps, dim.iterated && !self.by_layout)?;
        let grid = steps.grid();
        let position = |stored: u64| {
            grid.iter()
                .position(|&step| step == Some(stored))
                .unwrap_or(0) as u64
        };
        // The origins' bounds were set in stored steps: the selection (and the forecast
        // margins, in steps) are laid out again on the grid.
        let history = (-self.input_offsets.iter().copied().min().unwrap_or(0)) as u64;
        let lead = self.target_offsets.iter().copied().max().unwrap_or(0) as u64;
        let (history, lead) = match self.forecast_axis == Some(axis) {
            true => (history, lead),
            false => (0, 0),
        };
        let first = dim.start - history;
        let last = dim.length - 1 - (dim.end_margin - lead);
        let length = grid.len() as u64;
        let dim = &mut self.sample_dims[axis];
        dim.start = position(first) + history;
        dim.end_margin = length - 1 - position(last) + lead;
        dim.length = length;
        self.groups = groups(&self.sample_dims)?;
        self.grid = Some((axis, Arc::new(grid)));
        Ok(self)
    }

    /// The missing steps of the time dimension and their handling, when they were looked for.
    pub fn missing_steps(&self) -> Option<(&MissingSteps, Missing)> {
        self.missing
            .as_ref()
            .map(|(steps, policy)| (steps.as_ref(), *policy))
    }

    /// Samples (or batches, when the layout fixes them) left out because they touch a
    /// missing step.
    pub fn skipped(&self) -> u64 {
        self.skipped
    }

    /// Whether tensors start out holding the pad value (NaN unless set) before the windows
    /// are gathered into them: padded windows, and steps filled for gaps.
    pub fn prefilled(&self) -> bool {
        self.padded() || self.grid.is_some()
    }

    /// The stored variables, in the order given.
    pub fn variables(&self) -> &[Arc<Variable>] {
        &self.variables
    }

    /// Iterated dimensions first, then the windowed ones in the specification's order.
    pub fn sample_dims(&self) -> &[SampleDim] {
        &self.sample_dims
    }

    /// Every channel, in tensor order.
    pub fn channels(&self) -> &[Channel] {
        &self.channels
    }

    /// The channels of variable number `variable`.
    pub fn channel_range(&self, variable: usize) -> Range<usize> {
        self.channel_ranges[variable].clone()
    }

    /// The derived channels: each one's position among the channels, and what it is.
    pub fn derived_channels(&self) -> &[(usize, Derived)] {
        &self.derived
    }

    /// Whether variable number `variable` is static: it has none of the iterated dimensions,
    /// so every sample holds the same field (cut to its window). Static variables are left
    /// out of [`read_plan`](Self::read_plan): collators read them once, whole.
    pub fn is_static(&self, variable: usize) -> bool {
        let variable = &self.variables[variable];
        let mut iterated = self
            .sample_dims
            .iter()
            .filter(|dim| dim.iterated)
            .peekable();
        iterated.peek().is_some() && iterated.all(|dim| variable.axis(&dim.name).is_none())
    }

    /// The numbers of the static variables ([`is_static`](Self::is_static)), in order.
    pub fn static_variables(&self) -> Vec<usize> {
        (0..self.variables.len())
            .filter(|&number| self.is_static(number))
            .collect()
    }

    /// The value of elements of padded windows past the end of the data.
    pub fn pad_value(&self) -> f32 {
        self.pad_value
    }

    /// Whether windows are padded past the end (then batches carry a validity mask).
    pub fn padded(&self) -> bool {
        self.sample_dims.iter().any(|dim| dim.edge == Edge::Pad)
    }

    /// Steps relative to the sample's own along the forecast dimension that make the input,
    /// oldest first (`[0]` without forecasting).
    pub fn input_offsets(&self) -> &[i64] {
        &self.input_offsets
    }

    /// Steps ahead that make the target (empty without forecasting).
    pub fn target_offsets(&self) -> &[i64] {
        &self.target_offsets
    }

    /// `sample` moved by `offset` steps along the forecast dimension.
    pub fn shifted(&self, sample: &Sample, offset: i64) -> Sample {
        let mut shifted = sample.clone();
        if let Some(axis) = self.forecast_axis {
            shifted.origin[axis] = sample.origin[axis]
                .checked_add_signed(offset)
                .expect("offset within the data");
        }
        shifted
    }

    /// The shape of one target, `[leads x channels, window sizes...]`, when forecasting.
    pub fn target_shape(&self) -> Option<Vec<usize>> {
        let mut shape = self.sample_shape();
        shape[0] = self.channels.len() * self.target_offsets.len();
        (!self.target_offsets.is_empty()).then_some(shape)
    }

    /// The shape of one sample's input: `[history x channels, window sizes...]` (iterated dims
    /// squeezed; the history steps, oldest first, each holding every channel).
    pub fn sample_shape(&self) -> Vec<usize> {
        let windows = self.sample_dims.iter().filter(|dim| !dim.iterated);
        std::iter::once(self.channels.len() * self.input_offsets.len())
            .chain(windows.map(|dim| dim.size as usize))
            .collect()
    }

    /// Elements in one sample.
    pub fn sample_len(&self) -> usize {
        self.sample_shape().iter().product()
    }

    /// Samples in one epoch. With batches fixed by the layout, only samples inside a batch
    /// count (a window crossing a block boundary of a windowed batch dim is in none).
    pub fn num_samples(&self) -> u64 {
        self.groups.count * self.groups.size
    }

    /// Why the epoch has no samples, when it has none: the first sample dimension without a
    /// window position (or a batch block), with its usable length and what narrowed it.
    pub fn why_empty(&self) -> Option<String> {
        if self.num_samples() > 0 {
            return None;
        }
        if let (Some((steps, _)), true) = (&self.missing, self.skipped > 0) {
            return Some(format!(
                "every sample touches one of the {} missing steps along `{}` (--missing fill keeps them)",
                steps.count(),
                steps.dim
            ));
        }
        for dim in &self.sample_dims {
            let usable = dim.usable();
            let narrowed = if usable < dim.length {
                format!(
                    " of its {} ({} at the start and {} at the end are taken by the selection and the forecast history and leads)",
                    dim.length, dim.start, dim.end_margin
                )
            } else {
                String::new()
            };
            let what = if dim.iterated { "step" } else { "window" };
            if dim.positions() == 0 {
                return Some(format!(
                    "`{}` has {usable} usable elements{narrowed}, fewer than one {what} of {}",
                    dim.name, dim.size
                ));
            }
            let (blocks, per_block) = dim.batch_split();
            if blocks == 0 || per_block == 0 {
                let BatchSpan::Block(block) = dim.batch else {
                    continue;
                };
                return Some(format!(
                    "batch blocks of {block} along `{}` do not fit its {usable} usable elements{narrowed} or hold no {what} of {}",
                    dim.name, dim.size
                ));
            }
        }
        Some("no sample dimension has a window position".to_string())
    }

    /// The batches when the layout fixes them (xbatcher's `batch_dims` or
    /// `concat_input_dims`); `None` when a batch size cuts them.
    pub fn batch_groups(&self) -> Option<BatchGroups> {
        self.by_layout.then_some(self.groups)
    }

    /// The sample with number `index` in natural order: C order over the sample dimensions,
    /// or, when the layout fixes the batches, batch after batch (C order over the dimensions'
    /// blocks), each batch in C order over the positions inside its blocks.
    pub fn sample(&self, index: u64) -> Sample {
        let mut origin = vec![0; self.sample_dims.len()];
        if !self.by_layout {
            // The planning hot path: plain C order over the positions.
            let mut rest = self.kept.as_ref().map_or(index, |kept| kept.natural(index));
            for (axis, dim) in self.sample_dims.iter().enumerate().rev() {
                // An empty epoch has no sample to name: keep origins at the dimension's start.
                let positions = dim.positions().max(1);
                origin[axis] = dim.origin(rest % positions);
                rest /= positions;
            }
            return Sample { index, origin };
        }
        let size = self.groups.size.max(1);
        let (mut block_rest, mut within_rest) = (index / size, index % size);
        if let Some(kept) = &self.kept {
            block_rest = kept.natural(block_rest);
        }
        for (axis, dim) in self.sample_dims.iter().enumerate().rev() {
            let (blocks, per_block) = dim.batch_split();
            let (blocks, per_block) = (blocks.max(1), per_block.max(1));
            origin[axis] = dim.block_origin(block_rest % blocks, within_rest % per_block);
            block_rest /= blocks;
            within_rest /= per_block;
        }
        Sample { index, origin }
    }

    /// The element region variable number `variable` contributes to `sample`: the window
    /// along sample dimensions, everything along stacked ones. A padded window may reach past
    /// the end of the array; [`clip`] gives the part that exists.
    pub fn region(&self, variable: usize, sample: &Sample) -> Vec<Range<u64>> {
        let variable = &self.variables[variable];
        let dims = variable.dims().iter().zip(variable.shape());
        dims.map(|(name, &length)| match self.sample_axis(name) {
            Some(axis) => match &self.grid {
                // A step of the regular grid: its stored step, or nothing for a gap's.
                Some((grid_axis, grid)) if *grid_axis == axis => {
                    match grid.get(sample.origin[axis] as usize).copied().flatten() {
                        Some(stored) => stored..stored + 1,
                        None => 0..0,
                    }
                }
                _ => {
                    let start = sample.origin[axis];
                    start..start + self.sample_dims[axis].size
                }
            },
            None => 0..length,
        })
        .collect()
    }

    /// Parts of variable `variable`'s region for `sample` ([`region`](Self::region)), one
    /// per run of consecutive selected indices along its selected stacked dimensions (one
    /// part, the region, without selections), each with the number of its first channel
    /// among the variable's channels. A part's channels follow each other as its indices do.
    pub fn region_parts(&self, variable: usize, sample: &Sample) -> Vec<(Vec<Range<u64>>, usize)> {
        let region = self.region(variable, sample);
        let array = &self.variables[variable];
        let mut parts = vec![(region, 0usize)];
        // Channels of each stacked axis, from the last (fastest) to the first.
        let mut stride = 1usize;
        for (axis, name) in array.dims().iter().enumerate().rev() {
            if self.sample_axis(name).is_some() {
                continue;
            }
            let length = array.shape()[axis];
            let Some((_, indices)) = self.stacked.iter().find(|(dim, _)| dim == name) else {
                stride *= length as usize;
                continue;
            };
            let runs = runs(indices);
            parts = parts
                .into_iter()
                .flat_map(|(region, first)| {
                    runs.iter().map(move |&(position, start, len)| {
                        let mut region = region.clone();
                        region[axis] = start..start + len;
                        (region, first + position * stride)
                    })
                })
                .collect();
            stride *= indices.len();
        }
        parts
    }

    /// The channels variable `variable` has along its stacked axis `axis`: the selected
    /// indices' count, else the dimension's length.
    pub fn stacked_len(&self, variable: usize, axis: usize) -> u64 {
        let array = &self.variables[variable];
        let name = &array.dims()[axis];
        match self.stacked.iter().find(|(dim, _)| dim == name) {
            Some((_, indices)) => indices.len() as u64,
            None => array.shape()[axis],
        }
    }

    /// The stacked dimensions cut to index lists ([`WindowSpec::stacked`]).
    pub fn stacked(&self) -> &[(String, Vec<u64>)] {
        &self.stacked
    }

    /// Names the channels along stacked dimension `dim` by its coordinate's values (one per
    /// index of the dimension), so labels read `z[level=500]`.
    pub fn label_stacked(&mut self, dim: &str, values: &[String]) {
        for channel in &mut self.channels {
            for (at, (name, index)) in channel.index.iter().enumerate() {
                if name == dim {
                    channel.values[at] = values.get(*index as usize).cloned();
                }
            }
        }
    }

    /// A stable hash of what defines the samples (variables, sample dimensions, windows), for
    /// [`SamplerSpec::layout_hash`](crate::SamplerSpec): a saved state only resumes the same
    /// layout.
    pub fn layout_hash(&self) -> u64 {
        let mut hash = Fnv1a::new();
        for variable in &self.variables {
            hash.bytes(variable.name().as_bytes());
            hash.u64(0xff);
        }
        // Derived channels change no sample, but a saved state resumes the same channels;
        // layouts without them hash as before.
        for (_, kind) in &self.derived {
            hash.bytes(kind.name().as_bytes());
            hash.u64(0xfe);
        }
        // Likewise selected channels: layouts without selections hash as before.
        for (dim, indices) in &self.stacked {
            hash.bytes(dim.as_bytes());
            indices.iter().for_each(|&index| hash.u64(index));
            hash.u64(0xfd);
        }
        for dim in &self.sample_dims {
            hash.bytes(dim.name.as_bytes());
            for value in [
                dim.length,
                dim.size,
                dim.stride,
                dim.iterated as u64,
                dim.edge as u64,
            ] {
                hash.u64(value);
            }
            // Only layouts that fix their batches hash their spans, so states saved before
            // batch dims existed still resume.
            if self.by_layout {
                let (tag, block) = match dim.batch {
                    BatchSpan::Each => (1, 0),
                    BatchSpan::All => (2, 0),
                    BatchSpan::Block(block) => (3, block),
                };
                hash.u64(tag);
                hash.u64(block);
            }
        }
        // Only layouts with missing steps hash them, so states saved before missing steps
        // were looked for still resume where none are.
        if let Some((steps, policy)) = self.missing.as_ref().filter(|(s, _)| !s.is_empty()) {
            steps.hash_into(&mut hash);
            hash.u64(*policy as u64);
        }
        hash.finish()
    }

    /// For each sample, the chunk of the first variable its window starts in (C-order number
    /// over the sample dimensions): the blocks of [`Shuffle::Blocks`](crate::Shuffle), so
    /// samples sharing chunks are delivered together. When the layout fixes the batches, one id
    /// per batch (that of its first sample), since batches are what the sampler orders then.
    pub fn block_ids(&self) -> Vec<u64> {
        // The first variable read batch by batch (a static one has no chunks along time).
        let first = (0..self.variables.len())
            .find(|&number| !self.is_static(number))
            .map_or(&self.variables[0], |number| &self.variables[number]);
        let chunk_shape = first.chunk_shape();
        // Per sample dimension: the chunk extent along it (1 where the variable lacks it).
        let extents: Vec<(u64, u64)> = self
            .sample_dims
            .iter()
            .map(|dim| match first.axis(&dim.name) {
                Some(axis) => (chunk_shape[axis].max(1), first.chunk_grid_shape()[axis]),
                None => (dim.length.max(1), 1),
            })
            .collect();
        let firsts: Box<dyn Iterator<Item = u64>> = match self.batch_groups() {
            // Batches fixed by the layout are shuffled whole: one id per batch.
            Some(groups) => Box::new((0..groups.count).map(move |batch| batch * groups.size)),
            None => Box::new(0..self.num_samples()),
        };
        firsts
            .map(|index| {
                let origin = self.sample(index).origin;
                origin
                    .iter()
                    .zip(&extents)
                    .fold(0, |id, (start, (extent, count))| {
                        id * count + start / extent
                    })
            })
            .collect()
    }

    /// The position of a dimension among the sample dimensions.
    pub fn sample_axis(&self, dim: &str) -> Option<usize> {
        self.sample_dims
            .iter()
            .position(|sample_dim| sample_dim.name == dim)
    }

    /// The chunks `samples` need, each once (overlapping windows share chunks), grouped by
    /// variable and in C order within a variable. Static variables are not in it: they are
    /// read once ([`is_static`](Self::is_static)).
    ///
    /// For sharded arrays read by inner chunk, each shard's request names the inner chunks
    /// the samples need, so only their byte ranges are read.
    pub fn read_plan(&self, samples: &[Sample]) -> Vec<ChunkRequest> {
        // (variable, chunk) -> inner chunks needed (`None`: the whole chunk).
        let mut needed: BTreeMap<(usize, Vec<u64>), Option<BTreeSet<u64>>> = BTreeMap::new();
        let offsets = self.input_offsets.iter().chain(&self.target_offsets);
        let shifted = samples
            .iter()
            .flat_map(|sample| offsets.clone().map(|&o| self.shifted(sample, o)));
        let per_batch: Vec<usize> = (0..self.variables.len())
            .filter(|&number| !self.is_static(number))
            .collect();
        for sample in shifted {
            let sample = &sample;
            for &variable in &per_batch {
                let array = &self.variables[variable];
                for (region, _) in self.region_parts(variable, sample) {
                    let region = clip(&region, array.shape());
                    for chunk in array.chunks_in(&region) {
                        let inner = array.inner_chunks_in(&chunk, &region);
                        let entry = needed
                            .entry((variable, chunk))
                            .or_insert_with(|| inner.as_ref().map(|_| BTreeSet::new()));
                        if let (Some(set), Some(inner)) = (entry.as_mut(), inner) {
                            set.extend(inner);
                        }
                    }
                }
            }
        }
        needed
            .into_iter()
            .map(|((variable, chunk), inner)| {
                let array = self.variables[variable].clone();
                match inner {
                    Some(inner) => {
                        ChunkRequest::with_inner(array, chunk, inner.into_iter().collect())
                    }
                    None => ChunkRequest::new(array, chunk),
                }
            })
            .collect()
    }
}

/// Batches along the dimensions' blocks, and samples in each.
fn groups(sample_dims: &[SampleDim]) -> Result<BatchGroups> {
    let (count, size) = sample_dims
        .iter()
        .map(SampleDim::batch_split)
        .try_fold((1u64, 1u64), |(count, size), (blocks, per_block)| {
            Some((count.checked_mul(blocks)?, size.checked_mul(per_block)?))
        })
        .filter(|(count, size)| count.checked_mul(*size).is_some())
        .ok_or_else(|| {
            let dims: Vec<String> = sample_dims
                .iter()
                .map(|dim| format!("{} positions along `{}`", dim.positions(), dim.name))
                .collect();
            Error::TooManySamples {
                dims: dims.join(" x "),
            }
        })?;
    Ok(BatchGroups { count, size })
}

/// The most values one sample may hold (2^31: 8 GiB of float32), so that a shape claiming
/// more than memory holds is refused before channels or batches are laid out.
pub const MAX_SAMPLE_VALUES: u64 = 1 << 31;

/// The most chunks one sample may read (2^20): planning keeps each one's indices, so tiny
/// chunks under a large window would claim memory in proportion to their count.
pub const MAX_SAMPLE_CHUNKS: u64 = 1 << 20;

/// Refuses samples that would read more than [`MAX_SAMPLE_CHUNKS`] chunks: per variable, the
/// chunks a window can meet along each dimension (one more than it spans, for an unaligned
/// start), all of them along stacked dimensions, times the steps of a forecast.
fn check_sample_chunks(
    variables: &[Arc<Variable>],
    sample_dims: &[SampleDim],
    steps: u64,
) -> Result<()> {
    let per_step = variables.iter().try_fold(0u64, |total, variable| {
        let chunk_shape = variable.chunk_shape();
        let grid = variable.chunk_grid_shape();
        let chunks = variable
            .dims()
            .iter()
            .enumerate()
            .try_fold(1u64, |count, (axis, name)| {
                let (chunk, along) = (chunk_shape.get(axis)?.max(&1), *grid.get(axis)?);
                let met = match sample_dims.iter().find(|dim| &dim.name == name) {
                    Some(dim) => dim.size.div_ceil(*chunk).saturating_add(1).min(along),
                    None => along,
                };
                count.checked_mul(met.max(1))
            })?;
        total.checked_add(chunks)
    });
    match per_step.and_then(|chunks| chunks.checked_mul(steps)) {
        Some(chunks) if chunks <= MAX_SAMPLE_CHUNKS => Ok(()),
        chunks => Err(Error::TooManyChunks {
            chunks: chunks.map_or("more than 2^64".into(), |c| c.to_string()),
            limit: MAX_SAMPLE_CHUNKS,
        }),
    }
}

/// Refuses samples of more than [`MAX_SAMPLE_VALUES`] values: channels (the product of each
/// variable's stacked dims) times history and lead steps times the window sizes.
fn check_sample_size(
    variables: &[Arc<Variable>],
    derived: usize,
    sample_dims: &[SampleDim],
    spec: &WindowSpec,
) -> Result<()> {
    let channels = variables
        .iter()
        .try_fold(derived as u64, |total, variable| {
            let stacked = variable
                .dims()
                .iter()
                .zip(variable.shape())
                .filter(|(name, _)| !sample_dims.iter().any(|dim| &dim.name == *name))
                .try_fold(1u64, |count, (_, &length)| count.checked_mul(length))?;
            total.checked_add(stacked)
        });
    let steps = match &spec.forecast {
        Some(forecast) => forecast.history.checked_add(forecast.leads.len() as u64),
        None => Some(1),
    };
    let window = sample_dims
        .iter()
        .filter(|dim| !dim.iterated)
        .try_fold(1u64, |count, dim| count.checked_mul(dim.size));
    let values = channels
        .zip(steps)
        .zip(window)
        .and_then(|((channels, steps), window)| channels.checked_mul(steps)?.checked_mul(window));
    if values.is_some_and(|values| values <= MAX_SAMPLE_VALUES) {
        return check_sample_chunks(variables, sample_dims, steps.unwrap_or(u64::MAX));
    }
    let windows: Vec<String> = sample_dims
        .iter()
        .filter(|dim| !dim.iterated)
        .map(|dim| format!("{}={}", dim.name, dim.size))
        .collect();
    Err(Error::SampleTooLarge {
        elements: values.map_or("more than 2^64".into(), |v| v.to_string()),
        what: format!(
            "{} channels, windows {}",
            channels.map_or("more than 2^64".into(), |c| c.to_string()),
            windows.join(", ")
        ),
        limit: MAX_SAMPLE_VALUES,
    })
}

/// Shares the sample dimensions' positions out among batches as xbatcher's `batch_dims` and
/// `concat_input_dims` do (see [`BatchSpan`]); nothing changes when neither is given.
fn apply_batch_dims(spec: &WindowSpec, sample_dims: &mut [SampleDim]) -> Result<()> {
    if !spec.batches_by_layout() {
        return Ok(());
    }
    for dim in sample_dims.iter_mut() {
        // Input dims: one window per batch, or all of them with concat_input_dims. Iterated
        // dims outside batch_dims are, in xbatcher, dims kept whole in every batch.
        dim.batch = match (dim.iterated, spec.concat_input_dims) {
            (false, false) => BatchSpan::Each,
            _ => BatchSpan::All,
        };
    }
    let mut seen = HashSet::new();
    for (name, block) in &spec.batch_dims {
        if !seen.insert(name) {
            return Err(Error::DuplicateDimension { dim: name.clone() });
        }
        let dim = sample_dims
            .iter_mut()
            .find(|dim| &dim.name == name)
            .expect("batch dims are sample dims: windowed or iterated");
        if !dim.iterated && !spec.concat_input_dims {
            return Err(Error::BatchDimNeedsConcat { dim: name.clone() });
        }
        if !dim.iterated && dim.edge != Edge::Drop {
            return Err(Error::BatchDimWithEdge {
                dim: name.clone(),
                edge: dim.edge,
            });
        }
        if *block < dim.size || *block > dim.usable() {
            return Err(Error::BadBatchBlock {
                dim: name.clone(),
                block: *block,
                window: dim.size,
                length: dim.usable(),
            });
        }
        dim.batch = BatchSpan::Block(*block);
    }
    Ok(())
}

/// Narrows sample dimensions to the selected index ranges.
fn apply_ranges(ranges: &[(String, Range<u64>)], sample_dims: &mut [SampleDim]) -> Result<()> {
    for (dim, range) in ranges {
        let sample_dim = sample_dims
            .iter_mut()
            .find(|sample_dim| &sample_dim.name == dim)
            .ok_or_else(|| Error::SelectionOnStackedDim { dim: dim.clone() })?;
        if range.start >= range.end || range.end > sample_dim.length {
            return Err(Error::BadSelection {
                dim: dim.clone(),
                start: range.start,
                end: range.end,
                length: sample_dim.length,
            });
        }
        if sample_dim.edge == Edge::Pad {
            return Err(Error::PadWithSelection { dim: dim.clone() });
        }
        sample_dim.start = sample_dim.start.max(range.start);
        sample_dim.end_margin = sample_dim.end_margin.max(sample_dim.length - range.end);
    }
    Ok(())
}

/// Input and target offsets for `forecast` along the first iterated dimension, whose origins
/// are narrowed so that every offset stays inside the data.
fn forecast_offsets(
    forecast: &Forecast,
    sample_dims: &mut [SampleDim],
) -> Result<(Vec<i64>, Vec<i64>, Option<usize>)> {
    if forecast.history == 0 {
        return Err(Error::InvalidForecast {
            reason: "a history of at least one step",
        });
    }
    if forecast.leads.contains(&0) {
        return Err(Error::InvalidForecast {
            reason: "leads of at least one step",
        });
    }
    let axis = sample_dims
        .iter()
        .position(|dim| dim.iterated)
        .ok_or(Error::InvalidForecast {
            reason: "an iterated (time) dimension",
        })?;
    let history = forecast.history as i64;
    let dim = &mut sample_dims[axis];
    dim.start = dim.start.saturating_add(forecast.history - 1);
    let lead = forecast.leads.iter().copied().max().unwrap_or(0);
    dim.end_margin = dim.end_margin.saturating_add(lead);
    let inputs = (1 - history..=0).collect();
    let targets = forecast.leads.iter().map(|&lead| lead as i64).collect();
    Ok((inputs, targets, Some(axis)))
}

/// The part of `region` inside an array of `shape`.
pub fn clip(region: &[Range<u64>], shape: &[u64]) -> Vec<Range<u64>> {
    region
        .iter()
        .zip(shape)
        .map(|(range, &length)| range.start.min(length)..range.end.min(length))
        .collect()
}

fn whole_trailing_dims(variable: &Variable, iterate: &[String]) -> Vec<Window> {
    let dims = variable.dims().iter().zip(variable.shape());
    let candidates: Vec<Window> = dims
        .filter(|(name, _)| !iterate.contains(name))
        .map(|(name, &length)| Window {
            dim: name.clone(),
            size: length,
            stride: length,
        })
        .collect();
    candidates[candidates.len().saturating_sub(2)..].to_vec()
}

fn sample_dims(
    variables: &[Arc<Variable>],
    iterate: &[String],
    windows: &[Window],
    edge: Edge,
) -> Result<Vec<SampleDim>> {
    let mut seen = HashSet::new();
    let iterated = iterate.iter().map(|dim| Window {
        dim: dim.clone(),
        size: 1,
        stride: 1,
    });
    let all = iterated
        .map(|window| (window, true))
        .chain(windows.iter().cloned().map(|w| (w, false)));
    let mut sample_dims = Vec::new();
    for (window, iterated) in all {
        if !seen.insert(window.dim.clone()) {
            return Err(Error::DuplicateDimension { dim: window.dim });
        }
        if window.size == 0 || window.stride == 0 {
            return Err(Error::EmptyWindow {
                dim: window.dim,
                size: window.size,
                stride: window.stride,
            });
        }
        let length = common_length(variables, &window.dim, !iterated)?;
        if window.size > length && (iterated || edge != Edge::Pad) {
            return Err(Error::WindowTooLarge {
                dim: window.dim,
                size: window.size,
                length,
            });
        }
        let Window {
            dim: name,
            size,
            stride,
        } = window;
        let edge = if iterated { Edge::Drop } else { edge };
        sample_dims.push(SampleDim {
            name,
            length,
            size,
            stride,
            iterated,
            edge,
            start: 0,
            end_margin: 0,
            batch: BatchSpan::Each,
        });
    }
    Ok(sample_dims)
}

/// The length of `dim`, which must agree across the variables having it. Windowed dims must be
/// in every variable; an iterated dim may be absent (the variable is then repeated per step).
fn common_length(variables: &[Arc<Variable>], dim: &str, required: bool) -> Result<u64> {
    let mut found: Option<(&str, u64)> = None;
    for variable in variables {
        let Some(axis) = variable.axis(dim) else {
            if required {
                return Err(Error::MissingDimension {
                    dim: dim.into(),
                    variable: variable.name().into(),
                    dims: variable.dims().to_vec(),
                });
            }
            continue;
        };
        let length = variable.shape()[axis];
        match found {
            None => found = Some((variable.name(), length)),
            Some((first_variable, first)) if first != length => {
                return Err(Error::DimensionMismatch {
                    dim: dim.into(),
                    first_variable: first_variable.into(),
                    first,
                    other_variable: variable.name().into(),
                    other: length,
                })
            }
            Some(_) => {}
        }
    }
    found
        .map(|(_, length)| length)
        .ok_or_else(|| Error::MissingDimension {
            dim: dim.into(),
            variable: variables[0].name().into(),
            dims: variables[0].dims().to_vec(),
        })
}

/// Where a named channel comes from.
enum Source {
    Variable(Arc<Variable>),
    Derived(Derived),
}

/// Each name as a variable of `dataset` or, when it has none of that name, a derived channel.
fn channel_sources(dataset: &Dataset, names: &[impl AsRef<str>]) -> Result<Vec<Source>> {
    names
        .iter()
        .map(|name| match dataset.variable(name.as_ref()) {
            Ok(variable) => Ok(Source::Variable(variable.clone())),
            Err(error) => match (&error, Derived::from_name(name.as_ref())) {
                (zarrpipe_store::Error::MissingVariable { .. }, Some(kind)) => {
                    Ok(Source::Derived(kind))
                }
                (zarrpipe_store::Error::MissingVariable { .. }, None) => {
                    Err(Error::UnknownChannel {
                        name: name.as_ref().to_string(),
                        source: error,
                        derived: Derived::names(),
                    })
                }
                _ => Err(error.into()),
            },
        })
        .collect()
}

/// The names of the derived channels among `sources`.
fn derived_names(sources: &[Source]) -> Vec<&'static str> {
    sources
        .iter()
        .filter_map(|source| match source {
            Source::Derived(kind) => Some(kind.name()),
            Source::Variable(_) => None,
        })
        .collect()
}

/// The indices of a stacked dimension of `length` that become channels: the selected ones,
/// else all of them.
fn stacked_indices(selections: &[(String, Vec<u64>)], dim: &str, length: u64) -> Vec<u64> {
    match selections.iter().find(|(name, _)| name == dim) {
        Some((_, indices)) => indices.clone(),
        None => (0..length).collect(),
    }
}

/// Channel selections must be on dimensions stacked as channels that some variable has,
/// each index inside it, none twice.
fn check_stacked(
    selections: &[(String, Vec<u64>)],
    variables: &[Arc<Variable>],
    sample_dims: &[SampleDim],
) -> Result<()> {
    for (dim, indices) in selections {
        let fail = |reason: String| Error::BadStackedSelection {
            dim: dim.clone(),
            reason,
        };
        if sample_dims.iter().any(|sample_dim| &sample_dim.name == dim) {
            return Err(fail("it is iterated or windowed, not stacked as channels: select a range FROM..TO of it".into()));
        }
        let length = variables
            .iter()
            .find_map(|variable| Some(variable.shape()[variable.axis(dim)?]))
            .ok_or_else(|| fail("none of the variables has this dimension".into()))?;
        if indices.is_empty() {
            return Err(fail("no index selected".into()));
        }
        if let Some(&past) = indices.iter().find(|&&index| index >= length) {
            return Err(fail(format!("index {past} is past its {length} elements")));
        }
        let mut seen = indices.clone();
        seen.sort_unstable();
        seen.dedup();
        if seen.len() != indices.len() {
            return Err(fail("an index is selected twice".into()));
        }
    }
    Ok(())
}

/// Runs of consecutive indices in `indices` (in their order): (position of the run's first
/// in `indices`, its first index, its length).
fn runs(indices: &[u64]) -> Vec<(usize, u64, u64)> {
    let mut runs: Vec<(usize, u64, u64)> = Vec::new();
    for (position, &index) in indices.iter().enumerate() {
        match runs.last_mut() {
            Some((_, start, len)) if *start + *len == index => *len += 1,
            _ => runs.push((position, index, 1)),
        }
    }
    runs
}

/// The channels in order, each variable's range of them, and the derived ones' positions.
type Channels = (Vec<Channel>, Vec<Range<usize>>, Vec<(usize, Derived)>);

fn channels(
    sources: &[Source],
    sample_dims: &[SampleDim],
    selections: &[(String, Vec<u64>)],
) -> Channels {
    let mut channels = Vec::new();
    let mut ranges = Vec::new();
    let mut derived = Vec::new();
    for source in sources {
        let variable = match source {
            Source::Derived(kind) => {
                derived.push((channels.len(), *kind));
                channels.push(Channel {
                    variable: kind.name().to_string(),
                    index: Vec::new(),
                    values: Vec::new(),
                });
                continue;
            }
            Source::Variable(variable) => variable,
        };
        let first = channels.len();
        // Each stacked dimension's indices: the selected ones, else all of them.
        let stacked: Vec<(&String, Vec<u64>)> = variable
            .dims()
            .iter()
            .zip(variable.shape())
            .filter(|(name, _)| !sample_dims.iter().any(|dim| &dim.name == *name))
            .map(|(name, &length)| (name, stacked_indices(selections, name, length)))
            .collect();
        let count: u64 = stacked.iter().map(|(_, at)| at.len() as u64).product();
        for flat in 0..count {
            let mut rest = flat;
            let mut index = vec![(String::new(), 0); stacked.len()];
            for (slot, (name, at)) in index.iter_mut().zip(&stacked).rev() {
                let len = at.len() as u64;
                *slot = ((*name).clone(), at[(rest % len) as usize]);
                rest /= len;
            }
            channels.push(Channel {
                variable: variable.name().to_string(),
                values: vec![None; index.len()],
                index,
            });
        }
        ranges.push(first..channels.len());
    }
    (channels, ranges, derived)
}
