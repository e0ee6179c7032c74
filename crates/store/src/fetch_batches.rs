//! The fetch stage at batch level: each batch's chunk requests become its encoded chunks.

use futures::stream::{self, Stream, TryStreamExt};
use futures::FutureExt;
use zarrpipe_core::{StageStream, Staged};

use crate::{ChunkRequest, EncodedChunk, FetchExt, Result};

/// Stream returned by [`FetchBatchesExt::fetch_batches`](crate::FetchBatchesExt::fetch_batches).
pub type FetchBatches<St, M> = StageStream<St, Result<Staged<M, Vec<EncodedChunk>>>>;

pub(crate) fn fetch_batches<St, M>(
    batches: St,
    batches_at_once: usize,
    reads_per_batch: usize,
) -> FetchBatches<St, M>
where
    St: Stream<Item = Staged<M, Vec<ChunkRequest>>>,
    M: Send + 'static,
{
    StageStream::new(
        batches,
        batches_at_once,
        move |mut batch: Staged<M, Vec<ChunkRequest>>| {
            async move {
                let requests = std::mem::take(&mut batch.payload);
                let chunks: Vec<EncodedChunk> = stream::iter(requests)
                    .fetch(reads_per_batch)
                    .try_collect()
                    .await?;
                let mut batch = batch.with_payload(chunks);
                for chunk in &batch.payload {
                    batch.stats.chunks += 1;
                    batch.stats.missing_chunks += chunk.bytes.is_none() as u64;
                    batch.stats.stored_bytes += chunk.stored_len() as u64;
                    batch.stats.fetch_busy += chunk.fetch_time;
                }
                Ok(batch)
            }
            .boxed()
        },
    )
}
