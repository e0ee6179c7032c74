use std::sync::Arc;

use futures::channel::oneshot;
use futures::future::BoxFuture;
use zarrpipe_store::{EncodedChunk, ReusedReadMemory};

use crate::chunk_decode::decode_on_cpu;
use crate::{ChunkDecoder, DecodedChunk, Error, Result};

/// Decodes chunks on a rayon thread pool, one chunk per task, so the chunks of a batch
/// decode in parallel on every core: common chains with the codec libraries straight into
/// the memory they go to, the others with zarrs' codecs.
///
/// As a [`BatchDecoder`](crate::BatchDecoder) it hands a batch's chunks on undecoded
/// ([`DecodedChunks::Pending`](crate::DecodedChunks::Pending)), for the collator to have them
/// decoded into the batch's memory; [`decoding_at_once`](Self::decoding_at_once) makes it
/// decode each batch into chunks of their own instead.
#[derive(Clone, Debug)]
pub struct CpuDecoder {
    pool: Option<Arc<rayon::ThreadPool>>,
    at_once: bool,
    /// What a pipeline's local reads land in ([`BatchDecoder::read_memory`](crate::BatchDecoder::read_memory)):
    /// whole chunk files of a local store are read by the thread that decodes them, just
    /// before, unless batches decode at once.
    reads: Arc<ReusedReadMemory>,
}

impl Default for CpuDecoder {
    fn default() -> Self {
        Self {
            pool: None,
            at_once: false,
            reads: Arc::new(ReusedReadMemory::read_at_decode()),
        }
    }
}

impl CpuDecoder {
    /// Decodes on rayon's global pool (all cores).
    pub fn new() -> Self {
        Self::default()
    }

    /// Decodes on the given pool.
    pub fn with_pool(pool: Arc<rayon::ThreadPool>) -> Self {
        Self {
            pool: Some(pool),
            ..Self::default()
        }
    }

    /// The reused memory its pipeline's chunk reads land in.
    pub(crate) fn reads(&self) -> Arc<ReusedReadMemory> {
        self.reads.clone()
    }

    /// Has the fetch stage read every chunk ahead, as for other decoders, instead of the
    /// thread that decodes a whole chunk file of a local store reading it just before.
    pub fn reading_in_the_fetch_stage(mut self) -> Self {
        self.reads = Arc::new(ReusedReadMemory::new());
        self
    }

    /// Decodes each batch when it comes, into chunks of their own
    /// ([`DecodedChunks::Host`](crate::DecodedChunks::Host)), instead of where the collator
    /// places them: for a decoder whose time is measured where it decodes, or whose chunks
    /// are wanted as such.
    pub fn decoding_at_once(mut self) -> Self {
        self.at_once = true;
        // Chunks decoded at once go into memory of their own: read them ahead.
        self.reading_in_the_fetch_stage()
    }

    /// Whether batches decode when they come ([`decoding_at_once`](Self::decoding_at_once)).
    pub fn decodes_at_once(&self) -> bool {
        self.at_once
    }

    /// The threads chunks decode on: its pool's, or rayon's global pool's.
    pub fn threads(&self) -> usize {
        self.pool
            .as_ref()
            .map_or_else(rayon::current_num_threads, |pool| {
                pool.current_num_threads()
            })
    }

    /// Queues `task` on the decoder's pool behind the tasks queued before it (first in, first
    /// out, even from one of the pool's threads), so chunks decode in the order they came.
    pub(crate) fn spawn(&self, task: impl FnOnce() + Send + 'static) {
        match &self.pool {
            Some(pool) => pool.spawn_fifo(task),
            None => rayon::spawn_fifo(task),
        }
    }

    /// Runs `work` on the calling thread with a scope whose tasks go on the decoder's pool in
    /// the order they are spawned, behind the tasks queued before; returns once all are done.
    pub(crate) fn scope_fifo<'scope, R>(
        &self,
        work: impl FnOnce(&rayon::ScopeFifo<'scope>) -> R,
    ) -> R {
        match &self.pool {
            Some(pool) => pool.in_place_scope_fifo(work),
            None => rayon::in_place_scope_fifo(work),
        }
    }

    /// Runs `work` (parallel iterators) on the decoder's pool, blocking the caller.
    pub(crate) fn install<R: Send>(&self, work: impl FnOnce() -> R + Send) -> R {
        match &self.pool {
            Some(pool) => pool.install(work),
            None => work(),
        }
    }
}

impl ChunkDecoder for CpuDecoder {
    fn decode(&self, chunk: EncodedChunk) -> BoxFuture<'static, Result<DecodedChunk>> {
        let (sender, receiver) = oneshot::channel();
        let request = chunk.request.clone();
        self.spawn(move || {
            // Skip the work when the pipeline was dropped while the chunk waited in the queue.
            if sender.is_canceled() {
                return;
            }
            // The receiver is gone when the pipeline was dropped: nothing to deliver then.
            let _ = sender.send(decode_on_cpu(chunk));
        });
        Box::pin(async move {
            receiver.await.unwrap_or_else(|_| {
                Err(Error::WorkerGone {
                    variable: request.variable.name().into(),
                    key: request.key(),
                })
            })
        })
    }
}

#[cfg(test)]
mod tests {
    use std::sync::{mpsc, Arc, Mutex};

    use super::CpuDecoder;

    /// Tasks queued from one of the pool's own threads run in the order they were queued,
    /// not last first (rayon's `spawn` from a worker).
    #[test]
    fn tasks_run_in_the_order_they_were_queued() {
        let pool = rayon::ThreadPoolBuilder::new().num_threads(1).build();
        let decoder = CpuDecoder::with_pool(Arc::new(pool.unwrap()));
        let order = Arc::new(Mutex::new(Vec::new()));
        let (done, finished) = mpsc::channel();
        let queuing = decoder.clone();
        let (order_in, done_in) = (order.clone(), done.clone());
        decoder.spawn(move || {
            for task in 0..8 {
                let (order, done) = (order_in.clone(), done_in.clone());
                queuing.spawn(move || {
                    order.lock().unwrap().push(task);
                    done.send(()).unwrap();
                });
            }
        });
        for _ in 0..8 {
            finished.recv().unwrap();
        }
        assert_eq!(*order.lock().unwrap(), (0..8).collect::<Vec<_>>());
    }
}
