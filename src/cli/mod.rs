//! Command-line interface: argument parsing and one module per command.

mod advise;
mod bound;
mod default_run;
mod generate;
mod info;
mod plan;
mod rechunk;
mod stats;
mod store;
mod windows;

use std::process::ExitCode;

use clap::{Parser, Subcommand};

/// Feed training batches straight from Zarr. With no command: stream one epoch of the embedded
/// sample dataset (written to data/sample.zarr on first run) and print a summary.
#[derive(Debug, Parser)]
#[command(name = "zarrpipe", version, about)]
pub struct Args {
    #[command(subcommand)]
    command: Option<Command>,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Stream one epoch of a dataset through the default pipeline (the default command).
    Run(default_run::RunArgs),
    /// Describe a dataset: variables, dimensions, shapes, dtypes, chunks, codecs, sizes, and
    /// the missing time steps.
    Info(info::InfoArgs),
    /// Measure the whole pipeline: `run` with one warm-up and 2 timed epochs (best reported;
    /// each timed from building its stream to its last batch), decoded GB/s and samples/s
    /// delivered, and the time each stage took.
    Bench(default_run::RunArgs),
    /// Training statistics per channel: count, NaN count, mean, std, min and max of the values
    /// and of their tendencies (differences between consecutive time steps), over a date range,
    /// missing steps left out; --json writes what --normalize reads.
    Stats(stats::StatsArgs),
    /// Samples, batches, chunk reads and read amplification of an epoch, and the missing time
    /// steps with the samples they leave out (only the time coordinate is read).
    Plan(plan::PlanArgs),
    /// Write a W1-shaped synthetic ERA5-like Zarr v3 store for benchmarks and tests.
    Generate(generate::GenerateArgs),
    /// Rewrite a store as Zarr v3 with new chunks, shards and codec (resumable).
    Rechunk(rechunk::RechunkArgs),
    /// The CPU's bound on a local store: threads read its chunk files and decompress them with
    /// the codec library alone (reused buffers, no zarrpipe stage), decoded GB/s.
    Bound(bound::BoundArgs),
    /// Measure this machine's read and decode rates on a sample of the store and of candidate
    /// layouts, and say which layout feeds it fastest and why.
    Advise(advise::AdviseArgs),
}

pub async fn run(args: Args) -> anyhow::Result<()> {
    match args.command {
        // No command: `run` with its defaults, as clap would parse `zarrpipe run`.
        None => match Args::parse_from(["zarrpipe", "run"]).command {
            Some(Command::Run(defaults)) => default_run::run(defaults).await,
            _ => unreachable!("`run` parses as the run command"),
        },
        Some(Command::Run(args)) => default_run::run(args).await,
        Some(Command::Bench(mut args)) => {
            args.passes.get_or_insert(2);
            default_run::run(args).await
        }
        Some(Command::Info(args)) => info::run(args).await,
        Some(Command::Stats(args)) => stats::run(args).await,
        Some(Command::Plan(args)) => plan::run(args).await,
        Some(Command::Generate(args)) => generate::run(args),
        Some(Command::Rechunk(args)) => rechunk::run(args).await,
        Some(Command::Advise(args)) => advise::run(args).await,
        Some(Command::Bound(args)) => bound::run(args).await,
    }
}

/// Prints the error and its causes on one line and gives the failing exit status.
pub fn report(error: &anyhow::Error) -> ExitCode {
    eprintln!("error: {}", zarrpipe::error_chain(error.as_ref()));
    ExitCode::FAILURE
}

/// GB/s of `bytes` over `seconds`.
fn gb_per_s(bytes: u64, seconds: f64) -> f64 {
    bytes as f64 / 1e9 / seconds.max(1e-9)
}
