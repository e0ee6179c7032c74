//! Gather the windows of a batch from decoded chunks into one contiguous
//! `[batch, channel, window...]` float32 tensor (an `ndarray::ArrayD<f32>` on the CPU), with
//! the channel order documented on [`zarrpipe_batcher::SampleLayout`].
//!
//! ```no_run
//! use std::sync::Arc;
//! use futures::{stream, StreamExt, TryStreamExt};
//! use zarrpipe_batcher::{Batcher, SampleLayout, WindowSpec};
//! use zarrpipe_codec_gpu::{CpuDecoder, DecodeExt};
//! use zarrpipe_collate::{CollateExt, DecodedBatch, HostCollator};
//! use zarrpipe_store::{Dataset, FetchExt};
//!
//! # async fn demo() -> Result<(), Box<dyn std::error::Error>> {
//! let dataset = Dataset::open("data/sample.zarr").await?;
//! let layout = Arc::new(SampleLayout::new(&dataset, &["t2m", "z"], &WindowSpec::new())?);
//! let samples = Batcher::new(layout.clone(), 2, false)?.batch(0);
//! let chunks = stream::iter(layout.read_plan(&samples))
//!     .fetch(16)
//!     .decode(Arc::new(CpuDecoder::new()), 16)
//!     .try_collect()
//!     .await?;
//! let batch = stream::iter([Ok(DecodedBatch { samples, chunks })])
//!     .collate(Arc::new(HostCollator::new(layout)))
//!     .next()
//!     .await
//!     .unwrap()?;
//! println!("{:?}", batch.tensor.shape()); // [2, 14, 128, 256]
//! # Ok(()) }
//! ```
//!
//! With the `cuda` feature, [`DeviceCollator`] gathers the same windows from chunks decoded on
//! the GPU into device tensors in one kernel launch (float32, bfloat16 or float16), from the
//! same [`GatherPlan`].

mod collate;
#[cfg(feature = "cuda")]
mod device;
pub mod dlpack;
mod error;
mod gather;
mod host;
mod options;

use std::sync::Arc;

use futures::Stream;

#[cfg(feature = "candle")]
pub use candle_core;
pub use collate::{collate_on_rayon, Collate};
#[cfg(feature = "cuda")]
pub use device::{DeviceCollator, DeviceTensor, DeviceTensors, TensorPool};
pub use error::{Error, Result};
pub use gather::{GatherPlan, Piece, MAX_AXES};
pub use host::{DecodedBatch, HostBatch, HostCollator};
pub use options::{CollateOptions, LatitudeWeights, Normalization, TensorDType};

/// Stream adapters of the collate stage.
pub trait CollateExt: Stream<Item = Result<DecodedBatch>> + Sized {
    /// Collates each batch into a host tensor, on rayon's pool, in order.
    fn collate(self, collator: Arc<HostCollator>) -> Collate<Self> {
        Collate::new(self, collator)
    }
}

impl<St: Stream<Item = Result<DecodedBatch>>> CollateExt for St {}
