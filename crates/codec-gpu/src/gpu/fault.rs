//! The decoder's fault latch: after a CUDA call fails in a way that sticks to the context,
//! every later batch is refused with the reason.

use std::sync::Mutex;

use zarrpipe_cuda::CudaError;

use crate::{Error, Result};

/// Set when the device faulted: CUDA errors of that kind stick to the context, so every
/// later batch is refused with this reason.
#[derive(Debug, Default)]
pub(super) struct FaultLatch(Mutex<Option<String>>);

impl FaultLatch {
    /// Refuses a batch when the device faulted earlier.
    pub(super) fn check(&self) -> Result<()> {
        match self.0.lock().unwrap_or_else(|p| p.into_inner()).clone() {
            Some(reason) => Err(Error::unavailable(reason)),
            None => Ok(()),
        }
    }

    /// Refuses every later batch after a failed CUDA call: most such errors stick to the
    /// context. Running out of device memory does not: the next batch may find enough.
    pub(super) fn note(&self, error: &Error) {
        if let Error::Cuda(error @ CudaError::Call { what, source }) = error {
            if error.is_out_of_memory() {
                return;
            }
            *self.0.lock().unwrap_or_else(|p| p.into_inner()) = Some(format!(
                "the GPU faulted earlier ({what}: {source}); decode on the CPU"
            ));
        }
    }
}
