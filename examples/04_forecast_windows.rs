//! # 04: forecasting windows, shuffled across ranks, resumed
//!
//! Cuts 64 x 64 patches overlapping by 16 along latitude out of the sample dataset, pairs each
//! input (two history steps) with targets one and two steps ahead, shuffles the epoch with a
//! seed, splits it across two ranks as torchrun would, and resumes rank 0's epoch from a saved
//! state, showing that exactly the rest is delivered.
//!
//! Run it with `cargo run --release --example 04_forecast_windows`.

use zarrpipe::batcher::{Ranks, SamplerState, Shuffle};
use zarrpipe::pipeline::PipelineBuilder;
use zarrpipe::prelude::*;
use zarrpipe::sample::ensure_sample;

/// The same pipeline for every rank and every restart: only ranks and resume state differ.
fn pipeline(url: &str, rank: usize) -> anyhow::Result<PipelineBuilder> {
    Ok(Pipeline::builder(url)
        .variables(["t2m", "z"])
        .window("latitude", 64, 48)
        .window("longitude", 64, 64)
        .forecast(2, [1, 2])
        .shuffle(Shuffle::Full)
        .seed(42)
        .epoch(0)
        .ranks(Ranks::new(rank, 2)?)
        .batch_size(4))
}

fn sample_numbers(batch: &Batch) -> Vec<u64> {
    batch.samples.iter().map(|sample| sample.index).collect()
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    // --- 1. Windows with lead-time targets ---
    let url = ensure_sample(|_, _| {})?;
    let mut rank_0 = pipeline(&url, 0)?.build().await?;
    let layout = rank_0.layout().clone();
    println!(
        "{} samples per epoch (steps with 1 step of history and 2 ahead); input {:?}, target {:?}",
        layout.num_samples(),
        layout.sample_shape(),
        layout.target_shape().unwrap_or_default()
    );

    // --- 2. Two ranks share the shuffled epoch ---
    let rank_1: Vec<Batch> = pipeline(&url, 1)?.build().await?.try_collect().await?;
    let first = rank_0.try_next().await?.expect("rank 0 has batches");
    println!(
        "rank 0 batch 0: samples {:?}, inputs {:?}, targets {:?}",
        sample_numbers(&first),
        first.inputs.shape(),
        first.targets.as_ref().map(|t| t.shape().to_vec())
    );
    println!(
        "rank 1: {} batches, first samples {:?}",
        rank_1.len(),
        sample_numbers(&rank_1[0])
    );

    // --- 3. Save the position, stop, and resume ---
    let saved = serde_json::to_string(&rank_0.state())?;
    println!("saved state after one batch: {saved}");
    let uninterrupted: Vec<Vec<u64>> = rank_0
        .map_ok(|batch| sample_numbers(&batch))
        .try_collect()
        .await?;
    let state: SamplerState = serde_json::from_str(&saved)?;
    let resumed: Vec<Batch> = pipeline(&url, 0)?
        .resume(state)
        .build()
        .await?
        .try_collect()
        .await?;
    let resumed: Vec<Vec<u64>> = resumed.iter().map(sample_numbers).collect();
    println!(
        "resumed {} batches; identical to the uninterrupted rest: {}",
        resumed.len(),
        resumed == uninterrupted
    );
    Ok(())
}
