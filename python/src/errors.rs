//! zarrpipe's errors as Python exceptions: `ZarrpipeError` and one subclass per stage, each
//! with the Rust error chain as its message and the `url`, `variable` and `key` (chunk key) it
//! names as attributes (`None` where the error names none).

use pyo3::create_exception;
use pyo3::exceptions::PyException;
use pyo3::prelude::*;
use zarrpipe::{batcher, codec, collate, pipeline, store};

create_exception!(
    zarrpipe,
    ZarrpipeError,
    PyException,
    "Any zarrpipe error. `url`, `variable` and `key` (a chunk key) name what failed, or are None."
);
create_exception!(
    zarrpipe,
    StoreError,
    ZarrpipeError,
    "Opening a store or reading its metadata or chunks failed (missing store or variable, network, timeout)."
);
create_exception!(
    zarrpipe,
    DecodeError,
    ZarrpipeError,
    "A chunk could not be decoded (corrupt data, unsupported codec)."
);
create_exception!(
    zarrpipe,
    LayoutError,
    ZarrpipeError,
    "The windows, variables, ranks or saved state do not fit the dataset."
);
create_exception!(
    zarrpipe,
    CollateError,
    ZarrpipeError,
    "Gathering, normalising or typing a batch failed (bad statistics, options)."
);
create_exception!(
    zarrpipe,
    GpuError,
    ZarrpipeError,
    "CUDA or nvCOMP failed, or is not available."
);

pub(crate) fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    let py = m.py();
    m.add("ZarrpipeError", py.get_type::<ZarrpipeError>())?;
    m.add("StoreError", py.get_type::<StoreError>())?;
    m.add("DecodeError", py.get_type::<DecodeError>())?;
    m.add("LayoutError", py.get_type::<LayoutError>())?;
    m.add("CollateError", py.get_type::<CollateError>())?;
    m.add("GpuError", py.get_type::<GpuError>())?;
    Ok(())
}

/// Which exception class, and the names the error carries.
#[derive(Default)]
struct Context {
    kind: Kind,
    url: Option<String>,
    variable: Option<String>,
    key: Option<String>,
}

#[derive(Default, Clone, Copy)]
enum Kind {
    #[default]
    Other,
    Store,
    Decode,
    Layout,
    Collate,
    Gpu,
}

fn set(slot: &mut Option<String>, value: &str) {
    slot.get_or_insert_with(|| value.to_string());
}

fn of_store(error: &store::Error, context: &mut Context) {
    use store::Error as E;
    context.kind = Kind::Store;
    let (url, variable, key): (Option<&str>, Option<&str>, Option<&str>) = match error {
        E::StoreNotFound { url }
        | E::UnsupportedUrl { url, .. }
        | E::OpenStore { url, .. }
        | E::NotZarr { url }
        | E::BadUrl { url, .. }
        | E::StoreOption { url, .. } => (Some(url), None, None),
        E::ReadMetadata { url, key, .. }
        | E::MalformedMetadata { url, key, .. }
        | E::MetadataTimeout { url, key, .. }
        | E::List {
            url, prefix: key, ..
        } => (Some(url), None, Some(key)),
        E::InvalidArray { url, variable, .. } => (Some(url), Some(variable), None),
        E::MissingVariable { name, url, .. } => (Some(url), Some(name), None),
        E::UnsupportedDataType { variable, .. } | E::ChunkOutOfGrid { variable, .. } => {
            (None, Some(variable), None)
        }
        E::Fetch {
            url, variable, key, ..
        }
        | E::FetchTimeout {
            url, variable, key, ..
        }
        | E::ReadStopped {
            url, variable, key, ..
        }
        | E::ShardIndex {
            url, variable, key, ..
        } => (Some(url), Some(variable), Some(key)),
        _ => (None, None, None),
    };
    url.inspect(|url| set(&mut context.url, url));
    variable.inspect(|variable| set(&mut context.variable, variable));
    key.inspect(|key| set(&mut context.key, key));
}

fn of_codec(error: &codec::Error, context: &mut Context) {
    use codec::Error as E;
    context.kind = Kind::Decode;
    match error {
        E::Store(error) => of_store(error, context),
        E::Decode { variable, key, .. }
        | E::Codec { variable, key, .. }
        | E::DecodedSize { variable, key, .. }
        | E::WorkerGone { variable, key }
        | E::Frame { variable, key, .. }
        | E::GpuUnsupported { variable, key, .. }
        | E::GpuDecode { variable, key, .. } => {
            set(&mut context.variable, variable);
            set(&mut context.key, key);
        }
        E::Cuda(_) | E::Nvcomp { .. } => context.kind = Kind::Gpu,
        _ => {}
    }
}

fn of_batcher(error: &batcher::Error, context: &mut Context) {
    use batcher::Error as E;
    context.kind = Kind::Layout;
    match error {
        E::Store(error) | E::UnknownChannel { source: error, .. } => of_store(error, context),
        E::MissingDimension { variable, .. } => set(&mut context.variable, variable),
        _ => {}
    }
}

fn of_collate(error: &collate::Error, context: &mut Context) {
    use collate::Error as E;
    context.kind = Kind::Collate;
    match error {
        E::Store(error) => of_store(error, context),
        E::Decode(error) => of_codec(error, context),
        E::MissingChunk { variable, .. }
        | E::UnknownVariable { variable, .. }
        | E::TooManyAxes { variable, .. } => set(&mut context.variable, variable),
        E::Cuda(_) => context.kind = Kind::Gpu,
        _ => {}
    }
}

fn of_pipeline(error: &pipeline::Error, context: &mut Context) {
    use pipeline::Error as E;
    match error {
        E::Store(error) => of_store(error, context),
        E::Decode(error) => of_codec(error, context),
        E::Layout(error) => of_batcher(error, context),
        E::Collate(error) => of_collate(error, context),
        E::Gpu { .. } | E::WorkerStopped | E::UnsupportedDevice { .. } => context.kind = Kind::Gpu,
        E::Select { .. } | E::RankOnHost { .. } | E::SharedWaits { .. } => {
            context.kind = Kind::Layout
        }
        _ => {}
    }
}

/// The Python exception for `error`; `url` fills in the dataset's URL where the error itself
/// names none (chunk decoding errors name the variable and key only).
pub(crate) fn to_py_with_url(
    error: &(dyn std::error::Error + 'static),
    url: Option<&str>,
) -> PyErr {
    let mut context = Context::default();
    if let Some(error) = error.downcast_ref::<pipeline::Error>() {
        of_pipeline(error, &mut context);
    } else if let Some(error) = error.downcast_ref::<store::Error>() {
        of_store(error, &mut context);
    } else if let Some(error) = error.downcast_ref::<codec::Error>() {
        of_codec(error, &mut context);
    } else if let Some(error) = error.downcast_ref::<batcher::Error>() {
        of_batcher(error, &mut context);
    } else if let Some(error) = error.downcast_ref::<collate::Error>() {
        of_collate(error, &mut context);
    } else if error.is::<zarrpipe::cuda::CudaError>() {
        context.kind = Kind::Gpu;
    }
    if let Some(url) = url {
        set(&mut context.url, url);
    }
    let message = zarrpipe::error_chain(error);
    let exception = match context.kind {
        Kind::Other => ZarrpipeError::new_err(message),
        Kind::Store => StoreError::new_err(message),
        Kind::Decode => DecodeError::new_err(message),
        Kind::Layout => LayoutError::new_err(message),
        Kind::Collate => CollateError::new_err(message),
        Kind::Gpu => GpuError::new_err(message),
    };
    Python::attach(|py| {
        let value = exception.value(py);
        // Setting attributes on a fresh exception instance cannot fail.
        let _ = value.setattr("url", context.url);
        let _ = value.setattr("variable", context.variable);
        let _ = value.setattr("key", context.key);
    });
    exception
}

pub(crate) fn to_py(error: &(dyn std::error::Error + 'static)) -> PyErr {
    to_py_with_url(error, None)
}
