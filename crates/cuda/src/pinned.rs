//! Page-locked host memory that the CPU may read as well as write.

use std::sync::Arc;

use cudarc::driver::{CudaContext, DriverError, PinnedHostSlice};

/// Allocates `len` bytes of page-locked host memory, cached like any other host memory.
///
/// cudarc's `alloc_pinned` asks for write-combined memory, which the CPU reads uncached: a
/// decompressor that copies matches out of the output it has written, or a reader of statuses
/// copied back from the device, would wait on every load.
///
/// # Safety
/// The memory is not initialised: every byte must be written before it is read or uploaded.
pub unsafe fn alloc_pinned_host(
    context: &Arc<CudaContext>,
    len: usize,
) -> Result<PinnedHostSlice<u8>, DriverError> {
    // SAFETY: the caller writes every byte before reading it.
    unsafe { context.alloc_pinned_with_flags::<u8>(len, 0) }
}
