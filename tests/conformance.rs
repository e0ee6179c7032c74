//! Every array of every fixture store (written by zarr-python 3 and xarray, see
//! tests/fixtures/make_fixtures.py) reads back exactly as zarr-python reads it, through the
//! library's own fetch and decode stages; metadata (dims, dtypes, chunks, coordinates,
//! attributes, consolidation) matches what the writers recorded.

mod common;

use common::*;
use zarrpipe::store::Dataset;

#[tokio::test]
async fn every_fixture_array_reads_as_zarr_python_reads_it() {
    let manifest = manifest();
    assert!(manifest.stores.len() >= 4, "fixtures missing");
    let mut checked = 0;
    for store in &manifest.stores {
        let dataset = Dataset::open(&store_path(&store.store))
            .await
            .expect("open fixture");
        assert_eq!(dataset.zarr_format(), store.zarr_format, "{}", store.store);
        assert_eq!(
            dataset.consolidated(),
            store.consolidated,
            "{}",
            store.store
        );
        for array in &store.arrays {
            let context = format!("{}/{}", store.store, array.path);
            if let Some(codec) = array.unsupported_codec() {
                let error = dataset
                    .variable(&array.path)
                    .expect_err("unsupported codec");
                let message = zarrpipe::error_chain(&error);
                assert!(
                    message.contains(&array.path) && message.contains(codec),
                    "{message}"
                );
                assert!(dataset
                    .unreadable()
                    .iter()
                    .any(|(name, _)| name == &array.path));
                continue;
            }
            let variable = dataset
                .variable(&array.path)
                .unwrap_or_else(|e| panic!("{context}: {e}"));
            assert_eq!(variable.dtype().zarr_name(), array.dtype, "{context}");
            assert_eq!(variable.shape(), array.shape, "{context}");
            assert_eq!(variable.chunk_shape(), array.chunks, "{context}");
            if let Some(dims) = &array.dimension_names {
                assert_eq!(variable.dims(), dims.as_slice(), "{context}");
            }
            let actual = read_whole(variable)
                .await
                .unwrap_or_else(|e| panic!("{context}: {e}"));
            let expected = expected_bytes(array);
            assert!(
                same_values(&array.dtype, &actual, &expected),
                "{context}: values differ"
            );
            checked += 1;
        }
    }
    assert!(checked >= 30, "only {checked} arrays checked");
}

#[tokio::test]
async fn missing_chunks_really_are_missing_and_read_as_fill() {
    let manifest = manifest();
    let sparse = manifest
        .stores
        .iter()
        .flat_map(|store| store.arrays.iter().map(move |array| (store, array)))
        .filter(|(_, array)| !array.missing_chunk_files.is_empty())
        .count();
    assert!(
        sparse >= 3,
        "fixtures should include arrays with missing chunks"
    );
    for (store, array) in manifest
        .stores
        .iter()
        .flat_map(|s| s.arrays.iter().map(move |a| (s, a)))
    {
        for key in &array.missing_chunk_files {
            let path = fixtures().join("stores").join(&store.store).join(key);
            assert!(!path.exists(), "{} should be missing", path.display());
        }
    }
}

#[tokio::test]
async fn xarray_datasets_have_coordinates_dims_and_attributes() {
    for store in manifest()
        .stores
        .iter()
        .filter(|s| s.coordinates.as_ref().is_some_and(|c| !c.is_empty()))
    {
        let dataset = Dataset::open(&store_path(&store.store)).await.unwrap();
        let mut coordinates: Vec<&str> = dataset.coordinates().map(|v| v.name()).collect();
        coordinates.sort();
        let mut expected: Vec<&str> = store
            .coordinates
            .iter()
            .flatten()
            .map(String::as_str)
            .collect();
        expected.sort();
        assert_eq!(coordinates, expected, "{}", store.store);
        for (key, value) in &store.attributes {
            assert_eq!(
                dataset.attributes().get(key),
                Some(value),
                "{} attribute {key}",
                store.store
            );
        }
        let t2m = dataset.variable("t2m").unwrap();
        assert_eq!(t2m.dims(), ["time", "latitude", "longitude"]);
        assert_eq!(
            t2m.attributes().get("units").and_then(|u| u.as_str()),
            Some("K")
        );
        if store.arrays.iter().any(|array| array.path == "z") {
            assert!(dataset.data_variables().any(|v| v.name() == "z"));
        }
    }
}

#[tokio::test]
async fn consolidated_stores_open_over_http() {
    let base = serve_directory(fixtures().join("stores")).await;
    for store in manifest().stores.iter().filter(|s| s.consolidated) {
        let url = format!("{base}/{}", store.store);
        let dataset = Dataset::open(&url)
            .await
            .unwrap_or_else(|e| panic!("{url}: {e}"));
        for array in store
            .arrays
            .iter()
            .filter(|a| a.unsupported_codec().is_none())
        {
            let variable = dataset.variable(&array.path).unwrap();
            let actual = read_whole(variable)
                .await
                .unwrap_or_else(|e| panic!("{url} {}: {e}", array.path));
            assert!(
                same_values(&array.dtype, &actual, &expected_bytes(array)),
                "{url} {}",
                array.path
            );
        }
    }
}

#[tokio::test]
async fn stats_match_the_values_zarr_python_reads() {
    use std::sync::Arc;
    use zarrpipe::codec::CpuDecoder;
    use zarrpipe::stats::variable_stats;
    for store in manifest().stores.iter() {
        let dataset = Dataset::open(&store_path(&store.store)).await.unwrap();
        let floats = store
            .arrays
            .iter()
            .filter(|a| a.dtype == "float32" || a.dtype == "float64");
        for array in floats.filter(|a| a.unsupported_codec().is_none()) {
            let variable = dataset.variable(&array.path).unwrap();
            let stats = variable_stats(variable, Arc::new(CpuDecoder::new()), 4)
                .await
                .unwrap();
            let values = float_values(&array.dtype, &expected_bytes(array));
            let valid: Vec<f64> = values.iter().copied().filter(|v| !v.is_nan()).collect();
            let context = format!("{}/{}", store.store, array.path);
            assert_eq!(stats.count, values.len() as u64, "{context}");
            assert_eq!(
                stats.nan_count,
                (values.len() - valid.len()) as u64,
                "{context}"
            );
            if valid.is_empty() {
                assert_eq!(stats.min, None, "{context}");
                continue;
            }
            let min = valid.iter().copied().fold(f64::INFINITY, f64::min);
            let max = valid.iter().copied().fold(f64::NEG_INFINITY, f64::max);
            let mean = valid.iter().sum::<f64>() / valid.len() as f64;
            assert_eq!(stats.min, Some(min), "{context}");
            assert_eq!(stats.max, Some(max), "{context}");
            assert!(
                (stats.mean.unwrap() - mean).abs() <= 1e-9 * mean.abs().max(1.0),
                "{context}"
            );
        }
    }
}

fn float_values(dtype: &str, bytes: &[u8]) -> Vec<f64> {
    match dtype {
        "float32" => bytes
            .chunks_exact(4)
            .map(|b| f32::from_le_bytes(b.try_into().unwrap()) as f64)
            .collect(),
        _ => bytes
            .chunks_exact(8)
            .map(|b| f64::from_le_bytes(b.try_into().unwrap()))
            .collect(),
    }
}

#[tokio::test]
async fn stores_without_consolidated_metadata_are_listed() {
    // Remove the consolidated metadata of copies of the fixtures: the hierarchy is then listed.
    for store in manifest().stores.iter().filter(|s| s.consolidated) {
        let dir = tempfile::tempdir().unwrap();
        copy_dir(&fixtures().join("stores").join(&store.store), dir.path());
        let _ = std::fs::remove_file(dir.path().join(".zmetadata"));
        let root = dir.path().join("zarr.json");
        if let Ok(text) = std::fs::read(&root) {
            let mut group: serde_json::Value = serde_json::from_slice(&text).unwrap();
            group
                .as_object_mut()
                .unwrap()
                .remove("consolidated_metadata");
            std::fs::write(&root, serde_json::to_vec(&group).unwrap()).unwrap();
        }
        let dataset = Dataset::open(dir.path().to_str().unwrap()).await.unwrap();
        assert!(!dataset.consolidated(), "{}", store.store);
        for array in store
            .arrays
            .iter()
            .filter(|a| a.unsupported_codec().is_none())
        {
            let variable = dataset
                .variable(&array.path)
                .unwrap_or_else(|e| panic!("{}: {e}", store.store));
            let actual = read_whole(variable).await.unwrap();
            assert!(
                same_values(&array.dtype, &actual, &expected_bytes(array)),
                "{}",
                array.path
            );
        }
    }
}
