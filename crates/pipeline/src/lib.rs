//! Compose the stages (fetch, decode, collate) into one stream of training batches, with
//! batches loaded ahead of the consumer as Tokio tasks, bounded memory, and metrics.
//!
//! ```no_run
//! use futures::TryStreamExt;
//! use zarrpipe_pipeline::Pipeline;
//!
//! # async fn demo() -> zarrpipe_pipeline::Result<()> {
//! let mut batches = Pipeline::builder("data/sample.zarr")
//!     .variables(["t2m", "u10", "z"])
//!     .window("latitude", 64, 64)
//!     .window("longitude", 64, 64)
//!     .batch_size(8)
//!     .build()
//!     .await?;
//! while let Some(batch) = batches.try_next().await? {
//!     println!("batch {} {:?}", batch.index, batch.inputs.shape());
//! }
//! println!("{:?}", batches.metrics());
//! # Ok(()) }
//! ```
//!
//! [`PipelineBuilder::build`] delivers batches to host memory. With the `cuda` feature,
//! [`PipelineBuilder::build_gpu`] decodes and collates on a GPU and delivers [`GpuBatch`]es in
//! device memory.

mod builder;
#[cfg(feature = "candle")]
mod candle;
mod error;
#[cfg(feature = "cuda")]
mod gpu;
mod metrics;
mod select;
mod stream;

pub use builder::{Pipeline, PipelineBuilder};
#[cfg(feature = "candle")]
pub use candle::CandleBatch;
pub use error::{Error, Result};
#[cfg(feature = "cuda")]
pub use gpu::{GpuBatch, GpuDevice};
pub use metrics::{Metrics, MetricsSnapshot};
pub use select::{index_range, resolve_selections, CoordValue, Selection};
pub use stream::{Batch, BatchStream, Delivered};
pub use zarrpipe_collate::{CollateOptions, Normalization, TensorDType};
