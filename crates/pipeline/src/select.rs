//! Subsets by coordinate value: a time range given as dates (CF-encoded time coordinates) or
//! numbers, a latitude/longitude box, resolved to index ranges of the sample dimensions.

use std::ops::Range;
use std::sync::Arc;

use zarrpipe_batcher::WindowSpec;
use zarrpipe_codec_gpu::{read_array, CpuDecoder};
use zarrpipe_core::decoded_values_f64;
use zarrpipe_store::Dataset;

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
        let show = |value: f64| match dates.then(|| cf_date(value, units)).flatten() {
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

/// `spec` with each selection resolved to an index range of `dataset` (reads coordinates).
pub async fn resolve_selections(
    dataset: &Dataset,
    mut spec: WindowSpec,
    selections: &[Selection],
) -> Result<WindowSpec> {
    for selection in selections {
        let range = index_range(dataset, selection).await?;
        spec = spec.select_indices(selection.dim.clone(), range);
    }
    Ok(spec)
}

/// A date as a number in CF `units` (`hours since 2000-01-01`), proleptic Gregorian calendar.
fn cf_time(date: &str, units: &str, calendar: Option<&str>) -> std::result::Result<f64, String> {
    if let Some(calendar) =
        calendar.filter(|c| !matches!(*c, "standard" | "gregorian" | "proleptic_gregorian"))
    {
        return Err(format!(
            "calendar `{calendar}` is not supported (only the Gregorian calendar)"
        ));
    }
    let (unit, epoch) = units.split_once(" since ").ok_or_else(|| {
        format!("a date was given, but the units `{units}` are not `<unit> since <date>`")
    })?;
    let seconds_per_unit = unit_seconds(unit)
        .ok_or_else(|| format!("time unit `{}` is not supported", unit.trim()))?;
    Ok((seconds(date)? - seconds(epoch.trim())?) / seconds_per_unit)
}

/// Seconds in a CF time unit (`hours`), as xarray reads them.
fn unit_seconds(unit: &str) -> Option<f64> {
    Some(match unit.trim() {
        "nanoseconds" | "nanosecond" | "ns" => 1e-9,
        "microseconds" | "microsecond" | "us" => 1e-6,
        "milliseconds" | "millisecond" | "ms" => 1e-3,
        "seconds" | "second" | "s" => 1.0,
        "minutes" | "minute" | "min" => 60.0,
        "hours" | "hour" | "h" => 3600.0,
        "days" | "day" | "d" => 86400.0,
        _ => return None,
    })
}

/// Values of a CF time coordinate (`units` `hours since 2020-01-01`, Gregorian `calendar`)
/// as seconds since 1970-01-01 00:00 UTC.
pub(crate) fn cf_seconds_since_1970(
    values: &[f64],
    units: &str,
    calendar: Option<&str>,
) -> std::result::Result<Vec<f64>, String> {
    let epoch = cf_time("1970-01-01", units, calendar)?;
    let (unit, _) = units.split_once(" since ").unwrap_or_default();
    let seconds_per_unit = unit_seconds(unit).unwrap_or(1.0);
    Ok(values
        .iter()
        .map(|value| (value - epoch) * seconds_per_unit)
        .collect())
}

/// A number in CF `units` (`hours since 2000-01-01`) as a date, `2000-01-02T06:00`; `None`
/// when the units are not CF time.
pub(crate) fn cf_date(value: f64, units: &str) -> Option<String> {
    let (unit, epoch) = units.split_once(" since ")?;
    let seconds_per_unit = unit_seconds(unit)?;
    let total = seconds(epoch.trim()).ok()? + value * seconds_per_unit;
    if !total.is_finite() || total.abs() > 1e15 {
        return None;
    }
    let total = total.round() as i64;
    let (days, rest) = (total.div_euclid(86400), total.rem_euclid(86400));
    let (year, month, day) = civil_from_days(days);
    let (hour, minute, second) = (rest / 3600, rest % 3600 / 60, rest % 60);
    Some(match second {
        0 => format!("{year:04}-{month:02}-{day:02}T{hour:02}:{minute:02}"),
        _ => format!("{year:04}-{month:02}-{day:02}T{hour:02}:{minute:02}:{second:02}"),
    })
}

/// The proleptic Gregorian date of a day number since 1970-01-01 (Howard Hinnant's
/// algorithm, the inverse of [`days_from_civil`]).
fn civil_from_days(days: i64) -> (i64, i64, i64) {
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let day_of_era = z - era * 146_097;
    let year_of_era =
        (day_of_era - day_of_era / 1460 + day_of_era / 36_524 - day_of_era / 146_096) / 365;
    let day_of_year = day_of_era - (365 * year_of_era + year_of_era / 4 - year_of_era / 100);
    let mp = (5 * day_of_year + 2) / 153;
    let day = day_of_year - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = year_of_era + era * 400 + i64::from(month <= 2);
    (year, month, day)
}

/// Seconds since 1970-01-01 of `YYYY-MM-DD[( |T)HH:MM[:SS]]`.
fn seconds(date: &str) -> std::result::Result<f64, String> {
    let bad = || format!("`{date}` is not a date like 2020-01-31 or 2020-01-31T06:00");
    let (day, time) = date.split_once(['T', ' ']).unwrap_or((date, "00:00"));
    let parts: Vec<i64> = day
        .split('-')
        .map(|p| p.parse().map_err(|_| bad()))
        .collect::<std::result::Result<_, _>>()?;
    let [year, month, day] = parts[..] else {
        return Err(bad());
    };
    if !(1..=12).contains(&month) || !(1..=31).contains(&day) {
        return Err(bad());
    }
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
    Ok(days_from_civil(year, month, day) as f64 * 86400.0
        + hours * 3600.0
        + minutes * 60.0
        + seconds)
}

/// Days since 1970-01-01 of a proleptic Gregorian date (Howard Hinnant's algorithm).
fn days_from_civil(year: i64, month: i64, day: i64) -> i64 {
    let year = if month <= 2 { year - 1 } else { year };
    let era = year.div_euclid(400);
    let year_of_era = year - era * 400;
    let day_of_year = (153 * (month + if month > 2 { -3 } else { 9 }) + 2) / 5 + day - 1;
    let day_of_era = year_of_era * 365 + year_of_era / 4 - year_of_era / 100 + day_of_year;
    era * 146_097 + day_of_era - 719_468
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dates_become_cf_numbers() {
        assert_eq!(days_from_civil(1970, 1, 1), 0);
        assert_eq!(days_from_civil(2000, 3, 1), 11_017);
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
        assert!(
            cf_time("2000-01-02", "hours since 2000-01-01", Some("noleap"))
                .unwrap_err()
                .contains("noleap")
        );
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
        for days in [-800_000, -1, 0, 59, 11_016, 11_017, 20_000, 2_000_000] {
            let (y, m, d) = civil_from_days(days);
            assert_eq!(days_from_civil(y, m, d), days);
        }
        let units = "hours since 2000-01-01";
        assert_eq!(cf_date(30.0, units).unwrap(), "2000-01-02T06:00");
        assert_eq!(cf_date(-24.0, units).unwrap(), "1999-12-31T00:00");
        assert_eq!(
            cf_date(0.5, "minutes since 2000-01-01").unwrap(),
            "2000-01-01T00:00:30"
        );
        assert_eq!(cf_date(1.0, "K"), None);
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
