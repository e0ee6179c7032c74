//! The device's stream-ordered memory pool: freed memory kept for the next batch, and given
//! back to the driver when a decoder or a pipeline goes.

use std::sync::Arc;

use cudarc::driver::CudaContext;

use super::cuda::cuda_error;
use crate::Result;

/// Returns the memory the device's default pool keeps (see [`keep_freed_memory_pooled`]) to
/// the driver. Memory other users of the pool hold is not touched.
pub fn trim_memory_pool(context: &Arc<CudaContext>) {
    use cudarc::driver::sys;
    if context.bind_to_thread().is_err() {
        return;
    }
    let mut pool = std::ptr::null_mut();
    // SAFETY: driver calls on the bound context's own device pool.
    unsafe {
        if sys::cuDeviceGetDefaultMemPool(&mut pool, context.cu_device())
            == sys::CUresult::CUDA_SUCCESS
        {
            let _ = sys::cuMemPoolTrimTo(pool, 0);
        }
    }
}

/// Device memory freed by a batch stays in the pool for the next, instead of going back to
/// the driver at each synchronisation.
pub(super) fn keep_freed_memory_pooled(context: &Arc<CudaContext>) -> Result<()> {
    use cudarc::driver::sys;
    context
        .bind_to_thread()
        .map_err(cuda_error("binding the context"))?;
    let mut pool = std::ptr::null_mut();
    // SAFETY: plain driver queries on the bound context's device; `threshold` outlives the
    // call that reads it.
    unsafe {
        let status = sys::cuDeviceGetDefaultMemPool(&mut pool, context.cu_device());
        if status != sys::CUresult::CUDA_SUCCESS {
            return Ok(()); // no stream-ordered pools: nothing to keep
        }
        let mut threshold = u64::MAX;
        sys::cuMemPoolSetAttribute(
            pool,
            sys::CUmemPool_attribute::CU_MEMPOOL_ATTR_RELEASE_THRESHOLD,
            (&mut threshold as *mut u64).cast(),
        )
        .result()
        .map_err(cuda_error("setting the memory pool's release threshold"))?;
    }
    Ok(())
}
