//! # 08: a soak run on the CPU
//!
//! Streams many epochs of the sample dataset through the CPU pipeline, shuffled anew each
//! epoch (`--shuffle full`, seed + epoch), and prints the process's resident memory after
//! each: a leak (buffers, cached indexes, tasks left behind by dropped streams) shows as a
//! number that keeps climbing. Half the epochs stop early, dropping the stream mid-epoch, as a
//! training loop that breaks out does. The last line compares the last epoch's memory with the
//! first's.
//!
//! Run it with `cargo run --release --example 08_soak -- [EPOCHS]` (default 30; Linux, as it
//! reads `/proc/self/status`). It allocates with mimalloc, as the `zarrpipe` program does.
//! docs/benchmarks.md has a run's figures.

use std::time::Instant;

// The allocator the `zarrpipe` program uses, so the figures are the program's.
#[global_allocator]
static ALLOCATOR: zarrpipe::core::RetainingAllocator<mimalloc::MiMalloc> =
    zarrpipe::core::RetainingAllocator::new(mimalloc::MiMalloc);

use zarrpipe::batcher::{EpochOptions, Shuffle};
use zarrpipe::prelude::*;
use zarrpipe::sample::ensure_sample;

/// Resident and peak resident memory of this process, in MiB.
fn memory_mib() -> (f64, f64) {
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    let field = |name: &str| {
        status
            .lines()
            .find(|line| line.starts_with(name))
            .and_then(|line| line.split_whitespace().nth(1)?.parse::<f64>().ok())
            .map_or(f64::NAN, |kib| kib / 1024.0)
    };
    (field("VmRSS:"), field("VmHWM:"))
}

fn main() -> anyhow::Result<()> {
    // The runtime the `zarrpipe` program builds (src/main.rs); ZARRPIPE_SOAK_BLOCKING_THREADS
    // overrides its bound on blocking threads, to compare.
    let blocking = std::env::var("ZARRPIPE_SOAK_BLOCKING_THREADS")
        .ok()
        .and_then(|n| n.parse().ok())
        .unwrap_or(zarrpipe::MAX_BLOCKING_THREADS);
    tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .max_blocking_threads(blocking)
        .build()?
        .block_on(soak())
}

async fn soak() -> anyhow::Result<()> {
    // --- 1. The epochs to run ---
    let epochs: u64 = std::env::args()
        .nth(1)
        .map(|text| text.parse())
        .transpose()?
        .unwrap_or(30);
    let url = ensure_sample(|_, _| {})?;
    println!("epoch  batches  seconds  rss_mib  peak_mib");

    // --- 2. Shuffled epochs, every other one dropped half way ---
    // Resident memory after each complete epoch (dropped ones are caught mid-flight).
    let mut complete = Vec::new();
    for epoch in 0..epochs {
        let started = Instant::now();
        let mut batches = Pipeline::builder(url.as_str())
            .variables(["t2m", "u10", "v10", "msl", "z", "t"])
            .window("latitude", 64, 48)
            .window("longitude", 64, 64)
            .batch_size(8)
            .epoch_options(EpochOptions {
                epoch,
                seed: 7,
                shuffle: Shuffle::Full,
                ..EpochOptions::default()
            })
            .build()
            .await?;
        let stop_at = if epoch % 2 == 1 {
            batches.num_batches() / 2
        } else {
            u64::MAX
        };
        let mut delivered = 0u64;
        while let Some(batch) = batches.try_next().await? {
            std::hint::black_box(&batch.inputs);
            delivered += 1;
            if delivered >= stop_at {
                break;
            }
        }
        drop(batches);
        let (rss, peak) = memory_mib();
        if epoch % 2 == 0 {
            complete.push(rss);
        }
        println!(
            "{epoch:>5}  {delivered:>7}  {:>7.2}  {rss:>7.1}  {peak:>8.1}",
            started.elapsed().as_secs_f64()
        );
    }

    // --- 3. Flat or not: the first complete epochs against the last ones ---
    let tenth = (complete.len() / 10).max(1);
    let mean = |values: &[f64]| values.iter().sum::<f64>() / values.len().max(1) as f64;
    let (early, late) = (
        mean(&complete[..tenth.min(complete.len())]),
        mean(&complete[complete.len().saturating_sub(tenth)..]),
    );
    println!(
        "resident memory after complete epochs: {early:.1} MiB over the first {tenth}, {late:.1} MiB over the last {tenth} ({:+.1}%); peak {:.1} MiB",
        100.0 * (late - early) / early,
        memory_mib().1
    );
    Ok(())
}
