//! The run: settings from the flags, the model and the batches built, warm-up steps, then the
//! timed steps and their report.

use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{bail, ensure, Context};
use candle_core::{DType, Device, Tensor};
use candle_nn::{Optimizer, VarBuilder, VarMap};
use zarrpipe::prelude::*;

#[cfg(feature = "candle")]
use super::batches::gpu_stream;
use super::batches::{statistics, Batches, DataConfig};
use super::unet;
use super::{Args, Loader, Report, SETUP_A_VARIABLES, TINY_VARIABLES};

/// The flags with their defaults filled in (`--tiny` has its own).
struct Settings {
    url: String,
    variables: Vec<String>,
    loader: Loader,
    batch_size: usize,
    warmup: usize,
    steps: usize,
    log_every: usize,
    patch: Option<u64>,
}

impl Settings {
    fn new(args: &Args) -> anyhow::Result<Self> {
        let tiny = args.tiny;
        let url = match (&args.url, tiny) {
            (Some(url), _) => url.clone(),
            (None, true) => zarrpipe::sample::ensure_sample(|_, _| {})?,
            (None, false) => bail!("--url is needed (or --tiny, which uses the embedded sample)"),
        };
        let names = if tiny {
            TINY_VARIABLES
        } else {
            SETUP_A_VARIABLES
        };
        let variables = match &args.vars {
            Some(variables) => variables.clone(),
            None => names.split(',').map(String::from).collect(),
        };
        let pick = |value: Option<usize>, default: usize, tiny_default: usize| {
            value.unwrap_or(if tiny { tiny_default } else { default })
        };
        let settings = Self {
            url,
            variables,
            loader: args
                .loader
                .unwrap_or(if tiny { Loader::Host } else { Loader::Gpu }),
            batch_size: pick(args.batch_size, 16, 4),
            warmup: pick(args.warmup, 5, 2),
            steps: pick(args.steps, 50, 6),
            log_every: pick(args.log_every, 10, 1),
            patch: args.patch.or(tiny.then_some(32)),
        };
        ensure!(settings.steps > 0, "--steps must be at least 1");
        ensure!(settings.batch_size > 0, "--batch-size must be at least 1");
        ensure!(settings.log_every > 0, "--log-every must be at least 1");
        if args.no_training && settings.loader == Loader::Synthetic {
            bail!("--no-training times a loader, and `synthetic` has none");
        }
        Ok(settings)
    }
}

/// The training device from `--device`.
fn training_device(name: Option<&str>, tiny: bool) -> anyhow::Result<Device> {
    let name = match name {
        Some(name) => name,
        None if tiny || !cfg!(feature = "candle") => "cpu",
        None => "cuda:0",
    };
    if name == "cpu" {
        return Ok(Device::Cpu);
    }
    let ordinal: usize = name
        .strip_prefix("cuda:")
        .and_then(|n| n.parse().ok())
        .with_context(|| format!("--device {name}: expected cpu or cuda:N"))?;
    if !cfg!(feature = "candle") {
        bail!("--device {name} needs the `candle` feature (see scripts/cuda-build-env.sh)");
    }
    Ok(Device::new_cuda(ordinal)?)
}

/// Trains (or, with `--no-training`, loads) for `warmup + steps` steps and reports.
pub async fn run(args: Args) -> anyhow::Result<Report> {
    let settings = Settings::new(&args)?;
    let Settings {
        url,
        variables,
        loader,
        batch_size,
        warmup,
        steps,
        log_every,
        patch,
    } = settings;
    let device = training_device(args.device.as_deref(), args.tiny)?;
    let device_name = match device.location() {
        candle_core::DeviceLocation::Cuda { gpu_id } => format!("cuda:{gpu_id}"),
        other => format!("{other:?}").to_lowercase(),
    };

    // The layout fixes the model's channels and the grid: `[channels, latitude, longitude]`.
    let dataset = Arc::new(
        Dataset::open(&url)
            .await
            .with_context(|| format!("cannot open {url}"))?,
    );
    let mut spec = WindowSpec::new().forecast(1, [1]);
    if let Some(patch) = patch {
        spec = spec
            .window("latitude", patch, patch)
            .window("longitude", patch, patch);
    }
    let layout = SampleLayout::new(&dataset, &variables, &spec)
        .with_context(|| format!("variables {variables:?} of {url}"))?;
    let input_shape = layout.sample_shape();
    let target_shape = layout.target_shape().context("forecasting has targets")?;
    ensure!(
        input_shape.len() == 3,
        "the U-Net takes [channels, latitude, longitude] samples; {variables:?} of {url} gives \
         {input_shape:?} (a variable with other dimensions?)"
    );
    for (axis, &size) in input_shape[1..].iter().enumerate() {
        ensure!(
            size % unet::DIVISOR == 0,
            "the U-Net halves the grid five times, so its sides must divide by {}: {} is {size} \
             (pick --patch to crop)",
            unet::DIVISOR,
            ["latitude", "longitude"][axis]
        );
    }
    println!(
        "{url}: {} samples of {input_shape:?} -> {target_shape:?}, batch {}, on {device_name}",
        layout.num_samples(),
        batch_size
    );

    // The model and the optimiser.
    let varmap = VarMap::new();
    let model = unet::Unet::new(
        VarBuilder::from_varmap(&varmap, DType::F32, &device),
        input_shape[0],
        target_shape[0],
    )?;
    let parameters: usize = varmap.all_vars().iter().map(|v| v.elem_count()).sum();
    println!(
        "U-Net (resnet18 encoder): {:.2} M values (parameters and BN statistics)",
        parameters as f64 / 1e6
    );
    let mut optimizer = candle_nn::AdamW::new(
        varmap.all_vars(),
        candle_nn::ParamsAdamW {
            lr: 1e-3,
            weight_decay: 1e-4,
            ..Default::default()
        },
    )?;

    // The loader.
    let mut batches = match loader {
        Loader::Synthetic => {
            let batch = |shape: &[usize]| {
                let dims: Vec<usize> = std::iter::once(batch_size)
                    .chain(shape.iter().copied())
                    .collect();
                Tensor::randn(0f32, 1f32, dims, &device)
            };
            Batches::Synthetic {
                inputs: batch(&input_shape)?,
                targets: batch(&target_shape)?,
            }
        }
        loader => {
            let stats_json = statistics(&dataset, &variables, args.normalize.as_ref()).await?;
            let config = DataConfig {
                dataset: dataset.clone(),
                variables: variables.clone(),
                patch,
                batch_size,
                prefetch: args.prefetch,
                seed: args.seed,
                stats_json,
            };
            zarrpipe_batches(config, loader, &device, args.gpu_share).await?
        }
    };

    // Warm-up steps, then the timed ones; the device is synchronised at the end of each.
    let mut losses = Vec::new();
    let mut waited = Duration::ZERO;
    let mut started = Instant::now();
    let mut gpu_at_start = Duration::ZERO;
    for step in 0..warmup + steps {
        if step == warmup {
            device.synchronize()?;
            started = Instant::now();
            waited = Duration::ZERO;
            gpu_at_start = batches.gpu_busy();
        }
        let asked = Instant::now();
        let (inputs, targets) = batches.next(&device).await?;
        waited += asked.elapsed();
        if args.no_training {
            // The batch is on the device once the device has caught up.
            device.synchronize()?;
            continue;
        }
        let predicted = model.forward(&inputs, true)?;
        let loss = candle_nn::loss::mse(&predicted, &targets)?;
        optimizer.backward_step(&loss)?;
        let loss = loss.to_scalar::<f32>()?; // synchronises the device
        losses.push(loss);
        if (step + 1) % log_every == 0 || step + 1 == warmup + steps {
            let phase = if step < warmup { " (warm-up)" } else { "" };
            println!("step {:>4}{phase}: loss {loss:.4}", step + 1);
        }
    }
    device.synchronize()?;
    let seconds = started.elapsed().as_secs_f64();

    // The figures.
    let loader_gpu = (batches.gpu_busy() - gpu_at_start).as_secs_f64();
    let report = Report {
        loader: format!("{:?}", loader).to_lowercase(),
        training: !args.no_training,
        device: device_name,
        batch_size,
        input_shape,
        warmup_steps: warmup,
        timed_steps: steps,
        seconds,
        samples_per_second: (steps * batch_size) as f64 / seconds,
        step_ms: 1e3 * seconds / steps as f64,
        data_wait_fraction: (waited.as_secs_f64() / seconds).min(1.0),
        loader_gpu_seconds: loader_gpu,
        loader_gpu_fraction: loader_gpu / seconds,
        losses,
    };
    println!(
        "{} ({}): {:.2} samples/s, {:.1} ms a step, waiting for data {:.1}% of the time, \
         loader GPU time {:.3} s ({:.1}% of the wall time)",
        report.loader,
        if report.training {
            "training"
        } else {
            "loading only"
        },
        report.samples_per_second,
        report.step_ms,
        100.0 * report.data_wait_fraction,
        report.loader_gpu_seconds,
        100.0 * report.loader_gpu_fraction,
    );
    Ok(report)
}

/// The pipeline for a zarrpipe loader.
async fn zarrpipe_batches(
    config: DataConfig,
    loader: Loader,
    device: &Device,
    gpu_share: Option<f64>,
) -> anyhow::Result<Batches> {
    let decode_on = match loader {
        Loader::Host => {
            let stream = config.builder(0).build().await?;
            return Ok(Batches::Host {
                config,
                epoch: 0,
                stream,
                past_gpu: Duration::ZERO,
            });
        }
        Loader::Synthetic => unreachable!("synthetic batches need no pipeline"),
        Loader::Gpu => DecodeOn::Gpu,
        Loader::Cpu => DecodeOn::Cpu,
        Loader::Split => DecodeOn::Split,
        Loader::Auto => DecodeOn::Auto { gpu_share },
    };
    #[cfg(feature = "candle")]
    {
        let Device::Cuda(cuda) = device else {
            bail!("--loader {loader:?} delivers GPU batches: train on a cuda device (--device cuda:N)");
        };
        let ordinal = cuda.cuda_stream().context().ordinal();
        let options = GpuOptions {
            device: ordinal,
            ..Default::default()
        };
        let gpu = GpuDevice::open(options, 16 << 30)?;
        let stream = gpu_stream(&config, &gpu, decode_on, 0).await?;
        Ok(Batches::Gpu {
            config,
            gpu,
            decode_on,
            epoch: 0,
            stream,
            past_gpu: Duration::ZERO,
        })
    }
    #[cfg(not(feature = "candle"))]
    {
        let _ = (config, device, decode_on);
        bail!(
            "--loader {loader:?} hands GPU batches to candle: build with --features candle \
             (scripts/cuda-build-env.sh); without it, use --loader host or synthetic"
        )
    }
}
