use std::path::Path;
use std::sync::Arc;
use std::time::Instant;

use anyhow::Context;
use indicatif::{ProgressBar, ProgressStyle};
use zarrpipe::batcher::SampleLayout;
use zarrpipe::core::Device;
use zarrpipe::pipeline::{
    Batch, BatchStream, CollateOptions, DecodeOn, MetricsSnapshot, Pipeline, PipelineBuilder,
    Place, TensorDType,
};
use zarrpipe::prelude::TryStreamExt;
use zarrpipe::sample::{ensure_sample, sample_is_complete, SAMPLE_PATH};
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
    /// Batches loaded ahead of the consumer: decoded, collated, ready to be taken.
    #[arg(long, default_value_t = 4)]
    prefetch: usize,
    /// Batches whose chunks are read ahead of decoding.
    #[arg(long, default_value_t = 2, value_name = "N")]
    read_ahead: usize,
    /// Chunk reads in flight at once, shared by the batches being fetched, the oldest
    /// batch's first.
    #[arg(long, default_value_t = 64, value_name = "N")]
    fetch_concurrency: usize,
    /// On the GPU, most stored bytes of the batches being decoded (held in pinned host
    /// memory), e.g. 2G; past it the next batch waits for older ones.
    #[arg(long, default_value = "8G", value_name = "SIZE")]
    gpu_pinned_memory: String,
    /// On the GPU, most pinned host memory that reads of a local store land in, so chunks
    /// upload without a staging copy (0: none; past it, reads go to ordinary memory). Default:
    /// 16G, at most a quarter of the host's memory.
    #[arg(long, value_name = "SIZE")]
    gpu_read_memory: Option<String>,
    /// On the GPU, most of its memory the pipeline takes (decoded chunks not yet collated,
    /// stored bytes being decoded, batch tensors), e.g. 16G; under it fewer batches decode at
    /// once. Default: a quarter of the device's memory, leaving a model the rest.
    #[arg(long, value_name = "SIZE")]
    gpu_memory: Option<String>,
    /// cpu, cuda:N, or auto (the GPU when this build can use one, else the CPU): the GPU the
    /// GPU stages run on, and the stages' default side (both on the GPU for cuda:N).
    #[arg(long, default_value = "auto")]
    device: String,
    /// Where chunks are decoded: cpu, gpu, split (each batch on both, shared out by their
    /// measured rates, or by --gpu-chunks) or auto (the CPU first, the GPU only while the consumer waits, within
    /// --gpu-share). Default: the device's side.
    #[arg(long, value_name = "WHERE")]
    decode: Option<Decode>,
    /// With --decode auto: most of the GPU's time decoding may take, e.g. 0.05, or auto (as
    /// much as the consumer's pace asks for).
    #[arg(long, default_value = "auto", value_name = "SHARE")]
    gpu_share: String,
    /// With --decode split: a fixed fraction of each batch's chunks decoded on the GPU, e.g.
    /// 0.4, the rest on the CPU, instead of the share the sides' measured rates give.
    #[arg(long, value_name = "FRACTION")]
    gpu_chunks: Option<f64>,
    /// On a GPU device with --decode cpu, split or auto: threads decoding on the CPU, at a low
    /// priority (0: one per core; default: a quarter of the cores for split, leaving the
    /// others to feed the GPU; every core for cpu; every core but two for auto).
    #[arg(long, value_name = "N", alias = "split-cpu-threads")]
    cpu_decode_threads: Option<usize>,
    /// Processes on this host running pipelines, this one included (torchrun's
    /// LOCAL_WORLD_SIZE): the default --cpu-decode-threads take this process's share of the
    /// cores.
    #[arg(long, value_name = "N", default_value_t = 1)]
    processes_on_host: usize,
    /// This process's place among --processes-on-host, from 0 (torchrun's LOCAL_RANK): CPU
    /// decoding on a GPU device then keeps to this process's share of the cores.
    #[arg(long, value_name = "R")]
    rank_on_host: Option<usize>,
    /// Where batch tensors are made: cpu (host memory) or gpu (device memory; default: the
    /// device's side).
    #[arg(long, value_name = "SIDE")]
    collate: Option<Side>,
    /// Timed epochs after one untimed warm-up epoch (default: one epoch, no warm-up, for
    /// `run`; 2 for `bench`); the best is reported.
    #[arg(long)]
    pub(crate) passes: Option<u32>,
    /// Every epoch from one stream, as a training loop of many epochs takes them: the next
    /// epoch's first batches load while this one's last are consumed. An epoch is timed from
    /// the end of the one before (the first from building the stream); with --passes, two
    /// untimed warm-up epochs. Default: each epoch a stream of its own, started empty, as
    /// the peers are timed.
    #[arg(long)]
    epochs_in_a_row: bool,
    /// Stand in for a training loop that takes batch tensors at this many bytes per second
    /// (e.g. 3.2G): after each batch the consumer is busy for the batch's bytes over this rate.
    /// Shows what the loader needs of the CPU and GPU beside such a consumer.
    #[arg(long, value_name = "BYTES_PER_S")]
    consumer_rate: Option<String>,
    /// Also sum every delivered value (in an extra, untimed epoch) to compare with peers.
    #[arg(long)]
    checksum: bool,
    /// Print the summary as JSON.
    #[arg(long)]
    json: bool,
    /// On the GPU, skip the CPU checks of zstd entropy tables before nvCOMP decodes (less
    /// planning work; only for data you trust: nvCOMP 6 can write out of bounds on corrupt
    /// tables).
    #[arg(long)]
    skip_zstd_table_checks: bool,
    /// On the GPU, most batches decoding at once, each on a stream of its own (batches of
    /// fewer chunks decode more at once, to keep about 1024 chunks in flight, at least 3
    /// batches; each stream in use holds its own nvCOMP scratch memory).
    #[arg(long, default_value_t = 6)]
    gpu_decode_streams: usize,
    /// On the GPU, chunks to keep decoding at once: batches of fewer chunks let more batches
    /// decode beside them (at least 3, at most --gpu-decode-streams).
    #[arg(long, default_value_t = 16384)]
    gpu_chunks_in_flight: usize,
    /// On the GPU, decoded bytes per pipelined group of a batch (a larger batch is split into
    /// groups staged one after another: less memory per group, much slower), e.g. 256M.
    #[arg(long, default_value = "4G")]
    gpu_group_bytes: String,
    #[command(flatten)]
    values: CollateArgs,
}

/// Where a stage runs.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum Side {
    Cpu,
    Gpu,
}

/// Where chunks are decoded.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum Decode {
    Cpu,
    Gpu,
    Split,
    Auto,
}

impl std::fmt::Display for Decode {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Decode::Cpu => "CPU",
            Decode::Gpu => "GPU",
            Decode::Split => "CPU and GPU (split)",
            Decode::Auto => "CPU, and GPU when needed (auto)",
        })
    }
}

impl std::fmt::Display for Side {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Side::Cpu => "CPU",
            Side::Gpu => "GPU",
        })
    }
}

/// The stages' sides and the GPU they use.
#[derive(Clone, Copy, Debug)]
struct Stages {
    decode: Decode,
    collate: Side,
    /// The GPU of the GPU stages.
    ordinal: usize,
}

impl Stages {
    fn uses_gpu(&self) -> bool {
        self.decode != Decode::Cpu || self.collate == Side::Gpu
    }

    /// Where the batches end up.
    fn device(&self) -> Device {
        match self.collate {
            Side::Cpu => Device::Cpu,
            Side::Gpu => Device::Cuda(self.ordinal),
        }
    }
}

/// What collation does to values.
#[derive(Debug, clap::Args)]
pub struct CollateArgs {
    /// Tensor element type on the GPU: f32, bf16 or f16 (the CPU delivers f32).
    #[arg(long, default_value = "f32")]
    dtype: TensorDType,
    /// Normalise each channel with its mean and std (else its variable's), from the JSON
    /// that `zarrpipe stats URL --json` prints (inputs and targets alike).
    #[arg(long, value_name = "STATS_JSON")]
    normalize: Option<std::path::PathBuf>,
    /// Replace NaN by this value (after normalising).
    #[arg(long, value_name = "VALUE")]
    nan_fill: Option<f32>,
    /// Also deliver a u8 mask of the inputs, 0 where a value was NaN.
    #[arg(long)]
    nan_mask: bool,
    /// Also deliver latitude weights (cos(latitude) over its mean) along this dimension.
    #[arg(long, value_name = "DIM")]
    lat_weights: Option<String>,
}

impl CollateArgs {
    fn apply(&self, builder: PipelineBuilder) -> anyhow::Result<PipelineBuilder> {
        let builder = builder.collate_options(CollateOptions {
            dtype: self.dtype,
            normalize: None,
            nan_fill: self.nan_fill,
            nan_mask: self.nan_mask,
            latitude_weights: None,
            ..CollateOptions::default()
        });
        let builder = match &self.lat_weights {
            Some(dim) => builder.latitude_weights(dim.clone()),
            None => builder,
        };
        Ok(match &self.normalize {
            Some(path) => {
                let json = std::fs::read_to_string(path).map_err(|error| {
                    anyhow::anyhow!("reading statistics {}: {error}", path.display())
                })?;
                // Checked here too, so the error names the file.
                zarrpipe::collate::Normalization::parse_stats_json(&json)
                    .with_context(|| format!("--normalize {}", path.display()))?;
                builder.normalize_with_stats(json)
            }
            None => builder,
        })
    }
}

pub async fn run(args: RunArgs) -> anyhow::Result<()> {
    let url = match &args.url {
        Some(url) => url.clone(),
        None => sample_with_progress()?,
    };
    let (device, why) = choose_device(&args.device)?;
    let side = match device {
        Device::Cpu => Side::Cpu,
        Device::Cuda(_) => Side::Gpu,
    };
    let mut stages = Stages {
        decode: args.decode.unwrap_or(match side {
            Side::Cpu => Decode::Cpu,
            Side::Gpu => Decode::Gpu,
        }),
        collate: args.collate.unwrap_or(side),
        ordinal: match device {
            Device::Cuda(ordinal) => ordinal,
            Device::Cpu => 0,
        },
    };
    // `auto` into host tensors calls a GPU in only when there is one.
    let mut auto_note = String::new();
    if stages.decode == Decode::Auto && stages.collate == Side::Cpu {
        if let Some(reason) = no_usable_gpu() {
            stages.decode = Decode::Cpu;
            auto_note = format!(" (auto: {reason})");
        }
    }
    let dataset = Arc::new(args.store.open(&url).await?);
    if !args.json {
        println!(
            "device: {device} ({why}); decode on the {}{auto_note}, collate on the {}",
            stages.decode, stages.collate
        );
    }
    let report = match stages.uses_gpu() {
        false => {
            let (args, dataset) = (&args, &dataset);
            let build = |layout, epochs| async move {
                Ok(pipeline(args, dataset.clone(), Decode::Cpu, layout)?
                    .epochs(epochs)
                    .build()
                    .await?)
            };
            timed_passes(args, build, || {}, |_| Ok(()), host_sum).await?
        }
        true => gpu_passes(&args, dataset.clone(), stages).await?,
    };
    if args.json {
        print_json(
            &url,
            stages,
            &report,
            dataset.io_stats(),
            args.epochs_in_a_row,
        );
    } else {
        if report.epochs > 1 {
            println!("{} epochs in a row, timed together:", report.epochs);
        }
        summarise(&report.metrics, report.seconds);
        if let Some(warm_up) = report.warm_up_seconds {
            println!("warm-up epoch, with the setup it waited for: {warm_up:.2} s");
        }
        if let Some((memory, _)) = &report.gpu_memory {
            println!("GPU memory budget: {memory}");
        }
        if let Some(checksum) = report.checksum {
            println!("checksum (sum of every delivered value, NaN skipped): {checksum}");
        }
    }
    Ok(())
}

/// What the passes measured.
struct Report {
    /// Seconds of the best timed pass (epochs apart) or of the timed epochs together (in a
    /// row), and their counters.
    seconds: f64,
    /// Epochs those figures cover.
    epochs: u32,
    metrics: MetricsSnapshot,
    /// The warm-up epoch's seconds and the setup waited for after it (pinned read memory):
    /// what a training loop's first epoch costs beyond the steady state's.
    warm_up_seconds: Option<f64>,
    checksum: Option<f64>,
    /// The GPU memory budget and its shares (GPU stages only): as text, and bytes for JSON.
    gpu_memory: Option<(String, serde_json::Value)>,
}

/// Passes with at least one stage on the GPU.
#[cfg(feature = "cuda")]
async fn gpu_passes(
    args: &RunArgs,
    dataset: Arc<Dataset>,
    stages: Stages,
) -> anyhow::Result<Report> {
    use zarrpipe::codec::GpuOptions;
    use zarrpipe::pipeline::{GpuBatch, GpuDevice};
    // One decoder and tensor pool for every pass, as a training loop keeps them across epochs.
    let options = GpuOptions {
        device: stages.ordinal,
        check_zstd_tables: !args.skip_zstd_table_checks,
        decode_streams: args.gpu_decode_streams,
        chunks_in_flight: args.gpu_chunks_in_flight,
        group_bytes: super::store::parse_size(&args.gpu_group_bytes)? as usize,
        pinned_memory: super::store::parse_size(&args.gpu_pinned_memory)? as usize,
        read_memory: match &args.gpu_read_memory {
            Some(size) => super::store::parse_size(size)? as usize,
            None => GpuOptions::default().read_memory,
        },
        ..Default::default()
    };
    let budget = match &args.gpu_memory {
        Some(size) => Some(super::store::parse_size(size)? as usize),
        None => None,
    };
    let gpu = GpuDevice::open_within(options, budget, None)?;
    let memory = gpu.memory_budget();
    let gpu_memory = (
        memory.to_string(),
        serde_json::json!({
            "budget": memory.budget,
            "decoding": memory.decoding,
            "tensors": memory.tensors,
        }),
    );
    // Pinned read memory is allocated ahead while the warm-up runs (seconds for GiBs);
    // the timed passes start once it is there.
    let settle = || {
        let bytes = gpu.decoder().wait_for_read_memory();
        tracing::debug!(target: "zarrpipe::timeline", "{bytes} bytes of pinned read memory");
    };
    let builder = |layout, epochs| -> anyhow::Result<PipelineBuilder> {
        Ok(pipeline(args, dataset.clone(), stages.decode, layout)?
            .epochs(epochs)
            .gpu(gpu.clone()))
    };
    let builder = &builder;
    if stages.collate == Side::Cpu {
        let build = |layout, epochs| async move { Ok(builder(layout, epochs)?.build().await?) };
        let report = timed_passes(args, build, settle, |_| Ok(()), host_sum).await?;
        return Ok(Report {
            gpu_memory: Some(gpu_memory),
            ..report
        });
    }
    let build = |layout, epochs| async move {
        Ok(builder(layout, epochs)?.collate_on_gpu().build().await?)
    };
    // A batch counts as delivered once its tensors are complete on the device.
    let ready = |batch: &GpuBatch| Ok(batch.synchronize()?);
    let sum = |batch: &GpuBatch| -> anyhow::Result<f64> {
        Ok(nan_skipping_sum(batch.inputs.to_host_f32()?.iter()))
    };
    let report = timed_passes(args, build, settle, ready, sum).await?;
    Ok(Report {
        gpu_memory: Some(gpu_memory),
        ..report
    })
}

#[cfg(not(feature = "cuda"))]
async fn gpu_passes(_: &RunArgs, _: Arc<Dataset>, _: Stages) -> anyhow::Result<Report> {
    anyhow::bail!("GPU stages: this zarrpipe was built without the `cuda` feature (cargo build --features cuda)")
}

/// `--gpu-share`: a fraction in (0, 1], or auto (no cap).
fn gpu_share(value: &str) -> anyhow::Result<Option<f64>> {
    if value == "auto" {
        return Ok(None);
    }
    match value.parse::<f64>() {
        Ok(share) if share > 0.0 && share <= 1.0 => Ok(Some(share)),
        _ => anyhow::bail!(
            "--gpu-share {value}: give a fraction of the GPU's time in (0, 1], e.g. 0.05, or auto"
        ),
    }
}

/// One untimed warm-up epoch, `settle`, and `--passes` timed ones (or one timed epoch), then
/// the checksum epoch when asked for. `build` makes a stream of as many epochs as it is
/// given, with the layout the first one resolved (as a training loop keeps it: no epoch after
/// the first lists the store): one per epoch, or with `--epochs-in-a-row` one for them all.
async fn timed_passes<P, Build, Built>(
    args: &RunArgs,
    build: Build,
    settle: impl Fn(),
    consume: impl Fn(&Batch<P>) -> anyhow::Result<()>,
    sum: impl Fn(&Batch<P>) -> anyhow::Result<f64>,
) -> anyhow::Result<Report>
where
    P: Place,
    Build: Fn(Option<Arc<SampleLayout>>, u64) -> Built,
    Built: std::future::Future<Output = anyhow::Result<BatchStream<P>>>,
{
    let epochs = Epochs {
        place: std::marker::PhantomData,
        args,
        build: &build,
        consumer_rate: match &args.consumer_rate {
            Some(rate) => match super::store::parse_size(rate)? {
                0 => anyhow::bail!("--consumer-rate {rate}: a consumer must take some bytes per second (e.g. 3.2G)"),
                bytes => Some(bytes as f64),
            },
            None => None,
        },
        consume: &consume,
    };
    let (mut report, layout) = match args.epochs_in_a_row {
        false => epochs.apart(settle).await?,
        true => epochs.in_a_row(settle).await?,
    };
    if args.checksum {
        let mut batches = build(Some(layout), 1).await?;
        let total = std::cell::Cell::new(0f64);
        run_epoch(&mut batches, false, None, |batch| {
            total.set(total.get() + sum(batch)?);
            Ok(())
        })
        .await?;
        report.checksum = Some(total.get());
    }
    Ok(report)
}

/// How the timed epochs are made and consumed.
struct Epochs<'a, P, Build, Consume> {
    place: std::marker::PhantomData<P>,
    args: &'a RunArgs,
    build: &'a Build,
    consumer_rate: Option<f64>,
    consume: &'a Consume,
}

impl<P, Build, Built, Consume> Epochs<'_, P, Build, Consume>
where
    P: Place,
    Build: Fn(Option<Arc<SampleLayout>>, u64) -> Built,
    Built: std::future::Future<Output = anyhow::Result<BatchStream<P>>>,
    Consume: Fn(&Batch<P>) -> anyhow::Result<()>,
{
    /// Each epoch a stream of its own, started empty; the best timed epoch is reported.
    /// Returns the report and the layout the first epoch resolved.
    async fn apart(&self, settle: impl Fn()) -> anyhow::Result<(Report, Arc<SampleLayout>)> {
        let args = self.args;
        let (warm_up, timed) = match args.passes {
            Some(passes) => (1, passes.max(1)),
            None => (0, 1),
        };
        let mut best: Option<(f64, MetricsSnapshot)> = None;
        let mut warm_up_seconds = None;
        let mut layout = None;
        for pass in 0..warm_up + timed {
            // An epoch as a training loop sees it, and as the peer harness times every peer's
            // pass (benches/peers/peers.py, `measure`): from building its stream, through the
            // first batch's wait, to the stream dropped after the last batch.
            let started = Instant::now();
            tracing::debug!(target: "zarrpipe::timeline", "pass {pass} starting");
            let built = (self.build)(layout.clone(), 1).await?;
            let mut batches = first_stream(args, built, pass == 0)?;
            layout.get_or_insert_with(|| batches.layout().clone());
            let metrics = self.run(&mut batches).await?;
            drop(batches);
            let seconds = started.elapsed().as_secs_f64();
            if pass + 1 == warm_up {
                settle();
                warm_up_seconds = Some(started.elapsed().as_secs_f64());
            }
            let faster = best.as_ref().is_none_or(|(fastest, _)| seconds < *fastest);
            if pass >= warm_up && faster {
                best = Some((seconds, metrics));
            }
        }
        let (seconds, metrics) = best.expect("at least one timed pass");
        let report = Report {
            seconds,
            epochs: 1,
            metrics,
            warm_up_seconds,
            checksum: None,
            gpu_memory: None,
        };
        Ok((report, layout.expect("at least one pass")))
    }

    /// Every epoch from one stream, as a training loop of many epochs takes them. With
    /// `--passes`: two untimed warm-up epochs (`settle` after the first, which the second
    /// absorbs), the timed epochs together, and one more epoch the stream carries but nobody
    /// takes, so the chain is as full when the timed epochs end as when they begin.
    async fn in_a_row(&self, settle: impl Fn()) -> anyhow::Result<(Report, Arc<SampleLayout>)> {
        let args = self.args;
        let (warm_up, timed, trailing) = match args.passes {
            Some(passes) => (2, passes.max(1), 1),
            None => (0, 1, 0),
        };
        let started = Instant::now();
        let epochs = u64::from(warm_up + timed + trailing);
        let mut batches = first_stream(args, (self.build)(None, epochs).await?, true)?;
        let mut warm_up_seconds = None;
        for pass in 0..warm_up {
            self.run(&mut batches).await?;
            if pass == 0 {
                settle();
                warm_up_seconds = Some(started.elapsed().as_secs_f64());
            }
        }
        let (timed_from, before) = (Instant::now(), batches.metrics());
        for pass in 0..timed {
            tracing::debug!(target: "zarrpipe::timeline", "timed epoch {pass} starting");
            self.run(&mut batches).await?;
        }
        let report = Report {
            seconds: timed_from.elapsed().as_secs_f64(),
            epochs: timed,
            metrics: batches.metrics().since(&before),
            warm_up_seconds,
            checksum: None,
            gpu_memory: None,
        };
        Ok((report, batches.layout().clone()))
    }

    /// Runs the rest of the stream's epoch through the consumer.
    async fn run(&self, batches: &mut BatchStream<P>) -> anyhow::Result<MetricsSnapshot> {
        run_epoch(batches, !self.args.json, self.consumer_rate, self.consume).await
    }
}

/// A built stream, refused when its epoch is empty; described when `describe_it`.
fn first_stream<P: Place>(
    args: &RunArgs,
    batches: BatchStream<P>,
    describe_it: bool,
) -> anyhow::Result<BatchStream<P>> {
    if batches.num_batches() == 0 {
        anyhow::bail!("{}", empty_epoch(&batches));
    }
    if describe_it && !args.json {
        describe(&batches);
    }
    Ok(batches)
}

fn host_sum(batch: &Batch) -> anyhow::Result<f64> {
    Ok(nan_skipping_sum(batch.inputs.iter()))
}

fn nan_skipping_sum<'a>(values: impl Iterator<Item = &'a f32>) -> f64 {
    values.filter(|v| !v.is_nan()).map(|&v| f64::from(v)).sum()
}

/// The pipeline `args` describe; with `layout`, one an earlier epoch resolved.
fn pipeline(
    args: &RunArgs,
    dataset: Arc<Dataset>,
    decode: Decode,
    layout: Option<Arc<SampleLayout>>,
) -> anyhow::Result<PipelineBuilder> {
    if args.gpu_chunks.is_some() && !matches!(decode, Decode::Split) {
        anyhow::bail!("--gpu-chunks is a share of split decoding: give it with --decode split");
    }
    let mut builder = Pipeline::from_dataset(dataset)
        .variables(args.windows.variables.clone())
        .epoch_options(args.windows.epoch_options()?)
        .window_spec(args.windows.spec()?)
        .batch_size(args.windows.batch_size)
        .missing(args.windows.missing.into())
        .prefetch(args.prefetch)
        .read_ahead(args.read_ahead)
        .fetch_concurrency(args.fetch_concurrency)
        .decode_on(match decode {
            Decode::Cpu => DecodeOn::Cpu,
            Decode::Gpu => DecodeOn::Gpu,
            Decode::Split => match args.gpu_chunks {
                Some(gpu_chunks) => DecodeOn::SplitFixed { gpu_chunks },
                None => DecodeOn::Split,
            },
            Decode::Auto => DecodeOn::Auto {
                gpu_share: gpu_share(&args.gpu_share)?,
            },
        });
    if let Some(threads) = args.cpu_decode_threads {
        builder = builder.cpu_decode_threads(threads);
    }
    builder = builder.processes_on_host(args.processes_on_host);
    if let Some(rank) = args.rank_on_host {
        builder = builder.rank_on_host(rank);
    }
    if let Some(layout) = layout {
        builder = builder.layout(layout);
    }
    builder = args.values.apply(builder)?;
    let (ranges, lists) = args.windows.selections();
    for selection in ranges {
        builder = builder.select(selection.dim, selection.from, selection.to);
    }
    for selection in lists {
        builder = builder.select_channels(selection.dim, selection.values);
    }
    Ok(builder)
}

/// Streams the batches left in the stream's epoch, handing each to `consume`; returns the
/// epoch's counters.
async fn run_epoch<P: Place>(
    batches: &mut BatchStream<P>,
    progress: bool,
    consumer_rate: Option<f64>,
    mut consume: impl FnMut(&Batch<P>) -> anyhow::Result<()>,
) -> anyhow::Result<MetricsSnapshot> {
    let (epoch, count) = (batches.epoch(), batches.batches_left_in_epoch());
    let bar = if progress {
        ProgressBar::new(count)
    } else {
        ProgressBar::hidden()
    };
    bar.set_style(ProgressStyle::with_template(
        "{bar:40} {pos}/{len} batches {per_sec} [{elapsed_precise}]",
    )?);
    for delivered in 0..count {
        let Some(batch) = batches.try_next().await? else {
            anyhow::bail!("epoch {epoch} ended after {delivered} of its {count} batches");
        };
        // A training step would consume `batch.inputs` here.
        consume(std::hint::black_box(&batch))?;
        tracing::debug!(target: "zarrpipe::timeline", "batch {} delivered", batch.index);
        if let Some(rate) = consumer_rate {
            let busy = batch.tensor_bytes() as f64 / rate;
            tokio::time::sleep(std::time::Duration::from_secs_f64(busy)).await;
        }
        bar.inc(1);
    }
    bar.finish_and_clear();
    Ok(batches.epoch_metrics())
}

fn print_json(url: &str, stages: Stages, report: &Report, io: IoStats, in_a_row: bool) {
    let Report {
        seconds,
        epochs,
        ref metrics,
        warm_up_seconds,
        checksum,
        ref gpu_memory,
    } = *report;
    let device = stages.device();
    let summary = serde_json::json!({
        "tool": format!("zarrpipe {} ({device})", env!("CARGO_PKG_VERSION")),
        "device": device.to_string(),
        "decode": format!("{:?}", stages.decode).to_lowercase(),
        "collate": stages.collate.to_string().to_lowercase(),
        "url": url,
        "seconds": seconds,
        "warm_up_s": warm_up_seconds,
        "gpu_memory": gpu_memory.as_ref().map(|(_, bytes)| bytes),
        "epochs_in_a_row": in_a_row,
        "epochs": epochs,
        "samples": metrics.samples,
        "samples_per_s": metrics.samples as f64 / seconds.max(1e-9),
        "batches": metrics.batches,
        "stored_bytes": metrics.stored_bytes,
        "decoded_bytes": metrics.decoded_bytes,
        "delivered_bytes": metrics.delivered_bytes,
        "gb_per_s": gb_per_s(metrics.delivered_bytes, seconds),
        "decoded_gb_per_s": gb_per_s(metrics.decoded_bytes, seconds),
        "fetch_busy_s": metrics.fetch_busy.as_secs_f64(),
        "decode_busy_s": metrics.decode_busy.as_secs_f64(),
        "decode_cpu_s": metrics.decode_cpu.as_secs_f64(),
        "collate_busy_s": metrics.collate_busy.as_secs_f64(),
        "gpu_planning_busy_s": metrics.gpu_planning_busy.as_secs_f64(),
        "gpu_busy_s": metrics.gpu_busy.as_secs_f64(),
        "cpu_decoded_chunks": metrics.cpu_decoded_chunks,
        "gpu_decoded_chunks": metrics.gpu_decoded_chunks,
        "cpu_copied_chunks": metrics.cpu_copied_chunks,
        "consumer_wait_s": metrics.consumer_wait.as_secs_f64(),
        "wait_fraction": metrics.wait_fraction(seconds),
        "steady_wait_fraction": metrics.steady_wait_fraction(seconds),
        "checksum": checksum,
        // `stored_bytes` above is the timed epochs'; the requests cover every pass.
        "io": io,
        "io_covers": "every pass over the store, the warm-up, checksum and metadata reads included; stored_bytes is the timed epochs' alone",
        "cores": std::thread::available_parallelism().map(|n| n.get()).unwrap_or(1),
    });
    println!("{summary}");
}

/// Writes the sample dataset on first run, with a progress bar; returns its path.
fn sample_with_progress() -> anyhow::Result<String> {
    if !sample_is_complete(Path::new(SAMPLE_PATH)) {
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

/// Why no GPU can decode here, if none can: this build lacks `cuda`, or the host has no GPU.
fn no_usable_gpu() -> Option<&'static str> {
    if !cfg!(feature = "cuda") {
        return Some("this build has no `cuda` feature");
    }
    (!Path::new("/dev/nvidia0").exists()).then_some("no GPU found")
}

/// The device to deliver to, and why it was chosen.
fn choose_device(requested: &str) -> anyhow::Result<(Device, &'static str)> {
    if requested != "auto" {
        return Ok((requested.parse()?, "as requested"));
    }
    let gpu_present = Path::new("/dev/nvidia0").exists();
    Ok(match (gpu_present, cfg!(feature = "cuda")) {
        (true, true) => (Device::Cuda(0), "a GPU is present"),
        (true, false) => (
            Device::Cpu,
            "a GPU is present, but this build has no `cuda` feature",
        ),
        (false, _) => (Device::Cpu, "no GPU found"),
    })
}

/// Why an epoch delivers no batch.
fn empty_epoch<P: Place>(batches: &BatchStream<P>) -> String {
    let layout = batches.layout();
    match layout.why_empty() {
        Some(why) => format!("the epoch has no samples: {why}"),
        None => format!(
            "this process's share of the epoch is empty: {} samples over the ranks RANK and WORLD_SIZE give",
            layout.num_samples()
        ),
    }
}

fn describe<P: Place>(batches: &BatchStream<P>) {
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
    if let Some((steps, policy)) = layout.missing_steps() {
        let dates = steps.dates();
        if layout.skipped() > 0 || !dates.is_empty() {
            println!(
                "missing steps along `{}`: {} ({}); --missing {}: {} samples left out",
                steps.dim,
                dates.len(),
                dates.iter().take(3).cloned().collect::<Vec<_>>().join(", "),
                format!("{policy:?}").to_lowercase(),
                layout.skipped()
            );
        }
    }
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
    // The stage times add up every chunk's time while many are in flight at once, so they
    // can exceed the epoch's wall time: they say where the work went, not how long it took.
    println!(
        "work per stage, added up over the chunks in flight at once (not comparable with the {seconds:.2} s above): fetch {:.2} s, decode {:.2} s, collate {:.2} s",
        metrics.fetch_busy.as_secs_f64(),
        metrics.decode_busy.as_secs_f64(),
        metrics.collate_busy.as_secs_f64(),
    );
    let waited = metrics.wait_fraction(seconds);
    println!(
        "the consumer waited for batches {:.2} s, {:.0}% of the epoch{}",
        metrics.consumer_wait.as_secs_f64(),
        100.0 * waited,
        if waited > 0.9 {
            ": this run does nothing with its batches, so the loader set the pace (a training step would fill the wait)"
        } else {
            ""
        },
    );
    if metrics.cpu_copied_chunks > 0 {
        println!(
            "{} chunks decoded on the CPU into memory of their own and copied into the batch: their codec chain (a transpose, fixedscaleoffset, or shards of inner chunks of those) is not decoded in place",
            metrics.cpu_copied_chunks
        );
    }
    if metrics.gpu_busy > std::time::Duration::ZERO {
        println!(
            "GPU: planning and staging {:.2} s on the host, {:.2} s on the device (upload, decode, collate), {:.1} ms per batch; chunks decoded: {} on the CPU, {} on the GPU",
            metrics.gpu_planning_busy.as_secs_f64(),
            metrics.gpu_busy.as_secs_f64(),
            1e3 * metrics.gpu_busy.as_secs_f64() / metrics.batches.max(1) as f64,
            metrics.cpu_decoded_chunks,
            metrics.gpu_decoded_chunks,
        );
    }
}
