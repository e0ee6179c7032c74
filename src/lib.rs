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
//! [`pipeline`], and [`cuda`], the CUDA runtime the GPU stages share. Decoding and delivery on
//! the GPU are behind the `cuda` feature, on by default (it needs nothing at build time);
//! handing GPU batches to candle without a copy is behind `candle`.

#![warn(missing_docs)]

pub use zarrpipe_batcher as batcher;
pub use zarrpipe_codec_gpu as codec;
pub use zarrpipe_collate as collate;
/// candle-core, the version `Batch::<Gpu>::into_candle` hands tensors to.
#[cfg(feature = "candle")]
pub use zarrpipe_collate::candle_core as candle;
pub use zarrpipe_core as core;
pub use zarrpipe_cuda as cuda;
pub use zarrpipe_pipeline as pipeline;
pub use zarrpipe_store as store;

pub mod advise;
pub mod bound;
pub mod generate;
pub mod info;
pub mod rechunk;
pub mod sample;
pub mod stats;

/// The bound on a tokio runtime's blocking threads that the `zarrpipe` program sets. Local
/// files are read on blocking threads (object_store's `LocalFileSystem`), one per read in
/// flight, and tokio's default allows 512; with up to 64 reads per batch and several batches
/// ahead (before the batches being fetched shared 64 reads), a soak run kept about 200 threads
/// alive, and with mimalloc (a heap per thread) about 2 GB resident on the small sample. Reads
/// beyond the bound wait their turn; each GPU batch holds one while it is planned, staged and
/// decoded.
pub const MAX_BLOCKING_THREADS: usize = 32;

/// An error and its causes on one line, `outer: cause: root cause`. A cause whose text the
/// line already holds is left out: some errors (object_store's, reqwest's) repeat their
/// source's text in their own.
pub fn error_chain(error: &dyn std::error::Error) -> String {
    let mut message = error.to_string();
    let mut source = error.source();
    while let Some(cause) = source {
        let text = cause.to_string();
        if !text.is_empty() && !message.contains(&text) {
            message = format!("{message}: {text}");
        }
        source = cause.source();
    }
    message
}

#[cfg(test)]
mod tests {
    #[derive(Debug, thiserror::Error)]
    #[error("{text}")]
    struct Layer {
        text: String,
        #[source]
        source: Option<Box<Layer>>,
    }

    fn layer(text: &str, source: Option<Layer>) -> Layer {
        Layer {
            text: text.into(),
            source: source.map(Box::new),
        }
    }

    #[test]
    fn error_chain_says_each_cause_once() {
        let root = layer("connection refused", None);
        let middle = layer("request failed: connection refused", Some(root));
        let top = layer("cannot read zarr.json", Some(middle));
        assert_eq!(
            super::error_chain(&top),
            "cannot read zarr.json: request failed: connection refused"
        );
    }
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
    pub use zarrpipe_pipeline::{ConsumerStream, Gpu, GpuBatch, GpuDevice};
    pub use zarrpipe_store::{ChunkRequest, Dataset, FetchBatchesExt, FetchExt};
}
