//! `zarrpipe._native`: the Rust side of the `zarrpipe` Python package, a thin layer over the
//! workspace crates (`zarrpipe_pipeline::Pipeline::builder` and friends). The Python side
//! (`zarrpipe/__init__.py`) turns its arguments into this module's explicit ones, picks ranks
//! from `torch.distributed`, and wraps batches as torch tensors when torch is installed.
//!
//! Host batches arrive as NumPy arrays that own the Rust `ndarray` buffers (no copy); GPU
//! batches (feature `cuda`, all of it in `gpu.rs`) as `CudaTensor`s that export themselves
//! through DLPack (`__dlpack__`) and make the consumer's stream wait on the batch's event.

#![warn(missing_docs)]

use std::sync::OnceLock;

use pyo3::prelude::*;

mod errors;
#[cfg(feature = "cuda")]
mod gpu;
mod layout;
mod options;
mod pipeline;
mod samples;

// As in the `zarrpipe` program (src/main.rs): fetching and decoding allocate a buffer per
// chunk (megabytes each, hundreds per epoch), which mimalloc reuses where glibc's allocator
// unmaps them and faults every page in again. Its local-dynamic TLS model (the crate's
// `local_dynamic_tls` feature) is the one a library loaded with dlopen needs. Host batch
// tensors, freed when PyTorch lets them go, are kept for the next batch.
#[global_allocator]
static ALLOCATOR: zarrpipe::core::RetainingAllocator<mimalloc::MiMalloc> =
    zarrpipe::core::RetainingAllocator::new(mimalloc::MiMalloc);

/// The Tokio runtime every pipeline of the process runs its stages on, configured as the
/// `zarrpipe` program's.
pub(crate) fn runtime() -> &'static tokio::runtime::Runtime {
    static RUNTIME: OnceLock<tokio::runtime::Runtime> = OnceLock::new();
    RUNTIME.get_or_init(|| {
        tokio::runtime::Builder::new_multi_thread()
            .enable_all()
            .max_blocking_threads(zarrpipe::MAX_BLOCKING_THREADS)
            .thread_name("zarrpipe-io")
            .build()
            .expect("a Tokio runtime starts")
    })
}

/// Whether this build has the GPU path (the `cuda` feature).
#[pyfunction]
fn cuda_built() -> bool {
    cfg!(feature = "cuda")
}

/// `zarrpipe info URL --json`: the dataset's variables, dims, chunks and codecs, as JSON.
#[pyfunction]
#[pyo3(signature = (url, store_options = None, mask_and_scale = true, time_dim = None))]
fn info_json(
    py: Python<'_>,
    url: String,
    store_options: Option<Vec<(String, String)>>,
    mask_and_scale: bool,
    time_dim: Option<String>,
) -> PyResult<String> {
    let options = options::store_options(store_options.unwrap_or_default(), None, None);
    let options = options::reading(options, mask_and_scale, time_dim);
    let described = py
        .detach(|| {
            runtime().block_on(async {
                let dataset = zarrpipe::store::Dataset::open_with(&url, &options).await?;
                Ok::<_, zarrpipe::store::Error>(zarrpipe::info::describe(&dataset).await)
            })
        })
        .map_err(|error| errors::to_py(&error))?;
    serde_json::to_string(&described).map_err(|error| errors::to_py(&error))
}

/// `zarrpipe stats URL --json`: per channel, mean, std, min and max of the values and their
/// tendencies over a range of time steps, and what they cover, as JSON (what `normalize=`
/// takes).
#[pyfunction]
#[pyo3(signature = (url, variables = None, store_options = None, start = None, end = None, dim = None, mask_and_scale = true, time_dim = None))]
#[allow(clippy::too_many_arguments)]
fn stats_json(
    py: Python<'_>,
    url: String,
    variables: Option<Vec<String>>,
    store_options: Option<Vec<(String, String)>>,
    start: Option<String>,
    end: Option<String>,
    dim: Option<String>,
    mask_and_scale: bool,
    time_dim: Option<String>,
) -> PyResult<String> {
    use std::sync::Arc;
    use zarrpipe::pipeline::{CoordValue, Selection};
    let options = options::store_options(store_options.unwrap_or_default(), None, None);
    let options = options::reading(options, mask_and_scale, time_dim);
    let report = py.detach(|| {
        runtime().block_on(async {
            let dataset = zarrpipe::store::Dataset::open_with(&url, &options).await?;
            let chosen = dim.clone();
            let dim = zarrpipe::stats::stats_dim(&dataset, dim.as_deref());
            let steps = match (&start, &end) {
                (None, None) => None,
                (from, to) => {
                    // An open end is the coordinate's own first or last value.
                    let selection = Selection {
                        dim: dim.clone(),
                        from: from
                            .as_deref()
                            .map_or(CoordValue::Number(f64::MIN), Into::into),
                        to: to
                            .as_deref()
                            .map_or(CoordValue::Number(f64::MAX), Into::into),
                    };
                    Some(zarrpipe::pipeline::index_range(&dataset, &selection).await?)
                }
            };
            let options = zarrpipe::stats::StatsOptions {
                variables: variables.unwrap_or_default(),
                dim: chosen,
                steps,
                start,
                end,
                concurrency: 2 * rayon_threads(),
            };
            let decoder = Arc::new(zarrpipe::codec::CpuDecoder::new());
            let report = zarrpipe::stats::channel_stats(&dataset, decoder, &options).await?;
            Ok::<_, Box<dyn std::error::Error + Send + Sync>>(report)
        })
    });
    let report = report.map_err(|error| errors::to_py(&*error))?;
    serde_json::to_string(&report).map_err(|error| errors::to_py(&error))
}

/// Writes zarrpipe's sample dataset (ERA5-like: t2m, u10, z on 13 levels; 128 x 256 points)
/// to `data/sample.zarr` under the working directory unless it is there; returns its path.
#[pyfunction]
fn sample_dataset(py: Python<'_>) -> PyResult<String> {
    py.detach(|| zarrpipe::sample::ensure_sample(|_, _| {}))
        .map_err(|error| errors::ZarrpipeError::new_err(format!("{error:#}")))
}

fn rayon_threads() -> usize {
    std::thread::available_parallelism().map_or(1, |n| n.get())
}

/// With `ZARRPIPE_LOG` set (a `tracing` filter, as for the `zarrpipe` program, e.g.
/// `zarrpipe_codec_gpu::split=debug`), zarrpipe's traces go to stderr; a subscriber the
/// process already has is kept.
fn trace_from_environment() {
    if std::env::var_os("ZARRPIPE_LOG").is_some() {
        let _ = tracing_subscriber::fmt()
            .with_env_filter(tracing_subscriber::EnvFilter::from_env("ZARRPIPE_LOG"))
            .with_writer(std::io::stderr)
            .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
            .try_init();
    }
}

#[pymodule]
fn _native(m: &Bound<'_, PyModule>) -> PyResult<()> {
    trace_from_environment();
    errors::register(m)?;
    m.add_class::<pipeline::NativePipeline>()?;
    m.add_class::<pipeline::NativeEpoch>()?;
    #[cfg(feature = "cuda")]
    m.add_class::<gpu::CudaTensor>()?;
    m.add_function(wrap_pyfunction!(cuda_built, m)?)?;
    m.add_function(wrap_pyfunction!(info_json, m)?)?;
    m.add_function(wrap_pyfunction!(stats_json, m)?)?;
    m.add_function(wrap_pyfunction!(sample_dataset, m)?)?;
    m.add_function(wrap_pyfunction!(layout::rechunk, m)?)?;
    m.add_function(wrap_pyfunction!(layout::advise_json, m)?)?;
    m.add("__version__", env!("CARGO_PKG_VERSION"))?;
    Ok(())
}
