//! The one error of the CUDA runtime: what was asked of the GPU, and what the driver (or NVRTC)
//! answered. It exists without the `runtime` feature too, so the error enums that hold it keep
//! their shape whichever features are on.

/// A CUDA call that failed, or a GPU that cannot be used at all.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum CudaError {
    /// The GPU path cannot run: no driver, device, NVRTC or nvCOMP, no `cuda` feature, or an
    /// earlier fault of the device's context.
    #[error("CUDA is not available: {reason}")]
    Unavailable {
        /// What is missing or went wrong, and what to do.
        reason: String,
    },

    /// A CUDA driver or NVRTC call failed.
    #[error("CUDA call failed: {what}")]
    Call {
        /// The call, or what it was for.
        what: String,
        /// The driver's error, or NVRTC's log.
        #[source]
        source: Box<dyn std::error::Error + Send + Sync>,
    },
}

/// `Result` with [`CudaError`].
pub type Result<T, E = CudaError> = std::result::Result<T, E>;

impl CudaError {
    /// A GPU that cannot be used, and why.
    pub fn unavailable(reason: impl Into<String>) -> Self {
        Self::Unavailable {
            reason: reason.into(),
        }
    }

    /// A failed call: `what` it was for, and the error it returned.
    pub fn call(
        what: impl Into<String>,
        source: impl Into<Box<dyn std::error::Error + Send + Sync>>,
    ) -> Self {
        Self::Call {
            what: what.into(),
            source: source.into(),
        }
    }

    /// Whether the call failed for want of device memory: the caller may free some and try
    /// again, as the device itself is fine.
    pub fn is_out_of_memory(&self) -> bool {
        match self {
            Self::Unavailable { .. } => false,
            #[cfg(feature = "runtime")]
            Self::Call { source, .. } => source
                .downcast_ref::<cudarc::driver::DriverError>()
                .is_some_and(|error| {
                    error.0 == cudarc::driver::sys::CUresult::CUDA_ERROR_OUT_OF_MEMORY
                }),
            #[cfg(not(feature = "runtime"))]
            Self::Call { .. } => false,
        }
    }
}

/// The context of a failed driver call, added where it fails:
/// `stream.synchronize().during("collating a batch")?`.
#[cfg(feature = "runtime")]
pub trait During<T> {
    /// Names what the call was for.
    fn during(self, what: &str) -> Result<T>;
    /// Names what the call was for, with a message built only on failure.
    fn during_with(self, what: impl FnOnce() -> String) -> Result<T>;
}

#[cfg(feature = "runtime")]
impl<T> During<T> for std::result::Result<T, cudarc::driver::DriverError> {
    fn during(self, what: &str) -> Result<T> {
        self.map_err(|error| CudaError::call(what, error))
    }

    fn during_with(self, what: impl FnOnce() -> String) -> Result<T> {
        self.map_err(|error| CudaError::call(what(), error))
    }
}

#[cfg(test)]
mod tests {
    use super::CudaError;

    #[test]
    fn errors_say_what_failed() {
        let error = CudaError::unavailable("no CUDA driver (libcuda.so) on this machine");
        assert_eq!(
            error.to_string(),
            "CUDA is not available: no CUDA driver (libcuda.so) on this machine"
        );
        assert!(!error.is_out_of_memory());
        let error = CudaError::call("allocating 4096 bytes of device memory", "log");
        assert_eq!(
            error.to_string(),
            "CUDA call failed: allocating 4096 bytes of device memory"
        );
        assert!(!error.is_out_of_memory());
    }

    #[cfg(feature = "runtime")]
    #[test]
    fn out_of_memory_is_told_apart() {
        use cudarc::driver::{sys::CUresult, DriverError};
        let error = CudaError::call(
            "allocating",
            DriverError(CUresult::CUDA_ERROR_OUT_OF_MEMORY),
        );
        assert!(error.is_out_of_memory());
        let error = CudaError::call(
            "launching",
            DriverError(CUresult::CUDA_ERROR_ILLEGAL_ADDRESS),
        );
        assert!(!error.is_out_of_memory());
    }
}
