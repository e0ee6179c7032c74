use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Instant;

use futures::future::BoxFuture;
use futures::stream::{FusedStream, Stream};
use object_store::path::Path;
use object_store::ObjectStoreExt;
use zarrpipe_core::InFlight;

use crate::{ChunkRequest, EncodedChunk, Error, Result};

type FetchFuture = BoxFuture<'static, Result<EncodedChunk>>;
type MakeFetch = fn(ChunkRequest) -> FetchFuture;

pin_project_lite::pin_project! {
    /// Stream returned by [`FetchExt::fetch`](crate::FetchExt::fetch).
    #[must_use = "streams do nothing unless polled"]
    pub struct Fetch<St: Stream<Item = ChunkRequest>> {
        #[pin]
        inner: InFlight<St, MakeFetch, FetchFuture>,
    }
}

impl<St: Stream<Item = ChunkRequest>> Fetch<St> {
    pub(crate) fn new(stream: St, concurrency: usize) -> Self {
        Self {
            inner: InFlight::new(stream, concurrency, |request| {
                Box::pin(fetch_chunk(request))
            }),
        }
    }

    /// The stream of requests; fetches in flight are dropped.
    pub fn into_inner(self) -> St {
        self.inner.into_inner()
    }
}

impl<St: Stream<Item = ChunkRequest>> Stream for Fetch<St> {
    type Item = Result<EncodedChunk>;

    fn poll_next(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        self.project().inner.poll_next(cx)
    }

    fn size_hint(&self) -> (usize, Option<usize>) {
        self.inner.size_hint()
    }
}

impl<St: Stream<Item = ChunkRequest>> FusedStream for Fetch<St> {
    fn is_terminated(&self) -> bool {
        self.inner.is_terminated()
    }
}

/// Reads one chunk's stored bytes; a chunk that is not in the store is `bytes: None`.
pub async fn fetch_chunk(request: ChunkRequest) -> Result<EncodedChunk> {
    let started = Instant::now();
    request.variable.check_chunk(&request.indices)?;
    let key = request.key();
    let store = request.variable.store();
    let fetch_error = |source| Error::Fetch {
        variable: request.variable.name().to_string(),
        key: key.clone(),
        source,
    };
    let bytes = match store.get(&Path::from(key.as_str())).await {
        Ok(result) => Some(result.bytes().await.map_err(fetch_error)?),
        Err(object_store::Error::NotFound { .. }) => None,
        Err(source) => return Err(fetch_error(source)),
    };
    Ok(EncodedChunk {
        request,
        bytes,
        fetch_time: started.elapsed(),
    })
}
