//! Kernels compiled at run time: each `.cu` source is compiled once per process with NVRTC
//! (no `nvcc` at build time) and loaded into each context that asks for it.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, OnceLock};

use cudarc::driver::{CudaContext, CudaFunction, CudaModule};
use cudarc::nvrtc::{compile_ptx_with_opts, CompileOptions, Ptx};

use crate::{CudaError, Result};

/// Compiles `source` with NVRTC once per process (by `name`) and loads it into `context`.
pub fn load_module(
    context: &Arc<CudaContext>,
    name: &'static str,
    source: &'static str,
) -> Result<Arc<CudaModule>> {
    type Cache = Mutex<HashMap<&'static str, std::result::Result<Ptx, String>>>;
    static PTX: OnceLock<Cache> = OnceLock::new();
    let ptx = PTX
        .get_or_init(Cache::default)
        .lock()
        .unwrap_or_else(|poison| poison.into_inner())
        .entry(name)
        .or_insert_with(|| {
            let options = CompileOptions {
                name: Some(name.into()),
                ..Default::default()
            };
            compile_ptx_with_opts(source, options).map_err(|error| format!("{error:?}"))
        })
        .clone()
        .map_err(|log| CudaError::call(format!("compiling {name} with NVRTC"), log))?;
    context
        .load_module(ptx)
        .map_err(|error| CudaError::call(format!("loading {name}"), error))
}

/// Finds kernel `name` in `module`.
pub fn kernel(module: &Arc<CudaModule>, name: &str) -> Result<CudaFunction> {
    module
        .load_function(name)
        .map_err(|error| CudaError::call(format!("finding kernel `{name}`"), error))
}
