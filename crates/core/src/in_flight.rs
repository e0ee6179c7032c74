use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};

use futures::stream::{FusedStream, FuturesOrdered, Stream, StreamExt};

pin_project_lite::pin_project! {
    /// Maps each item of a stream to a future and runs up to `limit` of them at once, yielding
    /// their outputs in input order. The engine of the fetch and decode adapters: they differ
    /// only in the future they make per item.
    #[must_use = "streams do nothing unless polled"]
    pub struct InFlight<St: Stream, F, Fut: Future> {
        #[pin]
        stream: St,
        make: F,
        running: FuturesOrdered<Fut>,
        limit: usize,
        stream_done: bool,
    }
}

impl<St, F, Fut> InFlight<St, F, Fut>
where
    St: Stream,
    F: FnMut(St::Item) -> Fut,
    Fut: Future,
{
    /// `limit` of zero is taken as one.
    pub fn new(stream: St, limit: usize, make: F) -> Self {
        Self {
            stream,
            make,
            running: FuturesOrdered::new(),
            limit: limit.max(1),
            stream_done: false,
        }
    }

    /// The wrapped stream; futures still running are dropped.
    pub fn into_inner(self) -> St {
        self.stream
    }
}

impl<St, F, Fut> Stream for InFlight<St, F, Fut>
where
    St: Stream,
    F: FnMut(St::Item) -> Fut,
    Fut: Future,
{
    type Item = Fut::Output;

    fn poll_next(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        let mut this = self.project();
        while !*this.stream_done && this.running.len() < *this.limit {
            match this.stream.as_mut().poll_next(cx) {
                Poll::Ready(Some(item)) => this.running.push_back((this.make)(item)),
                Poll::Ready(None) => *this.stream_done = true,
                Poll::Pending => break,
            }
        }
        match this.running.poll_next_unpin(cx) {
            Poll::Ready(None) if !*this.stream_done => Poll::Pending,
            other => other,
        }
    }

    fn size_hint(&self) -> (usize, Option<usize>) {
        let running = self.running.len();
        if self.stream_done {
            return (running, Some(running));
        }
        let (lower, upper) = self.stream.size_hint();
        (
            lower.saturating_add(running),
            upper.and_then(|upper| upper.checked_add(running)),
        )
    }
}

impl<St, F, Fut> FusedStream for InFlight<St, F, Fut>
where
    St: Stream,
    F: FnMut(St::Item) -> Fut,
    Fut: Future,
{
    fn is_terminated(&self) -> bool {
        self.stream_done && self.running.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use futures::executor::block_on;
    use futures::stream;
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::sync::Arc;

    /// Returns Pending once, waking itself so the executor polls again.
    async fn yield_now() {
        let mut yielded = false;
        futures::future::poll_fn(|cx| {
            if yielded {
                return std::task::Poll::Ready(());
            }
            yielded = true;
            cx.waker().wake_by_ref();
            std::task::Poll::Pending
        })
        .await
    }

    #[test]
    fn keeps_order_and_bounds_concurrency() {
        let running = Arc::new(AtomicUsize::new(0));
        let peak = Arc::new(AtomicUsize::new(0));
        let outputs: Vec<u32> = block_on(
            InFlight::new(stream::iter(0..20u32), 3, |i| {
                let (running, peak) = (running.clone(), peak.clone());
                async move {
                    let now = running.fetch_add(1, Ordering::SeqCst) + 1;
                    peak.fetch_max(now, Ordering::SeqCst);
                    // Yield once so several futures are live together.
                    yield_now().await;
                    running.fetch_sub(1, Ordering::SeqCst);
                    i * 2
                }
            })
            .collect(),
        );
        assert_eq!(outputs, (0..20).map(|i| i * 2).collect::<Vec<_>>());
        assert_eq!(peak.load(Ordering::SeqCst), 3);
    }
}
