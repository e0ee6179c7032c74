//! Choosing and opening a device: the CUDA driver and NVRTC are loaded at run time, so a
//! machine without them gets an error saying what is missing, not a crash.

use std::sync::Arc;

use cudarc::driver::CudaContext;

use crate::{CudaError, During, Result};

/// Opens device `ordinal` (its primary context, shared with every other user of the device in
/// the process, PyTorch included).
///
/// Work on the context is ordered by the streams and events zarrpipe records itself, so
/// cudarc's per-buffer event tracking is turned off for it.
pub fn open_device(ordinal: usize) -> Result<Arc<CudaContext>> {
    match libraries_present() {
        (false, _) => {
            return Err(CudaError::unavailable(
                "no CUDA driver (libcuda.so) on this machine",
            ))
        }
        (_, false) => {
            return Err(CudaError::unavailable(
                "NVRTC (libnvrtc.so) was not found: add the CUDA toolkit's lib directory to \
                 LD_LIBRARY_PATH",
            ))
        }
        _ => {}
    }
    let count = device_count()?;
    if ordinal >= count {
        return Err(CudaError::unavailable(format!(
            "no CUDA device {ordinal} ({count} present)"
        )));
    }
    let context = CudaContext::new(ordinal).during("opening the device")?;
    // SAFETY: buffers are only shared between streams through events that zarrpipe's stages
    // record and wait on themselves (`DeviceBuffer::ready`).
    unsafe { context.disable_event_tracking() };
    Ok(context)
}

/// How many CUDA devices the driver sees.
pub fn device_count() -> Result<usize> {
    let count = CudaContext::device_count().map_err(|error| {
        CudaError::unavailable(format!("the CUDA driver found no device: {error:?}"))
    })?;
    Ok(count.max(0) as usize)
}

/// Whether the CUDA driver and NVRTC can be opened (cudarc loads them at run time).
#[cfg(not(feature = "linked"))]
fn libraries_present() -> (bool, bool) {
    // SAFETY: only probes whether the libraries can be opened.
    unsafe {
        (
            cudarc::driver::sys::is_culib_present(),
            cudarc::nvrtc::sys::is_culib_present(),
        )
    }
}

/// Linked at build time (candle asks cudarc for that): a running program has them.
#[cfg(feature = "linked")]
fn libraries_present() -> (bool, bool) {
    (true, true)
}
