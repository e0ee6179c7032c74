//! `NativePipeline` (a dataset opened once, the options, the layout) and `NativeEpoch` (one
//! epoch's batches of a `BatchStream`, iterated with the GIL released). With epochs in a row,
//! an epoch that ends hands its stream, already loading the next epoch, back to the pipeline
//! for the next iteration.

use std::sync::{Arc, Mutex, TryLockError};
use std::time::Duration;

use futures::StreamExt;
use numpy::PyArray;
use pyo3::exceptions::{PyRuntimeError, PyValueError};
use pyo3::prelude::*;
use pyo3::types::PyDict;
use zarrpipe::batcher::{SampleLayout, SamplerState};
use zarrpipe::core::Device;
use zarrpipe::pipeline::{Batch, BatchStream, Host, MetricsSnapshot};
use zarrpipe::store::Dataset;

use crate::errors;
use crate::options::Config;
use crate::runtime;
use crate::samples::sample_list;

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

/// Calls `$method` on the stream, whichever place it delivers to.
macro_rules! on_stream {
    ($batches:expr, $method:ident) => {
        match $batches {
            Batches::Host(stream) => stream.$method(),
            #[cfg(feature = "cuda")]
            Batches::Gpu(stream) => stream.$method(),
        }
    };
}

impl Batches {
    fn state(&self) -> SamplerState {
        on_stream!(self, state)
    }

    fn num_batches(&self) -> u64 {
        on_stream!(self, num_batches)
    }

    /// The epoch whose batches come next.
    fn epoch(&self) -> u64 {
        on_stream!(self, epoch)
    }

    fn batches_left_in_epoch(&self) -> u64 {
        on_stream!(self, batches_left_in_epoch)
    }

    fn epochs_after(&self) -> u64 {
        on_stream!(self, epochs_after)
    }

    /// The counters of the epoch of the last batch delivered.
    fn epoch_metrics(&self) -> MetricsSnapshot {
        on_stream!(self, epoch_metrics)
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
    /// With epochs in a row: the stream an epoch handed back when it ended, loading the next.
    carried: Carried,
    #[cfg(feature = "cuda")]
    gpu: crate::gpu::GpuHandle,
}

/// Where an ended epoch leaves its stream for the next iteration.
type Carried = Arc<Mutex<Option<Batches>>>;

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
            carried: Carried::default(),
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
    /// `walking`: the caller goes on to the epoch after this one (it set this one's number),
    /// so with epochs in a row the stream carries on into it.
    #[pyo3(signature = (epoch, state = None, walking = false))]
    fn epoch(
        &self,
        py: Python<'_>,
        epoch: u64,
        state: Option<&str>,
        walking: bool,
    ) -> PyResult<NativeEpoch> {
        let resume = state
            .map(serde_json::from_str::<SamplerState>)
            .transpose()
            .map_err(|error| {
                PyValueError::new_err(format!("not a saved zarrpipe state: {error}"))
            })?;
        let epoch = resume.as_ref().map_or(epoch, |state| state.epoch);
        let in_a_row = self.config.epochs_in_a_row && walking;
        if let Some(batches) = self.take_carried(py, epoch, resume.is_none()) {
            return Ok(self.native_epoch(batches, epoch, in_a_row));
        }
        // The layout `new` resolved: no epoch reads the time coordinate or lists the store
        // again.
        let builder = self.config.builder(&self.dataset, epoch, resume)?;
        let mut builder = builder.layout(self.layout.clone());
        if in_a_row {
            // Every epoch from this one on; the stream stops when dropped.
            builder = builder.epochs(u64::MAX);
        }
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
        Ok(self.native_epoch(batches, epoch, in_a_row))
    }
}

impl NativePipeline {
    /// The stream an ended epoch handed back, when its next batch is `epoch`'s first and the
    /// epoch starts afresh (`fresh`: nothing resumed); any other is dropped.
    fn take_carried(&self, py: Python<'_>, epoch: u64, fresh: bool) -> Option<Batches> {
        let carried = self
            .carried
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .take()?;
        let at_start = carried.batches_left_in_epoch() == carried.num_batches();
        if fresh && carried.epoch() == epoch && at_start {
            return Some(carried);
        }
        // Dropping a GPU stream may wait for its worker.
        py.detach(move || drop(carried));
        None
    }

    /// Iterates `batches` for the rest of `epoch`; `in_a_row`: hands the stream on after it.
    fn native_epoch(&self, batches: Batches, epoch: u64, in_a_row: bool) -> NativeEpoch {
        let carry = in_a_row.then(|| self.carried.clone());
        // A state saved at an epoch's end resumes a stream that already stands at the next.
        let left = match batches.epoch() == epoch {
            true => batches.batches_left_in_epoch(),
            false => 0,
        };
        NativeEpoch {
            url: self.url.clone(),
            epoch,
            num_batches: batches.num_batches(),
            inner: Mutex::new(EpochState {
                left,
                delivered: 0,
                batches: Some(batches),
                ended: None,
            }),
            carry,
            #[cfg(feature = "cuda")]
            clock: self.gpu.clock(),
        }
    }
}

/// One epoch's batches, from a stream of its own or of epochs in a row.
#[pyclass(module = "zarrpipe._native", frozen)]
pub struct NativeEpoch {
    url: String,
    epoch: u64,
    num_batches: u64,
    inner: Mutex<EpochState>,
    /// With epochs in a row: where the stream goes when the epoch ends.
    carry: Option<Carried>,
    /// Times the consumer's waits for the pipeline's GPU batches.
    #[cfg(feature = "cuda")]
    clock: Arc<zarrpipe::collate::HandoverClock>,
}

/// The state of `epoch` of `num_batches` batches delivered whole. A stream of epochs in a row
/// already stands at the next epoch's start; the seed and spec are the same.
fn end_of(epoch: u64, num_batches: u64, batches: &Batches) -> SamplerState {
    SamplerState {
        epoch,
        position: num_batches,
        ..batches.state()
    }
}

/// Where an epoch stands.
struct EpochState {
    /// The stream, until the epoch ends or is closed.
    batches: Option<Batches>,
    /// Batches of the epoch still to deliver, and those delivered by this object.
    left: u64,
    delivered: u64,
    /// Once ended: the state and counters it ended with.
    ended: Option<(SamplerState, MetricsSnapshot)>,
}

impl EpochState {
    /// Ends the epoch: keeps its state and counters, and hands a stream that carries more
    /// epochs to `carry`; returns one that does not, to drop.
    fn end(&mut self, epoch: u64, num_batches: u64, carry: Option<&Carried>) -> Option<Batches> {
        let batches = self.batches.take()?;
        let metrics = self.metrics_of(&batches);
        self.ended = Some((end_of(epoch, num_batches, &batches), metrics));
        match carry {
            Some(carry) if batches.epochs_after() > 0 || batches.epoch() != epoch => {
                let mut carried = carry.lock().unwrap_or_else(|p| p.into_inner());
                carried.replace(batches)
            }
            _ => Some(batches),
        }
    }

    /// This epoch's counters, from its stream.
    fn metrics_of(&self, batches: &Batches) -> MetricsSnapshot {
        match self.delivered {
            0 => MetricsSnapshot::default(),
            _ => batches.epoch_metrics(),
        }
    }
}

#[pymethods]
impl NativeEpoch {
    /// The next batch as a dict (`index`, `inputs`, `targets`, `mask`, `nan_mask`,
    /// `latitude_weights`, `samples`), or None at the end of the epoch. Waits with the GIL
    /// released, and raises KeyboardInterrupt on Ctrl-C within 0.1 s.
    fn next_batch<'py>(&self, py: Python<'py>) -> PyResult<Option<Bound<'py, PyDict>>> {
        let mut guard = match self.inner.try_lock() {
            Ok(guard) => guard,
            Err(TryLockError::Poisoned(poison)) => poison.into_inner(),
            Err(TryLockError::WouldBlock) => {
                return Err(PyRuntimeError::new_err(
                    "this epoch is being iterated by another thread",
                ))
            }
        };
        let state = &mut *guard;
        if state.left == 0 {
            let done = state.end(self.epoch, self.num_batches, self.carry.as_ref());
            py.detach(move || drop(done));
            return Ok(None);
        }
        let Some(batches) = state.batches.as_mut() else {
            return Ok(None);
        };
        #[cfg(feature = "cuda")]
        crate::gpu::consumer_asks(&self.clock);
        loop {
            let next = block_on(py, async {
                tokio::time::timeout(SIGNAL_CHECK, batches.next()).await
            });
            let delivered = match next {
                // Nothing yet: let Python run its signal handlers (Ctrl-C raises here).
                Err(_elapsed) => {
                    py.check_signals()?;
                    continue;
                }
                // A stream that ends early keeps its state (it is fused).
                Ok(None) => return Ok(None),
                Ok(Some(Err(error))) => {
                    return Err(errors::to_py_with_url(&error, Some(&self.url)));
                }
                Ok(Some(Ok(delivered))) => delivered,
            };
            state.left -= 1;
            state.delivered += 1;
            return match delivered {
                Delivered::Host(batch) => host_batch(py, batch).map(Some),
                #[cfg(feature = "cuda")]
                Delivered::Gpu(batch) => crate::gpu::gpu_batch(py, batch, &self.clock).map(Some),
            };
        }
    }

    /// What to save to resume the epoch with exactly the batches not yet delivered (JSON).
    fn state_json(&self) -> PyResult<Option<String>> {
        let state = self.inner.lock().unwrap_or_else(|p| p.into_inner());
        let saved = match (&state.ended, &state.batches) {
            (Some((ended, _)), _) => Some(ended.clone()),
            (None, Some(batches)) if state.left == 0 => {
                Some(end_of(self.epoch, self.num_batches, batches))
            }
            (None, Some(batches)) => Some(batches.state()),
            (None, None) => None,
        };
        saved
            .map(|saved| serde_json::to_string(&saved))
            .transpose()
            .map_err(|error| errors::to_py(&error))
    }

    /// Batches in this rank's epoch (those before a resume included).
    fn num_batches(&self) -> u64 {
        self.num_batches
    }

    /// The epoch's counters so far (the pipeline's `MetricsSnapshot`): times in seconds.
    fn metrics<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyDict>> {
        let state = self.inner.lock().unwrap_or_else(|p| p.into_inner());
        let m = match (&state.ended, &state.batches) {
            (Some((_, metrics)), _) => metrics.clone(),
            (None, Some(batches)) => state.metrics_of(batches),
            (None, None) => MetricsSnapshot::default(),
        };
        drop(state);
        let dict = PyDict::new(py);
        let seconds = [
            ("fetch_busy_s", m.fetch_busy),
            ("decode_busy_s", m.decode_busy),
            ("decode_cpu_s", m.decode_cpu),
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
            ("cpu_copied_chunks", m.cpu_copied_chunks),
        ];
        for (name, count) in counts {
            dict.set_item(name, count)?;
        }
        Ok(dict)
    }

    /// Stops the epoch: batches being loaded are dropped and their work cancelled.
    fn close(&self, py: Python<'_>) {
        let batches = self
            .inner
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .batches
            .take();
        // Dropping the stream aborts its tasks; the GPU path may wait for its worker.
        py.detach(move || drop(batches));
    }
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
    dict.set_item("samples", sample_list(py, &batch.samples)?)?;
    Ok(dict)
}
