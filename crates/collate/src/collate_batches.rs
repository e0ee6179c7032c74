//! The collate stage at batch level: each batch's decoded chunks become its tensors.

use std::sync::Arc;

use futures::stream::Stream;
use futures::FutureExt;
use zarrpipe_core::StageStream;

use crate::{Batch, BatchCollator, DecodedBatch, Error, Result};

/// Stream returned by [`CollateBatchesExt::collate_batches`](crate::CollateBatchesExt::collate_batches).
pub type CollateBatches<St, C> = StageStream<St, Result<Batch<<C as BatchCollator>::Place>>>;

pub(crate) fn collate_batches<St, C, E>(batches: St, collator: Arc<C>) -> CollateBatches<St, C>
where
    St: Stream<Item = std::result::Result<DecodedBatch, E>>,
    C: BatchCollator + ?Sized + 'static,
    E: Into<Error> + Send + 'static,
{
    let limit = collator.batches_in_flight();
    StageStream::new(
        batches,
        limit,
        move |batch: std::result::Result<DecodedBatch, E>| {
            let collator = collator.clone();
            async move {
                let batch = collator.collate_batch(batch.map_err(Into::into)?).await?;
                tracing::debug!(target: "zarrpipe::timeline", "batch {} collated", batch.index);
                Ok(batch)
            }
            .boxed()
        },
    )
}
