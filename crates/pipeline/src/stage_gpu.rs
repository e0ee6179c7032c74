//! The GPU a pipeline's stages run on, as the builder hands it to them: one type with or
//! without the `cuda` feature, so [`CollateOn`](crate::CollateOn) is the same trait either way.

#[cfg(feature = "cuda")]
use std::sync::Arc;

use zarrpipe_core::Device;

use crate::Error;

/// The GPU the stages of a pipeline being built run on, if one does.
#[derive(Clone, Debug, Default)]
pub struct StageGpu {
    #[cfg(feature = "cuda")]
    device: Option<Arc<crate::GpuDevice>>,
}

impl StageGpu {
    /// No GPU: every stage runs on the CPU.
    pub fn none() -> Self {
        Self::default()
    }

    /// The stages' GPU.
    #[cfg(feature = "cuda")]
    pub fn on(device: Arc<crate::GpuDevice>) -> Self {
        Self {
            device: Some(device),
        }
    }

    /// The stages' GPU, if they have one.
    #[cfg(feature = "cuda")]
    pub fn device(&self) -> Option<&Arc<crate::GpuDevice>> {
        self.device.as_ref()
    }

    /// The stages' GPU, which `stage` needs; an error saying so where there is none.
    #[cfg(feature = "cuda")]
    pub fn required(&self, stage: &'static str) -> crate::Result<&Arc<crate::GpuDevice>> {
        self.device.as_ref().ok_or_else(|| Self::missing(stage))
    }

    /// The error for a stage that needs a GPU where there is none.
    pub(crate) fn missing(stage: &'static str) -> Error {
        Error::UnsupportedDevice {
            device: Device::Cuda(0),
            reason: stage,
        }
    }

    /// Where batches collated on this GPU end up.
    pub fn place(&self) -> Device {
        #[cfg(feature = "cuda")]
        if let Some(device) = &self.device {
            return Device::Cuda(device.decoder().context().ordinal());
        }
        Device::Cpu
    }
}

#[cfg(test)]
mod tests {
    use super::StageGpu;

    #[test]
    fn no_gpu_collates_on_the_host() {
        assert_eq!(StageGpu::none().place(), zarrpipe_core::Device::Cpu);
        let error = StageGpu::missing("GPU collation needs a GPU");
        assert!(
            error.to_string().contains("GPU collation needs a GPU"),
            "{error}"
        );
    }
}
