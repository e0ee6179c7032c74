//! Host collation off the async runtime's threads.

use std::sync::Arc;

use futures::channel::oneshot;
use futures::future::BoxFuture;

use crate::{Batch, DecodedBatch, Error, HostCollator, Result};

/// Collates on rayon's pool, off the async runtime's threads.
pub fn collate_on_rayon(
    collator: Arc<HostCollator>,
    batch: DecodedBatch,
) -> BoxFuture<'static, Result<Batch>> {
    let (sender, receiver) = oneshot::channel();
    rayon::spawn(move || {
        if sender.is_canceled() {
            return;
        }
        // A panic in a rayon task aborts the process: catch it here and deliver it as an error.
        let samples = sample_range(&batch);
        let collated =
            std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| collator.collate(batch)))
                .unwrap_or_else(|payload| {
                    Err(Error::Panicked {
                        samples,
                        message: zarrpipe_core::panic_message(payload.as_ref()),
                    })
                });
        // The receiver is gone when the consumer dropped the stream: nothing to deliver.
        let _ = sender.send(collated);
    });
    Box::pin(async move { receiver.await.unwrap_or(Err(Error::WorkerGone)) })
}

/// The samples of a batch, for errors: `[12, 13, 14, 15]`, or the first few of a long one.
fn sample_range(batch: &DecodedBatch) -> String {
    let shown: Vec<u64> = batch.samples.iter().take(8).map(|s| s.index).collect();
    let more = batch.samples.len().saturating_sub(shown.len());
    match more {
        0 => format!("{shown:?}"),
        more => format!("{shown:?} and {more} more"),
    }
}
