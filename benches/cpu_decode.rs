//! CPU decoding of ~1 MiB chunks (512 x 512 float32 fields written by `zarrpipe::generate`)
//! with zstd, blosc-lz4 and gzip: one chunk on one thread (`decode_on_cpu`), and the store's
//! 14 chunks on every core (rayon, as `CpuDecoder` runs them). Throughput is decoded bytes.
//! Run with `cargo bench --bench cpu_decode` (add `-- --quick` for a short run).

mod common;

use std::sync::Arc;
use std::time::Duration;

use criterion::{criterion_group, criterion_main, BenchmarkId, Criterion, Throughput};
use futures::{stream, TryStreamExt};
use rayon::prelude::*;
use zarrpipe::codec::decode_on_cpu;
use zarrpipe::generate::Compression;
use zarrpipe::store::{ChunkRequest, Dataset, EncodedChunk, FetchExt};

fn cpu_decode(c: &mut Criterion) {
    let runtime = common::runtime();
    let mut group = c.benchmark_group("cpu_decode");
    group
        .warm_up_time(Duration::from_secs(1))
        .measurement_time(Duration::from_secs(3));
    for (name, compression) in [
        ("zstd", Compression::Zstd),
        ("blosc_lz4", Compression::BloscLz4),
        ("gzip", Compression::Gzip),
    ] {
        let (_dir, dataset) = common::store(&runtime, compression);
        let chunks = every_chunk(&runtime, &dataset);
        let decoded: u64 = chunks
            .iter()
            .map(|chunk| chunk.request.variable.decoded_chunk_bytes())
            .sum();
        let stored: usize = chunks.iter().map(|chunk| chunk.stored_len()).sum();
        println!(
            "{name}: {} chunks, {:.2} MiB decoded, ratio {:.2}",
            chunks.len(),
            decoded as f64 / f64::from(1 << 20),
            decoded as f64 / stored as f64
        );
        let first = chunks[0].clone();
        let one = first.request.variable.decoded_chunk_bytes();
        group.throughput(Throughput::Bytes(one));
        group.bench_function(BenchmarkId::new("one_chunk_one_thread", name), |b| {
            b.iter(|| decode_on_cpu(first.clone()).expect("decode").bytes.len())
        });
        group.throughput(Throughput::Bytes(decoded));
        group.bench_function(BenchmarkId::new("14_chunks_all_cores", name), |b| {
            b.iter(|| {
                chunks
                    .par_iter()
                    .map(|chunk| decode_on_cpu(chunk.clone()).expect("decode").bytes.len())
                    .sum::<usize>()
            })
        });
    }
    group.finish();
}

/// Every chunk of every data variable, read (not decoded).
fn every_chunk(runtime: &tokio::runtime::Runtime, dataset: &Dataset) -> Vec<EncodedChunk> {
    let mut requests = Vec::new();
    for name in dataset.data_variable_names() {
        let variable: Arc<_> = dataset.variable(&name).expect("variable").clone();
        let everything: Vec<_> = variable.shape().iter().map(|&n| 0..n).collect();
        for indices in variable.chunks_in(&everything) {
            requests.push(ChunkRequest::new(variable.clone(), indices));
        }
    }
    runtime
        .block_on(stream::iter(requests).fetch(16).try_collect())
        .expect("fetch")
}

criterion_group!(benches, cpu_decode);
criterion_main!(benches);
