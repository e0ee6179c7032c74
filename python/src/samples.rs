//! The samples of a batch, as both kinds of batch (host and GPU) hand them to Python.

use pyo3::prelude::*;
use pyo3::types::{PyList, PyTuple};

/// The samples of a batch as `(sample number, origin)` pairs.
pub(crate) fn sample_list<'py>(
    py: Python<'py>,
    samples: &[zarrpipe::batcher::Sample],
) -> PyResult<Bound<'py, PyList>> {
    let pairs = samples.iter().map(|sample| {
        let origin = PyTuple::new(py, &sample.origin)?;
        PyTuple::new(
            py,
            [
                sample.index.into_pyobject(py)?.into_any(),
                origin.into_any(),
            ],
        )
    });
    PyList::new(py, pairs.collect::<PyResult<Vec<_>>>()?)
}
