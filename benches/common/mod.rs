//! What the CPU-stage benches share: a small generated store on disk.

use tempfile::TempDir;
use zarrpipe::generate::{generate, Compression, GenerateOptions};
use zarrpipe::store::Dataset;

/// Two time steps of the seven W1 variables, one level, on a 512 x 512 grid: 14 fields of
/// 1 MiB (float32), one chunk each.
pub fn options(compression: Compression) -> GenerateOptions {
    GenerateOptions {
        time: 2,
        levels: 1,
        lat: 512,
        lon: 512,
        compression,
        shard: None,
        seed: 7,
        chunks: None,
        variables: Default::default(),
    }
}

pub fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("runtime")
}

/// The store, written to a temporary directory (kept alive by the returned guard), opened.
pub fn store(runtime: &tokio::runtime::Runtime, compression: Compression) -> (TempDir, Dataset) {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("bench.zarr");
    generate(&path, &options(compression), |_, _| {}).expect("generate");
    let dataset = runtime
        .block_on(Dataset::open(path.to_str().expect("utf-8 path")))
        .expect("open");
    (dir, dataset)
}
