//! Static and derived channels on `xr_static`, a store written by xarray
//! (tests/fixtures/make_fixtures.py): `t2m(time, latitude, longitude)` beside the static
//! fields `orography` (float32, NaN at one point, chunked across windows) and `lsm` (uint8),
//! six times 31 hours apart across the 2019/2020 year end. Static windows are checked
//! against the values zarr-python read back; derived channels against the formulas
//! computed here, in float64, from the stored coordinates.

mod common;

use std::f64::consts::TAU;

use common::{fixtures, store_path};
use futures::TryStreamExt;
use zarrpipe::batcher::Edge;
use zarrpipe::pipeline::{Batch, CollateOptions, Pipeline};
use zarrpipe::prelude::WindowSpec;

const LAT: usize = 7;
const LON: usize = 9;

fn expected(name: &str) -> Vec<u8> {
    std::fs::read(fixtures().join(format!("expected/xr_static/{name}.bin"))).unwrap()
}

fn f32s(name: &str) -> Vec<f32> {
    let bytes = expected(name);
    bytes
        .chunks_exact(4)
        .map(|b| f32::from_le_bytes(b.try_into().unwrap()))
        .collect()
}

fn f64s(name: &str) -> Vec<f64> {
    let bytes = expected(name);
    bytes
        .chunks_exact(8)
        .map(|b| f64::from_le_bytes(b.try_into().unwrap()))
        .collect()
}

/// Seconds since 1970 of each time step (stored as int64 hours since 1979-01-01).
fn seconds() -> Vec<f64> {
    let bytes = expected("time");
    let since_1979 = 283_996_800.0;
    bytes
        .chunks_exact(8)
        .map(|b| since_1979 + 3600.0 * i64::from_le_bytes(b.try_into().unwrap()) as f64)
        .collect()
}

/// Values equal, NaN equal to NaN.
fn same(a: f32, b: f32) -> bool {
    a.to_bits() == b.to_bits() || (a.is_nan() && b.is_nan())
}

async fn epoch(builder: zarrpipe::pipeline::PipelineBuilder) -> Vec<Batch> {
    builder.build().await.unwrap().try_collect().await.unwrap()
}

#[tokio::test]
async fn static_fields_are_cut_to_each_window() {
    let url = store_path("xr_static");
    let spec = WindowSpec::new()
        .window("latitude", 3, 3)
        .window("longitude", 4, 4)
        .edge(Edge::Pad);
    let batches = epoch(
        Pipeline::builder(&url)
            .variables(["t2m", "orography", "lsm", "cos_lat"])
            .window_spec(spec)
            .batch_size(5),
    )
    .await;
    let (t2m, orography, lsm) = (f32s("t2m"), f32s("orography"), expected("lsm"));
    let lats = f64s("latitude");
    let mut samples = 0;
    for batch in &batches {
        for (b, sample) in batch.samples.iter().enumerate() {
            let [time, lat0, lon0] = sample.origin[..] else {
                panic!("{:?}", sample.origin)
            };
            for y in 0..3 {
                for x in 0..4 {
                    let (lat, lon) = (lat0 as usize + y, lon0 as usize + x);
                    let inside = lat < LAT && lon < LON;
                    let want = |value: f32| if inside { value } else { f32::NAN };
                    let at = lat.min(LAT - 1) * LON + lon.min(LON - 1);
                    let got = |c: usize| batch.inputs[[b, c, y, x]];
                    assert!(same(got(0), want(t2m[time as usize * LAT * LON + at])));
                    assert!(
                        same(got(1), want(orography[at])),
                        "orography of sample {:?} at ({y}, {x}): {} for {}",
                        sample.origin,
                        got(1),
                        orography[at]
                    );
                    assert!(same(got(2), want(f32::from(lsm[at]))));
                    // Derived channels keep the pad value past the edge too.
                    match inside {
                        true => {
                            assert!((f64::from(got(3)) - lats[lat].to_radians().cos()).abs() < 1e-6)
                        }
                        false => assert!(got(3).is_nan()),
                    }
                }
            }
            samples += 1;
        }
    }
    // 6 times x 3 latitude x 3 longitude windows (the last of each padded).
    assert_eq!(samples, 6 * 3 * 3);
    // The NaN of orography reaches the windows that hold it.
    assert!(batches.iter().any(|b| b.inputs.iter().any(|v| v.is_nan())));
}

#[tokio::test]
async fn static_fields_are_read_once_not_per_batch() {
    let url = store_path("xr_static");
    let dataset = std::sync::Arc::new(zarrpipe::store::Dataset::open(&url).await.unwrap());
    let run = |variables: Vec<&'static str>| {
        let dataset = dataset.clone();
        async move {
            let before = dataset.io_stats().requests;
            let batches = epoch(
                Pipeline::from_dataset(dataset.clone())
                    .variables(variables)
                    .batch_size(1),
            )
            .await;
            (batches.len(), dataset.io_stats().requests - before)
        }
    };
    let (batches, alone) = run(vec!["t2m"]).await;
    let (_, with_static) = run(vec!["t2m", "orography", "lsm"]).await;
    // orography's 4 chunks and lsm's one, once, though each of the 6 batches holds them.
    assert_eq!(batches, 6);
    assert_eq!(with_static - alone, 4 + 1);
}

/// The derived channels' formulas (see crates/collate/src/derived.rs), in float64.
struct Expected {
    hours: f64,
    day: f64,
}

impl Expected {
    fn at(seconds: f64) -> Self {
        // Times lie between 2019-12-30 and 2020-01-07.
        let new_year = 1_577_836_800.0; // 2020-01-01T00:00Z
        let year_start = if seconds >= new_year {
            new_year
        } else {
            new_year - 365.0 * 86_400.0
        };
        Self {
            hours: seconds.rem_euclid(86_400.0) / 3600.0,
            day: (seconds - year_start) / 86_400.0,
        }
    }

    fn cos_zenith(&self, lat: f64, lon: f64) -> f64 {
        let angle = TAU * self.day / 365.25;
        let declination = (0.396372 - 22.91327 * angle.cos() + 4.025430 * angle.sin()
            - 0.387205 * (2.0 * angle).cos()
            + 0.051967 * (2.0 * angle).sin()
            - 0.154527 * (3.0 * angle).cos()
            + 0.084798 * (3.0 * angle).sin())
        .to_radians();
        let correction = 0.004297 + 0.107029 * angle.cos()
            - 1.837877 * angle.sin()
            - 0.837378 * (2.0 * angle).cos()
            - 2.340475 * (2.0 * angle).sin();
        let hour_angle = ((self.hours - 12.0) * 15.0 + lon + correction).to_radians();
        let lat = lat.to_radians();
        (declination.sin() * lat.sin() + declination.cos() * lat.cos() * hour_angle.cos()).max(0.0)
    }
}

#[tokio::test]
async fn derived_channels_follow_each_samples_grid_and_time() {
    let url = store_path("xr_static");
    let names = [
        "cos_lat",
        "t2m",
        "sin_lon",
        "cos_time_of_day",
        "sin_day_of_year",
        "cos_local_time",
        "cos_zenith",
    ];
    let batches = epoch(
        Pipeline::builder(&url)
            .variables(names)
            .window("latitude", 4, 3)
            .window("longitude", 5, 4)
            .batch_size(3),
    )
    .await;
    let (lats, lons, times, t2m) = (f64s("latitude"), f32s("longitude"), seconds(), f32s("t2m"));
    let mut zenith_day_and_night = (false, false);
    for batch in &batches {
        assert_eq!(batch.inputs.shape()[1], names.len());
        for (b, sample) in batch.samples.iter().enumerate() {
            let [time, lat0, lon0] = sample.origin[..].try_into().unwrap();
            let when = Expected::at(times[time as usize]);
            for y in 0..4 {
                for x in 0..5 {
                    let (i, j) = (lat0 as usize + y, lon0 as usize + x);
                    let (lat, lon) = (lats[i], f64::from(lons[j]));
                    let local = (lon / 360.0 * 24.0 + when.hours).rem_euclid(24.0);
                    let want = [
                        lat.to_radians().cos(),
                        f64::from(t2m[time as usize * LAT * LON + i * LON + j]),
                        lon.to_radians().sin(),
                        (TAU * when.hours / 24.0).cos(),
                        (TAU * when.day / 365.25).sin(),
                        (TAU * local / 24.0).cos(),
                        when.cos_zenith(lat, lon),
                    ];
                    for (c, want) in want.into_iter().enumerate() {
                        let got = f64::from(batch.inputs[[b, c, y, x]]);
                        assert!(
                            (got - want).abs() <= 1e-5,
                            "{} of sample {:?} at ({y}, {x}): {got}, expected {want}",
                            names[c],
                            sample.origin
                        );
                    }
                    let zenith = batch.inputs[[b, 6, y, x]];
                    zenith_day_and_night.0 |= zenith > 0.1;
                    zenith_day_and_night.1 |= zenith == 0.0;
                }
            }
        }
    }
    assert_eq!(zenith_day_and_night, (true, true), "day and night both met");
}

#[tokio::test]
async fn targets_hold_derived_channels_at_their_own_time() {
    let url = store_path("xr_static");
    let batches = epoch(
        Pipeline::builder(&url)
            .variables(["t2m", "orography", "cos_time_of_day"])
            .forecast(2, [1])
            .batch_size(2),
    )
    .await;
    let times = seconds();
    for batch in &batches {
        let targets = batch.targets.as_ref().expect("targets");
        for (b, sample) in batch.samples.iter().enumerate() {
            let time = sample.origin[0] as usize;
            let hours = |t: usize| Expected::at(times[t]).hours;
            let want = |t: usize| (TAU * hours(t) / 24.0).cos() as f32;
            // Inputs: steps time - 1 and time, three channels each.
            assert!((batch.inputs[[b, 2, 0, 0]] - want(time - 1)).abs() <= 1e-6);
            assert!((batch.inputs[[b, 5, 3, 4]] - want(time)).abs() <= 1e-6);
            assert!((targets[[b, 2, 6, 8]] - want(time + 1)).abs() <= 1e-6);
            // The static field is the same at every step.
            assert!(same(batch.inputs[[b, 1, 1, 1]], targets[[b, 1, 1, 1]]));
        }
    }
}

#[tokio::test]
async fn derived_channels_are_normalised_only_when_the_statistics_name_them() {
    let url = store_path("xr_static");
    let builder = || {
        Pipeline::builder(&url)
            .variables(["t2m", "lsm", "cos_lat", "sin_lat"])
            .batch_size(6)
    };
    let plain = epoch(builder()).await;
    let stats = r#"[{"variable": "t2m", "mean": 280.0, "std": 8.0},
                    {"variable": "lsm", "mean": 0.5, "std": 0.5},
                    {"variable": "cos_lat", "mean": 0.7, "std": 0.2}]"#;
    let normalised = epoch(builder().normalize_with_stats(stats)).await;
    let (plain, normalised) = (&plain[0].inputs, &normalised[0].inputs);
    for (index, &raw) in plain.indexed_iter() {
        let (mean, std) = [(280.0, 8.0), (0.5, 0.5), (0.7, 0.2), (0.0, 1.0)][index[1]];
        let want: f32 = (raw - mean) / std;
        assert!(same(normalised[&index], want), "{index:?}");
    }
    // A static variable needs its statistics, as any variable.
    let error = builder()
        .normalize_with_stats(r#"[{"variable": "t2m", "mean": 280.0, "std": 8.0}]"#)
        .build()
        .await
        .unwrap_err();
    assert!(
        error
            .to_string()
            .contains("no statistics for variable `lsm`"),
        "{error}"
    );
}

#[tokio::test]
async fn nan_masks_and_fills_cover_static_fields() {
    let url = store_path("xr_static");
    let batches = epoch(
        Pipeline::builder(&url)
            .variables(["orography", "t2m", "cos_zenith"])
            .collate_options(CollateOptions {
                nan_fill: Some(-1.0),
                nan_mask: true,
                ..Default::default()
            })
            .batch_size(6),
    )
    .await;
    let mask = batches[0].nan_mask.as_ref().unwrap();
    for b in 0..6 {
        // orography is NaN at (2, 3) only.
        assert_eq!(batches[0].inputs[[b, 0, 2, 3]], -1.0);
        assert_eq!(mask[[b, 0, 2, 3]], 0);
        assert_eq!(mask[[b, 0, 2, 4]], 1);
        assert_eq!(mask[[b, 2, 2, 3]], 1);
    }
}

#[tokio::test]
async fn derived_channels_need_their_dimensions_in_the_samples() {
    let url = store_path("xr_static");
    // Latitude stacked as channels (only longitude windowed): cos_lat has no place.
    let error = Pipeline::builder(&url)
        .variables(["t2m", "cos_lat"])
        .window("longitude", 9, 9)
        .build()
        .await
        .unwrap_err();
    let message = zarrpipe::error_chain(&error);
    assert!(
        message.contains("derived channel `cos_lat`") && message.contains("windowed or iterated"),
        "{message}"
    );
    // Names that are neither variables nor derived channels list both.
    let error = Pipeline::builder(&url)
        .variables(["t2m", "cos_latitude"])
        .build()
        .await
        .unwrap_err();
    let message = zarrpipe::error_chain(&error);
    assert!(
        message.contains("cos_latitude")
            && message.contains("cos_zenith")
            && message.contains("orography"),
        "{message}"
    );
}

#[tokio::test]
async fn hand_made_collators_ask_for_the_static_fields() {
    use std::sync::Arc;
    use zarrpipe::batcher::SampleLayout;
    use zarrpipe::collate::HostCollator;
    let dataset = zarrpipe::store::Dataset::open(&store_path("xr_static"))
        .await
        .unwrap();
    let layout =
        Arc::new(SampleLayout::new(&dataset, &["t2m", "lsm"], &WindowSpec::new()).unwrap());
    let error = HostCollator::with_options(layout.clone(), CollateOptions::default()).unwrap_err();
    assert!(error.to_string().contains("`lsm` is static"), "{error}");
    let (fields, derived) = zarrpipe::pipeline::read_channel_inputs(&dataset, &layout, 4)
        .await
        .unwrap();
    assert!(derived.is_none());
    let fields = fields.expect("lsm is static");
    assert_eq!(fields.fields()[0].variable, "lsm");
    assert_eq!(fields.fields()[0].bytes, expected("lsm"));
    let options = CollateOptions {
        static_fields: Some(fields),
        ..Default::default()
    };
    HostCollator::with_options(layout, options).unwrap();
}

#[tokio::test]
async fn a_time_window_gives_each_step_its_own_time() {
    let url = store_path("xr_static");
    let batches = epoch(
        Pipeline::builder(&url)
            .variables(["t2m", "cos_time_of_day", "sin_local_time"])
            .window("time", 3, 2)
            .window("latitude", 7, 7)
            .window("longitude", 9, 9)
            .batch_size(4),
    )
    .await;
    let (times, lons, t2m) = (seconds(), f32s("longitude"), f32s("t2m"));
    let mut samples = 0;
    for batch in &batches {
        // [batch, channel, time, latitude, longitude]: derived channels move along the time
        // window. (A windowed dimension must be in every variable: no static field here.)
        assert_eq!(batch.inputs.shape()[1..], [3, 3, LAT, LON]);
        for (b, sample) in batch.samples.iter().enumerate() {
            for t in 0..3 {
                let when = Expected::at(times[sample.origin[0] as usize + t]);
                for j in 0..LON {
                    let local = (f64::from(lons[j]) / 15.0 + when.hours).rem_euclid(24.0);
                    let want = [(TAU * when.hours / 24.0).cos(), (TAU * local / 24.0).sin()];
                    for (c, want) in want.into_iter().enumerate() {
                        let got = f64::from(batch.inputs[[b, c + 1, t, 5, j]]);
                        assert!((got - want).abs() <= 1e-5, "{got} for {want}");
                    }
                    let step = sample.origin[0] as usize + t;
                    let stored = t2m[step * LAT * LON + 5 * LON + j];
                    assert!(same(batch.inputs[[b, 0, t, 5, j]], stored));
                }
            }
            samples += 1;
        }
    }
    assert_eq!(samples, 2);
}
