use std::path::Path;
use std::sync::Arc;
use std::time::Instant;

use indicatif::{ProgressBar, ProgressStyle};
use zarrpipe::core::Device;
use zarrpipe::pipeline::{Batch, BatchStream, MetricsSnapshot, Pipeline, PipelineBuilder};
use zarrpipe::prelude::TryStreamExt;
use zarrpipe::sample::{ensure_sample, SAMPLE_PATH};
use zarrpipe::store::{Dataset, IoStats};

use super::gb_per_s;
use super::generate::generate_progress_bar;
use super::store::StoreArgs;
use super::windows::WindowArgs;

#[derive(Debug, clap::Args)]
pub struct RunArgs {
    /// Dataset path or URL (default: the sample dataset, written on first run).
    url: Option<String>,
    #[command(flatten)]
    windows: WindowArgs,
    #[command(flatten)]
    store: StoreArgs,
    /// Batches loaded ahead of the consumer.
    #[arg(long, default_value_t = 4)]
    prefetch: usize,
    /// cpu, cuda:N, or auto (the GPU when this build can use one, else the CPU).
    #[arg(long, default_value = "auto")]
    device: String,
    /// Timed epochs after one untimed warm-up epoch (default: one epoch, no warm-up); the
    /// best is reported.
    #[arg(long)]
    passes: Option<u32>,
    /// Also sum every delivered value (in an extra, untimed epoch) to compare with peers.
    #[arg(long)]
    checksum: bool,
    /// Print the summary as JSON.
    #[arg(long)]
    json: bool,
}

pub async fn run(args: RunArgs) -> anyhow::Result<()> {
    let url = match &args.url {
        Some(url) => url.clone(),
        None => sample_with_progress()?,
    };
    let (device, why) = choose_device(&args.device)?;
    let dataset = Arc::new(args.store.open(&url).await?);
    if !args.json {
        println!("device: {device} ({why})");
    }
    let (warm_up, timed) = match args.passes {
        Some(passes) => (1, passes.max(1)),
        None => (0, 1),
    };
    let mut best: Option<(f64, MetricsSnapshot)> = None;
    for pass in 0..warm_up + timed {
        let mut batches = pipeline(&args, dataset.clone(), device)?.build().await?;
        if pass == 0 && !args.json {
            describe(&batches);
        }
        let (seconds, metrics) = run_epoch(&mut batches, !args.json, |_| {}).await?;
        let faster = best.as_ref().is_none_or(|(fastest, _)| seconds < *fastest);
        if pass >= warm_up && faster {
            best = Some((seconds, metrics));
        }
    }
    let (seconds, metrics) = best.expect("at least one timed pass");
    let checksum = if args.checksum {
        Some(checksum(&args, dataset.clone(), device).await?)
    } else {
        None
    };
    if args.json {
        print_json(
            &url,
            device,
            seconds,
            &metrics,
            checksum,
            dataset.io_stats(),
        );
    } else {
        summarise(&metrics, seconds);
        if let Some(checksum) = checksum {
            println!("checksum (sum of every delivered value, NaN skipped): {checksum}");
        }
    }
    Ok(())
}

fn pipeline(
    args: &RunArgs,
    dataset: Arc<Dataset>,
    device: Device,
) -> anyhow::Result<PipelineBuilder> {
    let mut builder = Pipeline::from_dataset(dataset)
        .variables(args.windows.variables.clone())
        .epoch_options(args.windows.epoch_options()?)
        .window_spec(args.windows.spec()?)
        .batch_size(args.windows.batch_size)
        .prefetch(args.prefetch)
        .device(device);
    for selection in &args.windows.select {
        builder = builder.select(
            selection.dim.clone(),
            selection.from.clone(),
            selection.to.clone(),
        );
    }
    Ok(builder)
}

/// Streams one epoch, handing each batch to `consume`; returns its seconds and counters.
async fn run_epoch(
    batches: &mut BatchStream,
    progress: bool,
    mut consume: impl FnMut(&Batch),
) -> anyhow::Result<(f64, MetricsSnapshot)> {
    let started = Instant::now();
    let bar = if progress {
        ProgressBar::new(batches.num_batches())
    } else {
        ProgressBar::hidden()
    };
    bar.set_style(ProgressStyle::with_template(
        "{bar:40} {pos}/{len} batches {per_sec} [{elapsed_precise}]",
    )?);
    while let Some(batch) = batches.try_next().await? {
        // A training step would consume `batch.inputs` here.
        consume(std::hint::black_box(&batch));
        bar.inc(1);
    }
    bar.finish_and_clear();
    Ok((started.elapsed().as_secs_f64(), batches.metrics()))
}

async fn checksum(args: &RunArgs, dataset: Arc<Dataset>, device: Device) -> anyhow::Result<f64> {
    let mut batches = pipeline(args, dataset, device)?.build().await?;
    let mut sum = 0f64;
    run_epoch(&mut batches, false, |batch| {
        sum += batch
            .inputs
            .iter()
            .filter(|v| !v.is_nan())
            .map(|&v| f64::from(v))
            .sum::<f64>();
    })
    .await?;
    Ok(sum)
}

fn print_json(
    url: &str,
    device: Device,
    seconds: f64,
    metrics: &MetricsSnapshot,
    checksum: Option<f64>,
    io: IoStats,
) {
    let summary = serde_json::json!({
        "tool": format!("zarrpipe {} ({device})", env!("CARGO_PKG_VERSION")),
        "url": url,
        "seconds": seconds,
        "samples": metrics.samples,
        "batches": metrics.batches,
        "stored_bytes": metrics.stored_bytes,
        "decoded_bytes": metrics.decoded_bytes,
        "delivered_bytes": metrics.delivered_bytes,
        "gb_per_s": gb_per_s(metrics.delivered_bytes, seconds),
        "decoded_gb_per_s": gb_per_s(metrics.decoded_bytes, seconds),
        "fetch_busy_s": metrics.fetch_busy.as_secs_f64(),
        "decode_busy_s": metrics.decode_busy.as_secs_f64(),
        "collate_busy_s": metrics.collate_busy.as_secs_f64(),
        "consumer_wait_s": metrics.consumer_wait.as_secs_f64(),
        "checksum": checksum,
        // Requests and bytes of every pass (warm-up included) and the metadata.
        "io": io,
        "cores": std::thread::available_parallelism().map(|n| n.get()).unwrap_or(1),
    });
    println!("{summary}");
}

/// Writes the sample dataset on first run, with a progress bar; returns its path.
fn sample_with_progress() -> anyhow::Result<String> {
    if !Path::new(SAMPLE_PATH).join("zarr.json").exists() {
        eprintln!("writing the sample dataset to {SAMPLE_PATH} (first run)");
    }
    let bar = generate_progress_bar()?;
    let path = ensure_sample(|done, total| {
        bar.set_length(total);
        bar.set_position(done);
    });
    bar.finish_and_clear();
    path
}

/// The device to deliver to, and why it was chosen.
fn choose_device(requested: &str) -> anyhow::Result<(Device, &'static str)> {
    if requested != "auto" {
        return Ok((requested.parse()?, "as requested"));
    }
    let why = if Path::new("/dev/nvidia0").exists() {
        "a GPU is present, but this build decodes and collates on the CPU only"
    } else {
        "no GPU found"
    };
    Ok((Device::Cpu, why))
}

fn describe(batches: &BatchStream) {
    let layout = batches.layout();
    let channels: Vec<String> = layout.channels().iter().map(|c| c.label()).collect();
    let first = channels
        .iter()
        .take(6)
        .cloned()
        .collect::<Vec<_>>()
        .join(", ");
    let more = if channels.len() > 6 { ", ..." } else { "" };
    println!("dataset: {}", batches.dataset().url());
    println!(
        "sample shape {:?}: {} channels ({first}{more})",
        layout.sample_shape(),
        channels.len()
    );
    println!(
        "{} samples in {} batches on {}",
        layout.num_samples(),
        batches.num_batches(),
        batches.device()
    );
}

fn summarise(metrics: &MetricsSnapshot, seconds: f64) {
    println!(
        "{} samples, {} batches, {} chunks ({} missing) in {seconds:.2} s",
        metrics.samples, metrics.batches, metrics.chunks, metrics.missing_chunks
    );
    println!(
        "read {:.1} MB, decoded {:.1} MB ({:.2} GB/s), delivered {:.1} MB of float32 batches ({:.2} GB/s)",
        metrics.stored_bytes as f64 / 1e6,
        metrics.decoded_bytes as f64 / 1e6,
        gb_per_s(metrics.decoded_bytes, seconds),
        metrics.delivered_bytes as f64 / 1e6,
        gb_per_s(metrics.delivered_bytes, seconds),
    );
    println!(
        "time per stage, summed over chunks in flight: fetch {:.2} s (queueing included), decode {:.2} s, collate {:.2} s; consumer waited {:.2} s",
        metrics.fetch_busy.as_secs_f64(),
        metrics.decode_busy.as_secs_f64(),
        metrics.collate_busy.as_secs_f64(),
        metrics.consumer_wait.as_secs_f64(),
    );
}
