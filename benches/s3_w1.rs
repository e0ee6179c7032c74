//! W1 (plain and sharded) served by a local S3 server (s3s-fs on loopback, in this process),
//! read through the full pipeline (fetch, decode, collate) next to a plain concurrent GET of
//! the same objects from the same server in the same run, so the server's own speed cancels
//! out. Reports stored bytes per second of each, their ratio, requests per batch, bytes read
//! per byte delivered, and read amplification (bytes fetched / stored bytes of the chunks or
//! inner chunks the batches need).
//!
//! ```sh
//! cargo bench --bench s3_w1 -- [--time N] [--lat N] [--lon N] [--passes N] [--batch-size N]
//!                               [--codec zstd|none|blosc-lz4] [--work DIR] [--gpu]
//!                               [--prefetch N]
//! ```
//! `--gpu` (build with `--features cuda`) decodes and collates on cuda:0, as a training job
//! would; otherwise the pipeline decodes on the CPU cores it shares with the in-process server.
//! `benches/peers/s3_w1.sh` runs it at full W1 size.

#[path = "../tests/common/mod.rs"]
mod common;

use std::path::Path;
use std::sync::Arc;
use std::time::Instant;

use common::servers::Loopback;
use futures::{StreamExt, TryStreamExt};
use object_store::path::Path as ObjectPath;
use object_store::{ObjectStore, ObjectStoreExt};
use zarrpipe::batcher::{Batcher, EpochOptions, SampleLayout, Shuffle, WindowSpec};
use zarrpipe::generate::{generate, Compression, GenerateOptions};
use zarrpipe::pipeline::Pipeline;
use zarrpipe::store::{Dataset, FetchBatchesExt, StoreOptions};

/// Chunk reads in flight in the pipeline and in its fetch stage alone (the builder's default).
const PIPELINE_READS: usize = 64;

struct Args {
    time: u64,
    lat: u64,
    lon: u64,
    passes: u32,
    batch: usize,
    compression: Compression,
    work: std::path::PathBuf,
    gpu: bool,
    prefetch: usize,
}

fn args() -> Args {
    let mut args = Args {
        time: 16,
        lat: 640,
        lon: 1280,
        passes: 2,
        batch: 4,
        compression: Compression::Zstd,
        work: std::env::temp_dir().join("zarrpipe-s3-bench"),
        gpu: false,
        prefetch: 4,
    };
    let mut it = std::env::args().skip(1);
    while let Some(flag) = it.next() {
        let mut value = || it.next().expect("a value after the flag");
        match flag.as_str() {
            "--time" => args.time = value().parse().unwrap(),
            "--lat" => args.lat = value().parse().unwrap(),
            "--lon" => args.lon = value().parse().unwrap(),
            "--passes" => args.passes = value().parse().unwrap(),
            "--batch-size" => args.batch = value().parse().unwrap(),
            "--work" => args.work = value().into(),
            "--gpu" => args.gpu = true,
            "--prefetch" => args.prefetch = value().parse().unwrap(),
            "--codec" => {
                args.compression = match value().as_str() {
                    "none" => Compression::None,
                    "zstd" => Compression::Zstd,
                    "blosc-lz4" => Compression::BloscLz4,
                    other => panic!("unknown codec {other}"),
                }
            }
            _ => {} // `cargo bench` passes --bench
        }
    }
    args
}

/// Hard links (or copies) a store into the bucket: no second copy of the bytes on disk.
fn link_dir(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).unwrap();
    for entry in std::fs::read_dir(from).unwrap() {
        let entry = entry.unwrap();
        let target = to.join(entry.file_name());
        if entry.file_type().unwrap().is_dir() {
            link_dir(&entry.path(), &target);
        } else if std::fs::hard_link(entry.path(), &target).is_err() {
            std::fs::copy(entry.path(), &target).unwrap();
        }
    }
}

/// Every object under `prefix`, fetched whole with `concurrency` GETs in flight: seconds and
/// bytes.
async fn plain_gets(store: Arc<dyn ObjectStore>, prefix: &str, concurrency: usize) -> (f64, u64) {
    let objects: Vec<_> = store
        .list(Some(&ObjectPath::from(prefix)))
        .map_ok(|meta| meta.location)
        .try_collect()
        .await
        .unwrap();
    let started = Instant::now();
    let bytes: u64 = futures::stream::iter(objects)
        .map(|path| {
            let store = store.clone();
            async move { store.get(&path).await.unwrap().bytes().await.unwrap().len() as u64 }
        })
        .buffer_unordered(concurrency)
        .fold(0, |total, bytes| async move { total + bytes })
        .await;
    (started.elapsed().as_secs_f64(), bytes)
}

struct PipelineRun {
    seconds: f64,
    /// Of `seconds`, building the pipeline (opening the dataset, the decoder's set-up).
    building: f64,
    batches: u64,
    delivered: u64,
    requests: u64,
    fetched: u64,
    needed: u64,
}

/// Where the pipeline decodes: the CPU, or a GPU kept across epochs.
enum Decode {
    Cpu,
    #[cfg(feature = "cuda")]
    Gpu(Arc<zarrpipe::pipeline::GpuDevice>),
}

impl Decode {
    fn new(gpu: bool) -> Self {
        if !gpu {
            return Self::Cpu;
        }
        #[cfg(feature = "cuda")]
        {
            let device = zarrpipe::pipeline::GpuDevice::open(Default::default(), 16 << 30)
                .expect("a CUDA device for --gpu");
            Self::Gpu(device)
        }
        #[cfg(not(feature = "cuda"))]
        panic!("--gpu needs a build with --features cuda")
    }
}

async fn pipeline_epoch(
    url: &str,
    options: &StoreOptions,
    batch: usize,
    prefetch: usize,
    shuffle: Shuffle,
    decode: &Decode,
) -> PipelineRun {
    let dataset = Arc::new(Dataset::open_with(url, options).await.unwrap());
    let before = dataset.io_stats();
    let started = Instant::now();
    let builder = Pipeline::from_dataset(dataset.clone())
        .batch_size(batch)
        .prefetch(prefetch)
        .fetch_concurrency(PIPELINE_READS)
        .shuffle(shuffle)
        .seed(1);
    let (metrics, building) = match decode {
        Decode::Cpu => {
            let mut batches = builder.build().await.unwrap();
            let building = started.elapsed().as_secs_f64();
            while batches.try_next().await.unwrap().is_some() {}
            (batches.metrics(), building)
        }
        #[cfg(feature = "cuda")]
        Decode::Gpu(device) => {
            let mut batches = builder
                .gpu(device.clone())
                .decode_on(zarrpipe::pipeline::DecodeOn::Gpu)
                .collate_on_gpu()
                .build()
                .await
                .unwrap();
            let building = started.elapsed().as_secs_f64();
            while let Some(batch) = batches.try_next().await.unwrap() {
                batch.synchronize().unwrap();
            }
            (batches.metrics(), building)
        }
    };
    let seconds = started.elapsed().as_secs_f64();
    let io = dataset.io_stats();
    PipelineRun {
        seconds,
        building,
        batches: metrics.batches,
        delivered: metrics.delivered_bytes,
        requests: io.requests - before.requests,
        fetched: io.bytes_fetched - before.bytes_fetched,
        needed: io.bytes_needed - before.bytes_needed,
    }
}

/// The pipeline's fetch stage alone over the same epoch (the same read plans through
/// `fetch_batches`, `prefetch` batches at once sharing the pipeline's 64 reads in flight, no
/// decoding): seconds and bytes fetched.
async fn fetch_only_epoch(
    url: &str,
    options: &StoreOptions,
    batch: usize,
    prefetch: usize,
    shuffle: Shuffle,
) -> (f64, u64) {
    let dataset = Dataset::open_with(url, options).await.unwrap();
    let layout = Arc::new(
        SampleLayout::new(&dataset, &dataset.data_variable_names(), &WindowSpec::new()).unwrap(),
    );
    let epoch = EpochOptions {
        shuffle,
        seed: 1,
        ..EpochOptions::default()
    };
    let batcher = Batcher::with_options(layout.clone(), batch, &epoch).unwrap();
    let before = dataset.io_stats().bytes_fetched;
    let started = Instant::now();
    futures::stream::iter(batcher.read_plans())
        .fetch_batches(prefetch, PIPELINE_READS)
        .try_for_each(|_| futures::future::ready(Ok(())))
        .await
        .unwrap();
    (
        started.elapsed().as_secs_f64(),
        dataset.io_stats().bytes_fetched - before,
    )
}

#[tokio::main]
async fn main() {
    let args = args();
    let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
    let decode = Decode::new(args.gpu);
    println!(
        "host: {cores} cores; W1 of {} time steps x 43 fields of {} x {} float32, {:?}; batch {}, prefetch {}; decoding on the {}",
        args.time, args.lat, args.lon, args.compression, args.batch, args.prefetch,
        if args.gpu { "GPU" } else { "CPU" }
    );
    let server = Loopback::s3().await.expect("a loopback port");
    let options = server.s3_options();
    let object_store = {
        let location = zarrpipe::store::Location::parse_with(&server.s3_url(""), &options).unwrap();
        location.store
    };
    println!(
        "| store | order | plain GETs MB/s | pipeline MB/s (stored) | ratio | of its time, building s | fetch stage alone MB/s | ratio | requests/batch | bytes read / byte delivered | read amplification | pipeline GB/s delivered |"
    );
    println!("| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |");
    for (name, shard) in [("w1", None), ("w1_sharded", Some(4))] {
        let local = args.work.join(format!(
            "{name}_{}x{}x{}_{:?}",
            args.time, args.lat, args.lon, args.compression
        ));
        if !local.join("zarr.json").exists() {
            let options = GenerateOptions {
                time: args.time,
                lat: args.lat,
                lon: args.lon,
                shard,
                compression: args.compression,
                ..GenerateOptions::default()
            };
            generate(&local, &options, |_, _| {}).expect("generate");
            common::consolidate(&local);
        }
        link_dir(
            &local,
            &server.root.join(common::servers::BUCKET).join(name),
        );
        // As a PUT would: without a recorded ETag, s3s-fs hashes the whole object on every
        // ranged GET, so reading a quarter of a shard would cost the server the whole shard.
        server.register_objects();
        let url = server.s3_url(name);
        let orders: &[(&str, Shuffle)] = if shard.is_some() {
            &[("natural", Shuffle::None), ("shuffled", Shuffle::Full)]
        } else {
            &[("natural", Shuffle::None)]
        };
        for &(order, shuffle) in orders {
            // Interleaved passes, best of each (one warm-up of each first).
            let mut best_get: Option<(f64, u64)> = None;
            let mut best_run: Option<PipelineRun> = None;
            let mut best_fetch: Option<(f64, u64)> = None;
            for pass in 0..=args.passes {
                let get = plain_gets(object_store.clone(), name, options.max_requests).await;
                let run =
                    pipeline_epoch(&url, &options, args.batch, args.prefetch, shuffle, &decode)
                        .await;
                let (logged, started) = (server.faults.requests(), Instant::now());
                let fetch =
                    fetch_only_epoch(&url, &options, args.batch, args.prefetch, shuffle).await;
                if std::env::var_os("S3_BENCH_VERBOSE").is_some() {
                    eprintln!(
                        "{name} {order} fetch stage: {:.2} s, {} server requests",
                        started.elapsed().as_secs_f64(),
                        server.faults.requests() - logged
                    );
                }
                if pass == 0 {
                    continue;
                }
                if best_fetch.is_none_or(|(seconds, _)| fetch.0 < seconds) {
                    best_fetch = Some(fetch);
                }
                if best_get.is_none_or(|(seconds, _)| get.0 < seconds) {
                    best_get = Some(get);
                }
                if best_run
                    .as_ref()
                    .is_none_or(|best| run.seconds < best.seconds)
                {
                    best_run = Some(run);
                }
            }
            let (get_seconds, get_bytes) = best_get.unwrap();
            let run = best_run.unwrap();
            let get_rate = get_bytes as f64 / get_seconds / 1e6;
            let run_rate = run.fetched as f64 / run.seconds / 1e6;
            let (fetch_seconds, fetch_bytes) = best_fetch.unwrap();
            let fetch_rate = fetch_bytes as f64 / fetch_seconds / 1e6;
            println!(
                "| {name} | {order} | {get_rate:.0} | {run_rate:.0} | {:.2} | {:.2} / {:.2} | {fetch_rate:.0} | {:.2} | {:.1} | {:.3} | {:.4} | {:.2} |",
                run_rate / get_rate,
                run.building,
                run.seconds,
                fetch_rate / get_rate,
                run.requests as f64 / run.batches as f64,
                run.fetched as f64 / run.delivered as f64,
                run.fetched as f64 / run.needed as f64,
                run.delivered as f64 / run.seconds / 1e9,
            );
        }
    }
}
