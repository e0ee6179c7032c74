//! The embedded sample dataset: a small, deterministic, W1-shaped ERA5-like store that
//! `zarrpipe` and the examples write on first use.

use std::path::Path;

use crate::generate::{generate, GenerateOptions};

/// Where the sample dataset lives, relative to the working directory.
pub const SAMPLE_PATH: &str = "data/sample.zarr";

/// Writes the sample dataset unless it is already there; returns its path. `progress` is
/// called with (chunks written, chunks in all) while writing.
pub fn ensure_sample(progress: impl Fn(u64, u64) + Sync) -> anyhow::Result<String> {
    let path = Path::new(SAMPLE_PATH);
    if !path.join("zarr.json").exists() {
        if path.exists() {
            // A run interrupted while writing leaves a partial store: start again.
            std::fs::remove_dir_all(path)?;
        }
        generate(path, &GenerateOptions::sample(), progress)?;
    }
    Ok(SAMPLE_PATH.to_string())
}
