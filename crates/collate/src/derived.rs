//! Derived channels ([`Derived`]): computed, not stored, on each sample's own grid and time.
//!
//! The values are computed on the host, in float64, as small tables per (sample step, derived
//! channel): `a` and `b` along latitude, `c` along longitude, one row of each per time step of
//! the window. An element's value is then `a + b * c` in float32 (clipped at 0 for
//! `cos_zenith`), which the host collator and the GPU's `derived` kernel compute with the same
//! float32 operations: the two agree bit for bit, and the formulas live here only.
//!
//! Formulas (angles in radians, `lat`/`lon` in degrees, times UTC):
//! - `sin_lat`, `cos_lat`, `sin_lon`, `cos_lon`: of the grid point's coordinate.
//! - `sin_time_of_day`, `cos_time_of_day`: of `2 pi hours / 24`, `hours` since 00:00 UTC.
//! - `sin_local_time`, `cos_local_time`: of `2 pi local / 24`, `local = (lon / 360 * 24 +
//!   hours) mod 24` (earthkit-data's forcings `local_time`).
//! - `sin_day_of_year`, `cos_day_of_year`: of `2 pi day / 365.25`, `day` the days since 1
//!   January 00:00 of the year, with their fraction (earthkit-data's `julian_day`).
//! - `cos_zenith`: `max(0, sin(dec) sin(lat) + cos(dec) cos(lat) cos(h))`, the declination
//!   `dec` and the time correction `tc` from a Fourier series in `2 pi day / 365.25` and the
//!   hour angle `h = (hours - 12) * 15 + lon + tc` degrees: earthkit-meteo's
//!   `cos_solar_zenith_angle` (`earthkit/meteo/solar/__init__.py`, which anemoi-datasets uses
//!   for its `cos_solar_zenith_angle` forcing), except that `hours` keeps its minutes and
//!   seconds (earthkit takes the whole hour).
//!
//! A time that is not a date (NaN, or outside chrono's range) gives NaN.

use std::collections::HashMap;
use std::f64::consts::TAU;

use chrono::{Datelike, Timelike};
use rayon::prelude::*;
use zarrpipe_batcher::{Derived, Sample, SampleLayout};

use crate::{Error, Result};

/// A 1-D coordinate of a sample dimension.
#[derive(Clone, Debug, PartialEq)]
pub struct Coordinate {
    /// The dimension (windowed or iterated in the samples).
    pub dim: String,
    /// One value per element of the dimension.
    pub values: Vec<f64>,
}

/// The coordinates derived channels are computed from; only those the layout's derived
/// channels need must be given ([`Derived::needs`]).
#[derive(Clone, Debug, Default, PartialEq)]
pub struct DerivedChannels {
    /// Degrees north.
    pub latitude: Option<Coordinate>,
    /// Degrees east.
    pub longitude: Option<Coordinate>,
    /// Seconds since 1970-01-01 00:00 UTC (a CF time coordinate, decoded).
    pub time: Option<Coordinate>,
}

/// The tables of one tensor's derived channels (see the module docs): what the host and the
/// GPU compute the values from.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct DerivedPlan {
    /// Elements in one channel of one sample step.
    pub plane_len: u64,
    /// The sizes of the plane's axes (the windowed dimensions, in the sample's order).
    pub axes: Vec<u64>,
    /// The plane axes time, latitude and longitude move along (`None`: one value per plane).
    pub time_axis: Option<usize>,
    /// The plane axis latitude moves along.
    pub latitude_axis: Option<usize>,
    /// The plane axis longitude moves along.
    pub longitude_axis: Option<usize>,
    /// One job per derived plane of the tensor.
    pub jobs: Vec<DerivedJob>,
    /// Every job's tables.
    pub values: Vec<f32>,
}

/// One derived channel of one sample step: a plane of the tensor.
#[derive(Clone, Debug, PartialEq)]
pub struct DerivedJob {
    /// The plane's number in the tensor (`[batch, steps x channels]` flattened).
    pub plane: u64,
    /// Where its `a` table starts in [`DerivedPlan::values`] (`time x latitude` values), then
    /// `b` (as many).
    pub ab: u64,
    /// Where its `c` table starts (`time x longitude` values).
    pub c: u64,
    /// Whether values below 0 become 0.
    pub clip: bool,
    /// Per plane axis, the elements inside the data (fewer than the axis in padded windows;
    /// the others keep the pad value).
    pub valid: Vec<u64>,
}

/// The sun at one time: what the time-dependent formulas need.
struct Sun {
    /// Hours since 00:00 UTC.
    hours: f64,
    /// Days since 1 January 00:00 of the year.
    day: f64,
    /// Declination, radians.
    declination: f64,
    /// Time correction of the hour angle, degrees.
    time_correction: f64,
}

impl Sun {
    /// The sun at `seconds` since 1970-01-01 UTC; `None` when that is not a date.
    fn at(seconds: f64) -> Option<Sun> {
        if !seconds.is_finite() {
            return None;
        }
        let whole = seconds.floor();
        let date = chrono::DateTime::from_timestamp(whole as i64, 0)?;
        let since_midnight = f64::from(date.num_seconds_from_midnight()) + (seconds - whole);
        let day = f64::from(date.ordinal0()) + since_midnight / 86_400.0;
        let angle = day / 365.25 * TAU;
        // earthkit-meteo's `solar_declination_angle`: degrees, and the time correction in
        // degrees of hour angle.
        let declination = 0.396372 - 22.91327 * angle.cos() + 4.025430 * angle.sin()
            - 0.387205 * (2.0 * angle).cos()
            + 0.051967 * (2.0 * angle).sin()
            - 0.154527 * (3.0 * angle).cos()
            + 0.084798 * (3.0 * angle).sin();
        let time_correction = 0.004297 + 0.107029 * angle.cos()
            - 1.837877 * angle.sin()
            - 0.837378 * (2.0 * angle).cos()
            - 2.340475 * (2.0 * angle).sin();
        Some(Sun {
            hours: since_midnight / 3600.0,
            day,
            declination: declination.to_radians(),
            time_correction,
        })
    }
}

/// `(a, b)` of a kind at a latitude (degrees) and time.
fn latitude_terms(kind: Derived, latitude: f64, sun: Option<&Sun>) -> (f64, f64) {
    let phi = latitude.to_radians();
    let nan = (f64::NAN, 0.0);
    match kind {
        Derived::SinLat => (phi.sin(), 0.0),
        Derived::CosLat => (phi.cos(), 0.0),
        Derived::SinLon | Derived::CosLon | Derived::SinLocalTime | Derived::CosLocalTime => {
            (0.0, 1.0)
        }
        Derived::SinTimeOfDay => sun.map_or(nan, |sun| ((TAU * sun.hours / 24.0).sin(), 0.0)),
        Derived::CosTimeOfDay => sun.map_or(nan, |sun| ((TAU * sun.hours / 24.0).cos(), 0.0)),
        Derived::SinDayOfYear => sun.map_or(nan, |sun| ((TAU * sun.day / 365.25).sin(), 0.0)),
        Derived::CosDayOfYear => sun.map_or(nan, |sun| ((TAU * sun.day / 365.25).cos(), 0.0)),
        Derived::CosZenith => sun.map_or(nan, |sun| {
            (
                sun.declination.sin() * phi.sin(),
                sun.declination.cos() * phi.cos(),
            )
        }),
    }
}

/// `c` of a kind at a longitude (degrees) and time.
fn longitude_term(kind: Derived, longitude: f64, sun: Option<&Sun>) -> f64 {
    let local = |sun: &Sun| (longitude / 360.0 * 24.0 + sun.hours).rem_euclid(24.0);
    match kind {
        Derived::SinLon => longitude.to_radians().sin(),
        Derived::CosLon => longitude.to_radians().cos(),
        Derived::SinLocalTime => sun.map_or(f64::NAN, |sun| (TAU * local(sun) / 24.0).sin()),
        Derived::CosLocalTime => sun.map_or(f64::NAN, |sun| (TAU * local(sun) / 24.0).cos()),
        Derived::CosZenith => sun.map_or(f64::NAN, |sun| {
            ((sun.hours - 12.0) * 15.0 + longitude + sun.time_correction)
                .to_radians()
                .cos()
        }),
        _ => 0.0,
    }
}

/// One value from its terms, as the GPU's `derived` kernel computes it (float32 multiply,
/// then add: never fused).
pub(crate) fn combine(a: f32, b: f32, c: f32, clip: bool) -> f32 {
    let value = a + b * c;
    if clip && value < 0.0 {
        0.0
    } else {
        value
    }
}

/// Where a coordinate's dimension is: its sample axis and its plane axis when windowed.
#[derive(Clone, Copy)]
struct Place {
    sample_axis: usize,
    plane_axis: Option<usize>,
}

impl DerivedChannels {
    /// Checks that every derived channel of `layout` has the coordinates it needs, along
    /// sample dimensions, of their lengths.
    pub(crate) fn check(&self, layout: &SampleLayout) -> Result<()> {
        for &(_, kind) in layout.derived_channels() {
            let needs = kind.needs();
            let wanted = [
                (needs.latitude, &self.latitude, "latitude"),
                (needs.longitude, &self.longitude, "longitude"),
                (needs.time, &self.time, "time"),
            ];
            for (needed, coordinate, what) in wanted {
                if !needed {
                    continue;
                }
                let fail = |reason: String| {
                    Err(Error::DerivedChannel {
                        channel: kind.name(),
                        reason,
                    })
                };
                let Some(coordinate) = coordinate else {
                    return fail(format!("no {what} coordinate was given"));
                };
                let Some(axis) = layout.sample_axis(&coordinate.dim) else {
                    let dims: Vec<&str> = layout
                        .sample_dims()
                        .iter()
                        .map(|dim| dim.name.as_str())
                        .collect();
                    return fail(format!(
                        "its {what} dimension `{}` must be windowed or iterated (the sample dimensions are {})",
                        coordinate.dim,
                        dims.join(", ")
                    ));
                };
                let length = layout.sample_dims()[axis].length;
                if coordinate.values.len() as u64 != length {
                    return fail(format!(
                        "{} {what} values for the {length} elements of `{}`",
                        coordinate.values.len(),
                        coordinate.dim
                    ));
                }
            }
        }
        Ok(())
    }

    /// The tables of the derived channels of `samples` at each of `offsets` (steps along the
    /// forecast dimension), in the tensor's `[batch, steps x channels, window...]` order.
    pub fn plan(&self, layout: &SampleLayout, samples: &[Sample], offsets: &[i64]) -> DerivedPlan {
        let derived = layout.derived_channels();
        let windows: Vec<usize> = (0..layout.sample_dims().len())
            .filter(|&axis| !layout.sample_dims()[axis].iterated)
            .collect();
        let axes: Vec<u64> = windows
            .iter()
            .map(|&axis| layout.sample_dims()[axis].size)
            .collect();
        let place = |coordinate: &Option<Coordinate>| {
            let sample_axis = layout.sample_axis(&coordinate.as_ref()?.dim)?;
            Some(Place {
                sample_axis,
                plane_axis: windows.iter().position(|&axis| axis == sample_axis),
            })
        };
        let (time, latitude, longitude) = (
            place(&self.time),
            place(&self.latitude),
            place(&self.longitude),
        );
        let size = |place: Option<Place>| {
            place
                .and_then(|place| place.plane_axis)
                .map_or(1, |axis| axes[axis] as usize)
        };
        let (t_size, lat_size, lon_size) = (size(time), size(latitude), size(longitude));
        let mut plan = DerivedPlan {
            plane_len: axes.iter().product(),
            time_axis: time.and_then(|place| place.plane_axis),
            latitude_axis: latitude.and_then(|place| place.plane_axis),
            longitude_axis: longitude.and_then(|place| place.plane_axis),
            axes,
            jobs: Vec::new(),
            values: Vec::new(),
        };
        if derived.is_empty() {
            return plan;
        }
        let channels = layout.channels().len() as u64;
        let steps = samples
            .iter()
            .flat_map(|sample| offsets.iter().map(|&o| layout.shifted(sample, o)));
        for (slab, step) in steps.enumerate() {
            // The coordinate's value at element `k` of its window (or its one step).
            let value = |place: Option<Place>, coordinate: &Option<Coordinate>, k: usize| {
                let (place, coordinate) = (place?, coordinate.as_ref()?);
                let index = step.origin[place.sample_axis] as usize + k;
                coordinate.values.get(index).copied()
            };
            let suns: Vec<Option<Sun>> = (0..t_size)
                .map(|t| value(time, &self.time, t).and_then(Sun::at))
                .collect();
            let valid: Vec<u64> = windows
                .iter()
                .map(|&axis| {
                    let dim = &layout.sample_dims()[axis];
                    dim.length.saturating_sub(step.origin[axis]).min(dim.size)
                })
                .collect();
            for &(channel, kind) in derived {
                let ab = plan.values.len();
                let mut b = Vec::with_capacity(t_size * lat_size);
                for sun in &suns {
                    for i in 0..lat_size {
                        let phi = value(latitude, &self.latitude, i).unwrap_or(0.0);
                        let (a_value, b_value) = latitude_terms(kind, phi, sun.as_ref());
                        plan.values.push(a_value as f32);
                        b.push(b_value as f32);
                    }
                }
                plan.values.extend(b);
                let c = plan.values.len();
                for sun in &suns {
                    for j in 0..lon_size {
                        let lambda = value(longitude, &self.longitude, j).unwrap_or(0.0);
                        plan.values
                            .push(longitude_term(kind, lambda, sun.as_ref()) as f32);
                    }
                }
                plan.jobs.push(DerivedJob {
                    plane: slab as u64 * channels + channel as u64,
                    ab: ab as u64,
                    c: c as u64,
                    clip: kind == Derived::CosZenith,
                    valid: valid.clone(),
                });
            }
        }
        plan
    }
}

impl DerivedPlan {
    /// Element `element` of a job's plane, or `None` where the window is padded.
    pub fn value(&self, job: &DerivedJob, element: u64) -> Option<f32> {
        let mut rest = element;
        let mut coords = [0u64; crate::MAX_AXES];
        for axis in (0..self.axes.len()).rev() {
            coords[axis] = rest % self.axes[axis];
            rest /= self.axes[axis];
            if coords[axis] >= job.valid[axis] {
                return None;
            }
        }
        let at = |axis: Option<usize>| axis.map_or(0, |axis| coords[axis]);
        let size = |axis: Option<usize>| axis.map_or(1, |axis| self.axes[axis]);
        let (t, i, j) = (
            at(self.time_axis),
            at(self.latitude_axis),
            at(self.longitude_axis),
        );
        let rows = size(self.time_axis) * size(self.latitude_axis);
        let row = (t * size(self.latitude_axis) + i) as usize;
        let a = self.values[job.ab as usize + row];
        let b = self.values[(job.ab + rows) as usize + row];
        let c = self.values[(job.c + t * size(self.longitude_axis) + j) as usize];
        Some(combine(a, b, c, job.clip))
    }

    /// Writes every job's plane into `tensor` (`[planes, plane_len]` float32), planes in
    /// parallel.
    pub fn run_on_host(&self, tensor: &mut [f32]) {
        if self.jobs.is_empty() {
            return;
        }
        let jobs: HashMap<u64, &DerivedJob> =
            self.jobs.iter().map(|job| (job.plane, job)).collect();
        let plane_len = self.plane_len.max(1) as usize;
        tensor
            .par_chunks_mut(plane_len)
            .enumerate()
            .for_each(|(plane, values)| {
                let Some(job) = jobs.get(&(plane as u64)) else {
                    return;
                };
                for (element, out) in values.iter_mut().enumerate() {
                    if let Some(value) = self.value(job, element as u64) {
                        *out = value;
                    }
                }
            });
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_sun_at_known_times() {
        // 2020-06-21 12:00 UTC (a leap year: day 172 from 0).
        let sun = Sun::at(1_592_740_800.0).unwrap();
        assert_eq!(sun.hours, 12.0);
        assert_eq!(sun.day, 172.5);
        // Near the June solstice the declination is near 23.44 degrees.
        assert!((sun.declination.to_degrees() - 23.44).abs() < 0.1);
        // Fractions of a second and times before 1970 count too.
        let sun = Sun::at(-86_400.0 + 1800.25).unwrap(); // 1969-12-31 00:30:00.25
        assert!((sun.hours - (1800.25 / 3600.0)).abs() < 1e-12);
        assert!((sun.day - (364.0 + 1800.25 / 86_400.0)).abs() < 1e-9);
        assert!(Sun::at(f64::NAN).is_none());
        assert!(Sun::at(1e300).is_none());
    }

    #[test]
    fn zenith_follows_the_sun() {
        // At noon UTC on the equinox the sun is overhead near (0, 0): cos near 1; at
        // midnight it is below the horizon: clipped to 0.
        let noon = Sun::at(1_584_705_600.0).unwrap(); // 2020-03-20 12:00 UTC
        let (a, b) = latitude_terms(Derived::CosZenith, 0.0, Some(&noon));
        let c = longitude_term(Derived::CosZenith, 0.0, Some(&noon));
        assert!(combine(a as f32, b as f32, c as f32, true) > 0.99);
        let c = longitude_term(Derived::CosZenith, 180.0, Some(&noon));
        assert_eq!(combine(a as f32, b as f32, c as f32, true), 0.0);
        // Local time at 90 degrees east is 6 hours ahead: sin(2 pi 18 / 24) = -1.
        let c = longitude_term(Derived::SinLocalTime, 90.0, Some(&noon));
        assert!((c + 1.0).abs() < 1e-12);
    }
}
