//! # 01: open a dataset
//!
//! Opens the embedded sample dataset (written to `data/sample.zarr` on first run), lists its
//! variables the way xarray would, reads and decodes one chunk, and computes statistics of one
//! variable through the same read path the training pipeline uses.
//!
//! Run it with `cargo run --release --example 01_open_dataset`.

use std::sync::Arc;
use std::time::Instant;

use zarrpipe::codec::{decode_on_cpu, CpuDecoder};
use zarrpipe::prelude::*;
use zarrpipe::sample::ensure_sample;
use zarrpipe::stats::variable_stats;
use zarrpipe::store::fetch_chunk;

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    // --- 1. Open the dataset ---
    let url = ensure_sample(|_, _| {})?;
    let dataset = Dataset::open(&url).await?;
    println!(
        "{url}: Zarr v{}, dimensions {:?}",
        dataset.zarr_format(),
        dataset.dims()
    );

    // --- 2. List the variables ---
    for variable in dataset.variables() {
        let kind = if variable.is_coordinate() {
            "coordinate"
        } else {
            "data"
        };
        println!(
            "  {:<10} {:<10} {:?} {:?} {} chunks {:?} codecs {:?}",
            variable.name(),
            kind,
            variable.dims(),
            variable.shape(),
            variable.dtype(),
            variable.chunk_shape(),
            variable.codec_names()
        );
    }

    // --- 3. Read one chunk: fetch its stored bytes, then decode them ---
    let t2m = dataset.variable("t2m")?.clone();
    let started = Instant::now();
    let encoded = fetch_chunk(ChunkRequest::new(t2m.clone(), vec![0, 0, 0])).await?;
    let stored = encoded.stored_len();
    let decoded = decode_on_cpu(encoded)?;
    let values: Vec<f32> = decoded
        .bytes
        .chunks_exact(4)
        .map(|b| f32::from_ne_bytes(b.try_into().unwrap()))
        .collect();
    println!(
        "chunk {} : {} bytes stored, {} decoded (ratio {:.2}) in {:.2} ms; first values {:?}",
        decoded.request.key(),
        stored,
        decoded.bytes.len(),
        decoded.bytes.len() as f64 / stored as f64,
        started.elapsed().as_secs_f64() * 1e3,
        &values[..4]
    );

    // --- 4. Statistics over the whole variable ---
    let stats = variable_stats(&t2m, Arc::new(CpuDecoder::new()), 16).await?;
    println!(
        "t2m: {} values, {} NaN, min {:.2}, max {:.2}, mean {:.2}",
        stats.count,
        stats.nan_count,
        stats.min.unwrap_or(f64::NAN),
        stats.max.unwrap_or(f64::NAN),
        stats.mean.unwrap_or(f64::NAN)
    );
    Ok(())
}
