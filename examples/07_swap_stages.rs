//! # 07: swapping stages between the CPU and the GPU
//!
//! The chain is read plans -> `fetch_batches` -> `decode_batches` -> `collate_batches` ->
//! `prefetch`, and each stage runs on either side: decoding is a value (`DecodeOn::Cpu` or
//! `DecodeOn::Gpu`, or any `Arc<dyn BatchDecoder>`), collation a place (`Host` tensors, or
//! `Gpu` tensors after `.collate_on_gpu()`). This notebook streams the same shuffled epoch of
//! the sample dataset through every combination this machine allows (the CPU one everywhere;
//! with the `cuda` feature and a GPU, also CPU decode + GPU collate, GPU decode + GPU collate
//! and GPU decode + host tensors), checks that every batch equals the CPU's bit for bit, and
//! prints each combination's time, the chunks each side decoded and the GPU time it used.
//!
//! Run it with `cargo run --release --example 07_swap_stages` (CPU only), or on a GPU host
//! with `cargo run --release --features cuda --example 07_swap_stages`. Give a store's path
//! as the first argument to use another dataset.

use std::time::Instant;

use zarrpipe::batcher::Shuffle;
use zarrpipe::pipeline::{CollateOn, MetricsSnapshot, PipelineBuilder};
use zarrpipe::prelude::*;
use zarrpipe::sample::ensure_sample;

/// One epoch's inputs as host float32, batch by batch, with its time and counters.
struct Epoch {
    inputs: Vec<Vec<f32>>,
    seconds: f64,
    metrics: MetricsSnapshot,
}

/// Streams one epoch; `to_host` reads a batch's inputs back (after the clock: the time is
/// the pipeline's, with each batch complete where it was made).
async fn epoch<P: CollateOn>(
    builder: PipelineBuilder<P>,
    ready: impl Fn(&Batch<P>) -> anyhow::Result<()>,
    to_host: impl Fn(&Batch<P>) -> anyhow::Result<Vec<f32>>,
) -> anyhow::Result<Epoch> {
    let mut batches = builder.build().await?;
    let mut kept = Vec::new();
    let started = Instant::now();
    while let Some(batch) = batches.try_next().await? {
        ready(&batch)?;
        kept.push(batch);
    }
    let seconds = started.elapsed().as_secs_f64();
    let inputs = kept.iter().map(&to_host).collect::<anyhow::Result<_>>()?;
    Ok(Epoch {
        inputs,
        seconds,
        metrics: batches.metrics(),
    })
}

fn host_inputs(batch: &Batch) -> anyhow::Result<Vec<f32>> {
    Ok(batch.inputs.iter().copied().collect())
}

/// Prints a combination's figures and checks its batches against the CPU's, bit for bit.
fn report(name: &str, epoch: &Epoch, reference: &Epoch) -> anyhow::Result<()> {
    let same = epoch.inputs.len() == reference.inputs.len()
        && epoch.inputs.iter().zip(&reference.inputs).all(|(a, b)| {
            a.len() == b.len() && a.iter().zip(b).all(|(x, y)| x.to_bits() == y.to_bits())
        });
    let m = &epoch.metrics;
    println!(
        "{name:<26} {:>7.3} s {:>7.2} GB/s  chunks CPU {:>4} GPU {:>4}  GPU {:>6.2} ms/batch  {}",
        epoch.seconds,
        m.delivered_bytes as f64 / 1e9 / epoch.seconds,
        m.cpu_decoded_chunks,
        m.gpu_decoded_chunks,
        1e3 * m.gpu_busy.as_secs_f64() / m.batches.max(1) as f64,
        if same {
            "equal to the CPU's"
        } else {
            "DIFFERENT"
        },
    );
    anyhow::ensure!(same, "{name}: batches differ from the CPU's");
    Ok(())
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    // --- 1. One epoch, described once: shuffled 64 x 64 patches, batches of 8 ---
    let url = match std::env::args().nth(1) {
        Some(url) => url,
        None => ensure_sample(|_, _| {})?,
    };
    let dataset = std::sync::Arc::new(Dataset::open(&url).await?);
    let builder = || {
        Pipeline::from_dataset(dataset.clone())
            .window("latitude", 64, 48)
            .window("longitude", 64, 64)
            .shuffle(Shuffle::Full)
            .seed(7)
            .batch_size(8)
    };

    // --- 2. CPU decode, CPU collate: the reference ---
    let reference = epoch(builder().decode_on(DecodeOn::Cpu), |_| Ok(()), host_inputs).await?;
    println!(
        "{} batches of {:?}",
        reference.inputs.len(),
        builder().build().await?.layout().sample_shape()
    );
    report("CPU decode, CPU collate", &reference, &reference)?;

    // --- 3. The combinations with a GPU stage ---
    on_gpu(builder, &reference).await
}

#[cfg(feature = "cuda")]
async fn on_gpu(builder: impl Fn() -> PipelineBuilder, reference: &Epoch) -> anyhow::Result<()> {
    use zarrpipe::pipeline::Gpu;
    let gpu = match GpuDevice::open(GpuOptions::default(), 8 << 30) {
        Ok(gpu) => gpu,
        Err(error) => {
            println!("no GPU combinations here: {error}");
            return Ok(());
        }
    };
    let on_device = |decode| {
        builder()
            .gpu(gpu.clone())
            .decode_on(decode)
            .collate_on_gpu()
    };
    let ready = |batch: &Batch<Gpu>| Ok(batch.synchronize()?);
    let to_host = |batch: &Batch<Gpu>| -> anyhow::Result<Vec<f32>> {
        Ok(batch.inputs.to_host_f32()?.iter().copied().collect())
    };
    // A warm-up epoch: kernels compile and buffers grow once.
    epoch(on_device(DecodeOn::Gpu), ready, to_host).await?;
    let combination = epoch(on_device(DecodeOn::Cpu), ready, to_host).await?;
    report("CPU decode, GPU collate", &combination, reference)?;
    let combination = epoch(on_device(DecodeOn::Gpu), ready, to_host).await?;
    report("GPU decode, GPU collate", &combination, reference)?;
    let to_host_tensors = builder().gpu(gpu.clone()).decode_on(DecodeOn::Gpu);
    let combination = epoch(to_host_tensors, |_| Ok(()), host_inputs).await?;
    report("GPU decode, CPU collate", &combination, reference)
}

#[cfg(not(feature = "cuda"))]
async fn on_gpu(_: impl Fn() -> PipelineBuilder, _: &Epoch) -> anyhow::Result<()> {
    println!("GPU combinations: built without the `cuda` feature (--features cuda)");
    Ok(())
}
