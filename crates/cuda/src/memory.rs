//! The device's stream-ordered memory pool: memory freed by one batch is kept for the next,
//! and given back to the driver when the last holder of the device's [`DeviceMemory`] goes.

use std::sync::Arc;

use cudarc::driver::{sys, CudaContext};

use crate::{During, Result};

/// The device's pooled memory, given back to the driver when the last holder goes: the
/// decoder, each batch it decoded, and the tensor pools of the collators on its device hold
/// one, so whichever goes last (a pipeline's stages drop in any order) trims the pool.
pub struct DeviceMemory {
    context: Arc<CudaContext>,
}

impl DeviceMemory {
    /// Keeps up to `keep` bytes of memory freed on `context`'s device pooled for reuse (see
    /// [`keep_freed_memory_pooled`]) until the returned holder and its clones are gone.
    pub fn pooled(context: Arc<CudaContext>, keep: usize) -> Result<Arc<Self>> {
        keep_freed_memory_pooled(&context, keep)?;
        Ok(Arc::new(Self { context }))
    }

    /// The device's context.
    pub fn context(&self) -> &Arc<CudaContext> {
        &self.context
    }
}

impl Drop for DeviceMemory {
    fn drop(&mut self) {
        trim_memory_pool(&self.context);
    }
}

impl std::fmt::Debug for DeviceMemory {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DeviceMemory")
            .field("device", &self.context.ordinal())
            .finish()
    }
}

/// Returns the memory the device's default pool keeps (see [`keep_freed_memory_pooled`]) to
/// the driver. Memory other users of the pool hold is not touched.
pub fn trim_memory_pool(context: &Arc<CudaContext>) {
    if context.bind_to_thread().is_err() {
        return;
    }
    let mut pool = std::ptr::null_mut();
    // SAFETY: driver calls on the bound context's own device pool; `pool` outlives the call
    // that writes it.
    unsafe {
        if sys::cuDeviceGetDefaultMemPool(&mut pool, context.cu_device())
            == sys::CUresult::CUDA_SUCCESS
        {
            let _ = sys::cuMemPoolTrimTo(pool, 0);
        }
    }
}

/// Device memory freed by a batch stays in the pool for the next, instead of going back to
/// the driver at each synchronisation: up to `keep` bytes of it (the pool's release
/// threshold), so memory held beyond that goes back where others on the device (a model) can
/// allocate it.
pub fn keep_freed_memory_pooled(context: &Arc<CudaContext>, keep: usize) -> Result<()> {
    context.bind_to_thread().during("binding the context")?;
    let mut pool = std::ptr::null_mut();
    // SAFETY: plain driver queries on the bound context's device; `pool` and `threshold`
    // outlive the calls that write and read them.
    unsafe {
        let status = sys::cuDeviceGetDefaultMemPool(&mut pool, context.cu_device());
        if status != sys::CUresult::CUDA_SUCCESS {
            return Ok(()); // no stream-ordered pools: nothing to keep
        }
        let mut threshold = keep as u64;
        sys::cuMemPoolSetAttribute(
            pool,
            sys::CUmemPool_attribute::CU_MEMPOOL_ATTR_RELEASE_THRESHOLD,
            (&mut threshold as *mut u64).cast(),
        )
        .result()
        .during("setting the memory pool's release threshold")?;
    }
    Ok(())
}

/// The device's total memory, in bytes.
pub fn device_total_memory(context: &Arc<CudaContext>) -> Result<usize> {
    context.bind_to_thread().during("binding the context")?;
    // SAFETY: a plain query on the context's own device handle.
    unsafe { cudarc::driver::result::device::total_mem(context.cu_device()) }
        .during("asking the device's total memory")
}
