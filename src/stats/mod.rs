//! Statistics for training: per channel (a level of a level variable is a channel, as the
//! pipeline stacks it), the mean, standard deviation, min and max of the values and of their
//! tendencies (the difference between consecutive time steps), over a range of time steps (the
//! training split), in one streaming pass: chunks are read through the library's own fetch and
//! decode stages, a few at a time, and counted on every core, each run of a channel's values
//! in two passes, into moments that are merged (Chan et al.) into the channel's in a fixed
//! order, in f64. Memory holds the chunks in flight (being decoded and being counted) and the
//! last chunk of a chunk column (for the tendencies), whatever the store's size.
//!
//! Missing time steps are left out (see `zarrpipe_pipeline::find_missing_steps`): steps whose
//! field is absent, and tendencies across a gap in the time coordinate. NaN values are counted
//! apart and left out of the moments. The [`StatsReport`] records what it was computed over,
//! and is what `--normalize` reads (per channel).

use std::ops::Range;
use std::sync::Arc;

use serde::Serialize;
use zarrpipe_batcher::{MissingSteps, SampleLayout, WindowSpec};
use zarrpipe_codec_gpu::ChunkDecoder;
use zarrpipe_core::DType;
use zarrpipe_store::{Dataset, Variable};

mod chunk_layout;
mod moments;
mod step_moments;
mod variable_pass;

pub use moments::Moments;
use variable_pass::VariablePass;

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
    /// Chunks fetched, decoded and counted at once.
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
    let mut layouts: Vec<SampleLayout> = names
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
                tendency: pass.has_time_axis().then(|| tendency.summary()),
            });
        }
        let pooled = values.iter().fold(Moments::default(), |mut all, m| {
            all.merge(m);
            all
        });
        variables.push(VariableStats::pooled(variable, &pooled));
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
    let pass = VariablePass::whole(variable);
    let (values, _) = pass.run(decoder, concurrency).await?;
    Ok(VariableStats::pooled(variable, &values[0]))
}

impl VariableStats {
    /// `variable`'s statistics from the moments of all its values.
    fn pooled(variable: &Variable, all: &Moments) -> Self {
        Self {
            variable: variable.name().into(),
            dtype: variable.dtype(),
            shape: variable.shape().to_vec(),
            count: all.count + all.nan,
            nan_count: all.nan,
            min: all.min(),
            max: all.max(),
            mean: all.mean(),
            std: all.std(),
        }
    }
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
