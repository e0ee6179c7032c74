//! # 06: one pipeline per GPU
//!
//! Data-parallel training reads a different share of each epoch on each GPU. Here one process
//! drives every visible GPU: pipeline `i` runs on `cuda:i` as rank `i` of `n`, so the batcher
//! gives it every n-th batch of the shuffled epoch, and all of them run at once. (With one
//! process per GPU, as torchrun starts them, each takes its rank from `RANK`/`WORLD_SIZE`.)
//!
//! Run it on a multi-GPU host with
//! `cargo run --release --features cuda --example 06_multi_gpu [STORE]`.

#[cfg(feature = "cuda")]
#[tokio::main]
async fn main() -> anyhow::Result<()> {
    use std::time::Instant;
    use zarrpipe::batcher::{Ranks, Shuffle};
    use zarrpipe::cuda::cudarc::driver::CudaContext;
    use zarrpipe::pipeline::GpuDevice;
    use zarrpipe::prelude::*;
    use zarrpipe::sample::ensure_sample;

    let url = match std::env::args().nth(1) {
        Some(url) => url,
        None => ensure_sample(|_, _| {})?,
    };
    let gpus = CudaContext::device_count()? as usize;
    println!("{gpus} GPUs");
    let dataset = std::sync::Arc::new(Dataset::open(&url).await?);
    // Each GPU's decoder and tensor pool, opened once and kept across epochs.
    let devices = (0..gpus)
        .map(|gpu| {
            let options = GpuOptions {
                device: gpu,
                ..Default::default()
            };
            GpuDevice::open(options, 16 << 30)
        })
        .collect::<Result<Vec<_>, _>>()?;
    let epoch = |number: u64| {
        let (dataset, devices) = (dataset.clone(), devices.clone());
        async move {
            let started = Instant::now();
            let mut pipelines = Vec::new();
            for (gpu, device) in devices.into_iter().enumerate() {
                let batches = Pipeline::from_dataset(dataset.clone())
                    .batch_size(4)
                    .shuffle(Shuffle::Full)
                    .seed(42)
                    .epoch(number)
                    .ranks(Ranks {
                        rank: gpu,
                        world_size: gpus,
                    })
                    .gpu(device)
                    .decode_on(DecodeOn::Gpu)
                    .collate_on_gpu()
                    .build()
                    .await?;
                pipelines.push(tokio::spawn(async move {
                    let mut batches = batches;
                    let mut samples = Vec::new();
                    while let Some(batch) = batches.try_next().await? {
                        batch.synchronize()?;
                        samples.extend(batch.samples.iter().map(|sample| sample.index));
                    }
                    let seconds = started.elapsed().as_secs_f64();
                    anyhow::Ok((gpu, samples, batches.metrics(), seconds))
                }));
            }
            let mut results = Vec::new();
            for pipeline in pipelines {
                results.push(pipeline.await??);
            }
            anyhow::Ok((results, started.elapsed().as_secs_f64()))
        }
    };
    epoch(0).await?; // warm-up: page cache, pinned buffers, kernels
    let (results, seconds) = epoch(1).await?;
    let mut every_sample = Vec::new();
    let mut decoded = 0;
    for (gpu, samples, metrics, gpu_seconds) in results {
        let seconds = gpu_seconds;
        println!(
            "cuda:{gpu}: {} samples in {} batches, {:.2} GB decoded in {seconds:.2} s ({:.2} GB/s)",
            metrics.samples,
            metrics.batches,
            metrics.decoded_bytes as f64 / 1e9,
            metrics.decoded_bytes as f64 / 1e9 / seconds,
        );
        decoded += metrics.decoded_bytes;
        every_sample.extend(samples);
    }
    let count = every_sample.len();
    every_sample.sort_unstable();
    every_sample.dedup();
    println!(
        "all GPUs, second epoch: {count} samples ({} distinct: each once), {:.2} GB/s decoded together",
        every_sample.len(),
        decoded as f64 / 1e9 / seconds
    );
    Ok(())
}

#[cfg(not(feature = "cuda"))]
fn main() {
    println!("this example needs the `cuda` feature: cargo run --release --features cuda --example 06_multi_gpu");
}
