//! # 05: the overlapped GPU pipeline
//!
//! Streams one epoch of the sample dataset (or of the store given as the first argument) into
//! batches in GPU memory: chunks are read as async tasks a few batches ahead, their
//! still-compressed bytes are staged through reused pinned buffers and uploaded on a copy
//! stream, decoded in one batched nvCOMP call per codec, and gathered into one
//! `[batch, channel, lat, lon]` tensor by one kernel, here in bfloat16 with each channel
//! normalised and NaN replaced by 0. While batch k is consumed, k+1 decodes and k+2 is read.
//!
//! Run it on a GPU host with `cargo run --release --features cuda --example 05_gpu_pipeline`.
//! With `--features candle` (build set-up: `scripts/cuda-build-env.sh`) each batch is handed
//! to candle without a copy and candle computes the per-channel means.
//! Without the feature or a GPU it says why.

#[cfg(feature = "cuda")]
#[tokio::main]
async fn main() -> anyhow::Result<()> {
    use std::time::Instant;
    use zarrpipe::collate::{CollateOptions, TensorDType};
    use zarrpipe::prelude::*;
    use zarrpipe::sample::ensure_sample;
    use zarrpipe::stats::variable_stats;

    // --- 1. Statistics for normalisation (what `zarrpipe stats --json` prints) ---
    let url = match std::env::args().nth(1) {
        Some(url) => url,
        None => ensure_sample(|_, _| {})?,
    };
    let dataset = std::sync::Arc::new(Dataset::open(&url).await?);
    let mut stats = Vec::new();
    for name in dataset.data_variable_names() {
        let variable = dataset.variable(&name)?;
        stats.push(variable_stats(variable, std::sync::Arc::new(CpuDecoder::new()), 64).await?);
    }

    // --- 2. The pipeline: decode and collate on cuda:0, bf16 tensors ---
    let options = CollateOptions {
        dtype: TensorDType::BF16,
        nan_fill: Some(0.0),
        ..Default::default()
    };
    let mut batches = Pipeline::from_dataset(dataset.clone())
        .batch_size(4)
        .prefetch(4)
        .collate_options(options)
        .normalize_with_stats(serde_json::to_string(&stats)?)
        .device(Device::Cuda(0))
        .decode_on(DecodeOn::Gpu)
        .collate_on_gpu()
        .build()
        .await?;

    // --- 3. Consume: a training step would wait on `batch.ready` on its own stream ---
    #[cfg(feature = "candle")]
    let candle_device = zarrpipe::candle::Device::new_cuda(0)?;
    let started = Instant::now();
    let mut consumed = 0;
    while let Some(batch) = batches.try_next().await? {
        if batch.index == 0 {
            println!(
                "first batch: {:?} {:?} on cuda:{}",
                batch.inputs.shape(),
                batch.inputs.dtype(),
                batch.inputs.device_ordinal()
            );
        }
        #[cfg(not(feature = "candle"))]
        {
            batch.synchronize()?;
            if batch.index == 0 {
                // Normalised values: mean near 0, spread near 1.
                let values = batch.inputs.to_host_f32()?;
                let mean = values.iter().map(|&v| f64::from(v)).sum::<f64>() / values.len() as f64;
                println!("mean of the first batch after normalisation: {mean:.3}");
            }
        }
        // With the `candle` feature the batch becomes candle tensors on the same device memory;
        // candle's stream waits for the batch on the device, so nothing blocks here.
        #[cfg(feature = "candle")]
        {
            use zarrpipe::candle::DType;
            let index = batch.index;
            let batch = batch.into_candle(&candle_device)?;
            if index == 0 {
                // Per-channel means of `[batch, channel, lat, lon]`, computed by candle. A
                // variable's statistics cover all its levels, so single levels sit off 0.
                let means = batch
                    .inputs
                    .to_dtype(DType::F32)?
                    .mean((0, 2, 3))?
                    .to_vec1::<f32>()?;
                let shown: Vec<String> = means.iter().take(6).map(|m| format!("{m:.3}")).collect();
                println!(
                    "candle: per-channel means of the first batch: {}",
                    shown.join(" ")
                );
            }
        }
        consumed += 1;
    }
    #[cfg(feature = "candle")]
    candle_device.synchronize()?;
    let seconds = started.elapsed().as_secs_f64();

    // --- 4. Where the time went ---
    let metrics = batches.metrics();
    println!(
        "{} samples in {} batches, {seconds:.2} s: {:.2} GB decoded ({:.2} GB/s), {:.2} GB delivered",
        metrics.samples,
        metrics.batches,
        metrics.decoded_bytes as f64 / 1e9,
        metrics.decoded_bytes as f64 / 1e9 / seconds,
        metrics.delivered_bytes as f64 / 1e9,
    );
    println!(
        "GPU busy {:.3} s, host planning {:.3} s, consumer waited {:.0}% of the epoch ({consumed} batches consumed)",
        metrics.gpu_busy.as_secs_f64(),
        metrics.gpu_planning_busy.as_secs_f64(),
        100.0 * metrics.wait_fraction(seconds),
    );
    Ok(())
}

#[cfg(not(feature = "cuda"))]
fn main() {
    println!("this example needs the `cuda` feature: cargo run --release --features cuda --example 05_gpu_pipeline");
}
