use std::borrow::Cow;
use std::sync::Arc;
use std::time::Instant;

use futures::channel::oneshot;
use futures::future::BoxFuture;
use zarrpipe_store::EncodedChunk;
use zarrs::array::{ArrayBytes, ArrayToBytesCodecTraits, CodecOptions};

use crate::chain::GpuChain;
use crate::direct::DirectChain;
use crate::{ChunkDecoder, DecodedChunk, Error, Result};

/// Decodes chunks on a rayon thread pool, one chunk per task, so the chunks of a batch
/// decode in parallel on every core: common chains with the codec libraries straight into
/// the memory they go to, the others with zarrs' codecs.
///
/// As a [`BatchDecoder`](crate::BatchDecoder) it hands a batch's chunks on undecoded
/// ([`DecodedChunks::Pending`](crate::DecodedChunks::Pending)), for the collator to have them
/// decoded into the batch's memory; [`decoding_at_once`](Self::decoding_at_once) makes it
/// decode each batch into chunks of their own instead.
#[derive(Clone, Debug, Default)]
pub struct CpuDecoder {
    pool: Option<Arc<rayon::ThreadPool>>,
    at_once: bool,
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
            at_once: false,
        }
    }

    /// Decodes each batch when it comes, into chunks of their own
    /// ([`DecodedChunks::Host`](crate::DecodedChunks::Host)), instead of where the collator
    /// places them: for a decoder whose time is measured where it decodes, or whose chunks
    /// are wanted as such.
    pub fn decoding_at_once(mut self) -> Self {
        self.at_once = true;
        self
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

    pub(crate) fn spawn(&self, task: impl FnOnce() + Send + 'static) {
        match &self.pool {
            Some(pool) => pool.spawn(task),
            None => rayon::spawn(task),
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

/// Decodes one chunk on the calling thread; a missing chunk becomes the fill value. A panic
/// while decoding (corrupt bytes can reach a codec's unchecked arithmetic) is caught here and
/// becomes [`Error::Panicked`] naming the chunk: rayon aborts the process on a panic in a
/// spawned task, and this runs in one.
pub fn decode_on_cpu(chunk: EncodedChunk) -> Result<DecodedChunk> {
    let request = chunk.request.clone();
    std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| decode_unguarded(chunk)))
        .unwrap_or_else(|payload| {
            Err(Error::Panicked {
                variable: request.variable.name().to_string(),
                key: request.key(),
                message: panic_message(payload.as_ref()),
            })
        })
}

/// The text a panic was raised with.
pub(crate) fn panic_message(payload: &(dyn std::any::Any + Send)) -> String {
    match (
        payload.downcast_ref::<&str>(),
        payload.downcast_ref::<String>(),
    ) {
        (Some(text), _) => text.to_string(),
        (_, Some(text)) => text.clone(),
        _ => "(no message)".to_string(),
    }
}

/// Checks the frames of a chunk's stored bytes as the GPU path does (headers, declared sizes,
/// shard indexes; not zstd's entropy tables) before zarrs decodes them: zarrs' zstd codec
/// allocates whatever size a frame header declares, and a failed allocation aborts the
/// process, which no panic handler catches. `chain` is the chunk's chain as the GPU path
/// reads it; chains it cannot plan (`None`) are not checked.
fn check_frames(chunk: &EncodedChunk, chain: Option<&GpuChain>) -> Result<()> {
    let (Some(_), Some(chain)) = (&chunk.bytes, chain) else {
        return Ok(());
    };
    let mut plan = crate::plan::BatchPlan::default();
    let planned = crate::frames::with_table_checks(false, || {
        crate::batch::plan_chunk(&mut plan, 0, chunk, chain)
    });
    match planned {
        Ok(_) | Err(crate::FrameError::NeedsCpu(_)) => Ok(()),
        Err(source) => Err(Error::Frame {
            variable: chunk.request.variable.name().to_string(),
            key: chunk.request.key(),
            source,
        }),
    }
}

fn decode_unguarded(chunk: EncodedChunk) -> Result<DecodedChunk> {
    // Read once: it tells both whether the chain decodes directly and how to check frames.
    let variable = &chunk.request.variable;
    let chain = GpuChain::of(variable).ok();
    let direct = chain
        .as_ref()
        .and_then(|chain| DirectChain::of(chain, variable.dtype().size()));
    if let Some(direct) = direct {
        return decode_direct(chunk, direct);
    }
    check_frames(&chunk, chain.as_ref())?;
    let started = Instant::now();
    let EncodedChunk {
        request,
        bytes,
        fetch_time,
    } = chunk;
    let variable = &request.variable;
    let array = variable.array();
    let decode_error = |source| Error::Decode {
        variable: variable.name().to_string(),
        key: request.key(),
        source,
    };
    let shape = array.chunk_shape(&request.indices).map_err(|_| {
        Error::Store(zarrpipe_store::Error::ChunkOutOfGrid {
            variable: variable.name().to_string(),
            indices: request.indices.clone(),
            grid: variable.chunk_grid_shape().to_vec(),
        })
    })?;
    let elements: u64 = shape.iter().map(|n| n.get()).product();
    let expected = elements as usize * variable.dtype().size();
    let stored_len = bytes.as_ref().map_or(0, |bytes| bytes.len());
    let decoded = match &bytes {
        Some(bytes) => array
            .codecs()
            .decode(
                Cow::Borrowed(bytes),
                &shape,
                array.data_type(),
                array.fill_value(),
                &CodecOptions::default(),
            )
            .map_err(decode_error)?,
        None => ArrayBytes::new_fill_value(array.data_type(), elements, array.fill_value())
            .map_err(|error| decode_error(error.into()))?,
    };
    let decoded = decoded
        .into_fixed()
        .map_err(|error| decode_error(error.into()))?;
    if decoded.len() != expected {
        return Err(Error::DecodedSize {
            variable: variable.name().to_string(),
            key: request.key(),
            expected,
            actual: decoded.len(),
        });
    }
    Ok(DecodedChunk {
        bytes: decoded.into_owned(),
        stored_len,
        missing: bytes.is_none(),
        request,
        fetch_time,
        decode_time: started.elapsed(),
    })
}

/// `variable`'s chain, if the codec libraries decode it straight into a given buffer.
pub(crate) fn direct_chain(variable: &zarrpipe_store::Variable) -> Option<DirectChain> {
    let chain = GpuChain::of(variable).ok()?;
    DirectChain::of(&chain, variable.dtype().size())
}

/// Decodes a chunk of a [`DirectChain`] into a buffer of its own. The codec writes at most
/// the chunk's size, whatever a frame header declares, so no frame check is needed first.
fn decode_direct(chunk: EncodedChunk, chain: DirectChain) -> Result<DecodedChunk> {
    let started = Instant::now();
    let mut bytes = vec![0; chunk.request.variable.decoded_chunk_bytes() as usize];
    crate::placement::write_chunk(&chunk, chain, &mut bytes)?;
    Ok(DecodedChunk {
        bytes,
        stored_len: chunk.stored_len(),
        missing: chunk.bytes.is_none(),
        request: chunk.request,
        fetch_time: chunk.fetch_time,
        decode_time: started.elapsed(),
    })
}
