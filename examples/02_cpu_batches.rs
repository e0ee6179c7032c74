//! # 02: batches on the CPU
//!
//! Cuts 64 x 64 patches (overlapping by 16 along latitude) out of the sample dataset, stacks
//! the surface variables and every level of `z` and `t` as channels, and streams batches of 8
//! through the CPU pipeline: concurrent reads, parallel decoding on every core, collation into
//! `[batch, channel, latitude, longitude]` float32 tensors. Prints shapes and throughput.
//!
//! Run it with `cargo run --release --example 02_cpu_batches`.

use std::time::Instant;

use zarrpipe::prelude::*;
use zarrpipe::sample::ensure_sample;

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    // --- 1. Describe the pipeline ---
    let url = ensure_sample(|_, _| {})?;
    let mut batches = Pipeline::builder(url)
        .variables(["t2m", "u10", "v10", "msl", "z", "t"])
        .window("latitude", 64, 48)
        .window("longitude", 64, 64)
        .batch_size(8)
        .prefetch(2)
        .build()
        .await?;

    // --- 2. What one sample looks like ---
    let layout = batches.layout().clone();
    let labels: Vec<String> = layout.channels().iter().map(|c| c.label()).collect();
    println!("sample shape {:?}", layout.sample_shape());
    println!("channels: {}", labels.join(", "));
    println!(
        "{} samples in {} batches",
        layout.num_samples(),
        batches.num_batches()
    );

    // --- 3. Stream the epoch ---
    let started = Instant::now();
    while let Some(batch) = batches.try_next().await? {
        if batch.index == 0 {
            let first = &batch.samples[0];
            println!(
                "batch 0: inputs {:?}, first sample at {:?}",
                batch.inputs.shape(),
                first.origin
            );
        }
    }
    let seconds = started.elapsed().as_secs_f64();

    // --- 4. Throughput and where the time went ---
    let metrics = batches.metrics();
    println!(
        "{} batches in {:.3} s: {:.2} GB/s decoded, {:.2} GB/s of batches delivered",
        metrics.batches,
        seconds,
        metrics.decoded_bytes as f64 / 1e9 / seconds,
        metrics.delivered_bytes as f64 / 1e9 / seconds
    );
    println!(
        "busy: fetch {:.3} s, decode {:.3} s, collate {:.3} s; consumer waited {:.3} s",
        metrics.fetch_busy.as_secs_f64(),
        metrics.decode_busy.as_secs_f64(),
        metrics.collate_busy.as_secs_f64(),
        metrics.consumer_wait.as_secs_f64()
    );
    Ok(())
}
