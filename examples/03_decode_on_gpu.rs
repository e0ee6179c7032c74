//! # 03: decoding chunks on the GPU
//!
//! Reads every chunk of the sample dataset (or of the store given as the first argument),
//! decodes them once on every CPU core with zarrs and once on the GPU as one batch (nvCOMP for
//! zstd, lz4, snappy and deflate; zarrpipe's kernels for byte order, shuffles, transposes and
//! shards), checks that both give the same bytes, and prints both throughputs.
//!
//! Run it on a GPU host with `cargo run --release --features cuda --example 03_decode_on_gpu`;
//! without a GPU it says why and decodes on the CPU only.

use std::sync::Arc;
use std::time::Instant;

use futures::{stream, TryStreamExt};
use rayon::prelude::*;
use zarrpipe::codec::{decode_on_cpu, DecodePath, GpuDecoder, GpuOptions};
use zarrpipe::prelude::*;
use zarrpipe::sample::ensure_sample;

fn gigabytes_per_second(bytes: usize, seconds: f64) -> f64 {
    bytes as f64 / seconds / 1e9
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    // --- 1. Read the encoded chunks into memory ---
    let url = match std::env::args().nth(1) {
        Some(url) => url,
        None => ensure_sample(|_, _| {})?,
    };
    let dataset = Dataset::open(&url).await?;
    let mut requests = Vec::new();
    for variable in dataset.variables() {
        let whole: Vec<_> = variable.shape().iter().map(|&n| 0..n).collect();
        for indices in variable.chunks_in(&whole) {
            requests.push(ChunkRequest::new(Arc::clone(variable), indices));
        }
    }
    let chunks: Vec<_> = stream::iter(requests).fetch(64).try_collect().await?;
    let stored: usize = chunks.iter().map(|chunk| chunk.stored_len()).sum();
    println!(
        "{url}: {} chunks, {:.1} MB stored",
        chunks.len(),
        stored as f64 / 1e6
    );

    // --- 2. Decode on every CPU core ---
    let started = Instant::now();
    let on_cpu: Vec<_> = chunks
        .par_iter()
        .map(|chunk| decode_on_cpu(chunk.clone()))
        .collect::<Result<_, _>>()?;
    let cpu_seconds = started.elapsed().as_secs_f64();
    let decoded: usize = on_cpu.iter().map(|chunk| chunk.bytes.len()).sum();
    println!(
        "CPU ({} threads): {:.1} MB in {:.3} s = {:.2} GB/s",
        rayon::current_num_threads(),
        decoded as f64 / 1e6,
        cpu_seconds,
        gigabytes_per_second(decoded, cpu_seconds)
    );

    // --- 3. Decode on the GPU, as one batch ---
    let decoder = match GpuDecoder::new(GpuOptions::default()) {
        Ok(decoder) => decoder,
        Err(error) => {
            println!("GPU: skipped ({error})");
            return Ok(());
        }
    };
    println!(
        "GPU: {} (nvCOMP from {})",
        decoder.device_name(),
        decoder.nvcomp_path()
    );
    decoder.decode_batch(chunks.clone())?; // warm-up: kernels, memory pools
    let started = Instant::now();
    let batch = decoder.decode_batch(chunks.clone())?; // returns after the stream finished
    let gpu_seconds = started.elapsed().as_secs_f64();
    let fallbacks = batch
        .chunks
        .iter()
        .flatten()
        .filter(|chunk| matches!(chunk.path, DecodePath::CpuFallback { .. }))
        .count();
    println!(
        "GPU: {:.1} MB in {:.3} s = {:.2} GB/s (planning {:.1} ms, staging {:.1} ms, device {:.1} ms; {fallbacks} chunks decoded on the CPU)",
        decoded as f64 / 1e6,
        gpu_seconds,
        gigabytes_per_second(decoded, gpu_seconds),
        batch.timings.plan.as_secs_f64() * 1e3,
        batch.timings.stage.as_secs_f64() * 1e3,
        batch.timings.device.as_secs_f64() * 1e3,
    );

    // The ceiling: nvCOMP's decompression alone, on the same streams already on the device.
    let (bare, bare_bytes) = decoder.time_bare_nvcomp(chunks.clone(), 3)?;
    println!(
        "bare nvCOMP calls: {:.2} GB/s of their output ({:.1} ms)",
        gigabytes_per_second(bare_bytes, bare.as_secs_f64()),
        bare.as_secs_f64() * 1e3
    );

    // --- 4. Compare, bit for bit ---
    let on_gpu = batch.into_host()?;
    for (cpu, gpu) in on_cpu.iter().zip(on_gpu) {
        let gpu = gpu?;
        anyhow::ensure!(cpu.bytes == gpu.bytes, "{} differs", cpu.request);
    }
    println!(
        "identical: {} chunks; GPU / CPU = {:.1}x",
        on_cpu.len(),
        cpu_seconds / gpu_seconds
    );
    Ok(())
}
