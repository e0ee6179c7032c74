//! What collation does to values after gathering them: per-channel normalisation, NaN
//! replacement with a mask of the real values, and (on the GPU) the tensor's element type.
//! The CPU and GPU apply the same float32 operations in the same order, so their tensors are
//! bit-identical.

use std::sync::Arc;

use rayon::prelude::*;
use zarrpipe_batcher::SampleLayout;

use crate::{DerivedChannels, Error, Result, StaticFields, TensorDType};

/// Per-channel mean and standard deviation: a value becomes `(value - mean) / std`.
#[derive(Clone, Debug, PartialEq)]
pub struct Normalization {
    /// Mean of each channel, in channel order.
    pub mean: Vec<f32>,
    /// Standard deviation of each channel, in channel order.
    pub std: Vec<f32>,
}

impl Normalization {
    /// From the JSON that `zarrpipe stats --json` prints: each channel gets its own entry of
    /// `channels` (matched by label, `z[level=3]`), else its variable's entry of `variables`
    /// (pooled over its channels). The list of per-variable entries that earlier versions
    /// printed is read too. Static variables' channels get their statistics like any
    /// variable's. A derived channel gets the entry of its name when there is one, else it is
    /// left as it is (mean 0, std 1). Values are normalised, targets included, with the
    /// statistics of the values (the `tendency` entries are for scaling a model's residuals:
    /// the pipeline delivers targets as values, not differences).
    pub fn from_stats_json(layout: &SampleLayout, json: &str) -> Result<Self> {
        let report = parse_stats(json)?;
        let (channels, variables) = stats_entries(&report)?;
        check_values_decoded_alike(layout, &report)?;
        // Earlier formats named stacked channels by index (`z[level=3]`), not by value.
        let by_index = report["format"] != STATS_FORMAT;
        let count = layout.channels().len();
        let mut normalization = Self {
            mean: vec![0.0; count],
            std: vec![1.0; count],
        };
        let derived = layout.derived_channels();
        for (number, channel) in layout.channels().iter().enumerate() {
            let label = match by_index {
                true => channel.index_label(),
                false => channel.label(),
            };
            let entry = channels
                .iter()
                .find(|entry| entry["channel"] == label.as_str())
                .or_else(|| {
                    let variable = channel.variable.as_str();
                    variables.iter().find(|entry| entry["variable"] == variable)
                });
            let is_derived = derived.iter().any(|&(position, _)| position == number);
            let entry = match entry {
                Some(entry) => entry,
                None if is_derived => continue,
                None => {
                    return Err(Error::BadOptions {
                        reason: match channel.index.is_empty() {
                            true => format!("no statistics for variable `{label}`"),
                            false => format!(
                                "no statistics for channel `{label}` nor for variable `{}`",
                                channel.variable
                            ),
                        },
                    })
                }
            };
            let field = |name: &str| {
                entry[name].as_f64().ok_or_else(|| Error::BadOptions {
                    reason: match is_derived {
                        true => format!("derived channel `{label}` has no numeric `{name}`"),
                        false => format!("the statistics of `{label}` have no numeric `{name}`"),
                    },
                })
            };
            normalization.mean[number] = field("mean")? as f32;
            normalization.std[number] = field("std")? as f32;
        }
        Ok(normalization)
    }

    /// The per-variable entries of statistics JSON (the list earlier versions printed, or
    /// the report's `variables`), with an error that says what is wrong with it: cut short
    /// (a truncated file), not JSON, or JSON of another shape.
    pub fn parse_stats_json(json: &str) -> Result<Vec<serde_json::Value>> {
        Ok(stats_entries(&parse_stats(json)?)?.1)
    }

    fn check(&self, channels: usize) -> Result<()> {
        if self.mean.len() != channels || self.std.len() != channels {
            return Err(Error::BadOptions {
                reason: format!(
                    "{} means and {} standard deviations for {channels} channels",
                    self.mean.len(),
                    self.std.len()
                ),
            });
        }
        match self
            .std
            .iter()
            .position(|&std| !(std.is_finite() && std > 0.0))
        {
            Some(channel) => Err(Error::BadOptions {
                reason: format!(
                    "channel {channel} has standard deviation {}",
                    self.std[channel]
                ),
            }),
            None => Ok(()),
        }
    }
}

/// The format tag of the statistics `zarrpipe stats --json` writes, which
/// [`Normalization::from_stats_json`] reads.
pub const STATS_FORMAT: &str = "zarrpipe-stats/3";

/// Statistics JSON, parsed, with an error that says what is wrong with it: cut short (a
/// truncated file) or not JSON.
fn parse_stats(json: &str) -> Result<serde_json::Value> {
    serde_json::from_str(json).map_err(|error| {
        let what = match error.classify() {
            serde_json::error::Category::Eof => {
                "the statistics end early (a truncated file? write it again with `zarrpipe stats URL --json > FILE`)"
            }
            serde_json::error::Category::Syntax
            | serde_json::error::Category::Io
            | serde_json::error::Category::Data => {
                "the statistics are not valid JSON (a truncated or edited file? write it again with `zarrpipe stats URL --json > FILE`)"
            }
        };
        Error::BadOptions {
            reason: format!("{what}: {error}"),
        }
    })
}

/// `(channels, variables)` entries of parsed statistics, or an error when they are JSON of
/// another shape.
fn stats_entries(
    value: &serde_json::Value,
) -> Result<(Vec<serde_json::Value>, Vec<serde_json::Value>)> {
    let list = |value: &serde_json::Value| {
        value
            .as_array()
            .filter(|l| l.iter().all(|e| e.is_object()))
            .cloned()
    };
    match value {
        serde_json::Value::Array(_) => list(value).map(|variables| (Vec::new(), variables)),
        serde_json::Value::Object(report) => {
            let channels = report.get("channels").map_or(Some(Vec::new()), list);
            let variables = report.get("variables").map_or(Some(Vec::new()), list);
            channels.zip(variables)
        }
        _ => None,
    }
    .ok_or_else(|| Error::BadOptions {
        reason: "the statistics are not what `zarrpipe stats URL --json` prints (an object with `channels` and `variables`, or a list of per-variable entries)".into(),
    })
}

/// Statistics of CF-packed variables must have been computed on the values the batches
/// hold: decoded (format `zarrpipe-stats/3`, `values: decoded`) when the dataset is decoded,
/// stored when it is opened with `mask_and_scale` off. Earlier formats were always computed
/// on stored values, so they are refused for packed variables rather than misread.
fn check_values_decoded_alike(layout: &SampleLayout, report: &serde_json::Value) -> Result<()> {
    let packed: Vec<&str> = layout
        .variables()
        .iter()
        .filter(|variable| variable.encoding().decoding.is_some())
        .map(|variable| variable.name())
        .collect();
    if packed.is_empty() {
        return Ok(());
    }
    let decoded_here = layout.variables().iter().any(|v| v.decoding().is_some());
    let here = if decoded_here { "decoded" } else { "stored" };
    let format = report["format"].as_str().unwrap_or("a list of entries");
    let values = report["computed_over"]["values"].as_str();
    let reason = match (format, values) {
        (STATS_FORMAT, Some(values)) if values == here => return Ok(()),
        (STATS_FORMAT, Some(values)) => format!(
            "the statistics were computed on {values} values and the batches hold {here} ones"
        ),
        _ => format!(
            "the statistics ({format}) were computed on stored values, before zarrpipe decoded CF packing"
        ),
    };
    Err(Error::BadOptions {
        reason: format!(
            "{reason}, and {} {} CF encoding (scale_factor, add_offset, _FillValue): compute them again with `zarrpipe stats`{}",
            packed.join(", "),
            if packed.len() == 1 { "has" } else { "have" },
            if decoded_here { "" } else { " --raw-values" }
        ),
    })
}

/// What collation does beyond gathering.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct CollateOptions {
    /// The tensors' element type (GPU delivery; the CPU delivers float32).
    pub dtype: TensorDType,
    /// Per-channel normalisation, before NaN replacement.
    pub normalize: Option<Normalization>,
    /// Replace NaN (after normalisation) by this value.
    pub nan_fill: Option<f32>,
    /// Also deliver a `u8` tensor of the inputs' shape: 1 where the value was a number, 0
    /// where it was NaN.
    pub nan_mask: bool,
    /// Also deliver latitude weights `[batch, window]`.
    pub latitude_weights: Option<LatitudeWeights>,
    /// The layout's static variables, read once ([`StaticFields::read`]): needed when it has
    /// any ([`SampleLayout::is_static`]). The pipeline builder reads them.
    pub static_fields: Option<Arc<StaticFields>>,
    /// The coordinates of the layout's derived channels: needed when it has any. The
    /// pipeline builder reads them.
    pub derived: Option<Arc<DerivedChannels>>,
}

impl CollateOptions {
    /// Whether values need a pass after gathering.
    pub fn transforms_values(&self) -> bool {
        self.normalize.is_some() || self.nan_fill.is_some() || self.nan_mask
    }

    pub(crate) fn check(&self, layout: &SampleLayout) -> Result<()> {
        if self.dtype == TensorDType::U8 {
            return Err(Error::BadOptions {
                reason: "batch tensors are f32, bf16 or f16, not u8".into(),
            });
        }
        if let Some(weights) = &self.latitude_weights {
            weights.check(layout)?;
        }
        self.check_channels(layout)?;
        match &self.normalize {
            Some(normalization) => normalization.check(layout.channels().len()),
            None => Ok(()),
        }
    }

    /// Checks that the static fields and derived channels' coordinates `layout` needs are
    /// here.
    pub(crate) fn check_channels(&self, layout: &SampleLayout) -> Result<()> {
        if let Some(&number) = layout.static_variables().first() {
            let Some(fields) = &self.static_fields else {
                return Err(Error::BadOptions {
                    reason: format!(
                        "variable `{}` is static (it has none of the iterated dimensions): read the static fields once with `StaticFields::read(&layout, ..)` into `CollateOptions::static_fields` (the pipeline builder does)",
                        layout.variables()[number].name()
                    ),
                });
            };
            fields.check(layout)?;
        }
        if let Some(&(_, kind)) = layout.derived_channels().first() {
            let Some(derived) = &self.derived else {
                return Err(Error::DerivedChannel {
                    channel: kind.name(),
                    reason: "give its coordinates in `CollateOptions::derived` (the pipeline builder reads them)".into(),
                });
            };
            derived.check(layout)?;
        }
        Ok(())
    }
}

/// The value pass on the host: `values` is `[batch, steps x channels, plane]` with
/// `channels` channels per step; returns the NaN mask when asked for.
pub(crate) fn finish_on_host(
    values: &mut [f32],
    plane: usize,
    channels: usize,
    options: &CollateOptions,
) -> Option<Vec<u8>> {
    if !options.transforms_values() {
        return None;
    }
    let mut mask = vec![1u8; if options.nan_mask { values.len() } else { 0 }];
    let planes = values.par_chunks_mut(plane.max(1)).enumerate();
    let apply = |(index, values): (usize, &mut [f32]), mask: Option<&mut [u8]>| {
        let channel = index % channels.max(1);
        let (mean, std) = match &options.normalize {
            Some(n) => (n.mean[channel], n.std[channel]),
            None => (0.0, 1.0),
        };
        let normalize = options.normalize.is_some();
        let mut mask = mask.map(|mask| mask.iter_mut());
        for value in values.iter_mut() {
            let (finished, valid) = finish_value(*value, normalize, mean, std, options.nan_fill);
            *value = finished;
            if let Some(flag) = mask.as_mut().and_then(|mask| mask.next()) {
                *flag = valid as u8;
            }
        }
    };
    if options.nan_mask {
        planes
            .zip(mask.par_chunks_mut(plane.max(1)))
            .for_each(|(plane, mask)| apply(plane, Some(mask)));
        Some(mask)
    } else {
        planes.for_each(|plane| apply(plane, None));
        None
    }
}

/// One value, as the GPU's `finish` kernel computes it: normalised, then NaN replaced.
pub(crate) fn finish_value(
    value: f32,
    normalize: bool,
    mean: f32,
    std: f32,
    nan_fill: Option<f32>,
) -> (f32, bool) {
    let value = if normalize {
        (value - mean) / std
    } else {
        value
    };
    match (value.is_nan(), nan_fill) {
        (true, Some(fill)) => (fill, false),
        (nan, _) => (value, !nan),
    }
}

/// Area weights along latitude (cos(latitude), divided by their mean over the whole
/// coordinate, as WeatherBench weights losses), delivered per batch as `[batch, window]`.
#[derive(Clone, Debug, PartialEq)]
pub struct LatitudeWeights {
    /// The latitude dimension (windowed or iterated in the samples).
    pub dim: String,
    /// One weight per latitude of the whole coordinate.
    pub weights: Vec<f32>,
}

impl LatitudeWeights {
    /// From the latitude coordinate's values, in degrees.
    pub fn from_degrees(dim: impl Into<String>, latitudes: &[f64]) -> Self {
        let cosines: Vec<f64> = latitudes.iter().map(|lat| lat.to_radians().cos()).collect();
        let mean = cosines.iter().sum::<f64>() / cosines.len().max(1) as f64;
        Self {
            dim: dim.into(),
            weights: cosines.iter().map(|c| (c / mean) as f32).collect(),
        }
    }

    fn check(&self, layout: &SampleLayout) -> Result<()> {
        let bad = |reason: String| Err(Error::BadOptions { reason });
        match layout.sample_axis(&self.dim) {
            None => bad(format!(
                "latitude weights: `{}` is not windowed or iterated in the samples",
                self.dim
            )),
            Some(axis) if layout.sample_dims()[axis].length != self.weights.len() as u64 => {
                bad(format!(
                    "latitude weights: {} values for `{}`",
                    self.weights.len(),
                    self.dim
                ))
            }
            Some(_) => Ok(()),
        }
    }

    /// `[batch, window]`: each sample's weights along its latitude window (0 past the edge, in
    /// padded windows).
    pub fn batch(
        &self,
        layout: &SampleLayout,
        samples: &[zarrpipe_batcher::Sample],
    ) -> Result<ndarray::ArrayD<f32>> {
        let axis = layout
            .sample_axis(&self.dim)
            .ok_or_else(|| Error::BadOptions {
                reason: format!("latitude weights: `{}` is not a sample dimension", self.dim),
            })?;
        let dim = &layout.sample_dims()[axis];
        let window = if dim.iterated { 1 } else { dim.size as usize };
        Ok(ndarray::ArrayD::from_shape_fn(
            ndarray::IxDyn(&[samples.len(), window]),
            |index| {
                let latitude = samples[index[0]].origin[axis] as usize + index[1];
                self.weights.get(latitude).copied().unwrap_or(0.0)
            },
        ))
    }
}
