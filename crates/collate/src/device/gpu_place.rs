//! Device memory as a batch's place: tensors from the pipeline's pool and the event after
//! which they are complete.

use std::sync::Arc;

use zarrpipe_core::Device;
use zarrpipe_cuda::cudarc::driver::{CudaEvent, CudaStream};
use zarrpipe_cuda::During;

use super::pool::DeviceTensor;
use crate::{Batch, Place, Result};

/// GPU memory: [`DeviceTensor`]s, complete once the batch's `ready` event has completed.
/// Dropping a tensor returns its memory to the pipeline's pool.
#[derive(Clone, Copy, Debug)]
pub struct Gpu;

impl Place for Gpu {
    type Tensor = DeviceTensor;
    type Mask = DeviceTensor;
    type Ready = CudaEvent;

    fn tensor_bytes(tensor: &DeviceTensor) -> usize {
        tensor.byte_len()
    }

    fn tensor_device(tensor: &DeviceTensor) -> Device {
        Device::Cuda(tensor.device_ordinal())
    }
}

impl Batch<Gpu> {
    /// Makes `stream` wait (on the device, not the host) until the batch is complete.
    pub fn wait_on(&self, stream: &CudaStream) -> Result<()> {
        stream
            .wait(&self.ready)
            .during("waiting for a batch")
            .map_err(Into::into)
    }

    /// Blocks the calling thread until the batch is complete.
    pub fn synchronize(&self) -> Result<()> {
        self.ready
            .synchronize()
            .during("waiting for a batch")
            .map_err(Into::into)
    }

    /// The stream the batch's tensors were written on.
    pub fn stream(&self) -> &Arc<CudaStream> {
        self.inputs.stream()
    }
}
