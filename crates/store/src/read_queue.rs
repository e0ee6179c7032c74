//! The fetch stage's reads: queued by the batches in their order, started by a task of their
//! own as read slots free up, each read on a task of its own. The chain of stages runs as one
//! task, and a read polled only with it stalls whenever a later stage holds its batches or the
//! consumer's queue is full: an object store's response is read only as it is polled.

use std::future::Future;
use std::sync::Arc;

use tokio::sync::{mpsc, oneshot, Semaphore};

use crate::{fetch_chunk_into, ChunkRequest, EncodedChunk, Error, ReadMemory, Result};

/// Reads served in the order they were queued, a few at once.
#[derive(Debug)]
pub(crate) struct ReadQueue {
    queued: mpsc::UnboundedSender<QueuedRead>,
}

struct QueuedRead {
    request: ChunkRequest,
    memory: Option<Arc<dyn ReadMemory>>,
    reply: oneshot::Sender<Result<EncodedChunk>>,
}

impl ReadQueue {
    /// Starts serving reads, `reads` at once; it stops once the queue is dropped. Must be
    /// called inside a Tokio runtime.
    pub(crate) fn start(reads: usize) -> Self {
        let (queued, mut waiting) = mpsc::unbounded_channel::<QueuedRead>();
        // Tokio's semaphore is fair: reads start in the order they queued.
        let slots = Arc::new(Semaphore::new(reads.max(1)));
        tokio::spawn(async move {
            while let Some(read) = waiting.recv().await {
                let slot = slots.clone().acquire_owned().await.expect("never closed");
                // A dropped batch's reads are not started.
                if read.reply.is_closed() {
                    continue;
                }
                tokio::spawn(async move {
                    let _slot = slot;
                    let QueuedRead {
                        request,
                        memory,
                        mut reply,
                    } = read;
                    tokio::select! {
                        chunk = fetch_chunk_into(request, memory) => {
                            let _ = reply.send(chunk);
                        }
                        // Nobody waits for it any more: the read stops.
                        () = reply.closed() => {}
                    }
                });
            }
        });
        Self { queued }
    }

    /// Queues a read of `request` (into `memory`, when given) behind those queued before;
    /// returns its chunk once read.
    pub(crate) fn read(
        &self,
        request: ChunkRequest,
        memory: Option<Arc<dyn ReadMemory>>,
    ) -> impl Future<Output = Result<EncodedChunk>> + Send + 'static {
        let (reply, chunk) = oneshot::channel();
        // What names the chunk should its read stop; the strings are made only then.
        let (variable, indices) = (request.variable.clone(), request.indices.clone());
        let stopped = move |reason: &str| Error::ReadStopped {
            url: variable.url().to_string(),
            variable: variable.name().to_string(),
            key: variable.chunk_key(&indices),
            reason: reason.to_string(),
        };
        let sent = self.queued.send(QueuedRead {
            request,
            memory,
            reply,
        });
        async move {
            match (sent, chunk.await) {
                (Ok(()), Ok(chunk)) => chunk,
                // The read's task panicked, or the runtime is shutting down.
                (Ok(()), Err(_)) => Err(stopped("its task ended without an answer")),
                (Err(_), _) => Err(stopped("the fetch stage's reads have stopped")),
            }
        }
    }
}
