//! Object storage against real servers on loopback, started by the tests themselves: an S3
//! server (s3s-fs, in process: no Python, no network) and a plain HTTP server with range
//! support. Every fixture reads back as zarr-python wrote it through `s3://` URLs; sharded
//! arrays read by inner chunk (byte ranges) give the same values; the servers fail on purpose
//! to prove retries, timeouts and clear errors; the chunk cache serves later epochs.
//!
//! Where no loopback port can be bound, each test prints `skipped: ...` and returns.

mod common;

use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};

use common::servers::{Fault, Loopback};
use common::*;
use zarrpipe::codec::decode_on_cpu;
use zarrpipe::generate::{generate, Compression, GenerateOptions};
use zarrpipe::prelude::*;
use zarrpipe::store::{fetch_chunk, StoreOptions, Variable};

/// A small W1-shaped store: 8 time steps, sharded by 4 when `shard` is set.
fn small_w1(dir: &Path, shard: Option<u64>) -> std::path::PathBuf {
    let path = dir.join("w1.zarr");
    let options = GenerateOptions {
        time: 8,
        levels: 2,
        lat: 64,
        lon: 128,
        compression: Compression::Zstd,
        shard,
        seed: 3,
        chunks: None,
        variables: Default::default(),
    };
    generate(&path, &options, |_, _| {}).expect("generate");
    consolidate(&path);
    path
}

async fn all_batches(mut batches: BatchStream) -> Vec<Batch> {
    let mut all = Vec::new();
    while let Some(batch) = batches.try_next().await.expect("batch") {
        all.push(batch);
    }
    all
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_fixture_reads_over_s3_as_zarr_python_wrote_it() {
    let Some(server) = Loopback::s3().await else {
        return;
    };
    let manifest = manifest();
    let mut checked = 0;
    for store in &manifest.stores {
        server.upload(Path::new(&store_path(&store.store)), &store.store);
        let url = server.s3_url(&store.store);
        let dataset = Dataset::open_with(&url, &server.s3_options())
            .await
            .unwrap_or_else(|e| panic!("{url}: {}", zarrpipe::error_chain(&e)));
        assert_eq!(dataset.consolidated(), store.consolidated, "{url}");
        for array in store
            .arrays
            .iter()
            .filter(|a| a.unsupported_codec().is_none())
        {
            let variable = dataset.variable(&array.path).unwrap();
            let actual = read_whole(variable)
                .await
                .unwrap_or_else(|e| panic!("{url}/{}: {e}", array.path));
            assert!(
                same_values(&array.dtype, &actual, &expected_bytes(array)),
                "{url}/{}: values differ",
                array.path
            );
            checked += 1;
        }
    }
    assert!(checked >= 30, "only {checked} arrays checked");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn opening_a_consolidated_store_costs_one_or_two_requests() {
    let Some(server) = Loopback::s3().await else {
        return;
    };
    for store in manifest().stores.iter().filter(|store| store.consolidated) {
        server.upload(Path::new(&store_path(&store.store)), &store.store);
        let before = server.faults.requests();
        let dataset = Dataset::open_with(&server.s3_url(&store.store), &server.s3_options())
            .await
            .unwrap();
        let requests = server.faults.requests() - before;
        let expected = if store.zarr_format == 3 { 1 } else { 2 }; // v2: zarr.json, .zmetadata
        assert_eq!(
            requests,
            expected,
            "{}: {:?}",
            store.store,
            server.faults.log()
        );
        assert_eq!(dataset.io_stats().requests, expected);
    }
}

/// Reads a sharded variable one inner chunk per request (byte ranges), keeping from each
/// decoded shard only the inner chunk asked for.
async fn read_by_inner_chunks(variable: &Arc<Variable>) -> Vec<u8> {
    let shape = variable.shape().to_vec();
    let size = variable.dtype().size();
    let inner_shape = variable.inner_chunk_shape().expect("read by inner chunk");
    let per_shard = variable.inner_chunks_per_shard().unwrap();
    let mut out = vec![0u8; shape.iter().product::<u64>() as usize * size];
    let everything: Vec<_> = shape.iter().map(|&n| 0..n).collect();
    for shard in variable.chunks_in(&everything) {
        let (start, shard_shape) = variable.chunk_region(&shard).unwrap();
        for inner in 0..per_shard {
            let request = ChunkRequest::with_inner(variable.clone(), shard.clone(), vec![inner]);
            let decoded = decode_on_cpu(fetch_chunk(request).await.expect("fetch"))
                .expect("decode compact shard");
            let elements: u64 = shard_shape.iter().product();
            for flat in 0..elements {
                // The element's position in the shard, its inner chunk, its array position.
                let mut rest = flat;
                let mut position = vec![0; shard_shape.len()];
                for axis in (0..shard_shape.len()).rev() {
                    position[axis] = rest % shard_shape[axis];
                    rest /= shard_shape[axis];
                }
                let number = position
                    .iter()
                    .zip(&inner_shape)
                    .zip(shard_shape.iter().zip(&inner_shape))
                    .fold(0, |n, ((p, c), (s, i))| n * (s / i) + p / c);
                let global: Vec<u64> = position.iter().zip(&start).map(|(p, s)| p + s).collect();
                if number != inner || global.iter().zip(&shape).any(|(g, n)| g >= n) {
                    continue;
                }
                let target = global.iter().zip(&shape).fold(0, |n, (g, s)| n * s + g);
                let (from, to) = (flat as usize * size, target as usize * size);
                out[to..to + size].copy_from_slice(&decoded.bytes[from..from + size]);
            }
        }
    }
    out
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sharded_fixtures_read_by_inner_chunk_ranges_over_s3_and_http() {
    let Some(s3) = Loopback::s3().await else {
        return;
    };
    let Some(http) = Loopback::http(fixtures().join("stores")).await else {
        return;
    };
    let manifest = manifest();
    let mut checked = 0;
    for store in &manifest.stores {
        s3.upload(Path::new(&store_path(&store.store)), &store.store);
        let sharded: Vec<_> = store
            .arrays
            .iter()
            .filter(|array| array.codecs.starts_with("sharding_indexed"))
            .collect();
        if sharded.is_empty() {
            continue;
        }
        let s3_dataset = Dataset::open_with(&s3.s3_url(&store.store), &s3.s3_options())
            .await
            .unwrap();
        let http_dataset = Dataset::open(&http.http_url(&store.store)).await.unwrap();
        for dataset in [s3_dataset, http_dataset] {
            for array in &sharded {
                let variable = dataset.variable(&array.path).unwrap();
                assert!(variable.reads_inner_chunks(), "{}", array.path);
                let actual = read_by_inner_chunks(variable).await;
                assert!(
                    same_values(&array.dtype, &actual, &expected_bytes(array)),
                    "{} {}: values differ",
                    dataset.url(),
                    array.path
                );
                checked += 1;
            }
            // Only ranges: every GET of a shard names a byte range.
        }
    }
    assert!(checked >= 4, "only {checked} sharded arrays checked");
    let shard_reads: Vec<String> = s3
        .faults
        .log()
        .into_iter()
        .filter(|line| line.contains("sharded") && line.contains("/c/"))
        .collect();
    assert!(!shard_reads.is_empty());
    assert!(
        shard_reads.iter().all(|line| line.contains("bytes=")),
        "{shard_reads:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sharded_batches_over_s3_read_only_the_inner_chunks_they_need() {
    let Some(server) = Loopback::s3().await else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let local = small_w1(dir.path(), Some(4));
    server.upload(&local, "w1.zarr");
    let pipeline = |url: String, options: StoreOptions| {
        Pipeline::builder(url)
            .variables(["t2m", "z"])
            .batch_size(2) // half a shard: range reads
            .store_options(options)
            .build()
    };
    let expected = all_batches(
        pipeline(local.to_string_lossy().into_owned(), StoreOptions::new())
            .await
            .unwrap(),
    )
    .await;
    let batches = pipeline(server.s3_url("w1.zarr"), server.s3_options())
        .await
        .unwrap();
    let dataset = batches.dataset().clone();
    let opened = dataset.io_stats();
    let actual = all_batches(batches).await;
    assert_eq!(actual.len(), 4);
    for (actual, expected) in actual.iter().zip(&expected) {
        assert_eq!(actual.inputs, expected.inputs, "batch {}", actual.index);
    }
    let io = dataset.io_stats();
    let (requests, fetched) = (
        io.requests - opened.requests,
        io.bytes_fetched - opened.bytes_fetched,
    );
    let amplification = fetched as f64 / io.bytes_needed as f64;
    println!(
        "{requests} requests for 4 batches, {fetched} bytes fetched for {} needed: \
         read amplification {amplification:.4}",
        io.bytes_needed
    );
    assert!(amplification < 1.05, "read amplification {amplification}");
    // Per shard (2 variables x 2 shards): one index read per epoch, then per batch one
    // request of its adjacent inner chunks.
    assert!(
        requests <= 4 + 4 * 2,
        "{requests} requests: {:?}",
        server.faults.log()
    );
    // About half of each shard is read per batch, never the whole shard.
    let stored: u64 = walk_sizes(&local.join("t2m")) + walk_sizes(&local.join("z"));
    assert!(io.bytes_needed <= stored, "{} > {stored}", io.bytes_needed);
}

fn walk_sizes(dir: &Path) -> u64 {
    std::fs::read_dir(dir)
        .unwrap()
        .map(|entry| {
            let entry = entry.unwrap();
            if entry.file_type().unwrap().is_dir() {
                walk_sizes(&entry.path())
            } else if entry.file_name() == "zarr.json" {
                0
            } else {
                entry.metadata().unwrap().len()
            }
        })
        .sum()
}

/// The first chunk key of `t2m` in the small store, as the server sees its path.
const T2M_CHUNK: &str = "/w1.zarr/t2m/c/0/";

async fn open_small(server: &Loopback, options: StoreOptions) -> Arc<Dataset> {
    let dir = tempfile::tempdir().unwrap();
    server.upload(&small_w1(dir.path(), None), "w1.zarr");
    Arc::new(
        Dataset::open_with(&server.s3_url("w1.zarr"), &options)
            .await
            .unwrap(),
    )
}

async fn read_t2m(dataset: &Dataset) -> Result<Vec<u8>, zarrpipe::codec::Error> {
    read_whole(dataset.variable("t2m").unwrap()).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn throttling_server_errors_and_broken_bodies_are_retried() {
    let Some(server) = Loopback::s3().await else {
        return;
    };
    let dataset = open_small(&server, server.s3_options()).await;
    let expected = read_t2m(&dataset).await.unwrap();
    for fault in [
        Fault::Status(503),
        Fault::Status(500),
        Fault::Status(429),
        Fault::Truncate,
        Fault::Drop,
    ] {
        server.faults.inject(T2M_CHUNK, fault, 2);
        let before = server.faults.requests();
        let actual = read_t2m(&dataset)
            .await
            .unwrap_or_else(|e| panic!("{fault:?}: {}", zarrpipe::error_chain(&e)));
        assert_eq!(actual, expected, "{fault:?}");
        // 8 chunk reads, two of them failed first.
        assert_eq!(server.faults.requests() - before, 8 + 2, "{fault:?}");
    }
    // The same over plain HTTP.
    let dir = tempfile::tempdir().unwrap();
    let local = small_w1(dir.path(), None);
    let Some(http) = Loopback::http(dir.path().to_path_buf()).await else {
        return;
    };
    let options = StoreOptions::new().backoff(Duration::from_millis(10), Duration::from_millis(50));
    let dataset = Dataset::open_with(&http.http_url("w1.zarr"), &options)
        .await
        .unwrap();
    let expected = read_whole(
        Dataset::open(local.to_str().unwrap())
            .await
            .unwrap()
            .variable("t2m")
            .unwrap(),
    )
    .await
    .unwrap();
    for fault in [Fault::Status(503), Fault::Truncate, Fault::Drop] {
        http.faults.inject("/w1.zarr/t2m/c/1/", fault, 2);
        assert_eq!(read_t2m(&dataset).await.unwrap(), expected, "{fault:?}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hung_server_fails_in_bounded_time_with_the_url_and_key() {
    let Some(server) = Loopback::s3().await else {
        return;
    };
    let options = server
        .s3_options()
        .timeout(Duration::from_millis(300))
        .retries(2);
    let dataset = open_small(&server, options.clone()).await;
    server.faults.inject(
        T2M_CHUNK,
        Fault::Delay(Duration::from_secs(3600)),
        usize::MAX,
    );
    let started = Instant::now();
    let error = read_t2m(&dataset).await.expect_err("the server hangs");
    let elapsed = started.elapsed();
    let message = zarrpipe::error_chain(&error);
    assert!(
        elapsed <= options.deadline() + Duration::from_secs(2),
        "{elapsed:?}"
    );
    assert!(message.contains("s3://bucket/w1.zarr"), "{message}");
    assert!(message.contains("t2m/c/0/0/0"), "{message}");

    // A server that keeps failing: after the retries, the same clear error.
    server.faults.clear();
    server
        .faults
        .inject(T2M_CHUNK, Fault::Status(503), usize::MAX);
    let before = server.faults.requests();
    let error = read_t2m(&dataset).await.expect_err("the server fails");
    let message = zarrpipe::error_chain(&error);
    assert!(message.contains("s3://bucket/w1.zarr") && message.contains("t2m/c/0/0/0"));
    assert!(server.faults.requests() - before > 2, "retried");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn missing_chunks_over_s3_are_fill_values_not_errors() {
    let Some(server) = Loopback::s3().await else {
        return;
    };
    let dataset = open_small(&server, server.s3_options()).await;
    let chunk = server.root.join("bucket/w1.zarr/t2m/c/1/0/0");
    std::fs::remove_file(&chunk).unwrap();
    let values = read_t2m(&dataset).await.unwrap();
    let field = 64 * 128 * 4;
    assert!(values[field..2 * field]
        .chunks_exact(4)
        .all(|v| f32::from_le_bytes(v.try_into().unwrap()).is_nan()));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_cache_serves_later_epochs_and_refetches_corrupt_entries() {
    let Some(server) = Loopback::s3().await else {
        return;
    };
    let cache = tempfile::tempdir().unwrap();
    let options = server.s3_options().cache(cache.path(), 64 << 20);
    let dir = tempfile::tempdir().unwrap();
    server.upload(&small_w1(dir.path(), Some(4)), "w1.zarr");
    let epoch = || async {
        // Looking for missing steps lists each variable's keys at build, which the cache does
        // not hold: not looked for here, where only chunk reads are counted.
        let batches = Pipeline::builder(server.s3_url("w1.zarr"))
            .variables(["t2m", "z"])
            .batch_size(2)
            .missing(zarrpipe::batcher::Missing::Ignore)
            .store_options(options.clone())
            .build()
            .await
            .unwrap();
        let dataset = batches.dataset().clone();
        (all_batches(batches).await, dataset.io_stats())
    };
    let (first, io) = epoch().await;
    assert!(io.requests > 0 && io.cache_hits == 0);
    let before = server.faults.requests();
    let (second, io) = epoch().await;
    let log = server.faults.log();
    assert_eq!(server.faults.requests(), before, "{log:?}");
    assert_eq!(io.requests, 0);
    assert!(io.cache_hits > 0);
    for (a, b) in first.iter().zip(&second) {
        assert_eq!(a.inputs, b.inputs);
    }
    // Corrupt every entry: each fails its checksum and is fetched again.
    for entry in std::fs::read_dir(cache.path()).unwrap() {
        let path = entry.unwrap().path();
        let mut bytes = std::fs::read(&path).unwrap();
        let middle = bytes.len() / 2;
        bytes[middle] ^= 0x5a;
        std::fs::write(&path, bytes).unwrap();
    }
    let (third, io) = epoch().await;
    assert!(io.requests > 0 && io.cache_hits == 0, "{io:?}");
    for (a, b) in first.iter().zip(&third) {
        assert_eq!(a.inputs, b.inputs);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_program_reads_s3_urls() {
    let Some(server) = Loopback::s3().await else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    server.upload(&small_w1(dir.path(), Some(4)), "w1.zarr");
    let url = server.s3_url("w1.zarr");
    let endpoint = format!("endpoint={}", server.endpoint);
    for command in [
        vec!["info", url.as_str(), "--json"],
        vec!["stats", url.as_str(), "--var", "t2m", "--json"],
        vec!["plan", url.as_str(), "--batch-size", "2", "--json"],
        vec![
            "run",
            url.as_str(),
            "--batch-size",
            "2",
            "--device",
            "cpu",
            "--json",
        ],
    ] {
        let mut args = command.clone();
        args.extend(["--store-option", endpoint.as_str()]);
        let args: Vec<String> = args.iter().map(|arg| arg.to_string()).collect();
        let output = tokio::task::spawn_blocking(move || {
            std::process::Command::new(env!("CARGO_BIN_EXE_zarrpipe"))
                .args(&args)
                .env("AWS_ACCESS_KEY_ID", common::servers::ACCESS_KEY)
                .env("AWS_SECRET_ACCESS_KEY", common::servers::SECRET_KEY)
                .env("AWS_REGION", "us-east-1")
                .output()
        })
        .await
        .unwrap()
        .unwrap();
        assert!(
            output.status.success(),
            "{command:?}: {}",
            String::from_utf8_lossy(&output.stderr)
        );
        let json: serde_json::Value = serde_json::from_slice(&output.stdout)
            .unwrap_or_else(|_| panic!("{command:?}: {}", String::from_utf8_lossy(&output.stdout)));
        if command[0] == "plan" {
            // Half a shard per batch: the plan reads inner chunks, not whole shards.
            assert!(
                json["read_amplification"].as_f64().unwrap() < 1.01,
                "{json}"
            );
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn batches_fetched_side_by_side_read_the_oldest_batch_first() {
    let dir = tempfile::tempdir().unwrap();
    small_w1(dir.path(), None);
    let Some(http) = Loopback::http(dir.path().to_path_buf()).await else {
        return;
    };
    let dataset = Dataset::open(&http.http_url("w1.zarr")).await.unwrap();
    // Every chunk of the store (80: more than the 32 futures a poll reaches), in three
    // batches fetched at once, one read at a time; the first read is slow.
    let requests: Vec<ChunkRequest> = dataset
        .data_variables()
        .flat_map(|variable| {
            let variable = variable.clone();
            variable
                .every_chunk()
                .map(move |indices| ChunkRequest::new(variable.clone(), indices))
        })
        .collect();
    assert_eq!(requests.len(), 80);
    let expected: Vec<String> = requests
        .iter()
        .map(|request| format!("GET /w1.zarr/{}", request.key()))
        .collect();
    let batches = requests
        .chunks(34)
        .enumerate()
        .map(|(index, batch)| zarrpipe::core::Staged::new(index as u64, (), batch.to_vec()));
    http.faults.inject(
        &expected[0]["GET ".len()..],
        Fault::Delay(Duration::from_millis(300)),
        1,
    );
    let before = http.faults.log().len();
    let fetched: Vec<_> = stream::iter(batches.collect::<Vec<_>>())
        .fetch_batches(3, 1)
        .try_collect()
        .await
        .unwrap();
    assert_eq!(fetched.len(), 3);
    // The server saw the chunks in order: no later batch read while an earlier one waited.
    assert_eq!(http.faults.log()[before..], expected[..]);
}

/// Names zarr-python accepts (Unicode, spaces, `[`, `%`, `#`, `~`) are the keys it wrote, over
/// S3 and plain HTTP as on disk: every value reads, none is taken for a missing chunk.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn variables_with_any_name_read_over_s3_and_http() {
    let Some(s3) = Loopback::s3().await else {
        return;
    };
    let archives = fixtures().join("real_archives");
    let Some(http) = Loopback::http(archives.clone()).await else {
        return;
    };
    let names = ["température", "t2m[K]", "rel hum %", "a#b~c"];
    for store in ["unicode_names_v2.zarr", "unicode_names_v3.zarr"] {
        s3.upload(&archives.join(store), store);
        let local = archives.join(store).to_string_lossy().into_owned();
        let urls = [
            (local, StoreOptions::new()),
            (s3.s3_url(store), s3.s3_options()),
            (http.http_url(store), StoreOptions::new()),
        ];
        for (url, options) in urls {
            let dataset = Dataset::open_with(&url, &options)
                .await
                .unwrap_or_else(|e| panic!("{url}: {}", zarrpipe::error_chain(&e)));
            for name in names {
                let variable = dataset.variable(name).unwrap();
                let bytes = read_whole(variable)
                    .await
                    .unwrap_or_else(|e| panic!("{url} {name}: {}", zarrpipe::error_chain(&e)));
                let values: Vec<f32> = bytes
                    .chunks_exact(4)
                    .map(|b| f32::from_ne_bytes(b.try_into().unwrap()))
                    .collect();
                assert!(
                    values.iter().any(|v| v.is_finite() && *v != 0.0),
                    "{url} {name}: read as missing"
                );
                let requests = Pipeline::builder(url.clone())
                    .variables([name])
                    .store_options(options.clone())
                    .missing(zarrpipe::batcher::Missing::Ignore)
                    .build()
                    .await
                    .unwrap();
                let batches: Vec<_> = requests.try_collect().await.unwrap();
                let delivered: usize = batches.iter().map(|b| b.inputs.len()).sum();
                assert_eq!(delivered, values.len(), "{url} {name}");
            }
        }
    }
}

/// `info` over plain HTTP lists nothing (servers answer WebDAV's PROPFIND with an error page,
/// retried each time): a few GETs, and the sizes it cannot know are unknown.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn info_over_plain_http_sends_no_listing() {
    let Some(http) = Loopback::http(fixtures().join("stores")).await else {
        return;
    };
    let dataset = Dataset::open(&http.http_url("xr_v3")).await.unwrap();
    let info = zarrpipe::info::describe(&dataset).await;
    let log = http.faults.log();
    assert!(log.iter().all(|line| line.starts_with("GET ")), "{log:?}");
    assert!(log.len() <= 10, "{} requests: {log:?}", log.len());
    assert!(info.variables.iter().all(|v| v.stored_bytes.is_none()));
    let missing = info.missing.expect("the time coordinate is read");
    assert!(missing
        .unchecked
        .iter()
        .any(|why| why.contains("cannot be listed")));
}

/// Read memory that hands out nothing and counts how often a fetch stage asked it to set
/// memory aside for batches.
#[derive(Debug, Default)]
struct CountedAsks(std::sync::atomic::AtomicUsize);

impl zarrpipe::store::ReadMemory for CountedAsks {
    fn buffer(&self, _len: usize) -> Option<Box<dyn zarrpipe::store::ReadBuffer>> {
        None
    }

    fn expect_batches(self: Arc<Self>, _batch_bytes: u64, _read_ahead: usize) {
        self.0.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
    }
}

/// One epoch's read plans over every data variable of `dataset`, in batches of two samples.
fn read_plans_of_two(
    dataset: &Dataset,
) -> Vec<zarrpipe::core::Staged<Vec<zarrpipe::batcher::Sample>, Vec<zarrpipe::store::ChunkRequest>>>
{
    let layout = Arc::new(
        SampleLayout::new(dataset, &dataset.data_variable_names(), &WindowSpec::new()).unwrap(),
    );
    let batcher = Batcher::with_options(layout, 2, &Default::default()).unwrap();
    batcher.read_plans().collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn read_memory_is_set_aside_only_for_a_local_store() {
    use zarrpipe::store::{FetchBatchesExt, ReadMemory};
    let Some(server) = Loopback::s3().await else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let local = small_w1(dir.path(), None);
    server.upload(&local, "w1.zarr");
    // The fetch stage over one epoch's read plans; how often it asked its memory.
    let asks = |dataset: Dataset| async move {
        let memory = Arc::new(CountedAsks::default());
        let batches: Vec<_> = futures::stream::iter(read_plans_of_two(&dataset))
            .fetch_batches_into(2, 8, Some(memory.clone() as Arc<dyn ReadMemory>))
            .try_collect()
            .await
            .unwrap();
        assert_eq!(batches.len(), 4);
        memory.0.load(std::sync::atomic::Ordering::SeqCst)
    };
    let on_disk = Dataset::open(&local.to_string_lossy()).await.unwrap();
    assert!(on_disk.reads_into_memory());
    assert_eq!(asks(on_disk).await, 1);
    let over_s3 = Dataset::open_with(&server.s3_url("w1.zarr"), &server.s3_options())
        .await
        .unwrap();
    assert!(!over_s3.reads_into_memory());
    assert_eq!(
        asks(over_s3).await,
        0,
        "pinned memory set aside for S3 reads"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_fetch_stage_reads_on_while_nothing_polls_it() {
    use zarrpipe::store::FetchBatchesExt;
    let Some(server) = Loopback::s3().await else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let local = small_w1(dir.path(), None);
    server.upload(&local, "w1.zarr");
    let dataset = Dataset::open_with(&server.s3_url("w1.zarr"), &server.s3_options())
        .await
        .unwrap();
    let plans = read_plans_of_two(&dataset);
    let per_batch = plans[0].payload.len() as u64;
    assert!(per_batch > 4, "{per_batch} reads a batch");
    // Two batches at once, four reads in flight.
    let mut batches = futures::stream::iter(plans).fetch_batches(2, 4);
    let before = server.faults.requests();
    batches.try_next().await.unwrap().unwrap();
    // The consumer is busy elsewhere (a later stage, training): nothing polls the stage, and
    // the second batch's reads go on.
    let started = Instant::now();
    while server.faults.requests() - before < 2 * per_batch
        && started.elapsed() < Duration::from_secs(5)
    {
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let read = server.faults.requests() - before;
    assert_eq!(
        read,
        2 * per_batch,
        "requests while the stage was not polled"
    );
    let second = batches.try_next().await.unwrap().unwrap();
    assert_eq!(second.payload.len() as u64, per_batch);
}
