//! Decoding into the collator's memory. The collator owns a batch's memory and plans the
//! batch first; a CPU decoder hands its chunks on undecoded ([`DecodedChunks::Pending`]) and
//! the collator has them decoded where they go ([`PendingChunks::decode_into`]): a chunk
//! that lies in the batch whole and as stored is decoded into the decoding thread's scratch
//! memory and streamed into its place whole where that is faster (compressed chunks of 1 KiB
//! to 8 MiB: `DirectChain::decodes_faster_through_scratch`), straight into its place
//! otherwise; any other chunk into the thread's scratch memory and copied into place once (cut
//! to its windows, CF-decoded, converted).
//!
//! [`DecodedChunks::Pending`]: crate::DecodedChunks::Pending

use std::cell::RefCell;
use std::collections::HashMap;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::Duration;

use futures::future::BoxFuture;
use rayon::prelude::*;
use zarrpipe_core::streaming_stores::{copy_streaming, store_fence, LEAST_STREAMED_BYTES};
use zarrpipe_core::BatchStats;
use zarrpipe_store::{ChunkRequest, EncodedChunk, Variable};

use crate::chunk_decode::{decode_on_cpu, direct_decoder, write_chunk, DirectDecoder};
use crate::decode_clock::DecodeClock;
use crate::{ChunkDecoder, CpuDecoder, DecodedChunk, Error, Result};

/// Where the chunks of a batch go, as the collator planned them.
pub trait ChunkPlacement: Sync {
    /// Memory that chunk `index` (of `len` decoded bytes) is decoded into as it is: its place
    /// in the batch, when the batch holds the whole chunk in one run and in its stored type.
    /// Asked at most once per chunk; `None`: the chunk goes through [`put`](Self::put).
    // Mutable from shared: chunks decode on many threads at once, each into its own place,
    // and each place is handed out once (implementations keep them behind a lock or disjoint).
    #[allow(clippy::mut_from_ref)]
    fn whole(&self, index: usize, len: usize) -> Option<&mut [u8]>;

    /// Copies chunk `index`'s decoded bytes into place. Called at most once per chunk, from
    /// any thread, at once for different chunks.
    fn put(&self, index: usize, decoded: &[u8]);

    /// Every chunk is queued on the decoder's threads, behind those queued before: a later
    /// batch's chunks queued from now on decode after them, on threads this batch's last
    /// chunks leave idle.
    fn all_queued(&self) {}
}

/// The lock of a batch's outcome; a panic while holding it (none is expected: chunks' panics
/// are caught first) leaves the outcome as it was.
fn lock<T>(outcome: &Mutex<T>) -> MutexGuard<'_, T> {
    outcome.lock().unwrap_or_else(PoisonError::into_inner)
}

/// A batch's chunks, read but not yet decoded: the CPU decoder that will decode them does so
/// into the memory the collator places them in.
pub struct PendingChunks {
    chunks: Vec<EncodedChunk>,
    decoder: CpuDecoder,
    watch: Option<Box<dyn DecodeWatch>>,
}

impl std::fmt::Debug for PendingChunks {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PendingChunks")
            .field("chunks", &self.chunks.len())
            .field("decoder", &self.decoder)
            .field("watched", &self.watch.is_some())
            .finish()
    }
}

/// Told when pending chunks begin and end decoding, wherever the collator has them decoded:
/// a split decoder learns its CPU side's rate from it. Dropped without `ended`, the decoding
/// failed or never happened.
pub(crate) trait DecodeWatch: Send + Sync {
    /// Decoding begins, on the decoder's threads (from [`PendingChunks::decode`]: the chunks
    /// are queued there).
    fn begun(&mut self);
    /// Decoding ended: what it cost.
    fn ended(self: Box<Self>, spent: &BatchStats);
}

/// The largest chunk decoded through the thread's scratch memory rather than straight into its
/// place: the gain is the scratch memory staying in the cache (measured up to W1's 3.3 MB
/// chunks), and each thread keeps the largest scratch memory it used.
const MOST_THROUGH_SCRATCH_BYTES: usize = 8 << 20;

/// The most a decoding thread keeps for the chunk files it reads: on many threads, each
/// keeping the largest shard it read would hold that many shards.
const KEPT_READ_BYTES: usize = 64 << 20;

thread_local! {
    /// Each decoding thread's memory for chunks that are not decoded in place.
    static SCRATCH: RefCell<Vec<u8>> = const { RefCell::new(Vec::new()) };
    /// Each decoding thread's memory for the chunk files it reads just before decoding them.
    static READS: RefCell<Vec<u8>> = const { RefCell::new(Vec::new()) };
}

impl PendingChunks {
    pub(crate) fn new(chunks: Vec<EncodedChunk>, decoder: CpuDecoder) -> Self {
        Self {
            chunks,
            decoder,
            watch: None,
        }
    }

    /// The same chunks, `watch` told when they begin and end decoding.
    pub(crate) fn watched(mut self, watch: Box<dyn DecodeWatch>) -> Self {
        self.watch = Some(watch);
        self
    }

    /// The chunks, in the batch's order.
    pub fn chunks(&self) -> &[EncodedChunk] {
        &self.chunks
    }

    /// The chunks' requests, in the batch's order.
    pub fn requests(&self) -> Vec<&ChunkRequest> {
        self.chunks.iter().map(|chunk| &chunk.request).collect()
    }

    /// Bytes chunk `index` decodes to (its full chunk shape, as the decoder writes it).
    pub fn decoded_len(&self, index: usize) -> usize {
        decoded_len(&self.chunks[index].request.variable)
    }

    /// Decodes every chunk on the decoder's threads into the memory `placement` gives it, and
    /// returns when all are done with what decoding cost. A chunk that fails fails the batch,
    /// naming the chunk; the chunks not begun by then are skipped.
    ///
    /// Each chunk is a task of its own, queued behind the chunks queued before it (those of
    /// an earlier batch): threads that free up as this batch's last chunks end take the next
    /// batch's first, once `placement` has let it be queued ([`ChunkPlacement::all_queued`]).
    pub fn decode_into(mut self, placement: &dyn ChunkPlacement) -> Result<BatchStats> {
        let watch = self.watch.take();
        let decoders = direct_decoders(&self.chunks);
        // While a shard decodes on several threads, a waiting thread may take on another
        // chunk, which finds the thread's scratch memory in use and makes its own. So a shard
        // decoded into scratch memory decodes on several threads only where the batch has
        // fewer chunks than threads (which would idle otherwise): at most that many shards'
        // scratch memory at once.
        let few = self.chunks.len() < self.decoder.threads();
        let decode = || {
            let outcome = Mutex::new(Ok(BatchStats::default()));
            self.decoder.scope_fifo(|scope| {
                for (index, chunk) in self.chunks.iter().enumerate() {
                    let (decoders, outcome) = (&decoders, &outcome);
                    scope.spawn_fifo(move |_| {
                        if lock(outcome).is_err() {
                            return;
                        }
                        let decoder = decoders[&variable_key(&chunk.request.variable)].as_ref();
                        let decoded = guarded(chunk, || {
                            decode_chunk(chunk, index, decoder, placement, few)
                        });
                        let mut outcome = lock(outcome);
                        match (&mut *outcome, decoded) {
                            (Ok(total), Ok(stats)) => *total += stats,
                            (Ok(_), Err(error)) => *outcome = Err(error),
                            (Err(_), _) => {}
                        }
                    });
                }
                placement.all_queued();
            });
            outcome.into_inner().unwrap_or_else(PoisonError::into_inner)
        };
        watching(watch, decode, |stats| *stats)
    }

    /// Decodes every chunk into memory of its own, on the calling thread's pool.
    pub fn into_host(self) -> Result<Vec<DecodedChunk>> {
        let Self {
            chunks,
            decoder,
            watch,
        } = self;
        let decode = || {
            decoder.install(|| {
                chunks
                    .into_par_iter()
                    .map(decode_on_cpu)
                    .collect::<Result<Vec<_>>>()
            })
        };
        watching(watch, decode, |decoded| DecodedChunk::stats_of(decoded))
    }

    /// Decodes every chunk into memory of its own on the decoder's threads, without blocking
    /// the caller (for a decoder whose time is measured where it decodes, as a balanced
    /// split's CPU side). Each chunk is its own task in the pool's queue, so parts handed in
    /// one after another decode in that order, the next one's chunks taking the threads as
    /// the last of the one before finish. Decoded as one parallel task each, parts handed in
    /// together took the threads side by side and finished together: seven CPU parts of setup
    /// A's batches in 520-970 ms where one decodes in 100 (H200, 2026-11-29;
    /// docs/training-runs.md).
    pub fn decode(self) -> BoxFuture<'static, Result<Vec<DecodedChunk>>> {
        let Self {
            chunks,
            decoder,
            mut watch,
        } = self;
        if let Some(watch) = &mut watch {
            watch.begun();
        }
        let decoding: Vec<_> = chunks
            .into_iter()
            .map(|chunk| decoder.decode(chunk))
            .collect();
        Box::pin(async move {
            let decoded = futures::future::try_join_all(decoding).await?;
            if let Some(watch) = watch {
                watch.ended(&DecodedChunk::stats_of(&decoded));
            }
            Ok(decoded)
        })
    }
}

/// Runs `decode`, telling `watch` (if any) when it begins and, once it succeeded, what it cost
/// (`spent` reads that from the result).
fn watching<T>(
    mut watch: Option<Box<dyn DecodeWatch>>,
    decode: impl FnOnce() -> Result<T>,
    spent: impl FnOnce(&T) -> BatchStats,
) -> Result<T> {
    if let Some(watch) = &mut watch {
        watch.begun();
    }
    let decoded = decode()?;
    if let Some(watch) = watch {
        watch.ended(&spent(&decoded));
    }
    Ok(decoded)
}

/// Bytes of one decoded chunk of `variable` (its full chunk shape).
fn decoded_len(variable: &Variable) -> usize {
    variable.decoded_chunk_bytes() as usize
}

/// A variable, by address: the batch's chunks share each variable's `Arc`.
fn variable_key(variable: &Arc<Variable>) -> usize {
    Arc::as_ptr(variable) as usize
}

/// Each variable's direct decoder, if the codec libraries decode its chunks in place.
fn direct_decoders(chunks: &[EncodedChunk]) -> HashMap<usize, Option<DirectDecoder>> {
    let mut decoders = HashMap::new();
    for chunk in chunks {
        let variable = &chunk.request.variable;
        decoders
            .entry(variable_key(variable))
            .or_insert_with(|| direct_decoder(variable));
    }
    decoders
}

/// Runs `decode` on chunk `chunk`, turning a panic into an error naming it.
fn guarded(
    chunk: &EncodedChunk,
    decode: impl FnOnce() -> Result<BatchStats>,
) -> Result<BatchStats> {
    std::panic::catch_unwind(std::panic::AssertUnwindSafe(decode)).unwrap_or_else(|payload| {
        Err(Error::Panicked {
            variable: chunk.request.variable.name().to_string(),
            key: chunk.request.key(),
            message: zarrpipe_core::panic_message(payload.as_ref()),
        })
    })
}

/// Decodes chunk `index` where `placement` puts it, reading its file first if the fetch
/// stage handed it on unread; a shard decoded into scratch memory decodes on several threads
/// only with `parallel_in_scratch`.
fn decode_chunk(
    chunk: &EncodedChunk,
    index: usize,
    decoder: Option<&DirectDecoder>,
    placement: &dyn ChunkPlacement,
    parallel_in_scratch: bool,
) -> Result<BatchStats> {
    let variable = &chunk.request.variable;
    let len = decoded_len(variable);
    let mut stats = BatchStats {
        decoded_bytes: len as u64,
        cpu_decoded_chunks: 1,
        ..BatchStats::default()
    };
    // Taken out while in use: a chunk this thread takes on meanwhile (while a shard decodes
    // on several threads) finds none and makes its own.
    let mut reads = READS.take();
    let decoded = decode_stored(
        chunk,
        index,
        decoder,
        placement,
        parallel_in_scratch,
        &mut reads,
        &mut stats,
    );
    // A thread keeps what a chunk file needs, not what a large shard's did.
    if reads.len() <= KEPT_READ_BYTES {
        READS.set(reads);
    }
    decoded?;
    Ok(stats)
}

/// [`decode_chunk`] with `reads` the memory a chunk handed on unread is read into.
fn decode_stored(
    chunk: &EncodedChunk,
    index: usize,
    decoder: Option<&DirectDecoder>,
    placement: &dyn ChunkPlacement,
    parallel_in_scratch: bool,
    reads: &mut Vec<u8>,
    stats: &mut BatchStats,
) -> Result<()> {
    let len = stats.decoded_bytes as usize;
    let Some(decoder) = decoder else {
        // zarrs decodes the chains this crate does not, into memory of their own.
        let read_now = chunk.is_read_at_decode();
        let chunk = chunk.clone().read_now()?;
        if read_now {
            count_read(chunk.bytes.as_deref(), chunk.fetch_time, stats);
        }
        let clock = DecodeClock::start();
        let decoded = decode_on_cpu(chunk)?;
        match placement.whole(index, len) {
            Some(out) => out.copy_from_slice(&decoded.bytes),
            None => placement.put(index, &decoded.bytes),
        }
        stats.cpu_copied_chunks = 1;
        (stats.decode_busy, stats.decode_cpu) = clock.read();
        return Ok(());
    };
    let stored = chunk.stored(reads)?;
    if chunk.is_read_at_decode() {
        count_read(stored.bytes, stored.read_time, stats);
    }
    let clock = DecodeClock::start();
    let through_scratch = decoder.decodes_faster_through_scratch()
        && (LEAST_STREAMED_BYTES..=MOST_THROUGH_SCRATCH_BYTES).contains(&len);
    match placement.whole(index, len) {
        Some(out) if !through_scratch => write_chunk(chunk, stored.bytes, decoder, out, true)?,
        place => {
            let mut scratch = SCRATCH.take();
            if scratch.len() < len {
                scratch.resize(len, 0);
            }
            let written = write_chunk(
                chunk,
                stored.bytes,
                decoder,
                &mut scratch[..len],
                parallel_in_scratch,
            );
            if written.is_ok() {
                match place {
                    Some(out) => {
                        // SAFETY: `out` holds `len` bytes and is not the thread's scratch
                        // memory; the fence follows at once.
                        unsafe { copy_streaming(&scratch[..len], out.as_mut_ptr()) };
                        store_fence();
                    }
                    None => placement.put(index, &scratch[..len]),
                }
            }
            SCRATCH.set(scratch);
            written?;
        }
    }
    (stats.decode_busy, stats.decode_cpu) = clock.read();
    Ok(())
}

/// Counts a read made while decoding as the fetch stage counts its reads.
fn count_read(bytes: Option<&[u8]>, read_time: Duration, stats: &mut BatchStats) {
    stats.stored_bytes += bytes.map_or(0, <[u8]>::len) as u64;
    stats.missing_chunks += u64::from(bytes.is_none());
    stats.fetch_busy += read_time;
}

/// Chunk places for memory the collator splits into one run per chunk (an upload buffer, in
/// which every chunk lies whole at its own offset).
pub struct ChunkRuns<'a> {
    runs: Vec<std::sync::Mutex<Option<&'a mut [u8]>>>,
}

impl<'a> ChunkRuns<'a> {
    /// Places chunk `i` in `runs[i]`.
    pub fn new(runs: Vec<&'a mut [u8]>) -> Self {
        Self {
            runs: runs
                .into_iter()
                .map(|run| std::sync::Mutex::new(Some(run)))
                .collect(),
        }
    }
}

impl ChunkPlacement for ChunkRuns<'_> {
    fn whole(&self, index: usize, len: usize) -> Option<&mut [u8]> {
        let run = self.runs[index]
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .take()?;
        assert_eq!(run.len(), len, "chunk {index}'s run has the wrong size");
        Some(run)
    }

    fn put(&self, index: usize, decoded: &[u8]) {
        let run = self.runs[index]
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .take();
        run.expect("each chunk is placed once")
            .copy_from_slice(decoded);
    }
}

#[cfg(test)]
mod tests {
    use std::sync::{mpsc, Condvar};
    use std::time::Duration;

    use super::*;
    use crate::testing::{fixture_chunks, marked_buffers};

    /// Chunk runs that log which chunk of which batch begins, and tell when all are queued.
    struct Logged<'a> {
        runs: ChunkRuns<'a>,
        batch: char,
        log: &'a Mutex<Vec<(char, usize)>>,
        queued: Option<mpsc::Sender<()>>,
        /// Called as each chunk begins, with its index.
        beginning: &'a (dyn Fn(usize) + Sync),
    }

    impl ChunkPlacement for Logged<'_> {
        fn whole(&self, index: usize, len: usize) -> Option<&mut [u8]> {
            lock(self.log).push((self.batch, index));
            (self.beginning)(index);
            self.runs.whole(index, len)
        }

        fn put(&self, index: usize, decoded: &[u8]) {
            self.runs.put(index, decoded)
        }

        fn all_queued(&self) {
            if let Some(queued) = &self.queued {
                queued.send(()).unwrap();
            }
        }
    }

    #[test]
    fn a_batch_queued_behind_another_decodes_on_the_threads_its_last_chunks_leave() {
        let (_dir, _runtime, chunks) = fixture_chunks(3);
        let expected: Vec<Vec<u8>> = (chunks.iter())
            .map(|chunk| decode_on_cpu(chunk.clone()).unwrap().bytes)
            .collect();
        let threads = 2;
        let pool = rayon::ThreadPoolBuilder::new().num_threads(threads).build();
        let decoder = CpuDecoder::with_pool(Arc::new(pool.unwrap()));
        let half = chunks.len() / 2;
        let first = PendingChunks::new(chunks[..half].to_vec(), decoder.clone());
        let second = PendingChunks::new(chunks[half..].to_vec(), decoder);
        let (mut first_memory, mut second_memory) =
            (marked_buffers(&first), marked_buffers(&second));
        let log = Mutex::new(Vec::new());
        // The first batch's last chunk goes on only once the second batch has begun: on the
        // thread the first batch's other chunks have left.
        let second_begun = (Mutex::new(false), Condvar::new());
        let wait_for_second = |index: usize| {
            if index + 1 == half {
                let begun = lock(&second_begun.0);
                let (begun, waited) = (second_begun.1)
                    .wait_timeout_while(begun, Duration::from_secs(20), |begun| !*begun)
                    .unwrap();
                assert!(
                    *begun && !waited.timed_out(),
                    "the second batch never began"
                );
            }
        };
        let tell_begun = |_: usize| {
            *lock(&second_begun.0) = true;
            second_begun.1.notify_all();
        };
        let (queued, all_queued) = mpsc::channel();
        let (first_stats, second_stats) = std::thread::scope(|scope| {
            let first_runs = Logged {
                runs: ChunkRuns::new(first_memory.iter_mut().map(Vec::as_mut_slice).collect()),
                batch: 'a',
                log: &log,
                queued: Some(queued),
                beginning: &wait_for_second,
            };
            let first = scope.spawn(move || first.decode_into(&first_runs));
            all_queued
                .recv_timeout(Duration::from_secs(20))
                .expect("the first batch's chunks queued");
            let second_runs = Logged {
                runs: ChunkRuns::new(second_memory.iter_mut().map(Vec::as_mut_slice).collect()),
                batch: 'b',
                log: &log,
                queued: None,
                beginning: &tell_begun,
            };
            let second = second.decode_into(&second_runs);
            (first.join().unwrap(), second)
        });
        assert_eq!(first_stats.unwrap().cpu_decoded_chunks, half as u64);
        assert_eq!(
            second_stats.unwrap().cpu_decoded_chunks,
            (chunks.len() - half) as u64
        );
        assert!(first_memory.into_iter().chain(second_memory).eq(expected));
        // In the order they were queued: no chunk of the second batch began before every chunk
        // of the first had been taken (a thread may log its chunk after another's next one).
        let log = log.into_inner().unwrap();
        let second_from = log.iter().position(|(batch, _)| *batch == 'b').unwrap();
        let first_before = log[..second_from].iter().filter(|(b, _)| *b == 'a').count();
        assert!(first_before >= half - (threads - 1), "{log:?}");
    }

    #[test]
    fn a_chunk_that_fails_fails_its_batch_naming_it() {
        let (_dir, _runtime, mut chunks) = fixture_chunks(5);
        let broken = chunks
            .iter()
            .position(|chunk| chunk.bytes.is_some())
            .unwrap();
        chunks[broken].bytes = Some(bytes::Bytes::from_static(b"not a stored chunk"));
        let key = chunks[broken].request.key();
        let pool = rayon::ThreadPoolBuilder::new().num_threads(2).build();
        let decoder = CpuDecoder::with_pool(Arc::new(pool.unwrap()));
        let pending = PendingChunks::new(chunks, decoder);
        let mut memory = marked_buffers(&pending);
        let runs = ChunkRuns::new(memory.iter_mut().map(Vec::as_mut_slice).collect());
        let error = pending.decode_into(&runs).unwrap_err().to_string();
        assert!(error.contains(&key), "{error}");
    }
}
