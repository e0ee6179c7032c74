//! Planning speed: an epoch of one million samples (order, rank share, batches and every
//! batch's read plan) on one core, metadata only. Run with `cargo bench --bench plan_epoch`.
//!
//! The dataset is metadata alone, in memory: one variable `x(time=10000, lat=1000, lon=1000)`
//! in chunks of (1, 100, 100); windows of 100 x 100 give 10000 x 10 x 10 = 1,000,000 samples.

use std::sync::Arc;
use std::time::Instant;

use object_store::memory::InMemory;
use object_store::path::Path;
use object_store::ObjectStoreExt;
use zarrpipe::batcher::{Batcher, EpochOptions, PlanSummary, SampleLayout, Shuffle, WindowSpec};
use zarrpipe::store::Dataset;

fn main() {
    // Planning is single-threaded; pin rayon too so nothing else runs.
    rayon::ThreadPoolBuilder::new()
        .num_threads(1)
        .build_global()
        .expect("one thread");
    let runtime = tokio::runtime::Builder::new_current_thread()
        .build()
        .expect("runtime");
    let dataset = runtime.block_on(metadata_only_dataset());
    let spec = WindowSpec::new()
        .window("lat", 100, 100)
        .window("lon", 100, 100);
    for shuffle in [Shuffle::None, Shuffle::Full, Shuffle::Blocks] {
        let started = Instant::now();
        let layout = Arc::new(SampleLayout::new(&dataset, &["x"], &spec).expect("layout"));
        let options = EpochOptions {
            shuffle,
            seed: 1,
            ..EpochOptions::default()
        };
        let batcher = Batcher::with_options(layout.clone(), 32, &options).expect("batcher");
        let order = started.elapsed();
        let plan = PlanSummary::of_epoch(&batcher);
        let total = started.elapsed();
        println!(
            "{shuffle:?}: {} samples, {} batches, {} chunk reads; order {:.3} s, with read plans {:.3} s",
            plan.samples,
            plan.batches,
            plan.chunk_reads,
            order.as_secs_f64(),
            total.as_secs_f64()
        );
    }
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
