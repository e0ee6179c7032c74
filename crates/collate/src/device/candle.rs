//! Zero-copy handoff to candle (feature `candle`): a [`DeviceTensor`]'s buffer becomes the
//! storage of a `candle_core::Tensor` on the caller's device. Both sides use cudarc 0.19 and
//! the device's primary context, so the buffer changes owner without a copy: candle frees it
//! (stream-ordered, on its own stream) when its last tensor goes.

use candle_core::cuda::{CudaDType, CudaStorage};
use candle_core::op::BackpropOp;
use candle_core::{Storage, Tensor};
use zarrpipe_cuda::cudarc::driver::{CudaEvent, CudaStream};
use zarrpipe_cuda::{CudaError, During};

use super::pool::DeviceTensor;
use super::Gpu;
use crate::TensorDType;
use crate::{Batch, Error, Result};

fn candle_error(what: &str) -> impl FnOnce(candle_core::Error) -> Error + '_ {
    move |error| CudaError::call(what, error).into()
}

/// candle's memory: candle `Tensor`s on the pipeline's GPU, complete in candle's stream order.
#[derive(Clone, Copy, Debug)]
pub struct Candle;

impl crate::Place for Candle {
    type Tensor = Tensor;
    type Mask = Tensor;
    type Ready = ();

    fn tensor_bytes(tensor: &Tensor) -> usize {
        tensor.elem_count() * tensor.dtype().size_in_bytes()
    }

    fn tensor_device(tensor: &Tensor) -> zarrpipe_core::Device {
        match tensor.device().location() {
            candle_core::DeviceLocation::Cuda { gpu_id } => zarrpipe_core::Device::Cuda(gpu_id),
            _ => zarrpipe_core::Device::Cpu,
        }
    }
}

impl DeviceTensor {
    /// The tensor as a candle `Tensor` on `device`, without a copy. `ready` is the event after
    /// which the tensor is complete (the batch's); candle's stream waits on it, on the device.
    ///
    /// `device` must be the candle device the model uses (candle tells devices apart by
    /// instance) and on the tensor's GPU. The buffer leaves the pipeline's pool: the pool's
    /// cap no longer counts it, and candle's memory is bounded by what training code keeps.
    pub fn into_candle(self, device: &candle_core::Device, ready: &CudaEvent) -> Result<Tensor> {
        let cuda = device
            .as_cuda_device()
            .map_err(candle_error("handing a tensor to candle"))?;
        let stream = cuda.cuda_stream();
        let ordinal = stream.context().ordinal();
        if ordinal != self.device_ordinal() {
            return Err(CudaError::call(
                format!(
                    "handing a tensor on cuda:{} to candle's cuda:{ordinal}",
                    self.device_ordinal()
                ),
                "candle's device must be the pipeline's",
            )
            .into());
        }
        stream
            .wait(ready)
            .during("making candle's stream wait for a batch")?;
        let (shape, dtype, len) = (self.shape().to_vec(), self.dtype(), self.byte_len());
        let address = self.detach_buffer().leak();
        let slice = Handoff {
            stream: &stream,
            address,
            bytes: len,
            device: cuda,
        };
        let storage = match dtype {
            TensorDType::F32 => slice.storage::<f32>(),
            TensorDType::BF16 => slice.storage::<half::bf16>(),
            TensorDType::F16 => slice.storage::<half::f16>(),
            TensorDType::U8 => slice.storage::<u8>(),
        };
        Ok(Tensor::from_storage(
            Storage::Cuda(storage),
            shape,
            BackpropOp::none(),
            false,
        ))
    }
}

/// A device allocation whose ownership moves to candle.
struct Handoff<'a> {
    stream: &'a std::sync::Arc<CudaStream>,
    address: u64,
    bytes: usize,
    device: &'a candle_core::CudaDevice,
}

impl Handoff<'_> {
    fn storage<T: CudaDType>(&self) -> CudaStorage {
        // SAFETY: `address` is the start of a whole allocation of at least `bytes` bytes (from
        // cuMemAllocAsync, 256-byte aligned), leaked from its `CudaSlice` so freed only by the
        // slice made here, and `bytes` is a multiple of `T`'s size (the tensor holds `T`s).
        let slice = unsafe {
            self.stream
                .upgrade_device_ptr::<T>(self.address, self.bytes / std::mem::size_of::<T>())
        };
        CudaStorage::wrap_cuda_slice(slice, self.device.clone())
    }
}

impl Batch<Gpu> {
    /// Hands the batch to candle on `device`, the `candle_core::Device` the model runs on (it
    /// must be on the pipeline's GPU). candle's stream waits for the batch on the device, so
    /// this does not block. The tensors leave the pipeline's pool: candle frees them.
    pub fn into_candle(self, device: &candle_core::Device) -> Result<Batch<Candle>> {
        let ready = &self.ready;
        let hand = |tensor: DeviceTensor| tensor.into_candle(device, ready);
        let optional = |tensor: Option<DeviceTensor>| tensor.map(hand).transpose();
        Ok(Batch {
            index: self.index,
            epoch: self.epoch,
            inputs: hand(self.inputs)?,
            targets: optional(self.targets)?,
            mask: optional(self.mask)?,
            nan_mask: optional(self.nan_mask)?,
            latitude_weights: optional(self.latitude_weights)?,
            samples: self.samples,
            ready: (),
            stats: self.stats,
            pace: self.pace,
        })
    }
}
