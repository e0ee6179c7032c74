//! Planning speed: an epoch of one million samples (order, rank share and batches; then every
//! batch's read plan as well) on one core, metadata only. Run with `cargo bench --bench
//! planning` (add `-- --quick` for a short run).
//!
//! The dataset is metadata alone, in memory: one variable `x(time=10000, lat=1000, lon=1000)`
//! in chunks of (1, 100, 100); windows of 100 x 100 give 10000 x 10 x 10 = 1,000,000 samples,
//! in batches of 32.

use std::sync::Arc;
use std::time::Duration;

use criterion::{criterion_group, criterion_main, BenchmarkId, Criterion};
use object_store::memory::InMemory;
use object_store::path::Path;
use object_store::ObjectStoreExt;
use zarrpipe::batcher::{Batcher, EpochOptions, PlanSummary, SampleLayout, Shuffle, WindowSpec};
use zarrpipe::store::Dataset;

fn planning(c: &mut Criterion) {
    // Planning is single-threaded; pin rayon too so nothing else runs.
    let _ = rayon::ThreadPoolBuilder::new()
        .num_threads(1)
        .build_global();
    let runtime = tokio::runtime::Builder::new_current_thread()
        .build()
        .expect("runtime");
    let dataset = runtime.block_on(metadata_only_dataset());
    let spec = WindowSpec::new()
        .window("lat", 100, 100)
        .window("lon", 100, 100);
    let batcher = |shuffle| {
        let layout = Arc::new(SampleLayout::new(&dataset, &["x"], &spec).expect("layout"));
        assert_eq!(layout.num_samples(), 1_000_000);
        let options = EpochOptions {
            shuffle,
            seed: 1,
            ..EpochOptions::default()
        };
        Batcher::with_options(layout, 32, &options).expect("batcher")
    };
    let mut group = c.benchmark_group("plan_epoch_1M");
    group
        .sample_size(10)
        .warm_up_time(Duration::from_secs(1))
        .measurement_time(Duration::from_secs(5));
    for (name, shuffle) in [
        ("natural", Shuffle::None),
        ("full", Shuffle::Full),
        ("blocks", Shuffle::Blocks),
    ] {
        // Layout, epoch order and this rank's share, cut into batches.
        group.bench_function(BenchmarkId::new("order", name), |b| {
            b.iter(|| batcher(shuffle).num_batches())
        });
        // The same, plus every batch's deduplicated chunk reads.
        group.bench_function(BenchmarkId::new("read_plans", name), |b| {
            b.iter(|| PlanSummary::of_epoch(&batcher(shuffle)).chunk_reads)
        });
    }
    group.finish();
}

async fn metadata_only_dataset() -> Dataset {
    let store = Arc::new(InMemory::new());
    let array = serde_json::json!({
        "zarr_format": 3, "node_type": "array", "shape": [10000, 1000, 1000], "data_type": "float32",
        "chunk_grid": {"name": "regular", "configuration": {"chunk_shape": [1, 100, 100]}},
        "chunk_key_encoding": {"name": "default"}, "fill_value": 0.0,
        "codecs": [{"name": "bytes", "configuration": {"endian": "little"}}],
        "dimension_names": ["time", "lat", "lon"],
    });
    let group = serde_json::json!({"zarr_format": 3, "node_type": "group"});
    for (key, document) in [("zarr.json", group), ("x/zarr.json", array)] {
        let bytes = serde_json::to_vec(&document).expect("json");
        store
            .put(&Path::from(key), bytes.into())
            .await
            .expect("put");
    }
    Dataset::open_store("memory://plan-bench", store)
        .await
        .expect("open")
}

criterion_group!(benches, planning);
criterion_main!(benches);
