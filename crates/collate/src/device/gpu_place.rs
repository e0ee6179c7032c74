//! Device memory as a batch's place: tensors from the pipeline's pool and the event after
//! which they are complete.

use std::sync::Arc;

use zarrpipe_codec_gpu::cudarc::driver::{CudaEvent, CudaStream};

use super::cuda_error;
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
}

impl Batch<Gpu> {
    /// Makes `stream` wait (on the device, not the host) until the batch is complete.
    pub fn wait_on(&self, stream: &CudaStream) -> Result<()> {
        stream
            .wait(&self.ready)
            .map_err(cuda_error("waiting for a batch"))
    }

    /// Blocks the calling thread until the batch is complete.
    pub fn synchronize(&self) -> Result<()> {
        self.ready
            .synchronize()
            .map_err(cuda_error("waiting for a batch"))
    }

    /// The stream the batch's tensors were written on.
    pub fn stream(&self) -> &Arc<CudaStream> {
        self.inputs.stream()
    }
}
