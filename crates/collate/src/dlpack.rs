//! Zero-copy handoff of batch tensors through DLPack, with the `dlpark` crate: a managed
//! tensor points at the tensor's own memory (host or device) and owns the tensor until its
//! consumer calls the deleter (or, in Rust, drops the [`dlpark::Managed`] handle). PyTorch,
//! JAX, CuPy and NumPy take one wrapped in a PyCapsule (`__dlpack__`); the `zarrpipe` Python
//! package does that with dlpark's PyO3 support.
//!
//! Both ABIs are produced: the legacy `DLManagedTensor` ([`dlpark::legacy::Dlpack`]) that
//! every consumer reads, and the versioned `DLManagedTensorVersioned` (DLPack 1.x,
//! [`dlpark::versioned::Dlpack`]). Strides are always written (compact, C order), as DLPack
//! 1.2 asks of producers.

use std::ffi::c_void;

pub use dlpark;
use dlpark::ffi::{DLDataType, DLDevice};
use dlpark::metadata::Dynamic;
use dlpark::{Managed, ManagedTensorBase};
use ndarray::ArrayD;

use crate::TensorDType;

impl From<TensorDType> for DLDataType {
    fn from(dtype: TensorDType) -> Self {
        match dtype {
            TensorDType::F32 => DLDataType::F32,
            TensorDType::F16 => DLDataType::F16,
            TensorDType::BF16 => DLDataType::BF16,
            TensorDType::U8 => DLDataType::U8,
        }
    }
}

/// Wraps memory that `owner` keeps alive as a managed tensor of either ABI (`M`); the
/// consumer frees it (and drops `owner`, on whatever thread it calls the deleter from)
/// through the deleter.
///
/// # Safety
///
/// 1. `data` points at `shape.iter().product()` elements of `dtype`, C-contiguous, on
///    `device`.
/// 2. That memory stays valid, and is not written through any other handle, for as long as
///    `owner` lives.
pub unsafe fn export<M: ManagedTensorBase, O: Send + 'static>(
    owner: O,
    data: *mut c_void,
    device: DLDevice,
    shape: &[usize],
    dtype: DLDataType,
) -> Managed<M> {
    let shape: Vec<i64> = shape.iter().map(|&n| n as i64).collect();
    // A shape is at most a handful of axes of in-memory sizes: the metadata cannot overflow.
    let mut initialized = Dynamic::compact(shape)
        .initialize_as::<M>(Box::new(owner))
        .expect("tensor metadata of a few axes fits");
    initialized
        .set_data(data)
        .set_device(device)
        .set_dtype(dtype);
    // SAFETY: the data pointer, device, type and (compact) shape describe the owner's
    // memory (the caller's items 1 and 2); the owner is the context the deleter drops.
    unsafe { initialized.finish() }
}

/// A host tensor (a CPU batch's `inputs`, `targets`, masks or weights) as a DLPack tensor on
/// the CPU, without a copy (unless it is not in standard layout).
pub fn host_to_dlpack<T, M>(tensor: ArrayD<T>) -> Managed<M>
where
    T: dlpark::DlpackElement + Clone + Send,
    M: ManagedTensorBase,
{
    let shape = tensor.shape().to_vec();
    let mut tensor = if tensor.is_standard_layout() {
        tensor
    } else {
        tensor.as_standard_layout().into_owned()
    };
    let data = tensor.as_mut_ptr().cast::<c_void>();
    // SAFETY: `data` is the standard-layout (C-contiguous) array's first element, host
    // memory owned by `tensor`, which moves into the managed tensor and is never written
    // again.
    unsafe { export(tensor, data, DLDevice::CPU, &shape, T::DTYPE) }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::sync::Arc;

    #[test]
    fn host_tensors_export_their_own_memory_and_free_it_once() {
        let tensor = ArrayD::from_shape_fn(ndarray::IxDyn(&[2, 3, 4]), |i| {
            (i[0] * 12 + i[1] * 4 + i[2]) as f32
        });
        let data = tensor.as_ptr();
        let managed: dlpark::legacy::Dlpack = host_to_dlpack(tensor);
        let dl = managed.validate().unwrap();
        assert_eq!(dl.data_ptr() as *const f32, data, "no copy");
        assert_eq!(dl.device(), DLDevice::CPU);
        assert_eq!(dl.dtype(), DLDataType::F32);
        assert_eq!(dl.shape(), [2, 3, 4]);
        assert_eq!(dl.strides().unwrap(), [12, 4, 1]);
        // SAFETY: 24 f32 elements, alive while `managed` is.
        let values = unsafe { std::slice::from_raw_parts(dl.data_ptr() as *const f32, 24) };
        assert_eq!(values[23], 23.0);
        // The raw ABI: the consumer calls the deleter exactly once.
        let raw = managed.into_raw();
        // SAFETY: `raw` is a live tensor from `host_to_dlpack`, deleted once.
        unsafe { ((*raw).deleter.unwrap())(raw) };
    }

    /// What the owner context guards is dropped exactly when the consumer deletes the tensor,
    /// through either ABI.
    #[test]
    fn the_deleter_drops_the_owner_once() {
        struct Counted(Arc<AtomicUsize>);
        impl Drop for Counted {
            fn drop(&mut self) {
                self.0.fetch_add(1, Ordering::SeqCst);
            }
        }
        let drops = Arc::new(AtomicUsize::new(0));
        let mut bytes = vec![7u8; 6];
        let data = bytes.as_mut_ptr().cast();
        // SAFETY: 6 u8 elements that outlive both tensors (`bytes` lives to the end).
        let legacy: dlpark::legacy::Dlpack = unsafe {
            export(
                Counted(drops.clone()),
                data,
                DLDevice::CPU,
                &[2, 3],
                DLDataType::U8,
            )
        };
        // SAFETY: as above.
        let versioned: dlpark::versioned::Dlpack = unsafe {
            export(
                Counted(drops.clone()),
                data,
                DLDevice::CPU,
                &[6],
                DLDataType::U8,
            )
        };
        assert_eq!(versioned.validate().unwrap().shape(), [6]);
        assert_eq!(drops.load(Ordering::SeqCst), 0);
        drop(legacy);
        assert_eq!(drops.load(Ordering::SeqCst), 1);
        drop(versioned);
        assert_eq!(drops.load(Ordering::SeqCst), 2);
        drop(bytes);
    }
}
