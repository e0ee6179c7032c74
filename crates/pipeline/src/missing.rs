//! Finding missing time steps ([`MissingSteps`]): gaps in the time coordinate and stored steps
//! whose data is absent.
//!
//! - **Gaps.** The coordinate's regular frequency is its most common difference between
//!   neighbours (in its own units: a CF `hours since ...` coordinate, as xarray writes one,
//!   gives hours); a difference of k frequencies leaves out k - 1 steps, named as dates (CF
//!   units, Gregorian calendars) or coordinate values.
//! - **Absent data.** One listing of each variable's chunk keys: a step is missing for a
//!   variable when every chunk holding its field at that step is absent (a field partly
//!   absent, say ocean tiles of a land variable, is not). For sharded arrays the shards are
//!   what is listed. Chunks that are stored but hold only the fill value are not looked for:
//!   that needs reading every chunk, and zarr-python and xarray do not write such chunks by
//!   default (`write_empty_chunks=False`), so all-fill steps written by them are absent ones.
//!   A store that cannot be listed (plain HTTP) is not checked, and the result says so.

use std::collections::{BTreeMap, HashSet};

use futures::TryStreamExt;
use zarrpipe_batcher::{AbsentStep, Gap, Missing, MissingSteps, SampleLayout};
use zarrpipe_store::{Dataset, Variable};

use crate::select::{cf_date, coordinate_values};
use crate::Result;

/// The most chunks of one variable whose presence is checked; larger grids are not checked
/// (and the result says so), since the check visits every chunk key.
pub const MAX_CHECKED_CHUNKS: u64 = 1 << 24;

/// The time dimension of `layout`: the dataset's ([`Dataset::time_dim`]) when it is a
/// sample dimension, else the first sample dimension whose 1-D coordinate has CF time units
/// (`... since ...`).
pub fn time_dim(dataset: &Dataset, layout: &SampleLayout) -> Option<String> {
    let dims = layout.sample_dims();
    if let Some(time) = dataset.time_dim() {
        if dims.iter().any(|dim| dim.name == time.name) {
            return Some(time.name.clone());
        }
    }
    dims.iter()
        .find(|dim| {
            let units = dataset
                .variable(&dim.name)
                .ok()
                .and_then(|c| c.attributes().get("units")?.as_str().map(str::to_string));
            units.is_some_and(|units| units.contains(" since "))
        })
        .map(|dim| dim.name.clone())
}

/// `layout` with the missing steps of its time dimension found and handled by `policy`
/// (see [`SampleLayout::with_missing_steps`]); unchanged when it has no time dimension.
pub async fn apply_missing_steps(
    dataset: &Dataset,
    layout: SampleLayout,
    policy: Missing,
) -> Result<SampleLayout> {
    if policy == Missing::Ignore {
        return Ok(layout);
    }
    let Some(dim) = time_dim(dataset, &layout) else {
        return Ok(layout);
    };
    let names: Vec<&str> = layout.variables().iter().map(|v| v.name()).collect();
    let steps = find_missing_steps(dataset, &names, &dim).await?;
    Ok(layout.with_missing_steps(steps, policy)?)
}

/// The missing steps along `dim` of `variables` (names in `dataset`): gaps in the coordinate
/// of `dim`, and steps where a variable's whole field is absent.
pub async fn find_missing_steps(
    dataset: &Dataset,
    variables: &[impl AsRef<str>],
    dim: &str,
) -> Result<MissingSteps> {
    let variables: Vec<&std::sync::Arc<Variable>> = variables
        .iter()
        .map(|name| dataset.variable(name.as_ref()))
        .collect::<std::result::Result<_, _>>()?;
    let length = variables
        .iter()
        .find_map(|v| Some(v.shape()[v.axis(dim)?]))
        .unwrap_or(0);
    let mut steps = MissingSteps {
        dim: dim.to_string(),
        length,
        ..MissingSteps::default()
    };
    let coordinate = Coordinate::read(dataset, dim).await?;
    if let Some(coordinate) = &coordinate {
        find_gaps(coordinate, &mut steps);
    }
    let mut absent: BTreeMap<u64, Vec<String>> = BTreeMap::new();
    for variable in &variables {
        let Some(axis) = variable.axis(dim) else {
            continue;
        };
        match absent_steps(dataset, variable, axis).await {
            Ok(indices) => {
                for index in indices {
                    absent
                        .entry(index)
                        .or_default()
                        .push(variable.name().into());
                }
            }
            Err(why) => steps.unchecked.push(why),
        }
    }
    steps.absent = absent
        .into_iter()
        .map(|(index, variables)| AbsentStep {
            index,
            date: match &coordinate {
                Some(coordinate) => coordinate.label_at(index),
                None => format!("{dim}[{index}]"),
            },
            variables,
        })
        .collect();
    Ok(steps)
}

/// The values of a 1-D coordinate and how to name them.
struct Coordinate {
    dim: String,
    values: Vec<f64>,
    /// CF time units (`hours since 2020-01-01`).
    units: Option<String>,
    /// Its CF `calendar` (`None`: Gregorian).
    calendar: Option<String>,
}

impl Coordinate {
    async fn read(dataset: &Dataset, dim: &str) -> Result<Option<Self>> {
        let Ok(variable) = dataset.variable(dim) else {
            return Ok(None);
        };
        if variable.dims() != [dim.to_string()] {
            return Ok(None);
        }
        let attribute = |name: &str| variable.attributes().get(name)?.as_str();
        let units = attribute("units")
            .filter(|units| units.contains(" since "))
            .map(str::to_string);
        Ok(Some(Self {
            dim: dim.to_string(),
            values: coordinate_values(dataset, dim).await?,
            units,
            calendar: attribute("calendar").map(str::to_string),
        }))
    }

    fn label(&self, value: f64) -> String {
        let date = self
            .units
            .as_deref()
            .and_then(|units| cf_date(value, units, self.calendar.as_deref()));
        date.unwrap_or_else(|| format!("{}={value}", self.dim))
    }

    fn label_at(&self, index: u64) -> String {
        match self.values.get(index as usize) {
            Some(&value) => self.label(value),
            None => format!("{}[{index}]", self.dim),
        }
    }

    /// The frequency as text: `6 hours` for CF time units, else the value and the units.
    fn frequency_text(&self, frequency: f64) -> String {
        let Some((unit, _)) = self.units.as_deref().and_then(|u| u.split_once(" since ")) else {
            return format!("{frequency}");
        };
        let seconds = frequency
            * match unit.trim() {
                "seconds" | "second" | "s" => 1.0,
                "minutes" | "minute" | "min" => 60.0,
                "hours" | "hour" | "h" => 3600.0,
                "days" | "day" | "d" => 86400.0,
                _ => return format!("{frequency} {unit}"),
            };
        let (amount, name) = if seconds % 86400.0 == 0.0 {
            (seconds / 86400.0, "day")
        } else if seconds % 3600.0 == 0.0 {
            (seconds / 3600.0, "hour")
        } else if seconds % 60.0 == 0.0 {
            (seconds / 60.0, "minute")
        } else {
            (seconds, "second")
        };
        let plural = if amount == 1.0 { "" } else { "s" };
        format!("{amount} {name}{plural}")
    }
}

/// The coordinate's frequency (its most common difference; the smallest of equally common
/// ones) and the steps it leaves out.
fn find_gaps(coordinate: &Coordinate, steps: &mut MissingSteps) {
    let values = &coordinate.values;
    if values.len() < 2 {
        return;
    }
    let differences: Vec<f64> = values.windows(2).map(|pair| pair[1] - pair[0]).collect();
    if let Some(at) = differences
        .iter()
        .position(|d| !(d.is_finite() && *d > 0.0))
    {
        steps.unchecked.push(format!(
            "gaps: the `{}` coordinate does not increase from step {at} to {} ({} to {})",
            coordinate.dim,
            at + 1,
            coordinate.label(values[at]),
            coordinate.label(values[at + 1]),
        ));
        return;
    }
    let mut counts: BTreeMap<u64, usize> = BTreeMap::new();
    for difference in &differences {
        *counts.entry(difference.to_bits()).or_default() += 1;
    }
    let most = counts.values().copied().max().unwrap_or(0);
    let frequency = counts
        .iter()
        .filter(|(_, &count)| count == most)
        .map(|(&bits, _)| f64::from_bits(bits))
        .fold(f64::INFINITY, f64::min);
    steps.frequency = Some(frequency);
    steps.frequency_text = Some(coordinate.frequency_text(frequency));
    for (after, difference) in differences.iter().enumerate() {
        let multiple = (difference / frequency).round();
        if multiple < 2.0 {
            continue;
        }
        let left_out = multiple as u64 - 1;
        let named = left_out.min(MissingSteps::MAX_NAMED as u64);
        steps.gaps.push(Gap {
            after: after as u64,
            steps: left_out,
            dates: (1..=named)
                .map(|k| coordinate.label(values[after] + k as f64 * frequency))
                .collect(),
        });
    }
}

/// The steps along `axis` at which every chunk of `variable` is absent, from one listing;
/// `Err` says why they were not checked.
async fn absent_steps(
    dataset: &Dataset,
    variable: &Variable,
    axis: usize,
) -> std::result::Result<Vec<u64>, String> {
    let chunks: u64 = variable.chunk_grid_shape().iter().product();
    if chunks > MAX_CHECKED_CHUNKS {
        return Err(format!(
            "absent steps of `{}`: {chunks} chunks, more than the {MAX_CHECKED_CHUNKS} checked",
            variable.name()
        ));
    }
    if !dataset.can_list() {
        return Err(format!(
            "absent steps of `{}`: a plain HTTP store cannot be listed",
            variable.name()
        ));
    }
    let prefix = variable.list_prefix();
    let listed: HashSet<String> = dataset
        .store()
        .list(prefix.as_ref())
        .map_ok(|object| object.location.to_string())
        .try_collect()
        .await
        .map_err(|error| {
            format!(
                "absent steps of `{}`: the store cannot be listed ({error})",
                variable.name()
            )
        })?;
    let along = variable.chunk_grid_shape()[axis];
    let mut present = vec![false; along as usize];
    for indices in variable.every_chunk() {
        let slot = &mut present[indices[axis] as usize];
        if !*slot && listed.contains(&variable.chunk_key(&indices)) {
            *slot = true;
        }
    }
    let chunk = variable.chunk_shape()[axis].max(1);
    let length = variable.shape()[axis];
    let absent = present.iter().enumerate().filter(|(_, &present)| !present);
    Ok(absent
        .flat_map(|(index, _)| {
            let start = index as u64 * chunk;
            start..(start + chunk).min(length)
        })
        .collect())
}
