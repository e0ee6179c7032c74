//! The prefetch stage: a chain runs on its own Tokio task, up to `n` items ahead of its
//! consumer, so the stages work while the consumer trains.

use std::pin::Pin;
use std::task::{Context, Poll};

use futures::stream::{FusedStream, Stream, StreamExt};
use tokio::sync::mpsc;
use tokio::task::JoinHandle;

/// Stream returned by [`PipelineExt::prefetch`](crate::PipelineExt::prefetch). Dropping it
/// stops the task, and with it every stage of the chain.
#[must_use = "streams do nothing unless polled"]
pub struct Prefetch<St: Stream> {
    state: State<St>,
    ahead: usize,
}

enum State<St: Stream> {
    /// Not polled yet: the task starts on the first poll, on the runtime polling it.
    Idle(Pin<Box<St>>),
    Running {
        items: mpsc::Receiver<St::Item>,
        _task: AbortOnDrop,
    },
    Done,
}

/// Aborts the task when dropped.
struct AbortOnDrop(JoinHandle<()>);

impl Drop for AbortOnDrop {
    fn drop(&mut self) {
        self.0.abort();
    }
}

impl<St: Stream> Prefetch<St> {
    pub(crate) fn new(stream: St, ahead: usize) -> Self {
        Self {
            state: State::Idle(Box::pin(stream)),
            ahead: ahead.max(1),
        }
    }
}

impl<St> Stream for Prefetch<St>
where
    St: Stream + Send + 'static,
    St::Item: Send,
{
    type Item = St::Item;

    /// Must be polled inside a Tokio runtime (the chain runs as a task there).
    fn poll_next(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<St::Item>> {
        let ahead = self.ahead;
        if let State::Idle(_) = self.state {
            let State::Idle(mut stream) = std::mem::replace(&mut self.state, State::Done) else {
                unreachable!("checked above")
            };
            let (sender, items) = mpsc::channel(ahead);
            let task = tokio::spawn(async move {
                while let Some(item) = stream.next().await {
                    if sender.send(item).await.is_err() {
                        return; // the consumer is gone
                    }
                }
            });
            self.state = State::Running {
                items,
                _task: AbortOnDrop(task),
            };
        }
        let State::Running { items, .. } = &mut self.state else {
            return Poll::Ready(None);
        };
        let polled = items.poll_recv(cx);
        if let Poll::Ready(None) = polled {
            self.state = State::Done;
        }
        polled
    }
}

impl<St> FusedStream for Prefetch<St>
where
    St: Stream + Send + 'static,
    St::Item: Send,
{
    fn is_terminated(&self) -> bool {
        matches!(self.state, State::Done)
    }
}
