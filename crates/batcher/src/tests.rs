//! Layout and planning on a small in-memory dataset: `a(time, lat, lon)` and
//! `b(time, level, lat, lon)`, time 3, level 2, lat 10, lon 8, chunks of 4 x 4 on lat/lon.

use std::sync::Arc;

use object_store::memory::InMemory;
use object_store::path::Path;
use object_store::ObjectStoreExt;
use zarrpipe_store::Dataset;

use crate::{Batcher, Error, SampleLayout, WindowSpec};

fn array(dims: &[&str], shape: &[u64], chunks: &[u64]) -> serde_json::Value {
    serde_json::json!({
        "zarr_format": 3, "node_type": "array", "shape": shape, "data_type": "float32",
        "chunk_grid": {"name": "regular", "configuration": {"chunk_shape": chunks}},
        "chunk_key_encoding": {"name": "default"}, "fill_value": 0.0,
        "codecs": [{"name": "bytes", "configuration": {"endian": "little"}}],
        "dimension_names": dims,
    })
}

fn dataset() -> Dataset {
    let store = Arc::new(InMemory::new());
    let documents = [
        (
            "zarr.json",
            serde_json::json!({"zarr_format": 3, "node_type": "group"}),
        ),
        (
            "a/zarr.json",
            array(&["time", "lat", "lon"], &[3, 10, 8], &[1, 4, 4]),
        ),
        (
            "b/zarr.json",
            array(
                &["time", "level", "lat", "lon"],
                &[3, 2, 10, 8],
                &[1, 1, 4, 4],
            ),
        ),
        (
            "short/zarr.json",
            array(&["time", "lat", "lon"], &[3, 9, 8], &[1, 4, 4]),
        ),
        ("lsm/zarr.json", array(&["lat", "lon"], &[10, 8], &[4, 4])),
    ];
    let runtime = tokio::runtime::Builder::new_current_thread()
        .build()
        .unwrap();
    runtime.block_on(async {
        for (key, document) in documents {
            store
                .put(
                    &Path::from(key),
                    serde_json::to_vec(&document).unwrap().into(),
                )
                .await
                .unwrap();
        }
        Dataset::open_store("memory://test", store).await.unwrap()
    })
}

#[test]
fn samples_move_by_stride_in_c_order() {
    let spec = WindowSpec::new().window("lat", 4, 3).window("lon", 8, 8);
    let layout = SampleLayout::new(&dataset(), &["a"], &spec).unwrap();
    // time 3 x lat positions (0, 3, 6) x lon 1.
    assert_eq!(layout.num_samples(), 9);
    let origins: Vec<Vec<u64>> = (0..4).map(|i| layout.sample(i).origin).collect();
    assert_eq!(origins, [[0, 0, 0], [0, 3, 0], [0, 6, 0], [1, 0, 0]]);
    assert_eq!(layout.sample_shape(), [1, 4, 8]);
}

#[test]
fn static_variables_are_not_in_read_plans() {
    let spec = WindowSpec::new().window("lat", 4, 4).window("lon", 4, 4);
    let layout = SampleLayout::new(&dataset(), &["a", "lsm"], &spec).unwrap();
    assert!(!layout.is_static(0));
    assert!(layout.is_static(1));
    assert_eq!(layout.static_variables(), [1]);
    // Every sample holds the field: time is iterated over `a` alone.
    assert_eq!(layout.num_samples(), 3 * 2 * 2);
    assert_eq!(layout.sample_shape(), [2, 4, 4]);
    let batcher = Batcher::new(Arc::new(layout), 4, false).unwrap();
    let plan = batcher.layout().read_plan(&batcher.batch(0));
    assert!(!plan.is_empty());
    assert!(plan.iter().all(|request| request.variable.name() == "a"));
    // Without an iterated dimension nothing is static: lsm is read like any variable.
    let alone = SampleLayout::new(&dataset(), &["lsm"], &spec).unwrap();
    assert!(!alone.is_static(0));
}

#[test]
fn derived_channels_sit_where_they_are_named() {
    let layout = SampleLayout::new(
        &dataset(),
        &["cos_lat", "b", "cos_zenith", "a"],
        &WindowSpec::new(),
    )
    .unwrap();
    let labels: Vec<String> = layout.channels().iter().map(|c| c.label()).collect();
    assert_eq!(
        labels,
        ["cos_lat", "b[level=0]", "b[level=1]", "cos_zenith", "a"]
    );
    assert_eq!(layout.channel_range(0), 1..3);
    assert_eq!(layout.channel_range(1), 4..5);
    assert_eq!(
        layout.derived_channels(),
        [(0, crate::Derived::CosLat), (3, crate::Derived::CosZenith)]
    );
    assert_eq!(layout.sample_shape(), [5, 10, 8]);
    // Derived channels change the layout's hash (a saved state resumes the same channels).
    let plain = SampleLayout::new(&dataset(), &["b", "a"], &WindowSpec::new()).unwrap();
    assert_ne!(plain.layout_hash(), layout.layout_hash());
}

#[test]
fn unknown_and_lonely_channel_names_are_refused() {
    let error = SampleLayout::new(&dataset(), &["a", "cos_latitude"], &WindowSpec::new())
        .unwrap_err()
        .to_string();
    assert!(
        error.contains("`cos_latitude` is neither a variable"),
        "{error}"
    );
    assert!(error.contains("no variable `cos_latitude`"), "{error}");
    assert!(error.contains("cos_zenith"), "{error}");
    let error = SampleLayout::new(&dataset(), &["cos_lat", "sin_lat"], &WindowSpec::new())
        .unwrap_err()
        .to_string();
    assert!(
        error.contains("need at least one stored variable"),
        "{error}"
    );
    let error = SampleLayout::new(&dataset(), &["a", "cos_lat", "cos_lat"], &WindowSpec::new())
        .unwrap_err();
    assert!(matches!(error, Error::DuplicateVariable { .. }), "{error}");
}

#[test]
fn other_dimensions_become_channels_in_order() {
    let layout = SampleLayout::new(&dataset(), &["b", "a"], &WindowSpec::new()).unwrap();
    let labels: Vec<String> = layout.channels().iter().map(|c| c.label()).collect();
    assert_eq!(labels, ["b[level=0]", "b[level=1]", "a"]);
    assert_eq!(layout.channel_range(0), 0..2);
    assert_eq!(layout.channel_range(1), 2..3);
    // Default window: the last two dims whole.
    assert_eq!(layout.sample_shape(), [3, 10, 8]);
    assert_eq!(layout.num_samples(), 3);
}

#[test]
fn read_plans_read_each_chunk_once() {
    let spec = WindowSpec::new().window("lat", 4, 2).window("lon", 4, 4);
    let layout = SampleLayout::new(&dataset(), &["a"], &spec).unwrap();
    // The first two samples (lat 0..4 and 2..6, lon 0..4) overlap on chunk (0, 0, 0).
    let samples: Vec<_> = (0..2).map(|i| layout.sample(i)).collect();
    assert_eq!(samples[1].origin, [0, 0, 4]);
    let plan = layout.read_plan(&[layout.sample(0), layout.sample(2)]);
    let chunks: Vec<Vec<u64>> = plan.iter().map(|request| request.indices.clone()).collect();
    // Sample 2 (lat 2..6) crosses into the second row of chunks.
    assert_eq!(chunks, [vec![0, 0, 0], vec![0, 1, 0]]);
}

#[test]
fn batches_cover_the_epoch_once() {
    let layout = Arc::new(SampleLayout::new(&dataset(), &["a", "b"], &WindowSpec::new()).unwrap());
    let batcher = Batcher::new(layout.clone(), 2, false).unwrap();
    let indices: Vec<u64> = batcher
        .batches()
        .flat_map(|(_, samples)| samples)
        .map(|sample| sample.index)
        .collect();
    assert_eq!(indices, [0, 1, 2]);
    assert_eq!(
        Batcher::new(layout.clone(), 2, true).unwrap().num_batches(),
        1
    );
    assert!(matches!(
        Batcher::new(layout, 0, false),
        Err(Error::ZeroBatchSize)
    ));
}

#[test]
fn read_plans_carry_epochs_in_a_row_up_to_the_last_epoch_number() {
    use crate::EpochOptions;
    let layout = Arc::new(SampleLayout::new(&dataset(), &["a", "b"], &WindowSpec::new()).unwrap());
    let from = |epoch| {
        let options = EpochOptions {
            epoch,
            ..EpochOptions::default()
        };
        Batcher::with_options(layout.clone(), 2, &options).unwrap()
    };
    let numbered = |batcher: &Batcher, more| -> Vec<(u64, u64)> {
        let plans = batcher.read_plans_with_epochs_after(more);
        plans.map(|plan| (plan.epoch, plan.index)).collect()
    };
    assert_eq!(
        numbered(&from(4), 2),
        [(4, 0), (4, 1), (5, 0), (5, 1), (6, 0), (6, 1)]
    );
    // No epoch after u64::MAX, however many are asked for.
    assert!(from(u64::MAX).next_epoch().is_none());
    let last = numbered(&from(u64::MAX - 1), u64::MAX);
    assert_eq!(last.len(), 4);
    assert_eq!(last[3], (u64::MAX, 1));
}

#[test]
fn bad_specifications_are_refused() {
    let dataset = dataset();
    let refuse = |variables: &[&str], spec: WindowSpec| {
        SampleLayout::new(&dataset, variables, &spec).unwrap_err()
    };
    assert!(matches!(
        refuse(&["a"], WindowSpec::new().window("lat", 11, 1)),
        Error::WindowTooLarge { .. }
    ));
    assert!(matches!(
        refuse(&["a"], WindowSpec::new().window("level", 1, 1)),
        Error::MissingDimension { .. }
    ));
    assert!(matches!(
        refuse(&["a", "short"], WindowSpec::new().window("lat", 4, 4)),
        Error::DimensionMismatch { .. }
    ));
    assert!(matches!(
        refuse(
            &["a"],
            WindowSpec::new().window("lat", 4, 4).window("lat", 2, 2)
        ),
        Error::DuplicateDimension { .. }
    ));
    assert!(matches!(
        refuse(&["a"], WindowSpec::new().window("lat", 0, 1)),
        Error::EmptyWindow { .. }
    ));
    assert!(matches!(
        refuse(&["nope"], WindowSpec::new()),
        Error::UnknownChannel { .. }
    ));
    assert!(matches!(
        SampleLayout::new(&dataset, &[] as &[&str], &WindowSpec::new()),
        Err(Error::NoVariables)
    ));
}

#[test]
fn plan_counts_reads_and_amplification() {
    use crate::PlanSummary;
    // Windows of 4 x 4 aligned with the 4 x 4 chunks: every chunk read is delivered once.
    let spec = WindowSpec::new().window("lat", 4, 4).window("lon", 4, 4);
    let layout = Arc::new(SampleLayout::new(&dataset(), &["a"], &spec).unwrap());
    let plan = PlanSummary::of_epoch(&Batcher::new(layout, 4, false).unwrap());
    assert_eq!((plan.samples, plan.batches, plan.chunk_reads), (12, 3, 12));
    assert_eq!(plan.read_amplification, 1.0);
    // Overlapping windows of one sample per batch read shared chunks again in each batch.
    let spec = WindowSpec::new().window("lat", 4, 2).window("lon", 4, 4);
    let layout = Arc::new(SampleLayout::new(&dataset(), &["a"], &spec).unwrap());
    let plan = PlanSummary::of_epoch(&Batcher::new(layout, 1, false).unwrap());
    // lat origins 0, 2, 4, 6: 0 and 4 are aligned (one chunk), 2 and 6 straddle two chunks.
    assert_eq!(plan.chunk_reads, 3 * 2 * (1 + 2 + 1 + 2));
    assert_eq!(plan.read_amplification, 1.5);
}

#[test]
fn edges_count_positions() {
    use crate::Edge;
    let count = |edge, size, stride| {
        let spec = WindowSpec::new()
            .window("lat", size, stride)
            .window("lon", 8, 8)
            .edge(edge);
        SampleLayout::new(&dataset(), &["a"], &spec).map(|layout| layout.num_samples() / 3)
    };
    // lat has 10 elements.
    assert_eq!(count(Edge::Drop, 4, 3).unwrap(), 3); // 0, 3, 6
    assert_eq!(count(Edge::Shift, 4, 3).unwrap(), 3); // tiles exactly: no extra window
    assert_eq!(count(Edge::Shift, 4, 4).unwrap(), 3); // 0, 4, then 6 shifted back
    assert_eq!(count(Edge::Pad, 4, 4).unwrap(), 3); // 0, 4, 8 (two rows of padding)
    assert_eq!(count(Edge::Pad, 12, 12).unwrap(), 1); // larger than the dimension: one, padded
    assert!(matches!(
        count(Edge::Drop, 12, 12),
        Err(Error::WindowTooLarge { .. })
    ));
    let spec = WindowSpec::new()
        .window("lat", 4, 4)
        .window("lon", 8, 8)
        .edge(Edge::Shift);
    let layout = SampleLayout::new(&dataset(), &["a"], &spec).unwrap();
    assert_eq!(layout.sample(2).origin, [0, 6, 0]);
    // A padded window's read plan stays inside the chunk grid.
    let spec = WindowSpec::new()
        .window("lat", 4, 4)
        .window("lon", 8, 8)
        .edge(Edge::Pad);
    let layout = SampleLayout::new(&dataset(), &["a"], &spec).unwrap();
    assert_eq!(layout.sample(2).origin, [0, 8, 0]);
    let chunks: Vec<Vec<u64>> = layout
        .read_plan(&[layout.sample(2)])
        .iter()
        .map(|r| r.indices.clone())
        .collect();
    assert_eq!(chunks, [vec![0, 2, 0], vec![0, 2, 1]]);
}

fn origins(samples: &[crate::Sample]) -> Vec<Vec<u64>> {
    samples.iter().map(|sample| sample.origin.clone()).collect()
}

#[test]
fn batch_dims_make_blocks_of_iterated_steps() {
    use crate::BatchGroups;
    // time (3) in blocks of 2: one whole block (the short last one is dropped, as in
    // xbatcher); lat 4 / lon 4 windows: positions (0, 4) x (0, 4), one per batch.
    let spec = WindowSpec::new()
        .window("lat", 4, 4)
        .window("lon", 4, 4)
        .batch_dim("time", 2);
    let layout = Arc::new(SampleLayout::new(&dataset(), &["a"], &spec).unwrap());
    let groups = BatchGroups { count: 4, size: 2 };
    assert_eq!(layout.batch_groups(), Some(groups));
    assert_eq!(layout.num_samples(), 8);
    // The batch size is the layout's: the 5 asked for is not used.
    let batcher = Batcher::new(layout.clone(), 5, false).unwrap();
    assert_eq!((batcher.num_batches(), batcher.batch_size()), (4, 2));
    assert_eq!(origins(&batcher.batch(0)), [[0, 0, 0], [1, 0, 0]]);
    assert_eq!(origins(&batcher.batch(1)), [[0, 0, 4], [1, 0, 4]]);
    assert_eq!(origins(&batcher.batch(3)), [[0, 4, 4], [1, 4, 4]]);
    // concat_input_dims: every window position of the block in one batch.
    let layout = SampleLayout::new(&dataset(), &["a"], &spec.concat_input_dims(true)).unwrap();
    let groups = BatchGroups { count: 1, size: 8 };
    assert_eq!(layout.batch_groups(), Some(groups));
    // Without batch dims, concat_input_dims makes one batch of everything (as xbatcher).
    let spec = WindowSpec::new()
        .window("lat", 4, 4)
        .window("lon", 4, 4)
        .concat_input_dims(true);
    let layout = SampleLayout::new(&dataset(), &["a"], &spec).unwrap();
    let groups = BatchGroups { count: 1, size: 12 };
    assert_eq!(layout.batch_groups(), Some(groups));
    // Neither: a batch size cuts the batches.
    let spec = WindowSpec::new().window("lat", 4, 4);
    let layout = SampleLayout::new(&dataset(), &["a"], &spec).unwrap();
    assert_eq!(layout.batch_groups(), None);
}

#[test]
fn windowed_batch_dims_hold_the_windows_inside_each_block() {
    // lat (10) in blocks of 5 (two), windows of 3 moved by 1: 0, 1, 2 and 5, 6, 7, never one
    // across the block boundary; time (not a batch dim) whole in each batch.
    let spec = WindowSpec::new()
        .window("lat", 3, 1)
        .window("lon", 8, 8)
        .batch_dim("lat", 5)
        .concat_input_dims(true);
    let layout = Arc::new(SampleLayout::new(&dataset(), &["a"], &spec).unwrap());
    let batcher = Batcher::new(layout.clone(), 1, false).unwrap();
    assert_eq!((batcher.num_batches(), batcher.batch_size()), (2, 9));
    let second = origins(&batcher.batch(1));
    let lat: std::collections::BTreeSet<u64> = second.iter().map(|o| o[1]).collect();
    assert_eq!(lat.into_iter().collect::<Vec<_>>(), [5, 6, 7]);
    assert!(second.iter().all(|o| o[1] + 3 <= 10));
    let time: std::collections::BTreeSet<u64> = second.iter().map(|o| o[0]).collect();
    assert_eq!(time.len(), 3);
    // Every sample of the epoch in exactly one batch, shuffled or not, over ranks.
    for shuffle in [
        crate::Shuffle::None,
        crate::Shuffle::Full,
        crate::Shuffle::Blocks,
    ] {
        let mut seen = Vec::new();
        for rank in 0..2 {
            let options = crate::EpochOptions {
                shuffle,
                seed: 7,
                ranks: crate::Ranks::new(rank, 2).unwrap(),
                ..crate::EpochOptions::default()
            };
            let batcher = Batcher::with_options(layout.clone(), 3, &options).unwrap();
            for (_, samples) in batcher.batches() {
                assert_eq!(samples.len(), 9);
                // A batch is one block: its samples are consecutive in natural order.
                let first = samples[0].index;
                assert_eq!(first % 9, 0);
                for (offset, sample) in samples.iter().enumerate() {
                    assert_eq!(sample.index, first + offset as u64);
                    assert_eq!(sample, &layout.sample(sample.index));
                }
                seen.extend(samples.iter().map(|s| s.index));
            }
        }
        seen.sort_unstable();
        assert_eq!(seen, (0..18).collect::<Vec<u64>>(), "{shuffle:?}");
    }
}

#[test]
fn bad_batch_dims_are_refused() {
    use crate::Edge;
    let dataset = dataset();
    let refuse = |spec: WindowSpec| SampleLayout::new(&dataset, &["a"], &spec).unwrap_err();
    let windows = || WindowSpec::new().window("lat", 4, 2).window("lon", 8, 8);
    assert!(matches!(
        refuse(windows().batch_dim("lat", 6)),
        Error::BatchDimNeedsConcat { .. }
    ));
    let concat = || windows().concat_input_dims(true);
    assert!(matches!(
        refuse(concat().batch_dim("lat", 3)),
        Error::BadBatchBlock { block: 3, .. }
    ));
    assert!(matches!(
        refuse(concat().batch_dim("lat", 11)),
        Error::BadBatchBlock { length: 10, .. }
    ));
    assert!(matches!(
        refuse(concat().batch_dim("time", 4)),
        Error::BadBatchBlock { length: 3, .. }
    ));
    assert!(matches!(
        refuse(concat().batch_dim("lat", 6).edge(Edge::Pad)),
        Error::BatchDimWithEdge { .. }
    ));
    assert!(matches!(
        refuse(concat().batch_dim("time", 1).batch_dim("time", 2)),
        Error::DuplicateDimension { .. }
    ));
    assert!(matches!(
        refuse(concat().batch_dim("level", 1)),
        Error::MissingDimension { .. }
    ));
}

/// Time 3 with stored step 1 absent: under skip, iterated samples and the windows of each
/// time position leave step 1 out; batches fixed by the layout go whole; the sampler counts
/// the rest exactly.
#[test]
fn missing_steps_leave_out_samples_and_whole_layout_batches() {
    use crate::{AbsentStep, Missing, MissingSteps};
    let dataset = dataset();
    let steps = MissingSteps {
        dim: "time".into(),
        length: 3,
        absent: vec![AbsentStep {
            index: 1,
            date: "step 1".into(),
            variables: vec!["a".into()],
        }],
        ..MissingSteps::default()
    };
    let spec = WindowSpec::new().window("lat", 4, 4).window("lon", 4, 4);
    let layout = SampleLayout::new(&dataset, &["a"], &spec).unwrap();
    assert_eq!(layout.num_samples(), 3 * 2 * 2);
    let layout = layout
        .with_missing_steps(steps.clone(), Missing::Skip)
        .unwrap();
    assert_eq!((layout.num_samples(), layout.skipped()), (8, 4));
    let times: Vec<u64> = (0..8).map(|i| layout.sample(i).origin[0]).collect();
    assert_eq!(times, [0, 0, 0, 0, 2, 2, 2, 2]);
    let batcher = Batcher::new(Arc::new(layout), 3, false).unwrap();
    assert_eq!(batcher.num_batches(), 3);
    // Batches of two steps: the block holding step 1 goes whole.
    let blocks = spec.clone().batch_dim("time", 1);
    let layout = SampleLayout::new(&dataset, &["a"], &blocks).unwrap();
    let groups = layout.batch_groups().unwrap();
    let layout = layout
        .with_missing_steps(steps.clone(), Missing::Skip)
        .unwrap();
    assert_eq!(layout.batch_groups().unwrap().count, groups.count - 4);
    assert!(layout.num_samples() > 0);
    // Error names the date; ignore changes nothing.
    let layout = SampleLayout::new(&dataset, &["a"], &spec).unwrap();
    let error = layout
        .with_missing_steps(steps.clone(), Missing::Error)
        .unwrap_err();
    assert!(error.to_string().contains("step 1"), "{error}");
    let layout = SampleLayout::new(&dataset, &["a"], &spec).unwrap();
    let layout = layout.with_missing_steps(steps, Missing::Ignore).unwrap();
    assert_eq!(layout.num_samples(), 12);
}
