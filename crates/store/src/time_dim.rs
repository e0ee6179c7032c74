//! Which dimension a dataset iterates as time: found by its meaning, as CF and xarray read it,
//! not by its name alone (cfgrib and the CDS's netCDF name it `valid_time`).

use std::fmt;

use crate::Variable;

/// The dimension iterated as time, and why it was chosen.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TimeDim {
    /// The dimension's name.
    pub name: String,
    /// Why this dimension.
    pub reason: TimeDimReason,
}

/// Why a dimension is the time dimension, strongest first.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum TimeDimReason {
    /// Named by the user (`time_dim`, `--time-dim`).
    Chosen,
    /// A coordinate on it has CF's `axis: "T"`.
    Axis {
        /// The coordinate.
        coordinate: String,
    },
    /// A coordinate on it has `standard_name: "time"`.
    StandardName {
        /// The coordinate.
        coordinate: String,
    },
    /// A coordinate on it holds CF dates (`units: "<unit> since <date>"`).
    Units {
        /// The coordinate.
        coordinate: String,
        /// Its `units`.
        units: String,
    },
    /// A coordinate on it is of a datetime type (`datetime64`).
    Datetime {
        /// The coordinate.
        coordinate: String,
    },
    /// Its name is one time dimensions commonly have (`time`, `valid_time`, `date`).
    Name,
}

impl fmt::Display for TimeDimReason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Chosen => write!(f, "chosen with time_dim"),
            Self::Axis { coordinate } => write!(f, "`{coordinate}` has axis: T"),
            Self::StandardName { coordinate } => {
                write!(f, "`{coordinate}` has standard_name: time")
            }
            Self::Units { coordinate, units } => write!(f, "`{coordinate}` is in `{units}`"),
            Self::Datetime { coordinate } => write!(f, "`{coordinate}` holds datetimes"),
            Self::Name => write!(f, "its name"),
        }
    }
}

/// Names that mean time when nothing else says so, most likely first.
const TIME_NAMES: [&str; 3] = ["time", "valid_time", "date"];

/// The time dimension among the dimensions of `variables`' data variables: the one with the
/// strongest reason ([`TimeDimReason`]'s order), ties going to the earlier of
/// [`TIME_NAMES`], then by name. `datetime_arrays` are 1-D arrays of a datetime type that
/// zarrpipe cannot read, with their dimension.
pub(crate) fn find_time_dim(
    variables: &[Variable],
    datetime_arrays: &[(String, String)],
) -> Option<TimeDim> {
    let mut dims: Vec<&str> = variables
        .iter()
        .filter(|variable| !variable.is_coordinate())
        .flat_map(|variable| variable.dims().iter().map(String::as_str))
        .collect();
    dims.sort();
    dims.dedup();
    let rank_of_name = |dim: &str| {
        TIME_NAMES
            .iter()
            .position(|name| *name == dim)
            .unwrap_or(TIME_NAMES.len())
    };
    dims.into_iter()
        .filter_map(|dim| {
            let reason = meaning(dim, variables, datetime_arrays)
                .or_else(|| TIME_NAMES.contains(&dim).then_some(TimeDimReason::Name))?;
            Some((reason, rank_of_name(dim), dim))
        })
        .min()
        .map(|(reason, _, dim)| TimeDim {
            name: dim.to_string(),
            reason,
        })
}

/// What the 1-D arrays along `dim` say of it, strongest first.
fn meaning(
    dim: &str,
    variables: &[Variable],
    datetime_arrays: &[(String, String)],
) -> Option<TimeDimReason> {
    let along: Vec<&Variable> = variables
        .iter()
        .filter(|variable| variable.dims() == [dim])
        .collect();
    let attribute = |variable: &Variable, key: &str| {
        variable
            .attributes()
            .get(key)
            .and_then(|value| value.as_str())
            .map(str::to_string)
    };
    let mut reasons: Vec<TimeDimReason> = Vec::new();
    for variable in along {
        let coordinate = variable.name().to_string();
        if attribute(variable, "axis").is_some_and(|axis| axis.eq_ignore_ascii_case("T")) {
            reasons.push(TimeDimReason::Axis {
                coordinate: coordinate.clone(),
            });
        }
        if attribute(variable, "standard_name").as_deref() == Some("time") {
            reasons.push(TimeDimReason::StandardName {
                coordinate: coordinate.clone(),
            });
        }
        if let Some(units) = attribute(variable, "units").filter(|units| is_date_units(units)) {
            reasons.push(TimeDimReason::Units { coordinate, units });
        }
    }
    for (array, array_dim) in datetime_arrays {
        if array_dim == dim {
            reasons.push(TimeDimReason::Datetime {
                coordinate: array.clone(),
            });
        }
    }
    reasons.into_iter().min()
}

/// CF's date units: `<unit> since <reference date>`, the unit one of [`cf_unit_seconds`].
pub(crate) fn is_date_units(units: &str) -> bool {
    let Some((unit, reference)) = units.trim().split_once(" since ") else {
        return false;
    };
    cf_unit_seconds(unit).is_some() && !reference.trim().is_empty()
}

/// Seconds in a CF time unit (`hours`, `days`, ...), as xarray and cftime read them; `None`
/// for a unit that is not one of time.
pub fn cf_unit_seconds(unit: &str) -> Option<f64> {
    Some(match unit.trim().to_ascii_lowercase().as_str() {
        "nanoseconds" | "nanosecond" | "ns" => 1e-9,
        "microseconds" | "microsecond" | "us" => 1e-6,
        "milliseconds" | "millisecond" | "ms" => 1e-3,
        "seconds" | "second" | "sec" | "s" => 1.0,
        "minutes" | "minute" | "min" => 60.0,
        "hours" | "hour" | "hr" | "h" => 3600.0,
        "days" | "day" | "d" => 86400.0,
        "weeks" | "week" => 604_800.0,
        _ => return None,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn date_units_are_cf_units_since_a_date() {
        assert!(is_date_units("hours since 1900-01-01 00:00:00.0"));
        assert!(is_date_units("seconds since 1970-01-01"));
        assert!(is_date_units("days since 0001-01-01"));
        assert!(!is_date_units("days accumulated since sowing"));
        assert!(!is_date_units("K"));
        assert!(!is_date_units("hours since "));
    }

    #[test]
    fn stronger_reasons_win() {
        let axis = TimeDimReason::Axis {
            coordinate: "t".into(),
        };
        let units = TimeDimReason::Units {
            coordinate: "t".into(),
            units: "hours since 2000-01-01".into(),
        };
        assert!(TimeDimReason::Chosen < axis);
        assert!(axis < units);
        assert!(units < TimeDimReason::Name);
    }
}
