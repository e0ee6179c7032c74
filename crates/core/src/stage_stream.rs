//! The one stream type behind the batch-level stage adapters (`fetch_batches`,
//! `decode_batches`, `collate_batches`): each maps a batch to a boxed future and runs a few at
//! once, in order. The adapters are named aliases of it.

use std::pin::Pin;
use std::task::{Context, Poll};

use futures::future::BoxFuture;
use futures::stream::{FusedStream, Stream};

use crate::InFlight;

type MakeFuture<I, T> = Box<dyn FnMut(I) -> BoxFuture<'static, T> + Send>;

pin_project_lite::pin_project! {
    /// Runs up to `limit` batches of `St` through a stage at once, yielding them in order.
    #[must_use = "streams do nothing unless polled"]
    pub struct StageStream<St: Stream, T> {
        #[pin]
        inner: InFlight<St, MakeFuture<St::Item, T>, BoxFuture<'static, T>>,
    }
}

impl<St: Stream, T> StageStream<St, T> {
    /// `stage` turns each item into the future of its output; `limit` (at least 1) of them
    /// run at once.
    pub fn new(
        stream: St,
        limit: usize,
        stage: impl FnMut(St::Item) -> BoxFuture<'static, T> + Send + 'static,
    ) -> Self {
        Self {
            inner: InFlight::new(stream, limit, Box::new(stage)),
        }
    }

    /// The stream before this stage; batches in the stage are dropped.
    pub fn into_inner(self) -> St {
        self.inner.into_inner()
    }
}

impl<St: Stream, T> Stream for StageStream<St, T> {
    type Item = T;

    fn poll_next(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<T>> {
        self.project().inner.poll_next(cx)
    }

    fn size_hint(&self) -> (usize, Option<usize>) {
        self.inner.size_hint()
    }
}

impl<St: Stream, T> FusedStream for StageStream<St, T> {
    fn is_terminated(&self) -> bool {
        self.inner.is_terminated()
    }
}
