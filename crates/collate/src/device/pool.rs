//! Device tensors and the pool they come from. A tensor's buffer goes back to the pool when
//! the tensor is dropped, for the next batch; the pool caps the bytes handed out, so a
//! pipeline that runs ahead of its consumer waits (backpressure) instead of filling the GPU.

use std::sync::{Arc, Condvar, Mutex, OnceLock, Weak};

use ndarray::{ArrayD, IxDyn};
use zarrpipe_cuda::cudarc::driver::{
    result, sys, CudaContext, CudaEvent, CudaModule, CudaSlice, CudaStream, DevicePtr,
};
use zarrpipe_cuda::{trim_memory_pool, CudaError, DeviceMemory, During, HOST_WAITED_EVENT};

use super::staging::Staging;
use crate::dlpack::dlpark::ffi::DLDevice;
use crate::dlpack::dlpark::{Managed, ManagedTensorBase};
use crate::dlpack::export;
use crate::Result;
use crate::TensorDType;

/// Device buffers for batch tensors, reused from batch to batch.
#[derive(Clone)]
pub struct TensorPool {
    inner: Arc<PoolInner>,
}

struct PoolInner {
    /// Most bytes handed out at once.
    cap: usize,
    state: Mutex<PoolState>,
    returned: Condvar,
    /// Pinned buffers for uploads (chunks decoded on the CPU, tables, masks), shared by the
    /// collators on this pool's device and kept from epoch to epoch.
    staging: OnceLock<Staging>,
    /// The collate kernels of this pool's collators, loaded by the first and kept from epoch
    /// to epoch: each load hands the PTX to the driver's JIT (or its cache) again.
    kernels: Mutex<Option<Arc<CudaModule>>>,
    /// Last: the device's pool is trimmed once the free buffers above are gone, if nothing
    /// else on the device holds it.
    _memory: Option<Arc<DeviceMemory>>,
}

#[derive(Default)]
struct PoolState {
    free: Vec<FreeBuffer>,
    outstanding: usize,
}

/// A buffer back in the pool, and the events its last readers outside the pipeline recorded
/// on their streams when they let go of it: the buffer is handed out again once they have
/// completed.
struct FreeBuffer {
    buffer: CudaSlice<u8>,
    read_by: Vec<CudaEvent>,
}

impl std::fmt::Debug for TensorPool {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TensorPool")
            .field("cap", &self.inner.cap)
            .field("outstanding", &self.outstanding())
            .finish()
    }
}

impl TensorPool {
    /// A pool handing out at most `cap` bytes at once.
    pub fn new(cap: usize) -> Self {
        Self::with_memory(cap, None)
    }

    /// A pool on the device of `memory` (a `GpuDecoder`'s): the device's pooled memory goes
    /// back to the driver only after this pool's buffers, whichever of the two goes last.
    pub fn on_device(cap: usize, memory: Arc<DeviceMemory>) -> Self {
        Self::with_memory(cap, Some(memory))
    }

    fn with_memory(cap: usize, memory: Option<Arc<DeviceMemory>>) -> Self {
        Self {
            inner: Arc::new(PoolInner {
                cap,
                state: Mutex::new(PoolState::default()),
                returned: Condvar::new(),
                staging: OnceLock::new(),
                kernels: Mutex::new(None),
                _memory: memory,
            }),
        }
    }

    /// The pinned upload buffers of this pool's collators, on `context`'s device.
    pub(super) fn staging(&self, context: &Arc<CudaContext>) -> &Staging {
        self.inner
            .staging
            .get_or_init(|| Staging::new(context.clone()))
    }

    /// The collate kernels (a pool serves one device): loaded with `load` on first use, then
    /// the same module.
    pub(super) fn kernels<E>(
        &self,
        load: impl FnOnce() -> std::result::Result<Arc<CudaModule>, E>,
    ) -> std::result::Result<Arc<CudaModule>, E> {
        let mut kernels = self
            .inner
            .kernels
            .lock()
            .unwrap_or_else(|poison| poison.into_inner());
        if let Some(module) = &*kernels {
            return Ok(module.clone());
        }
        let module = load()?;
        *kernels = Some(module.clone());
        Ok(module)
    }

    /// Bytes in tensors not yet dropped.
    pub fn outstanding(&self) -> usize {
        self.inner.lock().outstanding
    }

    /// Frees the buffers kept for reuse.
    pub fn release_free(&self) {
        self.inner.lock().free.clear();
    }

    /// A tensor of `shape` and `dtype`, uninitialised: waits while the cap is reached and
    /// other tensors are out.
    /// The tensor is allocated (or reused) for work on `stream`.
    pub fn take(
        &self,
        shape: &[usize],
        dtype: TensorDType,
        stream: &Arc<CudaStream>,
    ) -> Result<DeviceTensor> {
        let len = shape.iter().product::<usize>() * dtype.size();
        let mut room = self.reserve(len);
        self.take_reserved(&mut room, shape, dtype, stream)
    }

    /// Room for `bytes` of tensors, counted as handed out: waits while the cap is reached and
    /// other tensors are out (at once when none are). A batch takes all its tensors' room at
    /// once, so it never waits for a tensor of its own; what it does not take goes back when
    /// the room is dropped.
    pub fn reserve(&self, bytes: usize) -> TensorRoom {
        let inner = &self.inner;
        let mut state = inner.lock();
        let full =
            |state: &PoolState| state.outstanding > 0 && state.outstanding + bytes > inner.cap;
        if full(&state) {
            tracing::debug!(
                target: "zarrpipe::timeline",
                "tensor room: {bytes} bytes wait, {} of {} out",
                state.outstanding,
                inner.cap
            );
        }
        while full(&state) {
            state = inner
                .returned
                .wait(state)
                .unwrap_or_else(|poison| poison.into_inner());
        }
        state.outstanding += bytes;
        TensorRoom {
            pool: self.inner.clone(),
            left: bytes,
        }
    }

    /// A tensor as [`take`](Self::take) makes it, in room reserved before ([`reserve`](
    /// Self::reserve)); a tensor larger than the room left waits for the rest.
    pub fn take_reserved(
        &self,
        room: &mut TensorRoom,
        shape: &[usize],
        dtype: TensorDType,
        stream: &Arc<CudaStream>,
    ) -> Result<DeviceTensor> {
        let len = shape.iter().product::<usize>() * dtype.size();
        if len > room.left {
            let more = self.reserve(len - room.left);
            room.absorb(more);
        }
        room.left -= len;
        let inner = &self.inner;
        let mut state = inner.lock();
        // The smallest free buffer that fits, if not more than twice too large.
        let fitting = (0..state.free.len())
            .filter(|&i| (len.max(1)..=2 * len.max(1)).contains(&state.free[i].buffer.len()))
            .min_by_key(|&i| state.free[i].buffer.len());
        let buffer = match fitting {
            Some(index) => {
                let free = state.free.swap_remove(index);
                drop(state);
                // The consumer's kernels queued before it let go may still read the buffer.
                // Waited for here, on the host (collation waits for its batch on the host
                // anyway): a wait on `stream` would count the consumer's work as the batch's
                // GPU time.
                free.read_by
                    .iter()
                    .try_for_each(CudaEvent::synchronize)
                    .map(|()| free.buffer)
                    .during("waiting for a tensor's last readers")
            }
            None => {
                drop(state);
                // SAFETY: every element is written by the collation before it is read.
                unsafe { stream.alloc::<u8>(len.max(1)) }
                    .during_with(|| format!("allocating a {len}-byte tensor"))
            }
        };
        let buffer = buffer.inspect_err(|_| inner.lock().outstanding -= len)?;
        Ok(DeviceTensor {
            buffer: Some(buffer),
            len,
            shape: shape.to_vec(),
            dtype,
            stream: stream.clone(),
            pool: Arc::downgrade(inner),
            readers: Mutex::new(Vec::new()),
        })
    }
}

/// Tensor room reserved in a [`TensorPool`] and not yet taken; what is left goes back when
/// dropped.
pub struct TensorRoom {
    pool: Arc<PoolInner>,
    left: usize,
}

impl TensorRoom {
    fn absorb(&mut self, mut other: TensorRoom) {
        self.left += std::mem::take(&mut other.left);
    }
}

impl Drop for TensorRoom {
    fn drop(&mut self) {
        if self.left > 0 {
            self.pool.give_back(self.left, None);
        }
    }
}

impl std::fmt::Debug for TensorRoom {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TensorRoom")
            .field("left", &self.left)
            .finish()
    }
}

impl PoolInner {
    fn lock(&self) -> std::sync::MutexGuard<'_, PoolState> {
        self.state
            .lock()
            .unwrap_or_else(|poison| poison.into_inner())
    }

    /// Stops counting `len` handed-out bytes, keeps `buffer` (if any) for reuse, and wakes
    /// the takers waiting for room.
    fn give_back(&self, len: usize, buffer: Option<FreeBuffer>) {
        let mut state = self.lock();
        state.outstanding -= len;
        state.free.extend(buffer);
        drop(state);
        self.returned.notify_all();
    }
}

/// A tensor in device memory, C order. Dropping it returns its memory to the pool for the
/// next batch, which writes into it only after the work its readers queued on their streams
/// (those named with [`read_on`](Self::read_on)) before the tensor was dropped; work on other
/// streams must be finished (synchronised) before the tensor is dropped.
pub struct DeviceTensor {
    buffer: Option<CudaSlice<u8>>,
    len: usize,
    shape: Vec<usize>,
    dtype: TensorDType,
    stream: Arc<CudaStream>,
    pool: Weak<PoolInner>,
    /// Streams outside the pipeline that read the tensor (a DLPack consumer's).
    readers: Mutex<Vec<ReaderStream>>,
}

/// A consumer's stream, as the driver names it (or a default-stream sentinel).
struct ReaderStream(sys::CUstream);

// SAFETY: a CUstream is a handle the driver accepts from any thread; `read_on`'s caller
// promises it stays valid while the tensor lives.
unsafe impl Send for ReaderStream {}

impl std::fmt::Debug for DeviceTensor {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DeviceTensor")
            .field("shape", &self.shape)
            .field("dtype", &self.dtype)
            .field("device", &self.device_ordinal())
            .finish()
    }
}

impl DeviceTensor {
    /// The tensor's shape, in elements.
    pub fn shape(&self) -> &[usize] {
        &self.shape
    }

    /// Its element type.
    pub fn dtype(&self) -> TensorDType {
        self.dtype
    }

    /// Bytes of the tensor's elements.
    pub fn byte_len(&self) -> usize {
        self.len
    }

    /// The CUDA device the tensor lives on.
    pub fn device_ordinal(&self) -> usize {
        self.stream.context().ordinal()
    }

    /// The device address of the first element.
    pub fn device_ptr(&self) -> u64 {
        self.buffer().device_ptr(&self.stream).0
    }

    fn buffer(&self) -> &CudaSlice<u8> {
        self.buffer.as_ref().expect("a live tensor has its buffer")
    }

    /// Takes the buffer out of the pool for good (the pool stops counting it).
    #[cfg(feature = "candle")]
    pub(super) fn detach_buffer(mut self) -> CudaSlice<u8> {
        let buffer = self.buffer.take().expect("a live tensor has its buffer");
        if let Some(pool) = self.pool.upgrade() {
            pool.give_back(self.len, None);
        }
        buffer
    }

    /// The stream the tensor was written on.
    pub fn stream(&self) -> &Arc<CudaStream> {
        &self.stream
    }

    /// Copies the tensor's bytes to the host (after the work on its stream).
    pub fn to_host_bytes(&self) -> Result<Vec<u8>> {
        let mut host = vec![0u8; self.len];
        if self.len > 0 {
            // SAFETY: `host` holds `len` bytes; the stream is synchronised before returning.
            unsafe {
                result::memcpy_dtoh_async(&mut host[..], self.device_ptr(), self.stream.cu_stream())
            }
            .during("copying a tensor to the host")?;
        }
        self.stream
            .synchronize()
            .during("copying a tensor to the host")?;
        Ok(host)
    }

    /// The values as float32 on the host (bf16 and f16 widened exactly).
    pub fn to_host_f32(&self) -> Result<ArrayD<f32>> {
        let bytes = self.to_host_bytes()?;
        let halves = || {
            bytes
                .chunks_exact(2)
                .map(|b| u16::from_ne_bytes([b[0], b[1]]))
        };
        let values: Vec<f32> = match self.dtype {
            TensorDType::F32 => bytes
                .chunks_exact(4)
                .map(|b| f32::from_ne_bytes(b.try_into().expect("4 bytes")))
                .collect(),
            TensorDType::BF16 => halves()
                .map(|h| half::bf16::from_bits(h).to_f32())
                .collect(),
            TensorDType::F16 => halves().map(|h| half::f16::from_bits(h).to_f32()).collect(),
            TensorDType::U8 => bytes.iter().map(|&b| f32::from(b)).collect(),
        };
        ArrayD::from_shape_vec(IxDyn(&self.shape), values)
            .map_err(|error| CudaError::call("shaping a tensor", error).into())
    }
}

impl DeviceTensor {
    /// Names `stream` as a reader of the tensor: when the tensor is dropped, an event is
    /// recorded on `stream`, and the buffer is written again only after it. A DLPack
    /// consumer (PyTorch) frees a tensor when its last reference goes, while its kernels may
    /// still be queued: without this the next batch could overwrite their input.
    ///
    /// # Safety
    /// `stream` is a stream on the tensor's device (or `CU_STREAM_LEGACY` /
    /// `CU_STREAM_PER_THREAD`) that stays valid until the tensor is dropped.
    pub unsafe fn read_on(&self, stream: sys::CUstream) {
        let mut readers = self.readers.lock().unwrap_or_else(|p| p.into_inner());
        if !readers.iter().any(|reader| reader.0 == stream) {
            readers.push(ReaderStream(stream));
        }
    }

    /// Events recorded on the readers' streams now, after the work they queued. Where one
    /// cannot be recorded, the device is synchronised instead (slow, but nothing races).
    fn readers_done(&self) -> Vec<CudaEvent> {
        let readers = std::mem::take(&mut *self.readers.lock().unwrap_or_else(|p| p.into_inner()));
        if readers.is_empty() {
            return Vec::new();
        }
        let context = self.stream.context();
        let recorded = context.bind_to_thread().and_then(|()| {
            readers
                .iter()
                .map(|reader| {
                    // Waited for on the host when the tensor's memory is taken again.
                    let event = context.new_event(Some(HOST_WAITED_EVENT))?;
                    // SAFETY: `read_on`'s caller promised the stream is valid until now; the
                    // event is alive and belongs to this context.
                    unsafe { result::event::record(event.cu_event(), reader.0) }?;
                    Ok(event)
                })
                .collect::<Result<Vec<_>, _>>()
        });
        recorded.unwrap_or_else(|_| {
            let _ = context.synchronize();
            Vec::new()
        })
    }

    /// Hands the tensor to a DLPack consumer (PyTorch, JAX, CuPy) without a copy, as either
    /// ABI (`dlpark::legacy::Dlpack` or `dlpark::versioned::Dlpack`). Its memory goes back to
    /// the pool when the consumer calls the deleter (or the handle is dropped). Read it only
    /// after the batch's `ready` event.
    pub fn into_dlpack<M: ManagedTensorBase>(self) -> Managed<M> {
        let data = self.device_ptr() as *mut std::ffi::c_void;
        let device = DLDevice::cuda(self.device_ordinal() as i32);
        let (shape, dtype) = (self.shape.clone(), self.dtype.into());
        // SAFETY: `data` is this tensor's own device buffer of `shape` elements of `dtype`, C
        // order, on its device; the tensor moves into the managed tensor, so the buffer stays
        // out of the pool until the deleter drops it.
        unsafe { export(self, data, device, &shape, dtype) }
    }

    /// What [`into_dlpack`](Self::into_dlpack) hands over, for a tensor shared with other
    /// owners (a Python object that exports it more than once): the buffer goes back to the
    /// pool when the last owner is gone.
    pub fn shared_dlpack<M: ManagedTensorBase>(tensor: &std::sync::Arc<Self>) -> Managed<M> {
        let data = tensor.device_ptr() as *mut std::ffi::c_void;
        let device = DLDevice::cuda(tensor.device_ordinal() as i32);
        let (shape, dtype) = (tensor.shape.clone(), tensor.dtype.into());
        // SAFETY: as in `into_dlpack`; the `Arc` keeps the tensor, and so its buffer, alive.
        unsafe { export(tensor.clone(), data, device, &shape, dtype) }
    }
}

impl Drop for DeviceTensor {
    fn drop(&mut self) {
        let Some(buffer) = self.buffer.take() else {
            return;
        };
        match self.pool.upgrade() {
            Some(pool) => {
                let read_by = self.readers_done();
                pool.give_back(self.len, Some(FreeBuffer { buffer, read_by }))
            }
            None => {
                // The pipeline is gone: give the memory back to the driver, not its pool,
                // after its last readers (the free is ordered on the tensor's stream).
                for event in self.readers_done() {
                    let _ = self.stream.wait(&event);
                }
                drop(buffer);
                let _ = self.stream.synchronize();
                trim_memory_pool(self.stream.context());
            }
        }
    }
}
