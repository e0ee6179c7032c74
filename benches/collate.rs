//! Collation on the CPU: `HostCollator` gathering a batch's windows from already decoded
//! chunks (512 x 512 float32 fields of the seven W1 variables, one level: 7 channels) into one
//! `[batch, channel, lat, lon]` float32 tensor. Throughput is bytes of the tensor. Run with
//! `cargo bench --bench collate` (add `-- --quick` for a short run).

mod common;

use std::sync::Arc;
use std::time::Duration;

use criterion::{criterion_group, criterion_main, BatchSize, BenchmarkId, Criterion, Throughput};
use futures::{stream, TryStreamExt};
use zarrpipe::batcher::{Batcher, SampleLayout, WindowSpec};
use zarrpipe::codec::DecodedChunks;
use zarrpipe::codec::{CpuDecoder, DecodeExt};
use zarrpipe::collate::{DecodedBatch, HostCollator};
use zarrpipe::generate::Compression;
use zarrpipe::store::FetchExt;

fn collate(c: &mut Criterion) {
    let runtime = common::runtime();
    let (_dir, dataset) = common::store(&runtime, Compression::Zstd);
    let variables = dataset.data_variable_names();
    let mut group = c.benchmark_group("collate");
    group
        .warm_up_time(Duration::from_secs(1))
        .measurement_time(Duration::from_secs(3));
    // (name, windows, batch size): whole fields, aligned quarter fields, overlapping patches.
    let cases = [
        ("fields_512_batch2", WindowSpec::new(), 2),
        (
            "windows_256_batch8",
            WindowSpec::new()
                .window("latitude", 256, 256)
                .window("longitude", 256, 256),
            8,
        ),
        (
            "patches_64_overlap32_batch32",
            WindowSpec::new()
                .window("latitude", 64, 32)
                .window("longitude", 64, 32),
            32,
        ),
    ];
    for (name, spec, batch_size) in cases {
        let layout = Arc::new(SampleLayout::new(&dataset, &variables, &spec).expect("layout"));
        let samples = Batcher::new(layout.clone(), batch_size, false)
            .expect("batcher")
            .batch(0);
        let chunks: Vec<_> = runtime
            .block_on(
                stream::iter(layout.read_plan(&samples))
                    .fetch(16)
                    .decode(Arc::new(CpuDecoder::new()), 16)
                    .try_collect(),
            )
            .expect("decode");
        let collator = HostCollator::new(layout.clone());
        let bytes = samples.len() * layout.sample_len() * 4;
        group.throughput(Throughput::Bytes(bytes as u64));
        group.bench_function(BenchmarkId::from_parameter(name), |b| {
            b.iter_batched(
                || DecodedBatch::new(0, samples.clone(), DecodedChunks::Host(chunks.clone())),
                |batch| collator.collate(batch).expect("collate").inputs.len(),
                BatchSize::LargeInput,
            )
        });
    }
    group.finish();
}

criterion_group!(benches, collate);
criterion_main!(benches);
