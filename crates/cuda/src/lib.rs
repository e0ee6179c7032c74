//! The CUDA runtime that zarrpipe's GPU stages share: opening a device, its pooled memory,
//! kernels compiled at run time, device buffers that carry the event after which they may be
//! read, the events zarrpipe's threads wait for asleep, and one [`CudaError`] that says what
//! was asked of the GPU.
//!
//! The decoder (`zarrpipe-codec-gpu`) and the collator (`zarrpipe-collate`) both build on this
//! crate, and on nothing of each other's GPU internals. With the `runtime` feature off the
//! crate holds only [`CudaError`], so the stages' error enums have the same shape either way.
//!
//! ```no_run
//! # #[cfg(feature = "runtime")]
//! # fn main() -> zarrpipe_cuda::Result<()> {
//! use zarrpipe_cuda::{open_device, DeviceBuffer, During};
//!
//! let context = open_device(0)?;
//! let stream = context.new_stream().during("creating a stream")?;
//! let bytes = stream.clone_htod(&[1u8, 2, 3]).during("uploading")?;
//! let buffer = DeviceBuffer::written_on(bytes, &stream)?;
//! assert_eq!(buffer.to_host()?, [1, 2, 3]);
//! # Ok(())
//! # }
//! # #[cfg(not(feature = "runtime"))]
//! # fn main() {}
//! ```

#[cfg(feature = "runtime")]
mod buffer;
#[cfg(feature = "runtime")]
mod device;
mod error;
#[cfg(feature = "runtime")]
mod host_wait;
#[cfg(feature = "runtime")]
mod kernels;
#[cfg(feature = "runtime")]
mod memory;
#[cfg(feature = "runtime")]
mod pinned;

#[cfg(feature = "runtime")]
pub use buffer::DeviceBuffer;
#[cfg(feature = "runtime")]
pub use cudarc;
#[cfg(feature = "runtime")]
pub use device::{device_count, open_device};
#[cfg(feature = "runtime")]
pub use error::During;
pub use error::{CudaError, Result};
#[cfg(feature = "runtime")]
pub use host_wait::HOST_WAITED_EVENT;
#[cfg(feature = "runtime")]
pub use kernels::{kernel, load_module};
#[cfg(feature = "runtime")]
pub use memory::{device_total_memory, keep_freed_memory_pooled, trim_memory_pool, DeviceMemory};
#[cfg(feature = "runtime")]
pub use pinned::alloc_pinned_host;
