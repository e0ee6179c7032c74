//! The GPU path (feature `cuda`), all of it: building a GPU pipeline, and `CudaTensor`, a
//! batch tensor in device memory that exports itself through DLPack without a copy.
//!
//! `__dlpack__(stream=S)` makes the consumer's stream `S` (torch passes its current stream)
//! wait on the batch's `ready` event on the device, so the host never synchronises; the first
//! of a batch's tensors exported also times the consumer's wait for it on the GPU
//! ([`HandoverClock`], from the moment the consumer asked for it), which `auto` reads instead
//! of the thread's wait. The
//! exported tensor shares the `DeviceTensor`: its buffer goes back to zarrpipe's pool when the
//! last holder (this object or the consumer's tensor, through the DLPack deleter) lets go, and
//! the next batch writes into it only after the kernels the consumer queued on `S` by then
//! (torch frees a tensor when its last reference goes, not when its kernels have run).

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};

use dlpark::ffi::{DLDevice, DLManagedTensor, DLManagedTensorVersioned};
use dlpark::python::{export_dlpack, CudaStreamRequest, DlpackExporter, ExportRequest};
use dlpark::{DlpackFlags, Managed};
use pyo3::prelude::*;
use pyo3::types::PyDict;
use zarrpipe::codec::GpuOptions;
use zarrpipe::collate::{DeviceTensor, HandoverClock, TensorDType};
use zarrpipe::core::Pace;
use zarrpipe::cuda::cudarc::driver::{result, sys, CudaEvent};
use zarrpipe::cuda::{CudaError, During};
use zarrpipe::pipeline::{BatchStream, Gpu, GpuBatch, GpuDevice, PipelineBuilder};

use crate::options::Config;

/// The pipeline's GPU (decoder, kernels, tensor pool), opened at its first epoch and kept for
/// the next ones; and the clock of its batches' hand-overs.
#[derive(Default)]
pub(crate) struct GpuHandle {
    gpu: Mutex<Option<Arc<GpuDevice>>>,
    clock: Arc<HandoverClock>,
}

impl GpuHandle {
    /// The clock that times the consumer's waits for this pipeline's batches.
    pub(crate) fn clock(&self) -> Arc<HandoverClock> {
        self.clock.clone()
    }
}

/// Builds one epoch's GPU stream on `cuda:ordinal`: chunks decoded on the GPU (or the CPU,
/// `decode_on`) and batches collated there, in device memory.
///
/// This is the one place that speaks the Rust GPU pipeline API.
pub(crate) async fn build(
    builder: PipelineBuilder,
    config: &Config,
    ordinal: usize,
    handle: &GpuHandle,
) -> zarrpipe::pipeline::Result<BatchStream<Gpu>> {
    let gpu = {
        let mut slot = handle.gpu.lock().unwrap_or_else(|p| p.into_inner());
        match &*slot {
            Some(gpu) => gpu.clone(),
            None => {
                let options = GpuOptions {
                    device: ordinal,
                    ..config.gpu.decoder.clone()
                };
                let (budget, tensors) = (config.gpu.memory, config.gpu.tensor_memory);
                let gpu = GpuDevice::open_within(options, budget, tensors)?;
                *slot = Some(gpu.clone());
                gpu
            }
        }
    };
    builder
        .device(config.device)
        .gpu(gpu)
        .decode_on(config.gpu.decode_on)
        .collate_on_gpu()
        .build()
        .await
}

/// The consumer asks for its next batch: `clock` marks where its stream stands. A mark that
/// fails costs this batch's timing, not the batch.
pub(crate) fn consumer_asks(clock: &HandoverClock) {
    // SAFETY: the stream of the last hand-over is the consumer's, which outlives the tensors
    // it read (as for `read_on` below), and those of the last batch are still held: a training
    // loop asks for the next batch before it lets go of the last.
    if let Err(error) = unsafe { clock.asked() } {
        tracing::debug!(target: "zarrpipe", "the consumer's wait not timed: {error}");
    }
}

/// A GPU batch as a dict of `CudaTensor`s, plus their device addresses (`pointers`); `clock`
/// times the consumer's wait for it, where the batch carries its pace.
pub(crate) fn gpu_batch<'py>(
    py: Python<'py>,
    batch: GpuBatch,
    clock: &Arc<HandoverClock>,
) -> PyResult<Bound<'py, PyDict>> {
    let handover = Arc::new(Handover {
        ready: Arc::new(batch.ready),
        timed: batch.pace.map(|pace| (pace, clock.clone())),
        taken: AtomicBool::new(false),
    });
    let dict = PyDict::new(py);
    let pointers = PyDict::new(py);
    let put = |name: &str, tensor: Option<DeviceTensor>| -> PyResult<()> {
        let tensor = tensor.map(|tensor| CudaTensor {
            tensor: Arc::new(tensor),
            handover: handover.clone(),
        });
        if let Some(tensor) = &tensor {
            pointers.set_item(name, tensor.tensor.device_ptr())?;
        }
        dict.set_item(name, tensor.map(|t| Py::new(py, t)).transpose()?)
    };
    put("inputs", Some(batch.inputs))?;
    put("targets", batch.targets)?;
    put("mask", batch.mask)?;
    put("nan_mask", batch.nan_mask)?;
    put("latitude_weights", batch.latitude_weights)?;
    dict.set_item("index", batch.index)?;
    dict.set_item("samples", crate::samples::sample_list(py, &batch.samples)?)?;
    dict.set_item("pointers", pointers)?;
    Ok(dict)
}

/// A batch tensor in device memory (C order). Hand it to torch, CuPy or JAX with their
/// `from_dlpack`; no copy is made, and the consumer's stream waits for the batch on the GPU.
#[pyclass(module = "zarrpipe._native", frozen)]
pub struct CudaTensor {
    tensor: Arc<DeviceTensor>,
    handover: Arc<Handover>,
}

/// What a batch's tensors share for their hand-over.
struct Handover {
    /// Recorded after the batch's last kernel.
    ready: Arc<CudaEvent>,
    /// Where the consumer's wait for the batch is counted, and the clock that times it.
    timed: Option<(Arc<Pace>, Arc<HandoverClock>)>,
    /// Whether a tensor of the batch was handed over (the wait is timed once, at the first).
    taken: AtomicBool,
}

/// CUDA's default-stream handles (`CU_STREAM_LEGACY`, `CU_STREAM_PER_THREAD` in cuda.h).
const LEGACY_STREAM: usize = 0x1;
const PER_THREAD_STREAM: usize = 0x2;

/// A failed CUDA call as the package's `GpuError`, with its cause.
fn gpu_error(error: CudaError) -> PyErr {
    crate::errors::to_py(&error)
}

impl DlpackExporter for CudaTensor {
    fn device(&self) -> DLDevice {
        DLDevice::cuda(self.tensor.device_ordinal() as i32)
    }

    fn flags(&self) -> DlpackFlags {
        DlpackFlags::empty()
    }

    /// The consumer's stream waits for the batch (on the device).
    fn prepare_export(&self, _py: Python<'_>, request: &ExportRequest<'_>) -> PyResult<()> {
        let stream = match request.cuda_stream()? {
            CudaStreamRequest::NoSync => return Ok(()),
            // DLPack: no stream given means the legacy default stream.
            CudaStreamRequest::Omitted | CudaStreamRequest::LegacyDefault => {
                LEGACY_STREAM as sys::CUstream
            }
            CudaStreamRequest::PerThreadDefault => PER_THREAD_STREAM as sys::CUstream,
            CudaStreamRequest::Pointer(address) => address as sys::CUstream,
        };
        let handover = &self.handover;
        let context = handover.ready.context();
        context
            .bind_to_thread()
            .during("making the batch's CUDA context current")
            .map_err(gpu_error)?;
        if let Some((pace, clock)) = &handover.timed {
            if !handover.taken.swap(true, Ordering::Relaxed) {
                // SAFETY: as for the wait below; the stream is marked before it waits.
                unsafe { clock.handed_over(stream, &handover.ready, pace) }
                    .during("timing the consumer's wait for the batch")
                    .map_err(gpu_error)?;
            }
        }
        // SAFETY: `stream` is the consumer's live stream on this tensor's device (DLPack's
        // contract for `__dlpack__(stream=...)`) or a default-stream sentinel, and the event
        // is alive (held by `self`) for the call; a wait on an event needs nothing after it.
        unsafe {
            result::stream::wait_event(
                stream,
                handover.ready.cu_event(),
                sys::CUevent_wait_flags::CU_EVENT_WAIT_DEFAULT,
            )
        }
        .during("making the consumer's stream wait for the batch")
        .map_err(gpu_error)?;
        // SAFETY: as above, `stream` is the consumer's stream on this device or a default-
        // stream sentinel; consumers' streams outlive the tensors they read (PyTorch's and
        // CuPy's streams are pooled, never destroyed while in use). The buffer then returns
        // to the pool only after the work the consumer queued on `stream` before freeing it.
        unsafe { self.tensor.read_on(stream) };
        Ok(())
    }

    fn export_legacy(&self, _py: Python<'_>) -> PyResult<Managed<DLManagedTensor>> {
        Ok(DeviceTensor::shared_dlpack(&self.tensor))
    }

    fn export_versioned(&self, _py: Python<'_>) -> PyResult<Managed<DLManagedTensorVersioned>> {
        Ok(DeviceTensor::shared_dlpack(&self.tensor))
    }
}

#[pymethods]
impl CudaTensor {
    /// DLPack export: a capsule consumed once by `torch.from_dlpack` and the like.
    #[pyo3(signature = (*, stream = None, max_version = None, dl_device = None, copy = None))]
    fn __dlpack__<'py>(
        &self,
        py: Python<'py>,
        stream: Option<Bound<'py, PyAny>>,
        max_version: Option<(u32, u32)>,
        dl_device: Option<(u32, i32)>,
        copy: Option<bool>,
    ) -> PyResult<Py<PyAny>> {
        let request = ExportRequest::parse(stream.as_ref(), max_version, dl_device, copy)?;
        export_dlpack(self, py, request)
    }

    /// `(2, ordinal)`: CUDA memory on device `ordinal`.
    fn __dlpack_device__(&self) -> (u32, i32) {
        (2, self.tensor.device_ordinal() as i32)
    }

    /// The device address of the first element.
    fn data_ptr(&self) -> u64 {
        self.tensor.device_ptr()
    }

    #[getter]
    fn shape(&self) -> Vec<usize> {
        self.tensor.shape().to_vec()
    }

    /// `float32`, `bfloat16`, `float16` or `uint8`.
    #[getter]
    fn dtype(&self) -> &'static str {
        match self.tensor.dtype() {
            TensorDType::F32 => "float32",
            TensorDType::BF16 => "bfloat16",
            TensorDType::F16 => "float16",
            TensorDType::U8 => "uint8",
        }
    }

    #[getter]
    fn device(&self) -> String {
        format!("cuda:{}", self.tensor.device_ordinal())
    }

    #[getter]
    fn nbytes(&self) -> usize {
        self.tensor.byte_len()
    }

    /// Blocks until the batch is complete on the GPU (for host-side reads; `__dlpack__` does
    /// not need it).
    fn synchronize(&self, py: Python<'_>) -> PyResult<()> {
        py.detach(|| self.handover.ready.synchronize())
            .during("waiting for the batch")
            .map_err(gpu_error)
    }

    fn __repr__(&self) -> String {
        format!(
            "CudaTensor(shape={:?}, dtype={}, device={})",
            self.tensor.shape(),
            self.dtype(),
            self.device()
        )
    }
}
