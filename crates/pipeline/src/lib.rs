//! Compose the stages into one stream of training batches: read plans
//! ([`Batcher::read_plans`](zarrpipe_batcher::Batcher::read_plans)), `fetch_batches`
//! (zarrpipe-store), `decode_batches` (zarrpipe-codec-gpu), `collate_batches`
//! (zarrpipe-collate) and [`prefetch`](PipelineExt::prefetch), ended by a [`BatchStream`] that
//! keeps metrics and the epoch's resumable state. Each stage runs on the CPU or the GPU:
//! decoding by a value ([`DecodeOn`], or any `Arc<dyn BatchDecoder>`), collation by the place
//! of the tensors ([`Host`], or `Gpu` with the `cuda` feature).
//!
//! ```no_run
//! use futures::TryStreamExt;
//! use zarrpipe_pipeline::{DecodeOn, Pipeline};
//!
//! # async fn demo() -> zarrpipe_pipeline::Result<()> {
//! let mut batches = Pipeline::builder("data/sample.zarr")
//!     .variables(["t2m", "u10", "z"])
//!     .window("latitude", 64, 64)
//!     .window("longitude", 64, 64)
//!     .batch_size(8)
//!     .decode_on(DecodeOn::Cpu) // DecodeOn::Gpu with the `cuda` feature
//!     .build()                  // `.collate_on_gpu().build()` for tensors in GPU memory
//!     .await?;
//! while let Some(batch) = batches.try_next().await? {
//!     println!("batch {} {:?}", batch.index, batch.inputs.shape());
//! }
//! println!("{:?}", batches.metrics());
//! # Ok(()) }
//! ```
//!
//! The same chain by hand, with metrics and a resumable state:
//!
//! ```no_run
//! use std::sync::Arc;
//! use futures::{stream, TryStreamExt};
//! use zarrpipe_batcher::{Batcher, SampleLayout, WindowSpec};
//! use zarrpipe_codec_gpu::{CpuDecoder, DecodeBatchesExt};
//! use zarrpipe_collate::{CollateBatchesExt, HostCollator};
//! use zarrpipe_core::Device;
//! use zarrpipe_pipeline::{BatchStream, PipelineExt};
//! use zarrpipe_store::{Dataset, FetchBatchesExt};
//!
//! # async fn demo() -> Result<(), Box<dyn std::error::Error>> {
//! let dataset = Arc::new(Dataset::open("data/sample.zarr").await?);
//! let layout = Arc::new(SampleLayout::new(&dataset, &["t2m", "z"], &WindowSpec::new())?);
//! let batcher = Batcher::new(layout.clone(), 8, false)?;
//! let chain = stream::iter(batcher.read_plans())
//!     .fetch_batches(4, 64)
//!     .decode_batches(Arc::new(CpuDecoder::new()))
//!     .collate_batches(Arc::new(HostCollator::new(layout)))
//!     .prefetch(4);
//! let mut batches = BatchStream::new(chain, dataset, batcher, Device::Cpu);
//! while let Some(batch) = batches.try_next().await? {
//!     let _resume_from = batches.state();
//! }
//! # Ok(()) }
//! ```

#![warn(missing_docs)]

mod builder;
mod calendar;
mod channels;
mod decode_threads;
mod error;
#[cfg(feature = "cuda")]
mod gpu;
#[cfg(feature = "cuda")]
mod gpu_memory;
mod host_waits;
mod metrics;
mod missing;
mod prefetch;
mod select;
mod stage_gpu;
mod stream;

pub use builder::{default_cpu_decode_threads, CollateOn, DecodeOn, Pipeline, PipelineBuilder};
pub use channels::read_channel_inputs;
pub use decode_threads::DecodeThreads;
pub use error::{Error, Result};
#[cfg(feature = "cuda")]
pub use gpu::{GpuBatch, GpuDevice};
#[cfg(feature = "cuda")]
pub use gpu_memory::GpuMemory;
pub use host_waits::HostWaits;
pub use metrics::{Metrics, MetricsSnapshot};
pub use missing::{apply_missing_steps, find_missing_steps, time_dim, MAX_CHECKED_CHUNKS};
pub use prefetch::Prefetch;
pub use select::{
    dim_labels, index_range, label_channels, resolve_selections, ChannelSelection, CoordValue,
    Selection,
};
pub use stage_gpu::StageGpu;
pub use stream::BatchStream;
#[cfg(feature = "candle")]
pub use zarrpipe_collate::Candle;
pub use zarrpipe_collate::{Batch, CollateOptions, Host, Normalization, Place, TensorDType};
#[cfg(feature = "cuda")]
pub use zarrpipe_collate::{ConsumerStream, Gpu};

/// A batch handed to candle (feature `candle`, see `GpuBatch::into_candle`).
#[cfg(feature = "candle")]
pub type CandleBatch = Batch<Candle>;

/// The prefetch stage, for any chain.
pub trait PipelineExt: futures::Stream + Sized + Send + 'static
where
    Self::Item: Send,
{
    /// Runs the chain on its own Tokio task, up to `batches` items ahead of the consumer.
    /// Poll it inside a Tokio runtime; dropping it stops the chain.
    fn prefetch(self, batches: usize) -> Prefetch<Self> {
        Prefetch::new(self, batches)
    }
}

impl<St: futures::Stream + Send + 'static> PipelineExt for St where St::Item: Send {}
