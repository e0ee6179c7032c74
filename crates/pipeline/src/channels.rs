//! What the channels that are not read batch by batch need, read when a pipeline is built:
//! the static variables' whole fields, and the latitude, longitude and time coordinates of
//! the derived channels (time decoded from its CF units, as xarray decodes it).

use std::sync::Arc;

use zarrpipe_batcher::{Missing, MissingSteps, Needs, SampleLayout};
use zarrpipe_collate::{Coordinate, DerivedChannels, StaticFields};
use zarrpipe_store::{Dataset, Variable};

use crate::select::{cf_seconds_since_1970, coordinate_values};
use crate::Result;

/// The static fields and derived-channel coordinates of `layout` (each `None` when it has
/// none), for [`CollateOptions`](zarrpipe_collate::CollateOptions)' `static_fields` and
/// `derived`; reads use up to `concurrency` requests at once.
pub async fn read_channel_inputs(
    dataset: &Dataset,
    layout: &SampleLayout,
    concurrency: usize,
) -> Result<(Option<Arc<StaticFields>>, Option<Arc<DerivedChannels>>)> {
    let fields = match layout.static_variables().is_empty() {
        true => None,
        false => Some(Arc::new(StaticFields::read(layout, concurrency).await?)),
    };
    let derived = layout.derived_channels();
    if derived.is_empty() {
        return Ok((fields, None));
    }
    let needs = derived
        .iter()
        .fold(Needs::default(), |all, &(_, kind)| Needs {
            latitude: all.latitude || kind.needs().latitude,
            longitude: all.longitude || kind.needs().longitude,
            time: all.time || kind.needs().time,
        });
    let mut coordinates = DerivedChannels::default();
    if needs.latitude {
        coordinates.latitude = coordinate(dataset, layout, Axis::Latitude).await?;
    }
    if needs.longitude {
        coordinates.longitude = coordinate(dataset, layout, Axis::Longitude).await?;
    }
    if needs.time {
        coordinates.time = coordinate(dataset, layout, Axis::Time).await?;
    }
    // The collators check that every derived channel has what it needs, with the reason.
    Ok((fields, Some(Arc::new(coordinates))))
}

#[derive(Clone, Copy, PartialEq)]
enum Axis {
    Latitude,
    Longitude,
    Time,
}

impl Axis {
    /// Whether `variable`, the 1-D coordinate of a dimension, is this axis: by its name
    /// (`latitude`, `lat`; `longitude`, `lon`; `time`) or its CF attributes.
    fn is(self, variable: &Variable) -> bool {
        let text = |key: &str| {
            variable
                .attributes()
                .get(key)
                .and_then(|value| value.as_str())
                .unwrap_or("")
                .to_string()
        };
        let (units, standard_name) = (text("units"), text("standard_name"));
        let name = variable.name();
        match self {
            Axis::Latitude => {
                matches!(name, "latitude" | "lat")
                    || standard_name == "latitude"
                    || matches!(
                        units.as_str(),
                        "degrees_north" | "degree_north" | "degrees_N" | "degree_N"
                    )
            }
            Axis::Longitude => {
                matches!(name, "longitude" | "lon")
                    || standard_name == "longitude"
                    || matches!(
                        units.as_str(),
                        "degrees_east" | "degree_east" | "degrees_E" | "degree_E"
                    )
            }
            Axis::Time => name == "time" || standard_name == "time" || units.contains(" since "),
        }
    }
}

/// The coordinate of the sample dimension that is `axis` (in degrees, or seconds since
/// 1970 for time), else of another dimension that is (the collators then say it must be
/// windowed or iterated); `None` when the dataset has none.
async fn coordinate(
    dataset: &Dataset,
    layout: &SampleLayout,
    axis: Axis,
) -> Result<Option<Coordinate>> {
    let is_axis = |variable: &&std::sync::Arc<Variable>| {
        variable.dims() == [variable.name().to_string()] && axis.is(variable)
    };
    let found = layout
        .sample_dims()
        .iter()
        .find_map(|dim| dataset.variable(&dim.name).ok().filter(is_axis))
        .or_else(|| dataset.coordinates().find(is_axis));
    let Some(variable) = found else {
        return Ok(None);
    };
    let dim = variable.name().to_string();
    let values = coordinate_values(dataset, &dim).await?;
    let values = match axis {
        Axis::Latitude | Axis::Longitude => values,
        Axis::Time => {
            let attribute = |key: &str| {
                variable
                    .attributes()
                    .get(key)
                    .and_then(|value| value.as_str())
            };
            let units = attribute("units").unwrap_or("");
            cf_seconds_since_1970(&values, units, attribute("calendar")).map_err(|reason| {
                crate::Error::TimeCoordinate {
                    dim: dim.clone(),
                    reason,
                }
            })?
        }
    };
    let values = match axis {
        Axis::Time => on_fill_grid(layout, &dim, values),
        Axis::Latitude | Axis::Longitude => values,
    };
    Ok(Some(Coordinate { dim, values }))
}

/// The times of `dim`'s stored steps laid out as the samples see them: under
/// [`Missing::Fill`] with gaps, time is laid out on its regular grid, and a gap's steps get
/// the times between their stored neighbours (evenly spaced), so derived channels are
/// computed at a gap's own time. Otherwise the stored times as they are.
fn on_fill_grid(layout: &SampleLayout, dim: &str, values: Vec<f64>) -> Vec<f64> {
    let Some((steps, Missing::Fill)) = layout.missing_steps() else {
        return values;
    };
    let on_grid = layout
        .sample_axis(dim)
        .is_some_and(|axis| layout.sample_dims()[axis].length != steps.length);
    if steps.dim != dim || steps.gaps.is_empty() || !on_grid {
        return values;
    }
    grid_times(steps, &values)
}

/// `values` (one per stored step) on `steps`' regular grid, gap steps interpolated.
fn grid_times(steps: &MissingSteps, values: &[f64]) -> Vec<f64> {
    let grid = steps.grid();
    let mut times = Vec::with_capacity(grid.len());
    // (grid position, value) of the last stored step before.
    let mut before: Option<(usize, f64)> = None;
    for (position, step) in grid.iter().enumerate() {
        match step.and_then(|stored| values.get(stored as usize)) {
            Some(&value) => {
                times.push(value);
                before = Some((position, value));
            }
            None => {
                let after = grid[position..].iter().enumerate().find_map(|(k, step)| {
                    let value = values.get((*step)? as usize)?;
                    Some((position + k, *value))
                });
                times.push(match (before, after) {
                    (Some((p, a)), Some((q, b))) => {
                        a + (b - a) * (position - p) as f64 / (q - p) as f64
                    }
                    _ => f64::NAN,
                });
            }
        }
    }
    times
}
