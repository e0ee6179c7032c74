//! Chunk reads into memory a decoder hands out (`ReadMemory`; a GPU decoder's is pinned):
//! whole chunks of a local store land in it, with the bytes, missing chunks, errors and
//! request counts of ordinary reads; shards' inner chunks, and reads past what the memory
//! gives, go to ordinary memory. Memory that asks for it has whole chunk files read by their
//! decoder instead, with the same bytes. The GPU's pinned memory runs in `tests/gpu_decode.rs`.

use std::path::Path;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use futures::{stream, TryStreamExt};
use zarrpipe::core::Staged;
use zarrpipe::generate::{generate, Compression, GenerateOptions};
use zarrpipe::store::{
    fetch_chunk, fetch_chunk_into, ChunkRequest, Dataset, EncodedChunk, FetchBatchesExt, IoStats,
    ReadBuffer, ReadMemory, ReusedReadMemory,
};

/// Heap buffers, at most `budget` of them, each remembered by its address range.
#[derive(Debug)]
struct Handed {
    budget: AtomicUsize,
    given: Mutex<Vec<std::ops::Range<usize>>>,
}

impl Handed {
    fn new(budget: usize) -> Arc<Self> {
        Arc::new(Self {
            budget: AtomicUsize::new(budget),
            given: Mutex::new(Vec::new()),
        })
    }

    fn holds(&self, bytes: &[u8]) -> bool {
        let start = bytes.as_ptr() as usize;
        self.given
            .lock()
            .unwrap()
            .iter()
            .any(|range| range.start == start && range.end == start + bytes.len())
    }

    fn count(&self) -> usize {
        self.given.lock().unwrap().len()
    }
}

struct HeapBuffer(Box<[u8]>);

impl AsRef<[u8]> for HeapBuffer {
    fn as_ref(&self) -> &[u8] {
        &self.0
    }
}

impl AsMut<[u8]> for HeapBuffer {
    fn as_mut(&mut self) -> &mut [u8] {
        &mut self.0
    }
}

impl ReadBuffer for HeapBuffer {}

impl ReadMemory for Handed {
    fn buffer(&self, len: usize) -> Option<Box<dyn ReadBuffer>> {
        self.budget
            .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |left| {
                left.checked_sub(1)
            })
            .ok()?;
        // Filled with a pattern, so a short read would show.
        let buffer = vec![0xA5u8; len].into_boxed_slice();
        let start = buffer.as_ptr() as usize;
        self.given.lock().unwrap().push(start..start + len);
        Some(Box::new(HeapBuffer(buffer)))
    }
}

fn write_store(dir: &Path, name: &str, shard: Option<u64>) -> String {
    let options = GenerateOptions {
        time: 4,
        levels: 2,
        lat: 16,
        lon: 32,
        compression: Compression::Zstd,
        shard,
        seed: 5,
        chunks: shard.map(|_| [8, 16]),
        variables: Default::default(),
    };
    let path = dir.join(name);
    generate(&path, &options, |_, _| {}).expect("generate");
    path.to_string_lossy().into_owned()
}

/// Every chunk of every variable, in order.
fn every_chunk(dataset: &Dataset) -> Vec<ChunkRequest> {
    let mut requests = Vec::new();
    for variable in dataset.variables() {
        let all: Vec<std::ops::Range<u64>> = variable.shape().iter().map(|&n| 0..n).collect();
        for indices in variable.chunks_in(&all) {
            requests.push(ChunkRequest::new(variable.clone(), indices));
        }
    }
    requests
}

async fn read_all(
    requests: &[ChunkRequest],
    memory: Option<Arc<dyn ReadMemory>>,
) -> Vec<EncodedChunk> {
    let mut chunks = Vec::new();
    for request in requests {
        chunks.push(
            fetch_chunk_into(request.clone(), memory.clone())
                .await
                .unwrap(),
        );
    }
    chunks
}

fn bytes(chunks: &[EncodedChunk]) -> Vec<Option<Vec<u8>>> {
    chunks
        .iter()
        .map(|chunk| chunk.bytes.as_deref().map(<[u8]>::to_vec))
        .collect()
}

/// The requests and bytes counted between `before` and `after` equal those between `opened`
/// and `before` (ordinary reads of the same chunks).
fn assert_counted_alike(opened: &IoStats, before: &IoStats, after: &IoStats) {
    assert_eq!(
        after.requests - before.requests,
        before.requests - opened.requests
    );
    assert_eq!(
        after.bytes_fetched - before.bytes_fetched,
        before.bytes_fetched - opened.bytes_fetched
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn whole_chunks_land_in_the_memory_given_with_the_bytes_of_ordinary_reads() {
    let dir = tempfile::tempdir().unwrap();
    let url = write_store(dir.path(), "w1.zarr", None);
    let dataset = Dataset::open(&url).await.unwrap();
    let requests = every_chunk(&dataset);
    // One chunk missing (the fill value), and later one replaced by a directory.
    let (missing, odd) = (&requests[1], &requests[2]);
    let root = Path::new(&url);
    std::fs::remove_file(root.join(missing.key())).unwrap();

    let opened = dataset.io_stats();
    let ordinary = read_all(&requests, None).await;
    let before = dataset.io_stats();
    let memory = Handed::new(usize::MAX);
    let read = read_all(&requests, Some(memory.clone() as Arc<dyn ReadMemory>)).await;
    let after = dataset.io_stats();
    assert_eq!(bytes(&read), bytes(&ordinary));
    assert!(read[1].bytes.is_none(), "{missing} is missing");
    for chunk in read.iter().filter_map(|chunk| chunk.bytes.as_ref()) {
        assert!(memory.holds(chunk), "read into the memory given");
    }
    assert_eq!(memory.count(), requests.len() - 1);
    // The same requests and bytes counted as ordinary reads.
    assert_counted_alike(&opened, &before, &after);

    std::fs::remove_file(root.join(odd.key())).unwrap();
    std::fs::create_dir(root.join(odd.key())).unwrap();
    let memory = Handed::new(usize::MAX);
    let odd_read = fetch_chunk_into(odd.clone(), Some(memory.clone() as Arc<dyn ReadMemory>))
        .await
        .unwrap();
    // object_store reads a directory as no object: the direct read hands it back to it.
    assert_eq!(
        odd_read.bytes,
        fetch_chunk(odd.clone()).await.unwrap().bytes
    );
    assert!(odd_read.bytes.is_none());
    assert_eq!(memory.count(), 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reads_past_what_the_memory_gives_and_inner_chunks_go_to_ordinary_memory() {
    let dir = tempfile::tempdir().unwrap();
    let url = write_store(dir.path(), "w1.zarr", None);
    let dataset = Dataset::open(&url).await.unwrap();
    let requests = every_chunk(&dataset);
    let ordinary = read_all(&requests, None).await;
    let memory = Handed::new(3);
    let read = read_all(&requests, Some(memory.clone() as Arc<dyn ReadMemory>)).await;
    assert_eq!(bytes(&read), bytes(&ordinary));
    let held = read
        .iter()
        .filter(|chunk| memory.holds(chunk.bytes.as_ref().unwrap()))
        .count();
    assert_eq!((held, memory.count()), (3, 3));

    // A shard's inner chunks are assembled into a compact shard: never in the memory given.
    let url = write_store(dir.path(), "sharded.zarr", Some(2));
    let dataset = Dataset::open(&url).await.unwrap();
    let variable = dataset.variable("t2m").unwrap().clone();
    let request = ChunkRequest::with_inner(variable, vec![0, 0, 0], vec![0, 3]);
    let memory = Handed::new(usize::MAX);
    let inner = fetch_chunk_into(request.clone(), Some(memory.clone() as Arc<dyn ReadMemory>))
        .await
        .unwrap();
    assert_eq!(inner.bytes, fetch_chunk(request).await.unwrap().bytes);
    assert_eq!(memory.count(), 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn batches_fetched_into_memory_equal_ordinary_batches() {
    let dir = tempfile::tempdir().unwrap();
    let url = write_store(dir.path(), "w1.zarr", Some(2));
    let dataset = Dataset::open(&url).await.unwrap();
    let requests = every_chunk(&dataset);
    let batches = || {
        stream::iter(
            requests
                .chunks(5)
                .enumerate()
                .map(|(index, batch)| Staged::new(index as u64, (), batch.to_vec()))
                .collect::<Vec<_>>(),
        )
    };
    let ordinary: Vec<_> = batches().fetch_batches(2, 4).try_collect().await.unwrap();
    let memory = Handed::new(usize::MAX);
    let read: Vec<_> = batches()
        .fetch_batches_into(2, 4, Some(memory.clone() as Arc<dyn ReadMemory>))
        .try_collect()
        .await
        .unwrap();
    assert_eq!(read.len(), ordinary.len());
    for (read, ordinary) in read.iter().zip(&ordinary) {
        assert_eq!(bytes(&read.payload), bytes(&ordinary.payload));
        for chunk in &read.payload {
            assert!(memory.holds(chunk.bytes.as_ref().unwrap()));
        }
    }
}

/// Every chunk's stored bytes as its decoder sees them, each file read now if it was handed on
/// unread.
fn stored(chunks: &[EncodedChunk]) -> Vec<Option<Vec<u8>>> {
    let mut buffer = Vec::new();
    chunks
        .iter()
        .map(|chunk| {
            let stored = chunk.stored(&mut buffer).unwrap();
            stored.bytes.map(<[u8]>::to_vec)
        })
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn chunk_files_are_read_by_their_decoder_when_the_memory_asks_with_the_bytes_of_ordinary_reads(
) {
    let dir = tempfile::tempdir().unwrap();
    let url = write_store(dir.path(), "w1.zarr", None);
    let dataset = Dataset::open(&url).await.unwrap();
    let requests = every_chunk(&dataset);
    // One chunk missing (the fill value), one a directory (object_store reads it as none).
    let (missing, odd) = (&requests[1], &requests[2]);
    let root = Path::new(&url);
    std::fs::remove_file(root.join(missing.key())).unwrap();
    std::fs::remove_file(root.join(odd.key())).unwrap();
    std::fs::create_dir(root.join(odd.key())).unwrap();

    let opened = dataset.io_stats();
    let ordinary = read_all(&requests, None).await;
    let before = dataset.io_stats();
    let memory: Arc<dyn ReadMemory> = Arc::new(ReusedReadMemory::read_at_decode());
    let handed = read_all(&requests, Some(memory)).await;
    // Handed on unread: every plain file, and nothing else.
    for (chunk, request) in handed.iter().zip(&requests) {
        let file = root.join(request.key());
        assert_eq!(chunk.is_read_at_decode(), file.is_file(), "{request}");
    }
    assert!(handed[1].bytes.is_none() && handed[2].bytes.is_none());
    assert_eq!(stored(&handed), bytes(&ordinary));
    // The same requests and bytes counted, once each file is read.
    assert_counted_alike(&opened, &before, &dataset.io_stats());
    // Read into memory of their own, they are the same too.
    let owned: Vec<_> = handed
        .into_iter()
        .map(|chunk| chunk.read_now().unwrap())
        .collect();
    assert!(owned.iter().all(|chunk| !chunk.is_read_at_decode()));
    assert_eq!(bytes(&owned), bytes(&ordinary));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_chunk_file_gone_before_its_decoder_reads_it_is_missing_and_one_turned_unreadable_is_an_error_naming_it(
) {
    let dir = tempfile::tempdir().unwrap();
    let url = write_store(dir.path(), "w1.zarr", None);
    let dataset = Dataset::open(&url).await.unwrap();
    let requests = every_chunk(&dataset);
    let memory: Arc<dyn ReadMemory> = Arc::new(ReusedReadMemory::read_at_decode());
    let handed = read_all(&requests[..2], Some(memory)).await;
    assert!(handed.iter().all(EncodedChunk::is_read_at_decode));
    let root = Path::new(&url);
    std::fs::remove_file(root.join(requests[0].key())).unwrap();
    std::fs::remove_file(root.join(requests[1].key())).unwrap();
    std::fs::create_dir(root.join(requests[1].key())).unwrap();
    let mut buffer = Vec::new();
    assert!(handed[0].stored(&mut buffer).unwrap().bytes.is_none());
    let error = handed[1].stored(&mut buffer).unwrap_err().to_string();
    let key = requests[1].key();
    assert!(error.contains(&key), "{error}");
    // An empty frame, never the fill value, to a decoder that does not read it itself.
    assert_eq!(handed[0].bytes.as_deref(), Some(&[][..]));
}
