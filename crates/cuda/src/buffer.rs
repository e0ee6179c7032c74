//! Bytes on the device that carry their own ordering: the event after which they may be read,
//! and the streams that read them, which the free waits for.

use std::sync::{Arc, Mutex};

use cudarc::driver::{sys::CUevent_flags, CudaEvent, CudaSlice, CudaStream, DevicePtr};

use crate::{DeviceMemory, During, Result};

/// A device buffer that owns its memory and the event after which it may be read.
///
/// The writer hands it over once its writes are queued ([`DeviceBuffer::written_on`]); a
/// reader asks for its address on the stream it reads on ([`DeviceBuffer::read_on`]), which
/// first waits for the writes. When the buffer is dropped, its memory is freed after the work
/// its readers queued until then, so no kernel reads freed memory.
pub struct DeviceBuffer {
    bytes: Option<CudaSlice<u8>>,
    ready: CudaEvent,
    readers: Mutex<Vec<Arc<CudaStream>>>,
    /// Last: the device's pool is trimmed after the memory is freed, if this is its last
    /// holder.
    memory: Option<Arc<DeviceMemory>>,
}

impl DeviceBuffer {
    /// `bytes`, written by the work queued on `stream` so far: readable once it has run.
    pub fn written_on(bytes: CudaSlice<u8>, stream: &Arc<CudaStream>) -> Result<Self> {
        let ready = stream
            .record_event(Some(CUevent_flags::CU_EVENT_DISABLE_TIMING))
            .during("recording a buffer's ready event")?;
        Ok(Self {
            bytes: Some(bytes),
            ready,
            readers: Mutex::new(Vec::new()),
            memory: None,
        })
    }

    /// Keeps the device's pooled `memory` until this buffer is freed (see [`DeviceMemory`]).
    pub fn holding(mut self, memory: Arc<DeviceMemory>) -> Self {
        self.memory = Some(memory);
        self
    }

    /// Bytes in the buffer.
    pub fn len(&self) -> usize {
        self.slice().len()
    }

    /// Whether the buffer holds no bytes.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The event after which the bytes may be read.
    pub fn ready(&self) -> &CudaEvent {
        &self.ready
    }

    /// The buffer's device address for work queued on `stream` from now on: `stream` waits for
    /// the writes first, and the memory is not freed before the work `stream` has queued when
    /// the buffer is dropped.
    pub fn read_on(&self, stream: &Arc<CudaStream>) -> Result<u64> {
        stream
            .wait(&self.ready)
            .during("waiting for a buffer's writes")?;
        let mut readers = self.readers.lock().unwrap_or_else(|p| p.into_inner());
        if !readers.iter().any(|reader| Arc::ptr_eq(reader, stream)) {
            readers.push(stream.clone());
        }
        Ok(self.slice().device_ptr(stream).0)
    }

    /// Waits on the host until the bytes are written.
    pub fn synchronize(&self) -> Result<()> {
        self.ready
            .synchronize()
            .during("waiting for a buffer's writes")
    }

    /// Copies the bytes to host memory, once written.
    pub fn to_host(&self) -> Result<Vec<u8>> {
        let bytes = self.slice();
        let stream = bytes.stream();
        stream
            .wait(&self.ready)
            .during("waiting for a buffer's writes")?;
        stream
            .clone_dtoh(bytes)
            .during("copying a buffer to the host")
    }

    fn slice(&self) -> &CudaSlice<u8> {
        self.bytes.as_ref().expect("taken only when dropped")
    }
}

impl Drop for DeviceBuffer {
    fn drop(&mut self) {
        let Some(bytes) = self.bytes.take() else {
            return;
        };
        // The free is queued on the writer's stream: behind the readers' work first.
        let owner = bytes.stream().clone();
        let readers = std::mem::take(self.readers.get_mut().unwrap_or_else(|p| p.into_inner()));
        for reader in readers.iter().filter(|reader| !Arc::ptr_eq(reader, &owner)) {
            let waited = reader
                .record_event(Some(CUevent_flags::CU_EVENT_DISABLE_TIMING))
                .and_then(|done| owner.wait(&done));
            if waited.is_err() {
                // Nothing can be ordered (the context has faulted): wait for everything.
                let _ = owner.context().synchronize();
                break;
            }
        }
        drop(bytes);
    }
}

impl std::fmt::Debug for DeviceBuffer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DeviceBuffer")
            .field("bytes", &self.len())
            .field("device", &self.slice().stream().context().ordinal())
            .finish_non_exhaustive()
    }
}
