use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use futures::channel::oneshot;
use futures::future::{self, BoxFuture, Either, Ready};
use futures::stream::{FusedStream, Stream};
use zarrpipe_core::InFlight;

use crate::{DecodedBatch, Error, HostBatch, HostCollator, Result};

type CollateFuture = Either<BoxFuture<'static, Result<HostBatch>>, Ready<Result<HostBatch>>>;
type MakeCollate = Box<dyn FnMut(Result<DecodedBatch>) -> CollateFuture + Send>;

pin_project_lite::pin_project! {
    /// Stream returned by [`CollateExt::collate`](crate::CollateExt::collate).
    #[must_use = "streams do nothing unless polled"]
    pub struct Collate<St: Stream<Item = Result<DecodedBatch>>> {
        #[pin]
        inner: InFlight<St, MakeCollate, CollateFuture>,
    }
}

impl<St: Stream<Item = Result<DecodedBatch>>> Collate<St> {
    pub(crate) fn new(stream: St, collator: Arc<HostCollator>) -> Self {
        let make: MakeCollate = Box::new(move |batch| match batch {
            Ok(batch) => Either::Left(collate_on_rayon(collator.clone(), batch)),
            Err(error) => Either::Right(future::ready(Err(error))),
        });
        // One batch at a time: collation already uses every core.
        Self {
            inner: InFlight::new(stream, 1, make),
        }
    }
}

impl<St: Stream<Item = Result<DecodedBatch>>> Stream for Collate<St> {
    type Item = Result<HostBatch>;

    fn poll_next(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        self.project().inner.poll_next(cx)
    }

    fn size_hint(&self) -> (usize, Option<usize>) {
        self.inner.size_hint()
    }
}

impl<St: Stream<Item = Result<DecodedBatch>>> FusedStream for Collate<St> {
    fn is_terminated(&self) -> bool {
        self.inner.is_terminated()
    }
}

/// Collates on rayon's pool, off the async runtime's threads.
pub fn collate_on_rayon(
    collator: Arc<HostCollator>,
    batch: DecodedBatch,
) -> BoxFuture<'static, Result<HostBatch>> {
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
                        message: panic_message(payload.as_ref()),
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

/// The text a panic was raised with.
fn panic_message(payload: &(dyn std::any::Any + Send)) -> String {
    match (
        payload.downcast_ref::<&str>(),
        payload.downcast_ref::<String>(),
    ) {
        (Some(text), _) => text.to_string(),
        (_, Some(text)) => text.clone(),
        _ => "(no message)".to_string(),
    }
}
