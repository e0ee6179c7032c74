//! The CPU decoder's chunks decoded straight into the host batch (the default) give the same
//! tensors, bit for bit, as chunks decoded into memory of their own and gathered after
//! (`CpuDecoder::decoding_at_once`): on whole fields (decoded in place), windows cut from
//! chunks, forecasting targets, CF-packed integers, static and derived channels, gaps filled
//! with NaN, every compressor, and sharded chains.

mod common;

use std::sync::Arc;

use common::{fixtures, store_path};
use zarrpipe::batcher::Missing;
use zarrpipe::generate::{generate, Compression, GenerateOptions};
use zarrpipe::pipeline::{Batch, MetricsSnapshot, PipelineBuilder};
use zarrpipe::prelude::*;

/// The builder's batches and metrics, decoding in place and decoding at once.
async fn both(builder: impl Fn() -> PipelineBuilder) -> [(Vec<Batch>, MetricsSnapshot); 2] {
    let at_once = Arc::new(CpuDecoder::new().decoding_at_once());
    let run = |builder: PipelineBuilder| async move {
        let mut stream = builder.build().await.unwrap();
        let mut batches = Vec::new();
        while let Some(batch) = stream.try_next().await.unwrap() {
            batches.push(batch);
        }
        (batches, stream.metrics())
    };
    [run(builder()).await, run(builder().decoder(at_once)).await]
}

fn bits(tensor: &ndarray::ArrayD<f32>) -> (Vec<usize>, Vec<u32>) {
    (
        tensor.shape().to_vec(),
        tensor.iter().map(|v| v.to_bits()).collect(),
    )
}

/// Both ways give the same batches; returns the in-place run's copied chunks.
async fn same_batches(what: &str, builder: impl Fn() -> PipelineBuilder) -> u64 {
    let [(in_place, metrics), (at_once, _)] = both(builder).await;
    assert!(!in_place.is_empty(), "{what}: no batch");
    assert_eq!(in_place.len(), at_once.len(), "{what}");
    for (a, b) in in_place.iter().zip(&at_once) {
        assert_eq!(a.samples, b.samples, "{what}");
        assert!(
            bits(&a.inputs) == bits(&b.inputs),
            "{what}: inputs of batch {}",
            a.index
        );
        let targets = |batch: &Batch| batch.targets.as_ref().map(bits);
        assert!(
            targets(a) == targets(b),
            "{what}: targets of batch {}",
            a.index
        );
    }
    assert!(metrics.cpu_decoded_chunks > 0, "{what}");
    metrics.cpu_copied_chunks
}

/// Windows of (size, stride) `lat` and `lon` over `variables`, with forecasting targets: where
/// they cross chunk edges, chunks are cut.
fn cut_windows(
    url: &str,
    variables: [&str; 2],
    lat: (u64, u64),
    lon: (u64, u64),
    batch_size: usize,
) -> PipelineBuilder {
    Pipeline::builder(url)
        .variables(variables)
        .window("latitude", lat.0, lat.1)
        .window("longitude", lon.0, lon.1)
        .forecast(2, [1])
        .batch_size(batch_size)
}

fn generated(dir: &std::path::Path, compression: Compression, shard: Option<u64>) -> String {
    generated_in(dir, compression, shard, [8, 16])
}

/// A store of 16 x 32 fields in `chunks`.
fn generated_in(
    dir: &std::path::Path,
    compression: Compression,
    shard: Option<u64>,
    chunks: [u64; 2],
) -> String {
    let path = dir.join(format!("{compression:?}-{shard:?}-{chunks:?}.zarr"));
    let options = GenerateOptions {
        time: 4,
        levels: 2,
        lat: 16,
        lon: 32,
        compression,
        shard,
        seed: 11,
        chunks: Some(chunks),
        variables: Default::default(),
    };
    generate(&path, &options, |_, _| {}).unwrap();
    path.to_string_lossy().into_owned()
}

#[tokio::test]
async fn every_codec_and_cut_matches_decoding_at_once() {
    let dir = tempfile::tempdir().unwrap();
    for compression in [Compression::Zstd, Compression::BloscLz4, Compression::Gzip] {
        let url = generated(dir.path(), compression, None);
        let wider = generated_in(dir.path(), compression, None, [8, 32]);
        // Whole chunks: each lies in one run of the batch. Chunks of 512 bytes are decoded
        // there; of 1 KiB, through the thread's scratch memory and streamed there
        // (`DirectChain::decodes_faster_through_scratch`).
        for (store, longitude, what) in [(&url, 16, "whole"), (&wider, 32, "whole 1 KiB chunks")] {
            let whole = || {
                Pipeline::builder(store)
                    .window("latitude", 8, 8)
                    .window("longitude", longitude, longitude)
                    .batch_size(3)
            };
            let label = format!("{compression:?} {what}");
            assert_eq!(same_batches(&label, whole).await, 0);
        }
        // Windows across chunk edges, with forecasting targets: chunks are cut.
        let cut = || cut_windows(&url, ["t2m", "z"], (6, 5), (12, 10), 4);
        assert_eq!(same_batches(&format!("{compression:?} cut"), cut).await, 0);
    }
    // Sharded chains decode in place too, none copied.
    let url = generated(dir.path(), Compression::Zstd, Some(2));
    let sharded = || {
        Pipeline::builder(&url)
            .variables(["t2m", "z"])
            .batch_size(2)
    };
    assert_eq!(same_batches("sharded", sharded).await, 0);
}

#[tokio::test]
async fn long_rows_cut_from_chunks_match_decoding_at_once() {
    // Rows of 301 to 700 float32 cut from chunks 700 wide, copied with streaming stores; the
    // tensor's rows are 1001 long, so the runs start at every 16-byte alignment.
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("wide.zarr");
    let options = GenerateOptions {
        time: 3,
        levels: 1,
        lat: 8,
        lon: 1400,
        compression: Compression::Zstd,
        shard: None,
        seed: 5,
        chunks: Some([4, 700]),
        variables: Default::default(),
    };
    generate(&path, &options, |_, _| {}).unwrap();
    let url = path.to_string_lossy().into_owned();
    let cut = || cut_windows(&url, ["t2m", "u10"], (3, 1), (1001, 199), 3);
    same_batches("long rows", cut).await;
}

#[tokio::test]
async fn stores_written_by_xarray_match_decoding_at_once() {
    for store in ["xr_v2", "xr_v3"] {
        let url = store_path(store);
        let patches = || {
            Pipeline::builder(&url)
                .variables(["t2m", "z", "tp", "cls"])
                .window("latitude", 5, 3)
                .window("longitude", 7, 4)
                .batch_size(3)
        };
        same_batches(store, patches).await;
    }
    let url = store_path("xr_static");
    let statics = || {
        Pipeline::builder(&url)
            .variables(["t2m", "orography", "lsm", "cos_lat"])
            .window("latitude", 4, 3)
            .batch_size(2)
    };
    same_batches("xr_static", statics).await;
    for store in ["gaps_v2", "gaps_v3"] {
        let url = store_path(store);
        let filled = || {
            Pipeline::builder(&url)
                .variables(["t2m", "z"])
                .missing(Missing::Fill)
                .forecast(2, [1])
                .batch_size(3)
        };
        same_batches(store, filled).await;
    }
    for store in ["era5_int16_packed_v2.zarr", "era5_int16_packed_v3.zarr"] {
        let url = fixtures().join("real_archives").join(store);
        let url = url.to_string_lossy().into_owned();
        let packed = || Pipeline::builder(&url).batch_size(2);
        same_batches(store, packed).await;
    }
}
