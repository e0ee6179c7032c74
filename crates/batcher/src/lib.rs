//! Cut samples out of Zarr variables by named dimensions and group them into batches:
//! windows with a size and stride per dimension, iterated dimensions (one sample per step,
//! `time` by default), every other dimension stacked as channels, and for each batch the
//! deduplicated set of chunks it needs ([`Batcher::read_plans`], the head of a stage chain).
//! xbatcher's `batch_dims` and `concat_input_dims` let the
//! layout fix the batches instead of a batch size (blocks of steps or of windows). Missing
//! time steps ([`MissingSteps`]: gaps in the time coordinate, absent fields) are skipped,
//! filled or refused by [`SampleLayout::with_missing_steps`] ([`Missing`]).
//!
//! ```no_run
//! use std::sync::Arc;
//! use zarrpipe_batcher::{Batcher, SampleLayout, WindowSpec};
//!
//! # async fn demo() -> Result<(), Box<dyn std::error::Error>> {
//! let dataset = zarrpipe_store::Dataset::open("data/sample.zarr").await?;
//! let spec = WindowSpec::new().window("latitude", 64, 32).window("longitude", 64, 64);
//! let layout = Arc::new(SampleLayout::new(&dataset, &["t2m", "z"], &spec)?);
//! let batcher = Batcher::new(layout.clone(), 8, false)?;
//! let first = batcher.batch(0);
//! println!("{} samples, first batch reads {} chunks", layout.num_samples(), layout.read_plan(&first).len());
//! # Ok(()) }
//! ```
//!
//! Planning runs on the CPU; there is no GPU code here.

#![warn(missing_docs)]

mod batches;
mod derived;
mod edge;
mod error;
mod layout;
mod missing;
mod plan;
mod sampler;
mod window;

pub use batches::{Batcher, EpochOptions};
pub use derived::{Derived, Needs};
pub use edge::Edge;
pub use error::{Error, Result};
pub use layout::{
    clip, BatchGroups, BatchSpan, Channel, Sample, SampleDim, SampleLayout, MAX_SAMPLE_CHUNKS,
    MAX_SAMPLE_VALUES,
};
pub use missing::{AbsentStep, Gap, Missing, MissingSteps};
pub use plan::PlanSummary;
pub use sampler::{
    EpochSampler, Ranks, SamplerSpec, SamplerState, Shuffle, Uneven, MAX_SHUFFLED_SAMPLES,
};
pub use window::{Forecast, Window, WindowSpec};

#[cfg(test)]
mod tests;
