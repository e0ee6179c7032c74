use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Instant;

use futures::future::BoxFuture;
use futures::stream::{FusedStream, Stream};
use std::ops::Range;
use std::sync::Arc;

use bytes::Bytes;
use object_store::GetRange;
use zarrpipe_core::InFlight;

use crate::io::GetFailure;
use crate::local_read::Probe;
use crate::ranges::{merge_ranges, ShardLayout};
use crate::read_at_decode::ChunkFile;
use crate::{ChunkRequest, EncodedChunk, Error, ReadMemory, Result};

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
///
/// A request for some inner chunks of a shard reads the shard's index (once per shard; it is
/// cached) and then only those inner chunks, adjacent ones in one request, and hands back a
/// compact shard holding just them.
pub async fn fetch_chunk(request: ChunkRequest) -> Result<EncodedChunk> {
    fetch_chunk_into(request, None).await
}

/// Like [`fetch_chunk`], reading a whole chunk of a local store into a buffer of `memory`
/// (when it has one to give). Inner chunks of a shard are assembled into a compact shard in
/// ordinary memory, so they are read as usual.
pub async fn fetch_chunk_into(
    request: ChunkRequest,
    memory: Option<Arc<dyn ReadMemory>>,
) -> Result<EncodedChunk> {
    let started = Instant::now();
    request.variable.check_chunk(&request.indices)?;
    let key = request.key();
    let bytes = match (&request.inner, request.variable.sharding()) {
        (Some(inner), Some(sharding)) if (inner.len() as u64) < sharding.inner_count() => {
            fetch_inner(&request, &key, sharding, inner).await?
        }
        _ => {
            let file = memory
                .as_ref()
                .filter(|memory| memory.reads_at_decode())
                .and_then(|_| ChunkFile::of(request.variable.io(), &key));
            if let Some(file) = file {
                let looked_at = file.clone();
                let probe = tokio::task::spawn_blocking(move || looked_at.probe()).await;
                match probe {
                    Ok(Probe::File) => return Ok(EncodedChunk::read_at_decode(request, file)),
                    Ok(Probe::Missing) => {
                        return Ok(EncodedChunk::new(request, None, started.elapsed()))
                    }
                    // Read as usual, which gives its answer or its error.
                    Ok(Probe::Other) | Err(_) => {}
                }
            }
            let bytes = get(&request, &key, None, memory.as_ref()).await?;
            let io = request.variable.io();
            io.add_needed(bytes.as_ref().map_or(0, |b| b.len() as u64));
            bytes
        }
    };
    Ok(EncodedChunk::new(request, bytes, started.elapsed()))
}

/// One read with the variable's context on failure.
async fn get(
    request: &ChunkRequest,
    key: &str,
    range: Option<GetRange>,
    memory: Option<&Arc<dyn ReadMemory>>,
) -> Result<Option<Bytes>> {
    let io = request.variable.io();
    io.get_into(key, range, memory)
        .await
        .map_err(|failure| match failure {
            GetFailure::Store(source) => Error::Fetch {
                url: io.url.clone(),
                variable: request.variable.name().to_string(),
                key: key.to_string(),
                source,
            },
            GetFailure::Timeout(after) => Error::FetchTimeout {
                url: io.url.clone(),
                variable: request.variable.name().to_string(),
                key: key.to_string(),
                after,
            },
        })
}

async fn fetch_inner(
    request: &ChunkRequest,
    key: &str,
    sharding: &ShardLayout,
    inner: &[u64],
) -> Result<Option<Bytes>> {
    let io = request.variable.io();
    let shard_error = |source| Error::ShardIndex {
        url: io.url.clone(),
        variable: request.variable.name().to_string(),
        key: key.to_string(),
        source,
    };
    let cell = io.index_cell(key);
    let index = cell
        .get_or_try_init(|| async {
            let Some(encoded) = get(request, key, Some(sharding.index_range()), None).await? else {
                return Ok(None);
            };
            let index = sharding.decode_index(&encoded).map_err(shard_error)?;
            Ok::<_, Error>(Some(Arc::new(index)))
        })
        .await?
        .clone();
    // No shard: every inner chunk is the fill value.
    let Some(index) = index else {
        return Ok(None);
    };
    let wanted: Vec<(u64, Range<u64>)> = inner
        .iter()
        .filter_map(|&number| {
            let (offset, length) = (*index.get(number as usize)?)?;
            Some((number, offset..offset + length))
        })
        .collect();
    io.add_needed(
        wanted
            .iter()
            .map(|(_, range)| range.end - range.start)
            .fold(0u64, u64::saturating_add),
    );
    let merged = merge_ranges(
        wanted.iter().map(|(_, range)| range.clone()).collect(),
        io.options.merge_gap,
    );
    let reads = merged.iter().map(|range| async move {
        let bytes = get(request, key, Some(GetRange::Bounded(range.clone())), None).await?;
        Ok::<_, Error>((range.start, bytes.unwrap_or_default()))
    });
    let fetched = futures::future::try_join_all(reads).await?;
    let mut pieces = Vec::with_capacity(wanted.len());
    for (number, range) in wanted {
        let (start, bytes) = fetched
            .iter()
            .rev()
            .find(|(start, _)| *start <= range.start)
            .expect("every wanted range lies in a merged range");
        let (from, to) = ((range.start - start) as usize, (range.end - start) as usize);
        let piece = bytes.get(from..to).ok_or_else(|| {
            shard_error(zarrs::array::CodecError::Other(format!(
                "inner chunk {number} at bytes {range:?} lies past the end of the shard"
            )))
        })?;
        pieces.push((number, bytes.slice_ref(piece)));
    }
    if pieces.is_empty() {
        return Ok(None);
    }
    let shard = sharding.assemble(&pieces).map_err(shard_error)?;
    Ok(Some(Bytes::from(shard)))
}
