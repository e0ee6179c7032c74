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
        // The receiver is gone when the consumer dropped the stream: nothing to deliver.
        let _ = sender.send(collator.collate(batch));
    });
    Box::pin(async move { receiver.await.unwrap_or(Err(Error::WorkerGone)) })
}
