//! Gather the windows of a batch from decoded chunks into one contiguous
//! `[batch, channel, window...]` float32 tensor (an `ndarray::ArrayD<f32>` on the CPU), with
//! the channel order documented on [`zarrpipe_batcher::SampleLayout`].
//!
//! ```no_run
//! use std::sync::Arc;
//! use futures::{stream, TryStreamExt};
//! use zarrpipe_batcher::{Batcher, SampleLayout, WindowSpec};
//! use zarrpipe_codec_gpu::{CpuDecoder, DecodeBatchesExt};
//! use zarrpipe_collate::{Batch, CollateBatchesExt, HostCollator};
//! use zarrpipe_store::{Dataset, FetchBatchesExt};
//!
//! # async fn demo() -> Result<(), Box<dyn std::error::Error>> {
//! let dataset = Dataset::open("data/sample.zarr").await?;
//! let layout = Arc::new(SampleLayout::new(&dataset, &["t2m", "z"], &WindowSpec::new())?);
//! let batcher = Batcher::new(layout.clone(), 2, false)?;
//! let batches: Vec<Batch> = stream::iter(batcher.read_plans())
//!     .fetch_batches(2, 64)                           // 2 batches at once, 64 reads in all
//!     .decode_batches(Arc::new(CpuDecoder::new()))    // or the GPU's decoder
//!     .collate_batches(Arc::new(HostCollator::new(layout)))
//!     .try_collect()
//!     .await?;
//! println!("{:?}", batches[0].inputs.shape()); // [2, 14, 128, 256]
//! # Ok(()) }
//! ```
//!
//! [`BatchCollator`] is the stage's swap point. With the `cuda` feature, `DeviceCollator`
//! gathers the same windows into device tensors in one kernel launch (float32, bfloat16 or
//! float16), from the same [`GatherPlan`], from chunks decoded on the GPU or uploaded from the
//! CPU through reused pinned buffers; [`HostCollator`] takes chunks decoded on either side too.
//!
//! Static variables come from [`StaticFields`] read once, derived channels from the
//! [`DerivedChannels`]' coordinates, both in [`CollateOptions`] (the pipeline builder fills
//! them): each collator cuts and computes them as the other does, bit for bit.

#![warn(missing_docs)]

mod batch;
mod batch_collator;
mod collate;
mod collate_batches;
mod derived;
#[cfg(feature = "cuda")]
mod device;
pub mod dlpack;
mod error;
mod gather;
mod host;
mod host_placement;
mod options;
mod static_fields;
mod tensor_dtype;

use std::sync::Arc;

use futures::Stream;

pub use batch::{Batch, DecodedBatch, Host, Place};
pub use batch_collator::BatchCollator;
#[cfg(feature = "candle")]
pub use candle_core;
pub use collate::collate_on_rayon;
pub use collate_batches::CollateBatches;
pub use derived::{Coordinate, DerivedChannels, DerivedJob, DerivedPlan};
#[cfg(feature = "candle")]
pub use device::Candle;
#[cfg(feature = "cuda")]
pub use device::{
    ConsumerStream, DeviceCollator, DeviceTensor, Gpu, HandoverClock, TensorPool, TensorRoom,
};
pub use error::{Error, Result};
pub use gather::{GatherPlan, Piece, MAX_AXES};
pub use host::HostCollator;
pub use options::{CollateOptions, LatitudeWeights, Normalization, STATS_FORMAT};
pub use static_fields::{StaticField, StaticFields};
pub use tensor_dtype::TensorDType;

/// The collate stage at batch level, for a stream of decoded batches
/// ([`DecodeBatchesExt::decode_batches`](zarrpipe_codec_gpu::DecodeBatchesExt::decode_batches)).
pub trait CollateBatchesExt<E>:
    Stream<Item = std::result::Result<DecodedBatch, E>> + Sized
{
    /// Collates each batch with `collator` ([`HostCollator`] for host tensors, or
    /// `DeviceCollator` for device tensors), a few at once as the collator asks, in order.
    /// Errors before this stage pass through.
    fn collate_batches<C>(self, collator: Arc<C>) -> CollateBatches<Self, C>
    where
        C: BatchCollator + ?Sized + 'static,
        E: Into<Error> + Send + 'static,
    {
        collate_batches::collate_batches(self, collator)
    }
}

impl<E, St: Stream<Item = std::result::Result<DecodedBatch, E>>> CollateBatchesExt<E> for St {}
