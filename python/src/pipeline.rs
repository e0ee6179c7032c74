//! `NativePipeline` (a dataset opened once, the options, the layout) and `NativeEpoch` (one
//! epoch's `BatchStream`, iterated with the GIL released).

use std::sync::{Arc, Mutex, TryLockError};
use std::time::Duration;

use futures::StreamExt;
use numpy::PyArray;
use pyo3::exceptions::{PyRuntimeError, PyValueError};
use pyo3::prelude::*;
use pyo3::types::{PyDict, PyList, PyTuple};
use zarrpipe::batcher::{SampleLayout, SamplerState};
use zarrpipe::core::Device;
use zarrpipe::pipeline::{Batch, BatchStream, Host, MetricsSnapshot};
use zarrpipe::store::Dataset;

use crate::errors;
use crate::options::Config;
use crate::runtime;

/// How often a thread waiting for a batch looks for Ctrl-C (and other signals).
const SIGNAL_CHECK: Duration = Duration::from_millis(100);

/// One epoch's batches, on the host or (feature `cuda`) on a GPU.
pub(crate) enum Batches {
    Host(BatchStream<Host>),
    #[cfg(feature = "cuda")]
    Gpu(BatchStream<zarrpipe::pipeline::Gpu>),
}

/// A batch as it left the stream.
enum Delivered {
    Host(Batch),
    #[cfg(feature = "cuda")]
    Gpu(zarrpipe::pipeline::GpuBatch),
}

impl Batches {
    fn state(&self) -> SamplerState {
        match self {
            Batches::Host(stream) => stream.state(),
            #[cfg(feature = "cuda")]
            Batches::Gpu(stream) => stream.state(),
        }
    }

    fn num_batches(&self) -> u64 {
        match self {
            Batches::Host(stream) => stream.num_batches(),
            #[cfg(feature = "cuda")]
            Batches::Gpu(stream) => stream.num_batches(),
        }
    }

    fn metrics(&self) -> MetricsSnapshot {
        match self {
            Batches::Host(stream) => stream.metrics(),
            #[cfg(feature = "cuda")]
            Batches::Gpu(stream) => stream.metrics(),
        }
    }

    async fn next(&mut self) -> Option<zarrpipe::pipeline::Result<Delivered>> {
        match self {
            Batches::Host(stream) => stream.next().await.map(|batch| batch.map(Delivered::Host)),
            #[cfg(feature = "cuda")]
            Batches::Gpu(stream) => stream.next().await.map(|batch| batch.map(Delivered::Gpu)),
        }
    }
}

/// A dataset opened once, the options of its pipelines and their layout (resolved once);
/// each epoch builds a new stream.
#[pyclass(module = "zarrpipe._native", frozen)]
pub struct NativePipeline {
    url: String,
    config: Config,
    dataset: Arc<Dataset>,
    layout: Arc<SampleLayout>,
    num_batches: u64,
    #[cfg(feature = "cuda")]
    gpu: crate::gpu::GpuHandle,
}

/// Runs `future` on the pipelines' runtime with the GIL released.
fn block_on<T: Send>(py: Python<'_>, future: impl std::future::Future<Output = T> + Send) -> T {
    py.detach(|| runtime().block_on(future))
}

#[pymethods]
impl NativePipeline {
    #[new]
    fn new(py: Python<'_>, url: String, options: &Bound<'_, PyDict>) -> PyResult<Self> {
        let mut config = Config::from_dict(options)?;
        let dataset = block_on(py, Dataset::open_with(&url, &config.store))
            .map_err(|error| errors::to_py(&error))?;
        let dataset = Arc::new(dataset);
        // A host stream of epoch 0, never polled (nothing starts), checks every option on the
        // CPU and gives the layout and the batch count.
        let mut probe_config = config.clone();
        probe_config.dtype = zarrpipe::collate::TensorDType::F32;
        let probe = probe_config.builder(&dataset, 0, None)?;
        let probe = block_on(py, async move { probe.build().await })
            .map_err(|error| errors::to_py_with_url(&error, Some(&url)))?;
        // Static fields and derived channels' coordinates, once for every epoch.
        let read = zarrpipe::pipeline::read_channel_inputs(&dataset, probe.layout(), 64);
        config.channel_inputs =
            block_on(py, read).map_err(|error| errors::to_py_with_url(&error, Some(&url)))?;
        Ok(Self {
            layout: probe.layout().clone(),
            num_batches: probe.num_batches(),
            url,
            config,
            dataset,
            #[cfg(feature = "cuda")]
            gpu: Default::default(),
        })
    }

    fn __len__(&self) -> usize {
        self.num_batches as usize
    }

    /// The dataset's URL.
    #[getter]
    fn url(&self) -> &str {
        &self.url
    }

    /// Where batches are delivered, `cpu` or `cuda:N`.
    #[getter]
    fn device(&self) -> String {
        self.config.device.to_string()
    }

    #[getter]
    fn rank(&self) -> usize {
        self.config.ranks.rank
    }

    #[getter]
    fn world_size(&self) -> usize {
        self.config.ranks.world_size
    }

    /// Channel labels in the order of the inputs' channel axis (`t2m`, `z[level=3]`, ...).
    #[getter]
    fn channels(&self) -> Vec<String> {
        self.layout.channels().iter().map(|c| c.label()).collect()
    }

    /// The variables stacked as channels, in order.
    #[getter]
    fn variables(&self) -> Vec<String> {
        let variables = self.layout.variables().iter();
        variables.map(|v| v.name().to_string()).collect()
    }

    /// One sample's input shape, `[channel, window...]`.
    #[getter]
    fn sample_shape(&self) -> Vec<usize> {
        self.layout.sample_shape()
    }

    /// Samples in the whole epoch (all ranks).
    #[getter]
    fn num_samples(&self) -> u64 {
        self.layout.num_samples()
    }

    /// The sample dimensions: `(name, length, window size, stride, iterated)`.
    #[getter]
    fn dims(&self) -> Vec<(String, u64, u64, u64, bool)> {
        let dims = self.layout.sample_dims().iter();
        dims.map(|d| (d.name.clone(), d.length, d.size, d.stride, d.iterated))
            .collect()
    }

    /// Starts epoch `epoch`, or resumes the one `state` (from `NativeEpoch.state_json`) saved.
    #[pyo3(signature = (epoch, state = None))]
    fn epoch(&self, py: Python<'_>, epoch: u64, state: Option<&str>) -> PyResult<NativeEpoch> {
        let resume = state
            .map(serde_json::from_str::<SamplerState>)
            .transpose()
            .map_err(|error| {
                PyValueError::new_err(format!("not a saved zarrpipe state: {error}"))
            })?;
        let epoch = resume.as_ref().map_or(epoch, |state| state.epoch);
        // The layout `new` resolved: no epoch reads the time coordinate or lists the store
        // again.
        let builder = self.config.builder(&self.dataset, epoch, resume)?;
        let builder = builder.layout(self.layout.clone());
        let url = self.url.clone();
        let batches = match self.config.device {
            Device::Cpu => block_on(py, async move { builder.build().await }).map(Batches::Host),
            #[cfg(feature = "cuda")]
            Device::Cuda(ordinal) => {
                let build = crate::gpu::build(builder, &self.config, ordinal, &self.gpu);
                block_on(py, build).map(Batches::Gpu)
            }
            #[cfg(not(feature = "cuda"))]
            Device::Cuda(_) => {
                return Err(crate::errors::GpuError::new_err(format!(
                    "device {}: this zarrpipe was built without CUDA support (build the wheel \
                     with `maturin build --release --features cuda`)",
                    self.config.device
                )))
            }
        }
        .map_err(|error| errors::to_py_with_url(&error, Some(&url)))?;
        Ok(NativeEpoch {
            url,
            batches: Mutex::new(Some(batches)),
        })
    }
}

/// One epoch's stream of batches.
#[pyclass(module = "zarrpipe._native", frozen)]
pub struct NativeEpoch {
    url: String,
    batches: Mutex<Option<Batches>>,
}

#[pymethods]
impl NativeEpoch {
    /// The next batch as a dict (`index`, `inputs`, `targets`, `mask`, `nan_mask`,
    /// `latitude_weights`, `samples`), or None at the end of the epoch. Waits with the GIL
    /// released, and raises KeyboardInterrupt on Ctrl-C within 0.1 s.
    fn next_batch<'py>(&self, py: Python<'py>) -> PyResult<Option<Bound<'py, PyDict>>> {
        let mut guard = match self.batches.try_lock() {
            Ok(guard) => guard,
            Err(TryLockError::Poisoned(poison)) => poison.into_inner(),
            Err(TryLockError::WouldBlock) => {
                return Err(PyRuntimeError::new_err(
                    "this epoch is being iterated by another thread",
                ))
            }
        };
        let Some(batches) = guard.as_mut() else {
            return Ok(None);
        };
        loop {
            let next = block_on(py, async {
                tokio::time::timeout(SIGNAL_CHECK, batches.next()).await
            });
            match next {
                // Nothing yet: let Python run its signal handlers (Ctrl-C raises here).
                Err(_elapsed) => py.check_signals()?,
                // The stream stays (it is fused) so the state still says where the epoch ended.
                Ok(None) => return Ok(None),
                Ok(Some(Err(error))) => {
                    return Err(errors::to_py_with_url(&error, Some(&self.url)));
                }
                Ok(Some(Ok(Delivered::Host(batch)))) => return host_batch(py, batch).map(Some),
                #[cfg(feature = "cuda")]
                Ok(Some(Ok(Delivered::Gpu(batch)))) => {
                    return crate::gpu::gpu_batch(py, batch).map(Some)
                }
            }
        }
    }

    /// What to save to resume the epoch with exactly the batches not yet delivered (JSON).
    fn state_json(&self) -> PyResult<Option<String>> {
        let guard = self.batches.lock().unwrap_or_else(|p| p.into_inner());
        guard
            .as_ref()
            .map(|batches| serde_json::to_string(&batches.state()))
            .transpose()
            .map_err(|error| errors::to_py(&error))
    }

    /// Batches in this rank's epoch (those before a resume included).
    fn num_batches(&self) -> u64 {
        let guard = self.batches.lock().unwrap_or_else(|p| p.into_inner());
        guard.as_ref().map_or(0, Batches::num_batches)
    }

    /// The epoch's counters so far (the pipeline's `MetricsSnapshot`): times in seconds.
    fn metrics<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyDict>> {
        let guard = self.batches.lock().unwrap_or_else(|p| p.into_inner());
        let m = guard.as_ref().map(Batches::metrics).unwrap_or_default();
        let dict = PyDict::new(py);
        let seconds = [
            ("fetch_busy_s", m.fetch_busy),
            ("decode_busy_s", m.decode_busy),
            ("collate_busy_s", m.collate_busy),
            ("consumer_wait_s", m.consumer_wait),
            ("first_wait_s", m.first_wait),
            ("gpu_planning_busy_s", m.gpu_planning_busy),
            ("gpu_busy_s", m.gpu_busy),
        ];
        for (name, duration) in seconds {
            dict.set_item(name, duration.as_secs_f64())?;
        }
        let counts = [
            ("chunks", m.chunks),
            ("missing_chunks", m.missing_chunks),
            ("stored_bytes", m.stored_bytes),
            ("decoded_bytes", m.decoded_bytes),
            ("delivered_bytes", m.delivered_bytes),
            ("samples", m.samples),
            ("batches", m.batches),
            ("cpu_decoded_chunks", m.cpu_decoded_chunks),
            ("gpu_decoded_chunks", m.gpu_decoded_chunks),
        ];
        for (name, count) in counts {
            dict.set_item(name, count)?;
        }
        Ok(dict)
    }

    /// Stops the epoch: batches being loaded are dropped and their work cancelled.
    fn close(&self, py: Python<'_>) {
        let batches = self
            .batches
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .take();
        // Dropping the stream aborts its tasks; the GPU path may wait for its worker.
        py.detach(move || drop(batches));
    }
}

/// The samples of a batch as `(sample number, origin)` pairs.
pub(crate) fn samples<'py>(
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

/// A host batch as NumPy arrays that own the batch's buffers (no copy).
fn host_batch(py: Python<'_>, batch: Batch) -> PyResult<Bound<'_, PyDict>> {
    let dict = PyDict::new(py);
    dict.set_item("index", batch.index)?;
    dict.set_item("inputs", PyArray::from_owned_array(py, batch.inputs))?;
    dict.set_item(
        "targets",
        batch.targets.map(|a| PyArray::from_owned_array(py, a)),
    )?;
    dict.set_item("mask", batch.mask.map(|a| PyArray::from_owned_array(py, a)))?;
    dict.set_item(
        "nan_mask",
        batch.nan_mask.map(|a| PyArray::from_owned_array(py, a)),
    )?;
    dict.set_item(
        "latitude_weights",
        batch
            .latitude_weights
            .map(|a| PyArray::from_owned_array(py, a)),
    )?;
    dict.set_item("samples", samples(py, &batch.samples)?)?;
    Ok(dict)
}
