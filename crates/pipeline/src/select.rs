//! Subsets by coordinate value: a time range given as dates (CF-encoded time coordinates) or
//! numbers, a latitude/longitude box, resolved to index ranges of the sample dimensions.

use std::ops::Range;
use std::sync::Arc;

use zarrpipe_batcher::{SampleLayout, WindowSpec};
use zarrpipe_codec_gpu::{read_array, CpuDecoder};
use zarrpipe_core::decoded_values_f64;
use zarrpipe_store::{cf_unit_seconds, Dataset};

use crate::calendar::Calendar;
use crate::{Error, Result};

/// A coordinate value: a number in the coordinate's own units, or a date for CF time
/// coordinates (`2020-01-03`, `2020-01-03T06:00`).
#[derive(Clone, Debug, PartialEq)]
pub enum CoordValue {
    /// A value in the coordinate's units.
    Number(f64),
    /// A date, for CF time coordinates.
    Date(String),
}

impl From<f64> for CoordValue {
    fn from(value: f64) -> Self {
        CoordValue::Number(value)
    }
}

impl From<&str> for CoordValue {
    /// A number when it parses as one, otherwise a date.
    fn from(text: &str) -> Self {
        text.parse()
            .map(CoordValue::Number)
            .unwrap_or_else(|_| CoordValue::Date(text.to_string()))
    }
}

/// Samples whose windows (history and targets included) lie between two coordinate values of
/// a dimension, both ends included, in either order (latitude often runs from 90 down to -90).
#[derive(Clone, Debug, PartialEq)]
pub struct Selection {
    /// The dimension selected on (its 1-D coordinate variable has the same name).
    pub dim: String,
    /// One end of the range.
    pub from: CoordValue,
    /// The other end.
    pub to: CoordValue,
}

/// Channels of a dimension stacked as channels, picked by coordinate value, in the order
/// given (`--select level=500,850`, `.select_channels("level", [500.0, 850.0])`): variables
/// with the dimension get these channels, variables without it are not affected. On a sample
/// dimension one value is the range from it to itself.
#[derive(Clone, Debug, PartialEq)]
pub struct ChannelSelection {
    /// The dimension (its 1-D coordinate variable has the same name, else its indices count).
    pub dim: String,
    /// The coordinate values of the channels kept.
    pub values: Vec<CoordValue>,
}

/// The index range of `selection`'s dimension whose coordinate values lie between its ends.
pub async fn index_range(dataset: &Dataset, selection: &Selection) -> Result<Range<u64>> {
    let dim = &selection.dim;
    let fail = |reason: String| Error::Select {
        dim: dim.clone(),
        reason,
    };
    let values = coordinate_values(dataset, dim).await?;
    let coordinate = dataset.variable(dim)?;
    let units = coordinate
        .attributes()
        .get("units")
        .and_then(|u| u.as_str())
        .unwrap_or("");
    let calendar = coordinate
        .attributes()
        .get("calendar")
        .and_then(|c| c.as_str());
    let to_number = |value: &CoordValue| match value {
        CoordValue::Number(number) => Ok(*number),
        CoordValue::Date(date) => cf_time(date, units, calendar).map_err(fail),
    };
    let (a, b) = (to_number(&selection.from)?, to_number(&selection.to)?);
    let (low, high) = (a.min(b), a.max(b));
    let inside: Vec<usize> = (0..values.len())
        .filter(|&i| low <= values[i] && values[i] <= high)
        .collect();
    let (Some(&first), Some(&last)) = (inside.first(), inside.last()) else {
        // Dates are shown as dates (when the units are CF time), numbers as numbers.
        let dates = matches!(selection.from, CoordValue::Date(_))
            || matches!(selection.to, CoordValue::Date(_));
        let show = |value: f64| match dates.then(|| cf_date(value, units, calendar)).flatten() {
            Some(date) => date,
            None => format!("{value}"),
        };
        let finite = values.iter().copied().filter(|v| v.is_finite());
        let range = finite.fold(None, |range: Option<(f64, f64)>, v| {
            Some(range.map_or((v, v), |(lo, hi)| (lo.min(v), hi.max(v))))
        });
        let covers = match range {
            Some((lo, hi)) => format!("the data covers {} to {}", show(lo), show(hi)),
            None => "the coordinate has no values".to_string(),
        };
        return Err(fail(format!(
            "no coordinate value between {} and {} ({covers})",
            show(low),
            show(high)
        )));
    };
    if last - first + 1 != inside.len() {
        return Err(fail(
            "the coordinate values in the range are not contiguous".into(),
        ));
    }
    Ok(first as u64..last as u64 + 1)
}

/// The values of the 1-D coordinate variable of `dim`, CF-decoded as xarray decodes them.
pub(crate) async fn coordinate_values(dataset: &Dataset, dim: &str) -> Result<Vec<f64>> {
    let coordinate = dataset
        .variable(dim)
        .ok()
        .filter(|variable| variable.dims() == [dim.to_string()])
        .ok_or_else(|| Error::Select {
            dim: dim.to_string(),
            reason: "no 1-D coordinate variable of that name".into(),
        })?;
    let bytes = read_array(coordinate, Arc::new(CpuDecoder::new()), 8).await?;
    Ok(decoded_values_f64(
        coordinate.dtype(),
        coordinate.decoding(),
        &bytes,
    ))
}

/// `spec` with each selection resolved against `dataset`'s coordinates: on a sample
/// dimension (iterated or windowed) an index range; on a dimension stacked as channels the
/// indices of the channels kept ([`WindowSpec::stacked`]), from a range or a list of values.
pub async fn resolve_selections(
    dataset: &Dataset,
    mut spec: WindowSpec,
    selections: &[Selection],
    channels: &[ChannelSelection],
) -> Result<WindowSpec> {
    for selection in selections {
        let range = index_range(dataset, selection).await?;
        spec = match is_sample_dim(dataset, &spec, &selection.dim) {
            true => spec.select_indices(selection.dim.clone(), range),
            false => with_stacked(spec, &selection.dim, range.collect())?,
        };
    }
    for selection in channels {
        let dim = &selection.dim;
        if is_sample_dim(dataset, &spec, dim) {
            let [value] = selection.values.as_slice() else {
                return Err(Error::Select {
                    dim: dim.clone(),
                    reason: "it is iterated or windowed: select a range FROM..TO of it, not a list of values (a list picks channels of a dimension stacked as channels)".into(),
                });
            };
            let range = Selection {
                dim: dim.clone(),
                from: value.clone(),
                to: value.clone(),
            };
            let range = index_range(dataset, &range).await?;
            spec = spec.select_indices(dim.clone(), range);
            continue;
        }
        let indices = channel_indices(dataset, dim, &selection.values).await?;
        spec = with_stacked(spec, dim, indices)?;
    }
    Ok(spec)
}

/// Whether `dim` is a sample dimension under `spec`: windowed, iterated, a batch dim, or the
/// dataset's time dimension iterated by default.
fn is_sample_dim(dataset: &Dataset, spec: &WindowSpec, dim: &str) -> bool {
    let windowed = spec.windows.iter().any(|window| window.dim == dim);
    let batched = spec.batch_dims.iter().any(|(name, _)| name == dim);
    let iterated = match &spec.iterate {
        Some(dims) => dims.iter().any(|name| name == dim),
        None => dataset.time_dim().is_some_and(|time| time.name == dim),
    };
    windowed || batched || iterated
}

/// `spec` with stacked dimension `dim` cut to `indices` (once per dimension).
fn with_stacked(mut spec: WindowSpec, dim: &str, indices: Vec<u64>) -> Result<WindowSpec> {
    if spec.stacked.iter().any(|(name, _)| name == dim) {
        return Err(Error::Select {
            dim: dim.to_string(),
            reason: "selected twice: give its channels in one selection".into(),
        });
    }
    spec.stacked.push((dim.to_string(), indices));
    Ok(spec)
}

/// The indices along `dim` of the channels `values` pick, in their order: numbers are
/// matched (exactly) against its coordinate's values, or its indices where it has no
/// coordinate; names against its labels ([`dim_labels`]). The coordinate is read once.
async fn channel_indices(dataset: &Dataset, dim: &str, values: &[CoordValue]) -> Result<Vec<u64>> {
    let fail = |reason: String| Error::Select {
        dim: dim.to_string(),
        reason,
    };
    let coordinate = match has_coordinate(dataset, dim) {
        true => Some(coordinate_values(dataset, dim).await?),
        false => None,
    };
    let counted: Vec<f64>;
    let numbers: &[f64] = match &coordinate {
        Some(values) => values,
        None => {
            counted = (0..dim_length(dataset, dim))
                .map(|index| index as f64)
                .collect();
            &counted
        }
    };
    let mut labels: Option<Vec<String>> = None;
    let mut indices = Vec::with_capacity(values.len());
    for value in values {
        let index = match value {
            CoordValue::Number(wanted) => numbers
                .iter()
                .position(|&value| same_number(value, *wanted))
                .ok_or_else(|| {
                    let shown: Vec<String> =
                        numbers.iter().take(40).map(|v| format!("{v}")).collect();
                    let more = if numbers.len() > 40 { ", ..." } else { "" };
                    fail(format!(
                        "no coordinate value {wanted} (its values: {}{more})",
                        shown.join(", ")
                    ))
                })?,
            CoordValue::Date(text) => labels
                .get_or_insert_with(|| labels_of(dataset, dim, coordinate.as_deref()))
                .iter()
                .position(|label| label == text)
                .ok_or_else(|| fail(format!("no channel named `{text}`")))?,
        };
        indices.push(index as u64);
    }
    Ok(indices)
}

/// Whether `dim` has a 1-D coordinate variable of its name.
fn has_coordinate(dataset: &Dataset, dim: &str) -> bool {
    dataset
        .variable(dim)
        .is_ok_and(|coordinate| coordinate.dims() == [dim.to_string()])
}

fn dim_length(dataset: &Dataset, dim: &str) -> u64 {
    dataset.dims().get(dim).copied().unwrap_or(0)
}

/// The names of `dim`'s elements: its 1-D coordinate's values (`500`, `0.25`), or for
/// anemoi's `variable` dimension the names its root attribute `variables` lists; empty when
/// neither exists.
pub async fn dim_labels(dataset: &Dataset, dim: &str) -> Result<Vec<String>> {
    let coordinate = match has_coordinate(dataset, dim) {
        true => Some(coordinate_values(dataset, dim).await?),
        false => None,
    };
    Ok(labels_of(dataset, dim, coordinate.as_deref()))
}

/// [`dim_labels`] from the coordinate's values, when `dim` has a coordinate.
fn labels_of(dataset: &Dataset, dim: &str, coordinate: Option<&[f64]>) -> Vec<String> {
    if let Some(values) = coordinate {
        return values.iter().map(|&value| number_label(value)).collect();
    }
    let named = dataset.attributes().get("variables").and_then(|names| {
        names
            .as_array()?
            .iter()
            .map(|name| name.as_str().map(str::to_string))
            .collect::<Option<Vec<String>>>()
    });
    match named {
        Some(names) if dim == "variable" && names.len() as u64 == dim_length(dataset, dim) => names,
        _ => Vec::new(),
    }
}

/// A coordinate value as a label: as a float32 reads where it is one (`0.1` rather than
/// `0.10000000149011612`), else as a float64.
fn number_label(value: f64) -> String {
    let single = value as f32;
    match f64::from(single) == value {
        true => format!("{single}"),
        false => format!("{value}"),
    }
}

/// Whether a coordinate value is the number a user wrote: equal, or equal as float32 for a
/// coordinate that is a float32 value (`0.1` picks the float32 0.1).
fn same_number(value: f64, wanted: f64) -> bool {
    value == wanted || (f64::from(value as f32) == value && value as f32 == wanted as f32)
}

/// Names the channels of `layout` along each stacked dimension by [`dim_labels`].
pub async fn label_channels(dataset: &Dataset, layout: &mut SampleLayout) -> Result<()> {
    let mut dims: Vec<String> = layout
        .channels()
        .iter()
        .flat_map(|channel| channel.index.iter().map(|(dim, _)| dim.clone()))
        .collect();
    dims.sort();
    dims.dedup();
    for dim in dims {
        let labels = dim_labels(dataset, &dim).await?;
        if !labels.is_empty() {
            layout.label_stacked(&dim, &labels);
        }
    }
    Ok(())
}

/// A date as a number in CF `units` (`hours since 2000-01-01`) of `calendar` (none:
/// Gregorian; `noleap`, `360_day` and the other CF calendars as cftime counts them).
fn cf_time(date: &str, units: &str, calendar: Option<&str>) -> std::result::Result<f64, String> {
    let calendar = Calendar::parse(calendar)?;
    let (unit, epoch) = units.split_once(" since ").ok_or_else(|| {
        format!("a date was given, but the units `{units}` are not `<unit> since <date>`")
    })?;
    let seconds_per_unit = cf_unit_seconds(unit)
        .ok_or_else(|| format!("time unit `{}` is not supported", unit.trim()))?;
    Ok((seconds(date, calendar)? - seconds(epoch.trim(), calendar)?) / seconds_per_unit)
}

/// Values of a CF time coordinate (`units` `hours since 2020-01-01`, Gregorian `calendar`)
/// as seconds since 1970-01-01 00:00 UTC (solar time needs the real calendar).
pub(crate) fn cf_seconds_since_1970(
    values: &[f64],
    units: &str,
    calendar: Option<&str>,
) -> std::result::Result<Vec<f64>, String> {
    if Calendar::parse(calendar)? != Calendar::Gregorian {
        return Err(format!(
            "calendar `{}` has no seconds since 1970 (derived time channels need the Gregorian calendar)",
            calendar.unwrap_or_default()
        ));
    }
    let epoch = cf_time("1970-01-01", units, calendar)?;
    let (unit, _) = units.split_once(" since ").unwrap_or_default();
    let seconds_per_unit = cf_unit_seconds(unit).unwrap_or(1.0);
    Ok(values
        .iter()
        .map(|value| (value - epoch) * seconds_per_unit)
        .collect())
}

/// A number in CF `units` (`hours since 2000-01-01`) of `calendar` as a date,
/// `2000-01-02T06:00`; `None` when the units are not CF time or the calendar is unknown.
pub(crate) fn cf_date(value: f64, units: &str, calendar: Option<&str>) -> Option<String> {
    let calendar = Calendar::parse(calendar).ok()?;
    let (unit, epoch) = units.split_once(" since ")?;
    let seconds_per_unit = cf_unit_seconds(unit)?;
    let total = seconds(epoch.trim(), calendar).ok()? + value * seconds_per_unit;
    if !total.is_finite() || total.abs() > 1e15 {
        return None;
    }
    let total = total.round() as i64;
    let (days, rest) = (total.div_euclid(86400), total.rem_euclid(86400));
    let (year, month, day) = calendar.date(days);
    let (hour, minute, second) = (rest / 3600, rest % 3600 / 60, rest % 60);
    Some(match second {
        0 => format!("{year:04}-{month:02}-{day:02}T{hour:02}:{minute:02}"),
        _ => format!("{year:04}-{month:02}-{day:02}T{hour:02}:{minute:02}:{second:02}"),
    })
}

/// Seconds from `calendar`'s origin of `YYYY-MM-DD[( |T)HH:MM[:SS]]`.
fn seconds(date: &str, calendar: Calendar) -> std::result::Result<f64, String> {
    let bad = || format!("`{date}` is not a date like 2020-01-31 or 2020-01-31T06:00");
    let (day, time) = date.split_once(['T', ' ']).unwrap_or((date, "00:00"));
    let parts: Vec<i64> = day
        .split('-')
        .map(|p| p.parse().map_err(|_| bad()))
        .collect::<std::result::Result<_, _>>()?;
    let [year, month, day] = parts[..] else {
        return Err(bad());
    };
    let days = calendar.days(year, month, day)?;
    let time = time.trim_end_matches('Z');
    let clock: Vec<f64> = time
        .split(':')
        .map(|p| p.parse().map_err(|_| bad()))
        .collect::<std::result::Result<_, _>>()?;
    let [hours, minutes, seconds] = match clock[..] {
        [h] => [h, 0.0, 0.0],
        [h, m] => [h, m, 0.0],
        [h, m, s] => [h, m, s],
        _ => return Err(bad()),
    };
    Ok(days as f64 * 86400.0 + hours * 3600.0 + minutes * 60.0 + seconds)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dates_become_cf_numbers() {
        assert_eq!(
            cf_time("2000-01-02", "hours since 2000-01-01", None),
            Ok(24.0)
        );
        assert_eq!(
            cf_time(
                "2000-01-01T06:30",
                "minutes since 2000-01-01 00:00:00",
                Some("standard")
            ),
            Ok(390.0)
        );
        assert_eq!(
            cf_time("2001-01-01", "days since 2000-01-01", None),
            Ok(366.0)
        ); // 2000 is a leap year
        assert_eq!(
            cf_time("2001-03-01", "days since 2001-02-28", Some("noleap")),
            Ok(1.0)
        );
        assert_eq!(
            cf_time("2001-01-01", "days since 2000-01-01", Some("360_day")),
            Ok(360.0)
        );
        assert!(cf_time("2001-02-29", "days since 2000-01-01", Some("noleap")).is_err());
        assert!(cf_time("2000-01-02", "hours since 2000-01-01", Some("lunar")).is_err());
        assert!(cf_time("2000-13-02", "hours since 2000-01-01", None).is_err());
        assert_eq!(
            cf_seconds_since_1970(&[0.0, 1.5], "hours since 1970-01-02 00:00:00", None),
            Ok(vec![86_400.0, 86_400.0 + 5400.0])
        );
        assert_eq!(
            cf_seconds_since_1970(&[2e9], "nanoseconds since 1970-01-01", Some("standard")),
            Ok(vec![2.0])
        );
        assert!(cf_seconds_since_1970(&[0.0], "K", None).is_err());
        assert!(cf_time("2000-01-02", "K", None).is_err());
    }

    #[test]
    fn cf_numbers_become_dates() {
        let units = "hours since 2000-01-01";
        assert_eq!(cf_date(30.0, units, None).unwrap(), "2000-01-02T06:00");
        assert_eq!(cf_date(-24.0, units, None).unwrap(), "1999-12-31T00:00");
        assert_eq!(
            cf_date(0.5, "minutes since 2000-01-01", None).unwrap(),
            "2000-01-01T00:00:30"
        );
        assert_eq!(cf_date(1.0, "K", None), None);
        assert_eq!(
            cf_date(59.0, "days since 2001-01-01", Some("noleap")).unwrap(),
            "2001-03-01T00:00"
        );
        assert_eq!(
            cf_date(59.0, "days since 2001-01-01", Some("360_day")).unwrap(),
            "2001-02-30T00:00"
        );
    }

    #[test]
    fn text_is_a_number_or_a_date() {
        assert_eq!(CoordValue::from("-30.5"), CoordValue::Number(-30.5));
        assert_eq!(
            CoordValue::from("2020-01-01"),
            CoordValue::Date("2020-01-01".into())
        );
    }
}
