//! # 09: an ERA5 U-Net trained in Rust (candle) on zarrpipe's batches
//!
//! The NCAR/NVIDIA ERA5 U-Net hackathon (`zarr_ML_optimization/train_unet.py`) showed its GPUs
//! waiting on data with three bars: training on real data, loading alone, and training on
//! synthetic data. This example is that experiment in Rust: a U-Net with a resnet18 encoder
//! (torchvision's layout, no pretrained weights) and segmentation_models_pytorch's decoder,
//! built with candle-nn, trained with AdamW (lr 1e-3, weight decay 1e-4) on the MSE of a
//! one-step forecast (inputs at t, targets at t+1), every variable normalised with its mean and
//! standard deviation. Setup A of the training benchmark (docs/training.md): `t2m, V500, U500, T500, Z500, Q500`, batch 16, whole
//! 640 x 1280 fields.
//!
//! `--loader` picks where the batches come from:
//! - `synthetic`: random tensors made once on the device, the upper bound;
//! - `gpu`, `cpu`, `split`, `auto`: zarrpipe decoding on the GPU, on the CPU, on both at once,
//!   or on the CPU with the GPU helping while training waits (`DecodeOn`), every one collating
//!   on the GPU and handing its batches to candle without a copy (`Batch::<Gpu>::into_candle`;
//!   feature `candle`);
//! - `host`: CPU decoding into host batches, copied into candle tensors (the CPU path).
//!
//! `--no-training` times the loader alone. Timing is honest: warm-up steps are left out, the
//! device is synchronised at the end of every step (so the time spent waiting for a batch is
//! time the device had nothing to do) and before each clock is read, and every loader runs
//! the same number of steps. The last line printed is a JSON object with the figures.
//!
//! Memory: candle 0.11 (without cuDNN) convolves through im2col and keeps every intermediate
//! of its batch norm for the backward pass. One training step at batch 1 on whole 640 x 1280
//! fields of six variables peaked at 5.0 GB resident on the CPU (`--device cpu --loader
//! synthetic`); memory grows with the batch, so batch 16 needs roughly sixteen times that: a
//! 141 GB H200 holds it, an 80 GB H100 may not (`--batch-size 8` there, and say so).
//!
//! ```sh
//! # CPU, in CI: 32 x 32 crops of the embedded sample, a few steps; fails unless the loss falls
//! cargo run --example 09_train_unet -- --tiny
//! # a GPU host (build set-up: scripts/cuda-build-env.sh), setup A's store
//! cargo run --release --features candle --example 09_train_unet -- --url era5_a.zarr --loader gpu
//! ```
//!
//! The model is in `unet.rs`, the batches (zarrpipe's stream or synthetic tensors) in
//! `batches.rs`, and the run (warm-up, timed steps, the report) in `run.rs`.

use std::path::PathBuf;

use anyhow::{bail, ensure};
use clap::{Parser, ValueEnum};

mod batches;
mod run;
mod unet;

pub use run::run;

/// Setup A's variables: surface temperature and five 500 hPa fields.
pub const SETUP_A_VARIABLES: &str = "t2m,V500,U500,T500,Z500,Q500";

/// The sample's surface variables, which `--tiny` trains on when `--vars` is not given.
pub const TINY_VARIABLES: &str = "t2m,u10,v10,msl";

/// Where the batches come from.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum Loader {
    /// Random tensors made once on the device: training without a loader (the upper bound).
    Synthetic,
    /// zarrpipe: decode on the GPU, collate on the GPU (feature `candle`).
    Gpu,
    /// zarrpipe: decode on the CPU, collate on the GPU (feature `candle`).
    Cpu,
    /// zarrpipe: decode each batch on both, shared by measured rates (feature `candle`).
    Split,
    /// zarrpipe: decode on the CPU, the GPU helping while training waits (feature `candle`).
    Auto,
    /// zarrpipe: decode and collate on the CPU, batches copied into candle tensors.
    Host,
}

/// The example's flags (`--help` lists them).
#[derive(Clone, Debug, Parser)]
#[command(about = "Train an ERA5 U-Net (resnet18 encoder) with candle on zarrpipe's batches")]
pub struct Args {
    /// The Zarr store (default: the embedded sample with `--tiny`).
    #[arg(long)]
    pub url: Option<String>,
    /// Variables, in and out, as channels in this order [default: t2m,V500,U500,T500,Z500,Q500;
    /// with --tiny: t2m,u10,v10,msl].
    #[arg(long, value_delimiter = ',')]
    pub vars: Option<Vec<String>>,
    /// Where the batches come from [default: gpu; with --tiny: host].
    #[arg(long, value_enum)]
    pub loader: Option<Loader>,
    /// Time the loader alone: batches are delivered to the device and dropped.
    #[arg(long)]
    pub no_training: bool,
    /// `cpu` or `cuda:N` [default: cuda:0 with the `candle` feature, else cpu; with --tiny: cpu].
    #[arg(long)]
    pub device: Option<String>,
    /// Samples per step [default: 16; with --tiny: 4].
    #[arg(long)]
    pub batch_size: Option<usize>,
    /// Steps before the clock starts [default: 5; with --tiny: 2].
    #[arg(long)]
    pub warmup: Option<usize>,
    /// Timed steps, the same for every loader [default: 50; with --tiny: 6].
    #[arg(long)]
    pub steps: Option<usize>,
    /// Print the loss every this many steps [default: 10; with --tiny: 1].
    #[arg(long)]
    pub log_every: Option<usize>,
    /// Per-variable mean and std, as `zarrpipe stats URL --json` prints them (default: computed
    /// here, over every chunk of each variable).
    #[arg(long)]
    pub normalize: Option<PathBuf>,
    /// Square crops of this many points (latitude and longitude) instead of whole fields
    /// [default: whole fields; with --tiny: 32].
    #[arg(long)]
    pub patch: Option<u64>,
    /// Batches loaded ahead of training.
    #[arg(long, default_value_t = 4)]
    pub prefetch: usize,
    /// `--loader auto`: most of the GPU's time decoding may take (e.g. 0.05).
    #[arg(long)]
    pub gpu_share: Option<f64>,
    /// Shuffling seed (each epoch shuffles with seed + epoch).
    #[arg(long, default_value_t = 0)]
    pub seed: u64,
    /// The CI check: the sample store, 32 x 32 crops, batch 4, 2 + 6 steps on the CPU with
    /// host batches; fails unless the loss is finite and falls. Flags given override these.
    #[arg(long)]
    pub tiny: bool,
}

/// What a run measured (also printed as the last line, in JSON).
#[derive(Clone, Debug, serde::Serialize)]
pub struct Report {
    pub loader: String,
    pub training: bool,
    pub device: String,
    pub batch_size: usize,
    /// `[channels in, latitude, longitude]`.
    pub input_shape: Vec<usize>,
    pub warmup_steps: usize,
    pub timed_steps: usize,
    pub seconds: f64,
    pub samples_per_second: f64,
    pub step_ms: f64,
    /// Of the timed wall-clock time, the fraction spent waiting for the next batch.
    pub data_wait_fraction: f64,
    /// GPU time the loader's batches took (decode and collate kernels, CUDA events) during the
    /// timed steps, and that over the timed wall-clock time.
    pub loader_gpu_seconds: f64,
    pub loader_gpu_fraction: f64,
    /// Every step's loss, warm-up included (empty with `--no-training`).
    pub losses: Vec<f32>,
}

/// `--tiny`'s check: every loss finite, and the last three steps' mean below the first three's.
pub fn check_loss_falls(losses: &[f32]) -> anyhow::Result<()> {
    ensure!(
        losses.len() >= 6,
        "need at least 6 steps to see the loss fall, got {}",
        losses.len()
    );
    if let Some(step) = losses.iter().position(|loss| !loss.is_finite()) {
        bail!("the loss at step {} is {}", step + 1, losses[step]);
    }
    let mean = |values: &[f32]| values.iter().sum::<f32>() / values.len() as f32;
    let (first, last) = (mean(&losses[..3]), mean(&losses[losses.len() - 3..]));
    ensure!(
        last < first,
        "the loss did not fall: the first three steps averaged {first:.4}, the last three {last:.4}"
    );
    println!("loss fell from {first:.4} (first three steps) to {last:.4} (last three)");
    Ok(())
}

fn main() -> anyhow::Result<()> {
    let args = Args::parse();
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .max_blocking_threads(zarrpipe::MAX_BLOCKING_THREADS)
        .build()?;
    let check = args.tiny && !args.no_training;
    let report = runtime.block_on(run(args))?;
    println!("{}", serde_json::to_string(&report)?);
    if check {
        check_loss_falls(&report.losses)?;
    }
    Ok(())
}
