//! The decode kernels (`kernels.cu`), compiled once per process with NVRTC and loaded once
//! per decoder's context; and the descriptor structs they read, laid out as in the source.

use std::sync::{Arc, OnceLock};

use cudarc::driver::{CudaContext, CudaFunction};
use cudarc::nvrtc::{compile_ptx_with_opts, CompileOptions, Ptx};

use crate::{Error, Result};

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
}

fn ptx() -> Result<Ptx> {
    static PTX: OnceLock<std::result::Result<Ptx, String>> = OnceLock::new();
    PTX.get_or_init(|| {
        let options = CompileOptions {
            name: Some("zarrpipe_kernels.cu".into()),
            ..Default::default()
        };
        compile_ptx_with_opts(SOURCE, options).map_err(|error| format!("{error:?}"))
    })
    .clone()
    .map_err(|log| Error::Cuda {
        what: "compiling the decode kernels with NVRTC".into(),
        source: log.into(),
    })
}

impl Kernels {
    pub fn load(context: &Arc<CudaContext>) -> Result<Self> {
        let module = context.load_module(ptx()?).map_err(|error| Error::Cuda {
            what: "loading the decode kernels".into(),
            source: Box::new(error),
        })?;
        let function = |name: &str| {
            module.load_function(name).map_err(|error| Error::Cuda {
                what: format!("finding kernel `{name}`"),
                source: Box::new(error),
            })
        };
        Ok(Self {
            copy: function("copy_bytes")?,
            fill: function("fill_pattern")?,
            unshuffle: function("byte_unshuffle")?,
            bit_unshuffle: function("bit_unshuffle")?,
            swap: function("swap_bytes")?,
            transpose: function("transpose")?,
            place: function("place_block")?,
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

/// Views a descriptor table as bytes for upload.
pub(crate) fn as_bytes<T: Copy>(items: &[T]) -> &[u8] {
    // SAFETY: the descriptor structs are `repr(C)` plain data of u64s and u8 arrays with no
    // padding bytes (every size is a multiple of 8), so all their bytes are initialised.
    unsafe { std::slice::from_raw_parts(items.as_ptr().cast(), std::mem::size_of_val(items)) }
}
