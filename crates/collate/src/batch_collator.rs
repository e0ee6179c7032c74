//! The collate stage's swap point: a [`BatchCollator`] turns a batch's decoded chunks (from
//! the CPU or the GPU) into its tensors, in host memory ([`HostCollator`]) or in device memory
//! (`DeviceCollator`, feature `cuda`).

use std::sync::Arc;
use std::time::Instant;

use futures::future::BoxFuture;
use futures::FutureExt;

use crate::{collate_on_rayon, Batch, DecodedBatch, HostCollator, Place, Result};

/// Collates whole batches into tensors in `Self::Place`'s memory, whichever side decoded
/// their chunks.
pub trait BatchCollator: Send + Sync + std::fmt::Debug {
    /// Where the tensors are made.
    type Place: Place;

    /// Collates `batch`: its index, samples and stats carry over into the [`Batch`].
    fn collate_batch(
        self: Arc<Self>,
        batch: DecodedBatch,
    ) -> BoxFuture<'static, Result<Batch<Self::Place>>>;

    /// Batches worth collating at once to keep this collator busy.
    fn batches_in_flight(&self) -> usize {
        1
    }
}

impl BatchCollator for HostCollator {
    type Place = crate::Host;

    /// On rayon's pool (chunks decoded on the GPU are copied to the host first, pending
    /// chunks decoded into the tensor). Two batches at once: each uses every core, and the
    /// second fills the cores the first's last chunks leave idle.
    fn collate_batch(
        self: Arc<Self>,
        mut batch: DecodedBatch,
    ) -> BoxFuture<'static, Result<Batch>> {
        async move {
            let started = Instant::now();
            // A part still decoding (a split's GPU part) is waited for here, not on a rayon
            // thread, which the part's own reading may need.
            batch.payload = batch.payload.finished().await?;
            let mut batch = collate_on_rayon(self, batch).await?;
            batch.stats.collate_busy += started.elapsed();
            Ok(batch)
        }
        .boxed()
    }

    fn batches_in_flight(&self) -> usize {
        2
    }
}
