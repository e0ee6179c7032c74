//! The fetch stage at batch level: each batch's chunk requests become its encoded chunks.
//!
//! The batches being fetched share one queue of reads, served in order: every read of a batch
//! queues before any of the next batch's. The oldest batch is then complete first and goes on
//! to be decoded while the later ones are read. (Reading batches side by side, each with reads
//! of its own, finished them all at about the same time: W1 of 64 steps went from 15-18 GB/s to
//! 22 GB/s once one batch was read at a time, H100, 2026-11-25.)

use std::sync::Arc;

use futures::stream::Stream;
use futures::FutureExt;
use zarrpipe_core::{StageStream, Staged};

use crate::read_queue::ReadQueue;
use crate::{ChunkRequest, EncodedChunk, ReadMemory, Result};

/// Stream returned by [`FetchBatchesExt::fetch_batches`](crate::FetchBatchesExt::fetch_batches).
pub type FetchBatches<St, M> = StageStream<St, Result<Staged<M, Vec<EncodedChunk>>>>;

pub(crate) fn fetch_batches<St, M>(
    batches: St,
    batches_at_once: usize,
    reads: usize,
    memory: Option<Arc<dyn ReadMemory>>,
) -> FetchBatches<St, M>
where
    St: Stream<Item = Staged<M, Vec<ChunkRequest>>>,
    M: Send + 'static,
{
    // Started at the first batch, inside the runtime polling the stage.
    let mut queue: Option<ReadQueue> = None;
    // Memory slow to set aside is asked for once, when the first batch's size is known.
    let mut to_ask = memory.clone();
    StageStream::new(
        batches,
        batches_at_once,
        move |mut batch: Staged<M, Vec<ChunkRequest>>| {
            // Only reads of a local store land in it: over object storage, setting slow pinned
            // memory aside would hold up the decoder's own GPU calls for nothing.
            let reads_into = |request: &ChunkRequest| request.variable.reads_into_memory();
            if let Some(asked) = to_ask
                .take()
                .filter(|_| batch.payload.iter().any(reads_into))
            {
                let batch_bytes = batch.payload.iter().map(ChunkRequest::decoded_bytes).sum();
                asked.expect_batches(batch_bytes, batches_at_once);
            }
            tracing::debug!(target: "zarrpipe::timeline", "batch {} fetching", batch.index);
            // Every read of the batch queues now, before the next batch's (tests/cloud.rs
            // checks the order a server sees), and goes on while the chain is busy elsewhere.
            let queue = queue.get_or_insert_with(|| ReadQueue::start(reads));
            let fetches: Vec<_> = std::mem::take(&mut batch.payload)
                .into_iter()
                .map(|request| queue.read(request, memory.clone()))
                .collect();
            async move {
                let chunks = futures::future::try_join_all(fetches).await?;
                let mut batch = batch.with_payload(chunks);
                for chunk in &batch.payload {
                    batch.stats.chunks += 1;
                    batch.stats.missing_chunks += chunk.bytes.is_none() as u64;
                    batch.stats.stored_bytes += chunk.stored_len() as u64;
                    batch.stats.fetch_busy += chunk.fetch_time;
                }
                tracing::debug!(
                    target: "zarrpipe::timeline",
                    "batch {} fetched: {} chunks, {} stored bytes",
                    batch.index,
                    batch.stats.chunks,
                    batch.stats.stored_bytes
                );
                Ok(batch)
            }
            .boxed()
        },
    )
}
