//! Stores as xarray and zarr-python write them from real products (ERA5 packed as int16,
//! uint8 packing, a float `_FillValue` of -9999, `missing_value` beside `_FillValue`,
//! `_Unsigned`, a `valid_time` axis, a noleap calendar, anemoi's layout, non-ASCII names, root
//! arrays) read as `xr.open_zarr` reads them: every batch value equal, bit for bit, to xarray's
//! decoded value cast to float32, and to the stored value with `mask_and_scale` off. The
//! stores and what xarray read are written by tests/fixtures/make_real_archives.py.

mod common;

use futures::TryStreamExt;
use serde_json::Value;
use zarrpipe::batcher::Missing;
use zarrpipe::pipeline::Pipeline;
use zarrpipe::store::{Dataset, StoreOptions};

fn fixtures() -> std::path::PathBuf {
    std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/real_archives")
}

fn expected() -> Value {
    let text = std::fs::read_to_string(fixtures().join("expected.json")).expect("expected.json");
    serde_json::from_str(&text).expect("expected.json parses")
}

/// xarray's values as float32 (`null`: NaN).
fn values_f32(values: &Value) -> Vec<f32> {
    let values = values.as_array().expect("a list of values");
    values
        .iter()
        .map(|value| value.as_f64().map_or(f32::NAN, |v| v as f32))
        .collect()
}

/// Every value of one variable's samples, in sample order, read through a whole pipeline
/// (whole fields, the time dimension iterated as the dataset says).
async fn pipeline_values(path: &str, variable: &str, options: StoreOptions) -> Vec<f32> {
    let batches = Pipeline::builder(path)
        .variables([variable])
        .batch_size(4)
        .missing(Missing::Ignore)
        .store_options(options)
        .build()
        .await
        .unwrap_or_else(|e| panic!("{path} {variable}: {}", zarrpipe::error_chain(&e)));
    let all: Vec<_> = batches.try_collect().await.expect("batches");
    all.iter()
        .flat_map(|batch| batch.inputs.iter().copied())
        .collect()
}

fn assert_bits(got: &[f32], want: &[f32], context: &str) {
    assert_eq!(got.len(), want.len(), "{context}: value count");
    for (i, (g, w)) in got.iter().zip(want).enumerate() {
        let same = (g.is_nan() && w.is_nan()) || g.to_bits() == w.to_bits();
        assert!(same, "{context}: value {i} is {g:?}, xarray has {w:?}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn batches_hold_what_xarray_decodes() {
    let expected = expected();
    let mut checked = 0;
    for (store, want) in expected["stores"].as_object().expect("stores") {
        let path = fixtures().join(store).to_string_lossy().into_owned();
        for (name, variable) in want["data_vars"].as_object().expect("data_vars") {
            // anemoi's `data` stacks variable x ensemble as channels: checked apart below.
            let Some(values) = variable["decoded"].get("values") else {
                continue;
            };
            if variable["dims"]
                .as_array()
                .is_some_and(|dims| dims.len() > 3)
            {
                continue;
            }
            let context = format!("{store}/{name}");
            let got = pipeline_values(&path, name, StoreOptions::new()).await;
            assert_bits(&got, &values_f32(values), &context);
            let raw = &variable["raw"];
            let raw_values = raw.get("values").unwrap_or(values);
            let got = pipeline_values(&path, name, StoreOptions::new().mask_and_scale(false)).await;
            assert_bits(&got, &values_f32(raw_values), &format!("{context} (raw)"));
            checked += 1;
        }
    }
    assert!(checked >= 12, "only {checked} variables checked");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_time_dimension_is_found_by_its_meaning() {
    let expected = expected();
    for (store, want) in expected["stores"].as_object().expect("stores") {
        let path = fixtures().join(store).to_string_lossy().into_owned();
        let dataset = Dataset::open(&path).await.expect("open");
        let found = dataset.time_dim().map(|time| time.name.clone());
        match want["time_dim"].as_str() {
            Some(dim) => assert_eq!(found.as_deref(), Some(dim), "{store}"),
            // anemoi keeps its dates in `dates`, a datetime64 array named after no
            // dimension: xarray sees no time coordinate, zarrpipe still iterates `time`.
            None if store.starts_with("anemoi") => {
                assert_eq!(found.as_deref(), Some("time"), "{store}")
            }
            None => assert_eq!(found, None, "{store}"),
        }
    }
    let path = fixtures().join("valid_time_v3.zarr");
    let batches = Pipeline::builder(path.to_string_lossy())
        .variables(["t2m"])
        .build()
        .await
        .expect("valid_time store");
    assert_eq!(
        batches.layout().num_samples(),
        6,
        "one sample per valid_time step"
    );
}

#[tokio::test]
async fn root_arrays_are_datasets_of_one_variable() {
    for store in ["root_array_v2.zarr", "root_array_v3.zarr"] {
        let path = fixtures().join(store).to_string_lossy().into_owned();
        let dataset = Dataset::open(&path).await.expect("open");
        let name = store.trim_end_matches(".zarr");
        let variable = dataset.variable(name).expect("named after the store");
        assert_eq!(variable.dims(), ["dim_0", "dim_1"]);
        assert_eq!(variable.path(), "");
        let values = pipeline_values(&path, name, StoreOptions::new()).await;
        let want: Vec<f32> = (0..100).map(|v| v as f32).collect();
        assert_bits(&values, &want, store);
    }
}

#[tokio::test]
async fn encodings_are_shown_and_applied_to_coordinates() {
    let path = fixtures().join("era5_int16_packed_v3.zarr");
    let dataset = Dataset::open(&path.to_string_lossy()).await.unwrap();
    let t2m = dataset.variable("t2m").unwrap();
    let decoding = t2m.decoding().expect("packed");
    assert!(decoding.scale_factor.is_some() && decoding.add_offset.is_some());
    assert_eq!(decoding.missing, vec![-32767.0]);
    let raw = Dataset::open_with(
        &path.to_string_lossy(),
        &StoreOptions::new().mask_and_scale(false),
    )
    .await
    .unwrap();
    let t2m = raw.variable("t2m").unwrap();
    assert!(t2m.decoding().is_none() && t2m.encoding().decoding.is_some());
}

#[tokio::test]
async fn a_chosen_time_dimension_must_exist() {
    let path = fixtures().join("valid_time_v3.zarr");
    let options = StoreOptions::new().time_dim("step");
    let error = Dataset::open_with(&path.to_string_lossy(), &options)
        .await
        .expect_err("no such dimension");
    let message = zarrpipe::error_chain(&error);
    assert!(
        message.contains("step") && message.contains("valid_time"),
        "{message}"
    );
    let options = StoreOptions::new().time_dim("latitude");
    let dataset = Dataset::open_with(&path.to_string_lossy(), &options)
        .await
        .unwrap();
    assert_eq!(dataset.time_dim().unwrap().name, "latitude");
}
