//! The decode kernels (`kernels.cu`), compiled at run time (`zarrpipe_cuda::load_module`); and the descriptor structs they read, laid out as in the source.

use std::sync::Arc;

use zarrpipe_cuda::cudarc::driver::{CudaContext, CudaFunction};
use zarrpipe_cuda::{kernel, load_module};

use crate::Result;

const SOURCE: &str = include_str!("kernels.cu");
pub(crate) use crate::plan::MAX_DIMS;

/// One loaded function per op kind.
pub(crate) struct Kernels {
    pub copy: CudaFunction,
    pub fill: CudaFunction,
    pub unshuffle: CudaFunction,
    pub bit_unshuffle: CudaFunction,
    pub swap: CudaFunction,
    pub transpose: CudaFunction,
    pub place: CudaFunction,
    pub scale_offset: CudaFunction,
}

impl Kernels {
    pub fn load(context: &Arc<CudaContext>) -> Result<Self> {
        let module = load_module(context, "zarrpipe_kernels.cu", SOURCE)?;
        let function = |name: &str| kernel(&module, name);
        Ok(Self {
            copy: function("copy_bytes")?,
            fill: function("fill_pattern")?,
            unshuffle: function("byte_unshuffle")?,
            bit_unshuffle: function("bit_unshuffle")?,
            swap: function("swap_bytes")?,
            transpose: function("transpose")?,
            place: function("place_block")?,
            scale_offset: function("scale_offset")?,
        })
    }
}

/// Descriptor structs, `#[repr(C)]` twins of those in `kernels.cu`.
#[repr(C)]
#[derive(Clone, Copy)]
pub(crate) struct CopyOp {
    pub src: u64,
    pub dst: u64,
    pub len: u64,
}

#[repr(C)]
#[derive(Clone, Copy)]
pub(crate) struct FillOp {
    pub dst: u64,
    pub len: u64,
    pub pattern_len: u64,
    pub pattern: [u8; 16],
}

#[repr(C)]
#[derive(Clone, Copy)]
pub(crate) struct ShuffleOp {
    pub src: u64,
    pub dst: u64,
    pub len: u64,
    pub type_size: u64,
    pub plane_len: u64,
    pub plane_stride: u64,
}

#[repr(C)]
#[derive(Clone, Copy)]
pub(crate) struct SwapOp {
    pub ptr: u64,
    pub len: u64,
    pub element_size: u64,
}

#[repr(C)]
#[derive(Clone, Copy)]
pub(crate) struct TransposeOp {
    pub src: u64,
    pub dst: u64,
    pub elements: u64,
    pub element_size: u64,
    pub ndim: u64,
    pub shape: [u64; MAX_DIMS],
    pub order: [u64; MAX_DIMS],
}

#[repr(C)]
#[derive(Clone, Copy)]
pub(crate) struct PlaceOp {
    pub src: u64,
    pub dst: u64,
    pub elements: u64,
    pub element_size: u64,
    pub ndim: u64,
    pub block: [u64; MAX_DIMS],
    pub outer: [u64; MAX_DIMS],
    pub start: [u64; MAX_DIMS],
}

#[repr(C)]
#[derive(Clone, Copy)]
pub(crate) struct ScaleOffsetOp {
    pub src: u64,
    pub dst: u64,
    pub elements: u64,
    /// `Element` numbers (`chain::Element` in declaration order, `Element` in the source).
    pub dtype: u32,
    pub astype: u32,
    /// 1 when `astype` is given: values are cast through f32 first.
    pub cast: u32,
    pub offset_bits: u32,
    pub scale_bits: u32,
    pub pad: u32,
}

/// Views a descriptor table as bytes for upload.
pub(crate) fn as_bytes<T: Copy>(items: &[T]) -> &[u8] {
    // SAFETY: the descriptor structs are `repr(C)` plain data of u64s, u32s and u8 arrays with
    // no padding bytes (every size is a multiple of 8, u32s come in pairs), so all their bytes
    // are initialised.
    unsafe { std::slice::from_raw_parts(items.as_ptr().cast(), std::mem::size_of_val(items)) }
}
