//! `zarrpipe.rechunk` and `zarrpipe.advise`: the GPU-friendly layout tools of the program
//! (`zarrpipe rechunk`, `zarrpipe advise`), from Python.

use std::collections::BTreeMap;

use pyo3::prelude::*;

use crate::{errors, options, runtime};

/// `zarrpipe rechunk SRC DST ...`: rewrites `source` as a Zarr v3 store at `destination`;
/// returns (arrays, chunks, chunks written by this call).
#[pyfunction]
#[pyo3(signature = (source, destination, chunks, shards, codec, variables, store_options = None))]
#[allow(clippy::too_many_arguments)]
pub fn rechunk(
    py: Python<'_>,
    source: String,
    destination: String,
    chunks: BTreeMap<String, u64>,
    shards: BTreeMap<String, u64>,
    codec: String,
    variables: Vec<String>,
    store_options: Option<Vec<(String, String)>>,
) -> PyResult<(usize, u64, u64)> {
    use zarrpipe::rechunk::{Codec, RechunkError, RechunkOptions};
    let store = options::store_options(store_options.unwrap_or_default(), None, None);
    let check = |flag: &str, sizes: &BTreeMap<String, u64>| -> PyResult<()> {
        match sizes.iter().find(|(_, &n)| n == 0) {
            Some((dim, _)) => Err(errors::to_py(&RechunkError::DimSize {
                flag: flag.into(),
                text: format!("{dim}=0"),
                reason: "sizes must be at least 1".into(),
            })),
            None => Ok(()),
        }
    };
    check("chunks", &chunks)?;
    check("shards", &shards)?;
    let codec: Codec = codec.parse().map_err(|error| errors::to_py(&error))?;
    let options = RechunkOptions {
        variables,
        chunks,
        shards,
        codec,
        ..Default::default()
    };
    let report = py.detach(|| {
        runtime().block_on(async {
            let dataset = zarrpipe::store::Dataset::open_with(&source, &store)
                .await
                .map_err(|error| errors::to_py(&error))?;
            zarrpipe::rechunk::rechunk(&dataset, destination.as_ref(), &options, |_, _| {})
                .await
                .map_err(|error| errors::to_py(error.as_ref()))
        })
    })?;
    Ok((report.arrays, report.chunks, report.written))
}

/// `zarrpipe advise URL --json`: the figures of the store's layout and of each candidate, and
/// the fastest, as JSON.
#[pyfunction]
#[pyo3(signature = (url, variable = None, sample_bytes = 64 << 20, store_options = None))]
pub fn advise_json(
    py: Python<'_>,
    url: String,
    variable: Option<String>,
    sample_bytes: u64,
    store_options: Option<Vec<(String, String)>>,
) -> PyResult<String> {
    let store = options::store_options(store_options.unwrap_or_default(), None, None);
    let options = zarrpipe::advise::AdviseOptions {
        variable,
        sample_bytes: sample_bytes.max(1),
        ..Default::default()
    };
    let advice = py
        .detach(|| {
            runtime().block_on(async {
                let dataset = zarrpipe::store::Dataset::open_with(&url, &store).await?;
                zarrpipe::advise::advise(&dataset, &options).await
            })
        })
        .map_err(|error| errors::to_py(error.as_ref()))?;
    serde_json::to_string(&advice).map_err(|error| errors::to_py(&error))
}
