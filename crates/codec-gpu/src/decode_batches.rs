//! The decode stage at batch level: each batch's encoded chunks become decoded chunks, on
//! whichever side the [`BatchDecoder`] decodes.

use std::sync::Arc;

use futures::stream::Stream;
use futures::FutureExt;
use zarrpipe_core::{StageStream, Staged};
use zarrpipe_store::EncodedChunk;

use crate::{BatchDecoder, DecodedChunks, Error, Result};

/// Stream returned by [`DecodeBatchesExt::decode_batches`](crate::DecodeBatchesExt::decode_batches).
pub type DecodeBatches<St, M> = StageStream<St, Result<Staged<M, DecodedChunks>>>;

pub(crate) fn decode_batches<St, M, E>(
    batches: St,
    decoder: Arc<dyn BatchDecoder>,
) -> DecodeBatches<St, M>
where
    St: Stream<Item = std::result::Result<Staged<M, Vec<EncodedChunk>>, E>>,
    M: Send + 'static,
    E: Into<Error> + Send + 'static,
{
    let limit = decoder.batches_in_flight();
    let pace = decoder.consumer_pace();
    StageStream::new(batches, limit, move |batch| {
        // The decoder is called here, as batches come, in order: a GPU decoder admits batches
        // to its memory budget in the order it was called.
        let started = batch.map_err(Into::into).map(|mut batch| {
            if pace.is_some() {
                batch.pace = pace.clone();
            }
            let chunks = std::mem::take(&mut batch.payload);
            tracing::debug!(target: "zarrpipe::timeline", "batch {} decoding", batch.index);
            let decoding = decoder.clone().decode_chunks(chunks);
            (batch, decoding)
        });
        async move {
            let (batch, decoding) = started?;
            let decoded = decoding.await?;
            tracing::debug!(target: "zarrpipe::timeline", "batch {} decoded", batch.index);
            let mut batch = batch.with_payload(decoded);
            batch.stats += batch.payload.stats();
            Ok(batch)
        }
        .boxed()
    })
}
