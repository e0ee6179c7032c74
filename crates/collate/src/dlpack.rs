//! Zero-copy handoff of batch tensors through DLPack: a `DLManagedTensor` points at the
//! tensor's own memory (host or device) and owns the tensor until its consumer calls the
//! deleter. PyTorch, JAX and CuPy take one wrapped in a PyCapsule named `"dltensor"`
//! (`torch.utils.dlpack.from_dlpack`); with PyO3 that capsule is one call (or see the
//! `dlpark` crate). The structs are DLPack's C ABI (v0.8, unversioned).

use std::ffi::c_void;

use ndarray::ArrayD;

use crate::TensorDType;

/// `DLDeviceType`: where the memory is.
pub const DL_CPU: i32 = 1;
pub const DL_CUDA: i32 = 2;

#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct DLDevice {
    pub device_type: i32,
    pub device_id: i32,
}

#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct DLDataType {
    /// 0 int, 1 uint, 2 float, 4 bfloat.
    pub code: u8,
    pub bits: u8,
    pub lanes: u16,
}

impl From<TensorDType> for DLDataType {
    fn from(dtype: TensorDType) -> Self {
        let (code, bits) = match dtype {
            TensorDType::F32 => (2, 32),
            TensorDType::F16 => (2, 16),
            TensorDType::BF16 => (4, 16),
            TensorDType::U8 => (1, 8),
        };
        Self {
            code,
            bits,
            lanes: 1,
        }
    }
}

#[repr(C)]
#[derive(Debug)]
pub struct DLTensor {
    pub data: *mut c_void,
    pub device: DLDevice,
    pub ndim: i32,
    pub dtype: DLDataType,
    pub shape: *mut i64,
    /// Null: C-contiguous.
    pub strides: *mut i64,
    pub byte_offset: u64,
}

#[repr(C)]
#[derive(Debug)]
pub struct DLManagedTensor {
    pub dl_tensor: DLTensor,
    pub manager_ctx: *mut c_void,
    pub deleter: Option<unsafe extern "C" fn(*mut DLManagedTensor)>,
}

/// What a managed tensor keeps alive: the tensor and its shape array.
struct Owner {
    _tensor: Box<dyn Send>,
    _shape: Vec<i64>,
}

/// Wraps memory that `owner` keeps alive as a `DLManagedTensor`; the consumer frees it (and
/// drops `owner`) through the deleter.
pub(crate) fn export(
    owner: Box<dyn Send>,
    data: *mut c_void,
    device: DLDevice,
    shape: &[usize],
    dtype: DLDataType,
) -> *mut DLManagedTensor {
    let mut shape: Vec<i64> = shape.iter().map(|&n| n as i64).collect();
    let dl_tensor = DLTensor {
        data,
        device,
        ndim: shape.len() as i32,
        dtype,
        shape: shape.as_mut_ptr(),
        strides: std::ptr::null_mut(),
        byte_offset: 0,
    };
    let owner = Box::new(Owner {
        _tensor: owner,
        _shape: shape,
    });
    Box::into_raw(Box::new(DLManagedTensor {
        dl_tensor,
        manager_ctx: Box::into_raw(owner).cast(),
        deleter: Some(delete),
    }))
}

unsafe extern "C" fn delete(managed: *mut DLManagedTensor) {
    if managed.is_null() {
        return;
    }
    // SAFETY: `managed` and its context were made by `export` with `Box::into_raw`, and
    // DLPack's contract is that the deleter is called once.
    unsafe {
        let managed = Box::from_raw(managed);
        drop(Box::from_raw(managed.manager_ctx.cast::<Owner>()));
    }
}

/// A host float32 tensor (a CPU batch's `inputs`) as a DLPack tensor on the CPU, without a
/// copy.
pub fn host_to_dlpack(tensor: ArrayD<f32>) -> *mut DLManagedTensor {
    let shape = tensor.shape().to_vec();
    let mut tensor = if tensor.is_standard_layout() {
        tensor
    } else {
        tensor.as_standard_layout().into_owned()
    };
    let data = tensor.as_mut_ptr().cast::<c_void>();
    let device = DLDevice {
        device_type: DL_CPU,
        device_id: 0,
    };
    export(
        Box::new(tensor),
        data,
        device,
        &shape,
        TensorDType::F32.into(),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn host_tensors_export_their_own_memory_and_free_it_once() {
        let tensor = ArrayD::from_shape_fn(ndarray::IxDyn(&[2, 3, 4]), |i| {
            (i[0] * 12 + i[1] * 4 + i[2]) as f32
        });
        let data = tensor.as_ptr();
        let managed = host_to_dlpack(tensor);
        // SAFETY: `managed` is a live tensor from `host_to_dlpack`, read then deleted once.
        unsafe {
            let dl = &(*managed).dl_tensor;
            assert_eq!(dl.data as *const f32, data, "no copy");
            assert_eq!(
                dl.device,
                DLDevice {
                    device_type: DL_CPU,
                    device_id: 0
                }
            );
            assert_eq!(
                dl.dtype,
                DLDataType {
                    code: 2,
                    bits: 32,
                    lanes: 1
                }
            );
            assert_eq!(
                std::slice::from_raw_parts(dl.shape, dl.ndim as usize),
                [2, 3, 4]
            );
            assert!(dl.strides.is_null());
            let values = std::slice::from_raw_parts(dl.data as *const f32, 24);
            assert_eq!(values[23], 23.0);
            ((*managed).deleter.unwrap())(managed);
        }
    }
}
