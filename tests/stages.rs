//! The stages as a user chains them by hand: the same batches as the builder's, with metrics
//! and a resumable state; and split decoding's sharing out of batches, checked on the CPU with
//! two CPU decoders standing for the two sides (the GPU side runs in `tests/gpu_pipeline.rs`).

use std::path::Path;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use futures::future::BoxFuture;
use zarrpipe::batcher::{Batcher, EpochOptions, SampleLayout, Shuffle, WindowSpec};
use zarrpipe::codec::{DecodedChunks, SplitDecoder, SplitPolicy};
use zarrpipe::core::{Device, Pace};
use zarrpipe::generate::{generate, Compression, GenerateOptions};
use zarrpipe::pipeline::PipelineBuilder;
use zarrpipe::prelude::*;
use zarrpipe::store::EncodedChunk;

fn write_store(dir: &Path, compression: Compression) -> String {
    let options = GenerateOptions {
        time: 5,
        levels: 2,
        lat: 16,
        lon: 32,
        compression,
        shard: None,
        seed: 3,
        chunks: None,
        variables: Default::default(),
    };
    let path = dir.join("w1.zarr");
    generate(&path, &options, |_, _| {}).expect("generate");
    path.to_string_lossy().into_owned()
}

fn patches(url: &str) -> PipelineBuilder {
    Pipeline::builder(url)
        .variables(["t2m", "z"])
        .window_spec(patch_spec())
        .shuffle(Shuffle::Full)
        .seed(9)
        .batch_size(3)
}

/// One epoch of `patches` as the builder makes it: what chains built by hand are checked against.
async fn built_epoch(url: &str) -> Vec<Batch> {
    patches(url)
        .build()
        .await
        .unwrap()
        .try_collect()
        .await
        .unwrap()
}

fn patch_spec() -> WindowSpec {
    WindowSpec::new()
        .window("latitude", 8, 4)
        .window("longitude", 8, 8)
}

/// Each batch's sample numbers and input bits.
fn contents(batches: &[Batch]) -> Vec<(Vec<u64>, Vec<u32>)> {
    batches
        .iter()
        .map(|batch| {
            (
                batch.samples.iter().map(|s| s.index).collect(),
                batch.inputs.iter().map(|v| v.to_bits()).collect(),
            )
        })
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_chain_composed_by_hand_equals_the_builder_with_metrics_and_state() {
    let dir = tempfile::tempdir().unwrap();
    let url = write_store(dir.path(), Compression::Zstd);
    let built: Vec<Batch> = built_epoch(&url).await;

    let dataset = Arc::new(Dataset::open(&url).await.unwrap());
    let layout = Arc::new(SampleLayout::new(&dataset, &["t2m", "z"], &patch_spec()).unwrap());
    let epoch = shuffled();
    let chain = |batcher: &Batcher| {
        stream::iter(batcher.read_plans())
            .fetch_batches(2, 16)
            .decode_batches(Arc::new(CpuDecoder::new()))
            .collate_batches(Arc::new(HostCollator::new(layout.clone())))
            .prefetch(2)
    };
    let batcher = Batcher::with_options(layout.clone(), 3, &epoch).unwrap();
    let mut by_hand = BatchStream::new(chain(&batcher), dataset.clone(), batcher, Device::Cpu);
    let mut first = Vec::new();
    for _ in 0..2 {
        first.push(by_hand.try_next().await.unwrap().expect("a batch"));
    }
    let state = by_hand.state();
    let metrics = by_hand.metrics();
    assert_eq!(metrics.batches, 2);
    assert_eq!(metrics.samples, 6);
    assert!(
        metrics.chunks > 0 && metrics.decoded_bytes > 0,
        "{metrics:?}"
    );
    assert_eq!(metrics.cpu_decoded_chunks, metrics.chunks);
    assert!(metrics.decode_busy > Duration::ZERO && metrics.collate_busy > Duration::ZERO);
    assert!(
        metrics.decode_cpu > Duration::ZERO && metrics.decode_cpu <= metrics.decode_busy,
        "{metrics:?}"
    );
    drop(by_hand);

    // The rest of the epoch from the saved state, through a new chain.
    let batcher = Batcher::resume(layout.clone(), 3, &epoch, &state).unwrap();
    let rest: Vec<Batch> = BatchStream::new(chain(&batcher), dataset, batcher, Device::Cpu)
        .try_collect()
        .await
        .unwrap();
    first.extend(rest);
    assert_eq!(contents(&first), contents(&built));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stream_refuses_a_chain_its_batcher_or_device_did_not_plan() {
    let dir = tempfile::tempdir().unwrap();
    let url = write_store(dir.path(), Compression::Zstd);
    let dataset = Arc::new(Dataset::open(&url).await.unwrap());
    let layout = Arc::new(SampleLayout::new(&dataset, &["t2m", "z"], &patch_spec()).unwrap());
    let chain = || {
        let batcher = Batcher::with_options(layout.clone(), 3, &shuffled()).unwrap();
        stream::iter(batcher.read_plans())
            .fetch_batches(2, 16)
            .decode_batches(Arc::new(CpuDecoder::new()))
            .collate_batches(Arc::new(HostCollator::new(layout.clone())))
    };
    let other_seed = EpochOptions {
        seed: 10,
        ..shuffled()
    };
    let other = Batcher::with_options(layout.clone(), 3, &other_seed).unwrap();
    let mut stream = BatchStream::new(chain(), dataset.clone(), other, Device::Cpu);
    let error = stream.try_next().await.unwrap_err().to_string();
    assert!(
        error.contains("batch 0 of epoch 0 holds other samples"),
        "{error}"
    );
    assert!(stream.try_next().await.unwrap().is_none());

    let batcher = Batcher::with_options(layout.clone(), 3, &shuffled()).unwrap();
    let mut stream = BatchStream::new(chain(), dataset, batcher, Device::Cuda(0));
    let error = stream.try_next().await.unwrap_err().to_string();
    assert!(
        error.contains("is on cpu, the stream's device is cuda:0"),
        "{error}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_consumers_pace_reaches_an_auto_decoder_through_the_batches() {
    let dir = tempfile::tempdir().unwrap();
    let url = write_store(dir.path(), Compression::Zstd);
    let (cpu, gpu) = (Arc::new(Counting::default()), Arc::new(Counting::default()));
    let auto = SplitPolicy::Auto { gpu_share: None };
    let split = Arc::new(SplitDecoder::new(cpu, gpu, auto));
    let dataset = Arc::new(Dataset::open(&url).await.unwrap());
    let layout = Arc::new(SampleLayout::new(&dataset, &["t2m", "z"], &patch_spec()).unwrap());
    let batcher = Batcher::with_options(layout.clone(), 3, &shuffled()).unwrap();
    let chain = stream::iter(batcher.read_plans())
        .fetch_batches(1, 16)
        .decode_batches(split.clone())
        .collate_batches(Arc::new(HostCollator::new(layout)));
    let count = batcher.num_batches();
    let mut stream = BatchStream::new(chain, dataset, batcher, Device::Cpu);
    while let Some(_batch) = stream.try_next().await.unwrap() {
        tokio::time::sleep(Duration::from_millis(2)).await;
    }
    let pace = split.pace().counts();
    assert_eq!(pace.delivered, count);
    assert!(
        pace.steps >= Duration::from_millis(2 * (count - 1)),
        "{pace:?}"
    );
}

/// A CPU decoder that counts the chunks it was given: one side of a split.
#[derive(Debug, Default)]
struct Counting {
    chunks: AtomicUsize,
    inner: CpuDecoder,
}

impl BatchDecoder for Counting {
    fn decode_chunks(
        self: Arc<Self>,
        chunks: Vec<EncodedChunk>,
    ) -> BoxFuture<'static, zarrpipe::codec::Result<DecodedChunks>> {
        self.chunks.fetch_add(chunks.len(), Ordering::Relaxed);
        Arc::new(self.inner.clone()).decode_chunks(chunks)
    }
}

/// An epoch of `patches` decoded by a split of two counting CPU decoders whose policy reads
/// the consumer's pace from `pace`; the batches and the chunks each side decoded.
async fn split_epoch(
    url: &str,
    policy: SplitPolicy,
    pace: Arc<Pace>,
) -> (Vec<Batch>, usize, usize) {
    let (cpu, gpu) = (Arc::new(Counting::default()), Arc::new(Counting::default()));
    let split = Arc::new(SplitDecoder::new(cpu.clone(), gpu.clone(), policy).with_pace(pace));
    let dataset = Arc::new(Dataset::open(url).await.unwrap());
    let layout = Arc::new(SampleLayout::new(&dataset, &["t2m", "z"], &patch_spec()).unwrap());
    let batcher = Batcher::with_options(layout.clone(), 3, &shuffled()).unwrap();
    let batches: Vec<Batch> = stream::iter(batcher.read_plans())
        .fetch_batches(1, 16)
        .decode_batches(split)
        .collate_batches(Arc::new(HostCollator::new(layout)))
        .try_collect()
        .await
        .unwrap();
    let counts = (
        cpu.chunks.load(Ordering::Relaxed),
        gpu.chunks.load(Ordering::Relaxed),
    );
    (batches, counts.0, counts.1)
}

fn shuffled() -> EpochOptions {
    EpochOptions {
        shuffle: Shuffle::Full,
        seed: 9,
        ..Default::default()
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn split_decoding_shares_each_batch_and_changes_no_bit() {
    let dir = tempfile::tempdir().unwrap();
    for compression in [Compression::Zstd, Compression::BloscLz4] {
        let url = write_store(&dir.path().join(format!("{compression:?}")), compression);
        let reference: Vec<Batch> = built_epoch(&url).await;
        // Balanced decodes both parts at once; a fixed split hands its CPU part on to be
        // decoded in place, beside its GPU part still decoding.
        let fixed = SplitPolicy::Fixed { gpu_chunks: 0.5 };
        for policy in [SplitPolicy::Balanced, fixed] {
            let (split, cpu, gpu) = split_epoch(&url, policy, Arc::default()).await;
            assert_eq!(
                contents(&split),
                contents(&reference),
                "{compression:?} {policy:?}"
            );
            assert!(
                cpu > 0 && gpu > 0,
                "{compression:?} {policy:?}: {cpu} chunks on one side, {gpu} on the other"
            );
            let chunks: u64 = split.iter().map(|batch| batch.stats.chunks).sum();
            assert_eq!((cpu + gpu) as u64, chunks, "{policy:?}");
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn auto_decoding_leaves_the_gpu_alone_while_the_consumer_keeps_up() {
    let dir = tempfile::tempdir().unwrap();
    let url = write_store(dir.path(), Compression::Zstd);
    let auto = SplitPolicy::Auto { gpu_share: None };
    // Nothing records a wait: the CPU alone decodes.
    let keeping_up = Arc::new(Pace::default());
    let (_, cpu, gpu) = split_epoch(&url, auto, keeping_up).await;
    assert!(cpu > 0);
    assert_eq!(gpu, 0, "the GPU side decoded while nobody waited");
    // A consumer that waited for the batches before: the GPU side takes a share.
    let waiting = Arc::new(Pace::default());
    for _ in 0..4 {
        waiting.record(Duration::from_millis(50), Duration::from_millis(100));
    }
    let (batches, cpu_when_waiting, gpu_when_waiting) = split_epoch(&url, auto, waiting).await;
    assert!(
        gpu_when_waiting > 0 && cpu_when_waiting > 0,
        "{cpu_when_waiting} chunks on the CPU side, {gpu_when_waiting} on the GPU side"
    );
    // Its CPU part, handed on undecoded beside the GPU side's decoded one, changes no bit,
    // and each chunk is counted once.
    let reference: Vec<Batch> = built_epoch(&url).await;
    assert_eq!(contents(&batches), contents(&reference));
    let chunks: u64 = batches.iter().map(|batch| batch.stats.chunks).sum();
    assert_eq!((cpu_when_waiting + gpu_when_waiting) as u64, chunks);
}

#[test]
fn gpu_stages_without_the_cuda_feature_say_so() {
    if cfg!(feature = "cuda") {
        return; // the GPU host's suites cover these
    }
    let dir = tempfile::tempdir().unwrap();
    let url = write_store(dir.path(), Compression::Zstd);
    for stages in [
        ["--decode", "gpu"],
        ["--decode", "split"],
        ["--collate", "gpu"],
    ] {
        let output = std::process::Command::new(env!("CARGO_BIN_EXE_zarrpipe"))
            .args(["run", &url, "--device", "cpu"])
            .args(stages)
            .output()
            .unwrap();
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert!(
            !output.status.success(),
            "{stages:?} succeeded without CUDA"
        );
        assert!(stderr.contains("`cuda` feature"), "{stages:?}: {stderr}");
    }
}
