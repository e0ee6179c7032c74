//! Small host-to-device uploads (gather tables, padding masks) through pinned buffers: a copy
//! from pageable memory would make the driver wait for the stream, stalling the pipeline
//! until the batch before has decoded.

use std::sync::{Arc, Mutex};

use zarrpipe_codec_gpu::cudarc::driver::{
    result, CudaContext, CudaEvent, CudaSlice, CudaStream, DevicePtr, PinnedHostSlice,
};

use super::cuda_error;
use crate::Result;

pub(super) struct Staging {
    context: Arc<CudaContext>,
    /// Pinned buffers, each with the event after its last upload.
    buffers: Mutex<Vec<(PinnedHostSlice<u8>, CudaEvent)>>,
}

impl Staging {
    pub fn new(context: Arc<CudaContext>) -> Self {
        Self {
            context,
            buffers: Mutex::new(Vec::new()),
        }
    }

    /// Uploads `bytes` into a new device buffer, in stream order.
    pub fn upload(&self, bytes: &[u8], stream: &Arc<CudaStream>) -> Result<CudaSlice<u8>> {
        // SAFETY: written by the upload below before the stream reads it.
        let buffer = unsafe { stream.alloc::<u8>(bytes.len().max(1)) }
            .map_err(cuda_error("allocating an upload buffer"))?;
        self.upload_to(buffer.device_ptr(stream).0, bytes, stream)?;
        Ok(buffer)
    }

    /// Uploads `bytes` to device address `dst`, in stream order.
    pub fn upload_to(&self, dst: u64, bytes: &[u8], stream: &Arc<CudaStream>) -> Result<()> {
        if bytes.is_empty() {
            return Ok(());
        }
        let mut buffers = self.buffers.lock().unwrap_or_else(|p| p.into_inner());
        let reusable = buffers
            .iter()
            .position(|(buffer, done)| buffer.len() >= bytes.len() && done.is_complete());
        let mut pinned = match reusable {
            Some(index) => buffers.swap_remove(index).0,
            // SAFETY: host memory; every byte uploaded is written first.
            None => unsafe { self.context.alloc_pinned::<u8>(bytes.len().max(1 << 16)) }
                .map_err(cuda_error("allocating pinned memory"))?,
        };
        let host = pinned
            .as_mut_slice()
            .map_err(cuda_error("mapping pinned memory"))?;
        host[..bytes.len()].copy_from_slice(bytes);
        // SAFETY: `host` is pinned and not written again before `done` completes; `dst`
        // holds `bytes.len()` bytes (the caller's buffer).
        unsafe { result::memcpy_htod_async(dst, &host[..bytes.len()], stream.cu_stream()) }
            .map_err(cuda_error("uploading to the device"))?;
        let done = stream
            .record_event(None)
            .map_err(cuda_error("recording an upload event"))?;
        buffers.push((pinned, done));
        Ok(())
    }
}
