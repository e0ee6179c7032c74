//! zarrpipe feeds training batches straight from Zarr: open a dataset, cut windows, fetch and
//! decode chunks in parallel, and collate `[batch, channel, ...]` tensors, as one stream.
//!
//! ```no_run
//! use zarrpipe::prelude::*;
//!
//! # async fn demo() -> zarrpipe::pipeline::Result<()> {
//! let mut batches = Pipeline::builder("data/sample.zarr")
//!     .variables(["t2m", "z"])
//!     .batch_size(4)
//!     .build()
//!     .await?;
//! while let Some(batch) = batches.try_next().await? {
//!     println!("{:?}", batch.inputs.shape());
//! }
//! # Ok(()) }
//! ```
//!
//! The crates behind it, each usable alone: [`store`], [`codec`], [`batcher`], [`collate`],
//! [`pipeline`]. Decoding and delivery on the GPU are behind the `cuda` feature; handing GPU
//! batches to candle without a copy is behind `candle`.

pub use zarrpipe_batcher as batcher;
pub use zarrpipe_codec_gpu as codec;
pub use zarrpipe_collate as collate;
/// candle-core, the version `Batch::<Gpu>::into_candle` hands tensors to.
#[cfg(feature = "candle")]
pub use zarrpipe_collate::candle_core as candle;
pub use zarrpipe_core as core;
pub use zarrpipe_pipeline as pipeline;
pub use zarrpipe_store as store;

pub mod generate;
pub mod info;
pub mod sample;
pub mod stats;

/// An error and its causes on one line, `outer: cause: root cause`.
pub fn error_chain(error: &dyn std::error::Error) -> String {
    let mut message = error.to_string();
    let mut source = error.source();
    while let Some(cause) = source {
        message = format!("{message}: {cause}");
        source = cause.source();
    }
    message
}

/// The names most programs need.
pub mod prelude {
    pub use futures::{stream, StreamExt, TryStreamExt};
    pub use zarrpipe_batcher::{Batcher, SampleLayout, WindowSpec};
    pub use zarrpipe_codec_gpu::GpuOptions;
    pub use zarrpipe_codec_gpu::{BatchDecoder, CpuDecoder, DecodeBatchesExt, DecodeExt};
    pub use zarrpipe_collate::{BatchCollator, CollateBatchesExt, HostCollator};
    pub use zarrpipe_collate::{CollateOptions, TensorDType};
    pub use zarrpipe_core::{DType, Device};
    #[cfg(feature = "candle")]
    pub use zarrpipe_pipeline::CandleBatch;
    pub use zarrpipe_pipeline::{Batch, BatchStream, DecodeOn, Host, Pipeline, PipelineExt};
    #[cfg(feature = "cuda")]
    pub use zarrpipe_pipeline::{Gpu, GpuBatch, GpuDevice};
    pub use zarrpipe_store::{ChunkRequest, Dataset, FetchBatchesExt, FetchExt};
}
