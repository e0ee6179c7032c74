use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use futures::future::{self, BoxFuture, Either, Ready};
use futures::stream::{FusedStream, Stream};
use zarrpipe_core::InFlight;
use zarrpipe_store::EncodedChunk;

use crate::{ChunkDecoder, DecodedChunk, Result};

type DecodeFuture = Either<BoxFuture<'static, Result<DecodedChunk>>, Ready<Result<DecodedChunk>>>;
type MakeDecode = Box<dyn FnMut(zarrpipe_store::Result<EncodedChunk>) -> DecodeFuture + Send>;

pin_project_lite::pin_project! {
    /// Stream returned by [`DecodeExt::decode`](crate::DecodeExt::decode).
    #[must_use = "streams do nothing unless polled"]
    pub struct Decode<St: Stream<Item = zarrpipe_store::Result<EncodedChunk>>> {
        #[pin]
        inner: InFlight<St, MakeDecode, DecodeFuture>,
    }
}

impl<St: Stream<Item = zarrpipe_store::Result<EncodedChunk>>> Decode<St> {
    pub(crate) fn new(stream: St, decoder: Arc<dyn ChunkDecoder>, concurrency: usize) -> Self {
        let make: MakeDecode = Box::new(move |chunk| match chunk {
            Ok(chunk) => Either::Left(decoder.decode(chunk)),
            // A fetch error passes through in its place, with its context.
            Err(error) => Either::Right(future::ready(Err(error.into()))),
        });
        Self {
            inner: InFlight::new(stream, concurrency, make),
        }
    }

    /// The stream of encoded chunks; decodes in flight are dropped.
    pub fn into_inner(self) -> St {
        self.inner.into_inner()
    }
}

impl<St: Stream<Item = zarrpipe_store::Result<EncodedChunk>>> Stream for Decode<St> {
    type Item = Result<DecodedChunk>;

    fn poll_next(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        self.project().inner.poll_next(cx)
    }

    fn size_hint(&self) -> (usize, Option<usize>) {
        self.inner.size_hint()
    }
}

impl<St: Stream<Item = zarrpipe_store::Result<EncodedChunk>>> FusedStream for Decode<St> {
    fn is_terminated(&self) -> bool {
        self.inner.is_terminated()
    }
}
