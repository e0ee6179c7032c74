//! The CPU pipeline end to end on stores written by `zarrpipe generate`: every batch equals the
//! slices of the arrays read directly, for plain, blosc and sharded stores; errors name their
//! chunk without poisoning later batches; dropping the stream stops the work.

mod common;

use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use common::read_whole;
use zarrpipe::generate::{generate, Compression, GenerateOptions};
use zarrpipe::prelude::*;

fn tiny(compression: Compression, shard: Option<u64>) -> GenerateOptions {
    GenerateOptions {
        time: 3,
        levels: 2,
        lat: 8,
        lon: 16,
        compression,
        shard,
        seed: 7,
        chunks: None,
        variables: Default::default(),
    }
}

fn write_store(dir: &Path, options: &GenerateOptions) -> String {
    let path = dir.join("w1.zarr");
    generate(&path, options, |_, _| {}).expect("generate");
    path.to_string_lossy().into_owned()
}

/// Checks every delivered sample against the arrays read whole.
async fn check_batches_equal_slices(url: &str) {
    let mut batches = Pipeline::builder(url)
        .variables(["t2m", "z"])
        .window("latitude", 4, 2)
        .window("longitude", 8, 8)
        .batch_size(4)
        .build()
        .await
        .unwrap();
    let layout = batches.layout().clone();
    assert_eq!(layout.num_samples(), 3 * 3 * 2);
    assert_eq!(batches.num_batches(), 5);
    assert_eq!(layout.sample_shape(), vec![3, 4, 8]);
    let labels: Vec<String> = layout.channels().iter().map(|c| c.label()).collect();
    // Stacked channels are named by the level coordinate's values.
    assert_eq!(labels, ["t2m", "z[level=50]", "z[level=1000]"]);

    let dataset = batches.dataset().clone();
    let t2m = bytes_to_f32(&read_whole(dataset.variable("t2m").unwrap()).await.unwrap());
    let z = bytes_to_f32(&read_whole(dataset.variable("z").unwrap()).await.unwrap());
    let mut seen = 0;
    while let Some(batch) = batches.try_next().await.unwrap() {
        for (position, sample) in batch.samples.iter().enumerate() {
            let (t, la, lo) = (
                sample.origin[0] as usize,
                sample.origin[1] as usize,
                sample.origin[2] as usize,
            );
            for y in 0..4 {
                for x in 0..8 {
                    let at = |channel: usize| batch.inputs[[position, channel, y, x]];
                    assert_eq!(at(0), t2m[(t * 8 + la + y) * 16 + lo + x]);
                    for level in 0..2 {
                        assert_eq!(
                            at(1 + level),
                            z[((t * 2 + level) * 8 + la + y) * 16 + lo + x]
                        );
                    }
                }
            }
            seen += 1;
        }
    }
    assert_eq!(seen, 18);
    let metrics = batches.metrics();
    assert_eq!(metrics.samples, 18);
    assert_eq!(metrics.batches, 5);
    assert_eq!(metrics.delivered_bytes, 18 * 3 * 4 * 8 * 4);
}

fn bytes_to_f32(bytes: &[u8]) -> Vec<f32> {
    bytes
        .chunks_exact(4)
        .map(|b| f32::from_ne_bytes(b.try_into().unwrap()))
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn zstd_batches_equal_array_slices() {
    let dir = tempfile::tempdir().unwrap();
    check_batches_equal_slices(&write_store(dir.path(), &tiny(Compression::Zstd, None))).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn blosc_and_gzip_batches_equal_array_slices() {
    for compression in [
        Compression::BloscLz4,
        Compression::BloscZstd,
        Compression::Gzip,
        Compression::None,
    ] {
        let dir = tempfile::tempdir().unwrap();
        check_batches_equal_slices(&write_store(dir.path(), &tiny(compression, None))).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sharded_batches_equal_array_slices() {
    let dir = tempfile::tempdir().unwrap();
    check_batches_equal_slices(&write_store(dir.path(), &tiny(Compression::Zstd, Some(2)))).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn default_window_takes_whole_fields_and_stacks_levels() {
    let dir = tempfile::tempdir().unwrap();
    let url = write_store(dir.path(), &tiny(Compression::Zstd, None));
    let batches = Pipeline::builder(url).batch_size(2).build().await.unwrap();
    let layout = batches.layout();
    // Every data variable: four surface fields plus three level variables of two levels.
    assert_eq!(layout.sample_shape(), vec![4 + 3 * 2, 8, 16]);
    assert_eq!(layout.num_samples(), 3);
    let all: Vec<Batch> = batches.try_collect().await.unwrap();
    assert_eq!(
        all.iter().map(|b| b.samples.len()).collect::<Vec<_>>(),
        [2, 1]
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn missing_chunk_reads_as_fill_value() {
    let dir = tempfile::tempdir().unwrap();
    let url = write_store(dir.path(), &tiny(Compression::Zstd, None));
    std::fs::remove_file(Path::new(&url).join("t2m/c/1/0/0")).unwrap();
    // The whole field of step 1 is absent: a missing step, which `skip` (the default) would
    // leave out and `fill` keeps, read as the fill value.
    let skipped = Pipeline::builder(url.clone())
        .variables(["t2m"])
        .build()
        .await
        .unwrap();
    assert_eq!(skipped.layout().num_samples(), 2);
    let batches = Pipeline::builder(url)
        .variables(["t2m"])
        .batch_size(1)
        .missing(zarrpipe::batcher::Missing::Fill)
        .build()
        .await
        .unwrap();
    let all: Vec<Batch> = batches.try_collect().await.unwrap();
    assert!(
        all[1].inputs.iter().all(|v| v.is_nan()),
        "fill value is NaN"
    );
    assert!(all[0].inputs.iter().all(|v| v.is_finite()));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn corrupt_chunk_fails_its_batch_only() {
    let dir = tempfile::tempdir().unwrap();
    let url = write_store(dir.path(), &tiny(Compression::Zstd, None));
    std::fs::write(Path::new(&url).join("z/c/1/1/0/0"), b"not zstd at all").unwrap();
    let mut batches = Pipeline::builder(url)
        .variables(["t2m", "z"])
        .batch_size(1)
        .build()
        .await
        .unwrap();
    let mut outcomes = Vec::new();
    while let Some(outcome) = batches.next().await {
        outcomes.push(outcome);
    }
    assert_eq!(outcomes.len(), 3);
    assert!(outcomes[0].is_ok() && outcomes[2].is_ok());
    let error = outcomes[1].as_ref().unwrap_err().to_string();
    assert!(
        error.contains("z/c/1/1/0/0") && error.contains("`z`"),
        "{error}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dropping_the_stream_stops_the_work() {
    let dir = tempfile::tempdir().unwrap();
    let options = GenerateOptions {
        time: 24,
        levels: 4,
        lat: 64,
        lon: 128,
        ..tiny(Compression::Zstd, None)
    };
    let url = write_store(dir.path(), &options);
    let mut batches = Pipeline::builder(url)
        .batch_size(1)
        .prefetch(2)
        .build()
        .await
        .unwrap();
    let total_chunks = 24 * (4 + 3 * 4);
    batches.try_next().await.unwrap().expect("a first batch");
    let metrics = batches.metrics_handle();
    drop(batches);
    tokio::time::sleep(Duration::from_millis(300)).await;
    let settled = metrics.snapshot().chunks;
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_eq!(
        metrics.snapshot().chunks,
        settled,
        "work went on after the drop"
    );
    assert!(
        settled < total_chunks / 2,
        "read {settled} of {total_chunks} chunks"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_read_ahead_delivers_the_same_batches() {
    let dir = tempfile::tempdir().unwrap();
    let options = GenerateOptions {
        time: 12,
        ..tiny(Compression::Zstd, None)
    };
    let url = write_store(dir.path(), &options);
    let with = |read_ahead: usize| {
        let builder = Pipeline::builder(url.as_str())
            .batch_size(2)
            .epochs(2)
            .prefetch(1)
            .read_ahead(read_ahead);
        async move { described(&collect(builder).await) }
    };
    let one_ahead = with(1).await;
    assert_eq!(one_ahead.len(), 12, "two epochs of six batches");
    assert_eq!(with(2).await, one_ahead);
    assert_eq!(with(5).await, one_ahead);
}

#[test]
fn stages_are_send() {
    fn assert_send<T: Send>() {}
    type Requests = futures::stream::Iter<std::vec::IntoIter<ChunkRequest>>;
    type Plans = futures::stream::Iter<
        std::vec::IntoIter<
            zarrpipe::core::Staged<Vec<zarrpipe::batcher::Sample>, Vec<ChunkRequest>>,
        >,
    >;
    type Fetched = zarrpipe::store::FetchBatches<Plans, Vec<zarrpipe::batcher::Sample>>;
    type Decoded = zarrpipe::codec::DecodeBatches<Fetched, Vec<zarrpipe::batcher::Sample>>;
    type Collated = zarrpipe::collate::CollateBatches<Decoded, HostCollator>;
    assert_send::<BatchStream>();
    assert_send::<zarrpipe::store::Fetch<Requests>>();
    assert_send::<zarrpipe::codec::Decode<zarrpipe::store::Fetch<Requests>>>();
    assert_send::<Fetched>();
    assert_send::<Decoded>();
    assert_send::<Collated>();
    assert_send::<zarrpipe::pipeline::Prefetch<Collated>>();
}

/// Every batch a pipeline delivers.
async fn collect(builder: zarrpipe::pipeline::PipelineBuilder) -> Vec<Batch> {
    builder.build().await.unwrap().try_collect().await.unwrap()
}

/// Sample numbers delivered by a pipeline, batch by batch.
async fn delivered(builder: zarrpipe::pipeline::PipelineBuilder) -> Vec<Vec<u64>> {
    collect(builder)
        .await
        .iter()
        .map(|batch| batch.samples.iter().map(|s| s.index).collect())
        .collect()
}

fn patches(url: &str) -> zarrpipe::pipeline::PipelineBuilder {
    Pipeline::builder(url)
        .variables(["t2m"])
        .window("latitude", 4, 2)
        .window("longitude", 8, 8)
        .batch_size(4)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn shuffled_epochs_split_across_ranks_cover_every_sample() {
    use zarrpipe::batcher::{Ranks, Shuffle, Uneven};
    let dir = tempfile::tempdir().unwrap();
    let url = write_store(dir.path(), &tiny(Compression::Zstd, None));
    let mut all = Vec::new();
    for rank in 0..2 {
        let ranks = Ranks::new(rank, 2).unwrap();
        let batches = delivered(
            patches(&url)
                .shuffle(Shuffle::Full)
                .seed(3)
                .ranks(ranks)
                .uneven(Uneven::Drop),
        )
        .await;
        assert_eq!(
            batches.iter().map(Vec::len).collect::<Vec<_>>(),
            [4, 4, 1],
            "rank {rank}"
        );
        all.extend(batches.into_iter().flatten());
    }
    let mut sorted = all.clone();
    sorted.sort();
    assert_eq!(
        sorted,
        (0..18).collect::<Vec<u64>>(),
        "every sample exactly once across ranks"
    );
    assert_ne!(all, sorted, "shuffled");
    let epoch_1: Vec<u64> = delivered(patches(&url).shuffle(Shuffle::Full).seed(3).epoch(1))
        .await
        .concat();
    let epoch_0: Vec<u64> = delivered(patches(&url).shuffle(Shuffle::Full).seed(3))
        .await
        .concat();
    assert_ne!(epoch_0, epoch_1, "each epoch reshuffles");
    let blocks: Vec<u64> = delivered(patches(&url).shuffle(Shuffle::Blocks).seed(3))
        .await
        .concat();
    let mut blocks_sorted = blocks.clone();
    blocks_sorted.sort();
    assert_eq!(blocks_sorted, (0..18).collect::<Vec<u64>>());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_resumed_epoch_delivers_exactly_the_rest() {
    use zarrpipe::batcher::{SamplerState, Shuffle};
    let dir = tempfile::tempdir().unwrap();
    let url = write_store(dir.path(), &tiny(Compression::Zstd, None));
    let whole = delivered(patches(&url).shuffle(Shuffle::Full).seed(9)).await;
    let mut first_run = patches(&url)
        .shuffle(Shuffle::Full)
        .seed(9)
        .build()
        .await
        .unwrap();
    let first = first_run.try_next().await.unwrap().unwrap();
    let saved = serde_json::to_string(&first_run.state()).unwrap();
    drop(first_run);
    let state: SamplerState = serde_json::from_str(&saved).unwrap();
    let rest = delivered(
        patches(&url)
            .shuffle(Shuffle::Full)
            .seed(9)
            .resume(state.clone()),
    )
    .await;
    let mut resumed = vec![first.samples.iter().map(|s| s.index).collect::<Vec<u64>>()];
    resumed.extend(rest);
    assert_eq!(resumed, whole);
    let error = patches(&url)
        .shuffle(Shuffle::Full)
        .seed(10)
        .resume(state.clone())
        .build()
        .await
        .unwrap_err();
    assert!(error.to_string().contains("seed"), "{error}");
    let error = patches(&url)
        .batch_size(3)
        .shuffle(Shuffle::Full)
        .seed(9)
        .resume(state)
        .build()
        .await
        .unwrap_err();
    assert!(error.to_string().contains("spec"), "{error}");
}

/// (epoch, batch number, sample numbers, inputs) of each batch.
type Delivered = Vec<(u64, u64, Vec<u64>, Vec<f32>)>;

fn described(batches: &[Batch]) -> Delivered {
    batches
        .iter()
        .map(|batch| {
            let samples = batch.samples.iter().map(|s| s.index).collect();
            let inputs = batch.inputs.iter().copied().collect();
            (batch.epoch, batch.index, samples, inputs)
        })
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn epochs_in_a_row_equal_epochs_apart_and_resume_across_their_boundary() {
    use zarrpipe::batcher::Shuffle;
    let dir = tempfile::tempdir().unwrap();
    let url = write_store(dir.path(), &tiny(Compression::Zstd, None));
    let shuffled = || patches(&url).shuffle(Shuffle::Full).seed(3);
    let mut apart = Vec::new();
    for epoch in 1..4 {
        apart.extend(described(&collect(shuffled().epoch(epoch)).await));
    }
    assert_eq!(apart.len(), 15, "5 batches in each of 3 epochs");

    let mut stream = shuffled().epoch(1).epochs(3).build().await.unwrap();
    assert_eq!((stream.epoch(), stream.epochs_after()), (1, 2));
    let mut in_a_row = Vec::new();
    for _ in 0..5 {
        in_a_row.push(stream.try_next().await.unwrap().unwrap());
    }
    // The first epoch delivered whole: the position is the next one's start.
    assert_eq!((stream.epoch(), stream.batches_left_in_epoch()), (2, 5));
    let state = stream.state();
    assert_eq!((state.epoch, state.position), (2, 0));
    assert_eq!(stream.epoch_metrics().batches, 5);
    in_a_row.push(stream.try_next().await.unwrap().unwrap());
    in_a_row.push(stream.try_next().await.unwrap().unwrap());
    let (metrics, epoch_metrics) = (stream.metrics(), stream.epoch_metrics());
    assert_eq!((metrics.batches, epoch_metrics.batches), (7, 2));
    assert_eq!(epoch_metrics.samples, 8);
    let state = stream.state();
    assert_eq!((state.epoch, state.position), (2, 2));
    while let Some(batch) = stream.try_next().await.unwrap() {
        in_a_row.push(batch);
    }
    assert_eq!(stream.epochs_after(), 0);
    assert_eq!(
        described(&in_a_row),
        apart,
        "the same batches, epoch by epoch"
    );

    // Resumed mid-epoch 2 for two epochs: the rest of epoch 2, then epoch 3 whole.
    let resumed = collect(shuffled().resume(state).epochs(2)).await;
    assert_eq!(described(&resumed), apart[7..]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn edges_drop_shift_or_pad_with_a_mask() {
    use zarrpipe::batcher::{Edge, WindowSpec};
    let dir = tempfile::tempdir().unwrap();
    let url = write_store(dir.path(), &tiny(Compression::Zstd, None));
    let dataset = Arc::new(zarrpipe::store::Dataset::open(&url).await.unwrap());
    let t2m = bytes_to_f32(&read_whole(dataset.variable("t2m").unwrap()).await.unwrap());
    // Latitude 8 in windows of 3: drop keeps 0 and 3, shift adds 5, pad adds 6 (rows 6, 7, pad).
    for (edge, origins) in [
        (Edge::Drop, vec![0, 3]),
        (Edge::Shift, vec![0, 3, 5]),
        (Edge::Pad, vec![0, 3, 6]),
    ] {
        let spec = WindowSpec::new()
            .window("latitude", 3, 3)
            .window("longitude", 16, 16)
            .edge(edge)
            .pad_value(-1.0);
        let pipeline = Pipeline::from_dataset(dataset.clone())
            .variables(["t2m"])
            .window_spec(spec)
            .batch_size(4);
        let batches: Vec<Batch> = pipeline.build().await.unwrap().try_collect().await.unwrap();
        let mut seen = Vec::new();
        for batch in &batches {
            assert_eq!(batch.mask.is_some(), edge == Edge::Pad, "{edge:?}");
            for (position, sample) in batch.samples.iter().enumerate() {
                let (t, la) = (sample.origin[0] as usize, sample.origin[1] as usize);
                seen.push(la as u64);
                for y in 0..3 {
                    for x in 0..16 {
                        let value = batch.inputs[[position, 0, y, x]];
                        let inside = la + y < 8;
                        let expected = if inside {
                            t2m[(t * 8 + la + y) * 16 + x]
                        } else {
                            -1.0
                        };
                        assert_eq!(value, expected, "{edge:?} t {t} lat {la} y {y}");
                        if let Some(mask) = &batch.mask {
                            assert_eq!(mask[[position, y, x]], inside as u8);
                        }
                    }
                }
            }
        }
        seen.sort();
        seen.dedup();
        assert_eq!(seen, origins, "{edge:?}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn forecasting_pairs_hold_history_and_lead_times() {
    let dir = tempfile::tempdir().unwrap();
    let options = GenerateOptions {
        time: 6,
        ..tiny(Compression::Zstd, None)
    };
    let url = write_store(dir.path(), &options);
    let dataset = Arc::new(zarrpipe::store::Dataset::open(&url).await.unwrap());
    let t2m = bytes_to_f32(&read_whole(dataset.variable("t2m").unwrap()).await.unwrap());
    let u10 = bytes_to_f32(&read_whole(dataset.variable("u10").unwrap()).await.unwrap());
    let pipeline = Pipeline::from_dataset(dataset.clone())
        .variables(["t2m", "u10"])
        .window("latitude", 4, 4)
        .window("longitude", 16, 16)
        .forecast(2, [1, 3])
        .batch_size(8);
    let stream = pipeline.build().await.unwrap();
    // Steps with one earlier step and three later ones: t = 1 and 2; two latitude windows each.
    assert_eq!(stream.layout().num_samples(), 2 * 2);
    let batches: Vec<Batch> = stream.try_collect().await.unwrap();
    let batch = &batches[0];
    let targets = batch.targets.as_ref().expect("targets");
    assert_eq!(batch.inputs.shape(), [4, 2 * 2, 4, 16]);
    assert_eq!(targets.shape(), [4, 2 * 2, 4, 16]);
    let field = |values: &[f32], t: usize, y: usize, x: usize| values[(t * 8 + y) * 16 + x];
    for (position, sample) in batch.samples.iter().enumerate() {
        let (t, la) = (sample.origin[0] as usize, sample.origin[1] as usize);
        assert!(t == 1 || t == 2, "step {t}");
        for y in 0..4 {
            for x in 0..16 {
                // Inputs: [t-1: t2m, u10], [t: t2m, u10]; targets: [t+1: ...], [t+3: ...].
                for (block, step) in [(0, t - 1), (1, t)] {
                    assert_eq!(
                        batch.inputs[[position, block * 2, y, x]],
                        field(&t2m, step, la + y, x)
                    );
                    assert_eq!(
                        batch.inputs[[position, block * 2 + 1, y, x]],
                        field(&u10, step, la + y, x)
                    );
                }
                for (block, step) in [(0, t + 1), (1, t + 3)] {
                    assert_eq!(
                        targets[[position, block * 2, y, x]],
                        field(&t2m, step, la + y, x)
                    );
                    assert_eq!(
                        targets[[position, block * 2 + 1, y, x]],
                        field(&u10, step, la + y, x)
                    );
                }
            }
        }
    }
    let too_long = Pipeline::from_dataset(dataset)
        .variables(["t2m"])
        .forecast(0, [1])
        .build()
        .await;
    assert!(too_long.unwrap_err().to_string().contains("history"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn selections_by_date_and_latitude_band_keep_whole_samples_inside() {
    let dir = tempfile::tempdir().unwrap();
    // Six 6-hourly steps from 2000-01-01 00:00; latitude 90 .. -90 in 8 rows.
    let options = GenerateOptions {
        time: 6,
        ..tiny(Compression::Zstd, None)
    };
    let url = write_store(dir.path(), &options);
    let steps = |builder: zarrpipe::pipeline::PipelineBuilder| async move {
        let batches: Vec<Batch> = builder
            .batch_size(64)
            .build()
            .await
            .unwrap()
            .try_collect()
            .await
            .unwrap();
        let mut origins: Vec<Vec<u64>> = batches
            .iter()
            .flat_map(|b| b.samples.iter().map(|s| s.origin.clone()))
            .collect();
        origins.sort();
        origins
    };
    let t2m = || Pipeline::builder(url.clone()).variables(["t2m"]);
    let by_date = steps(t2m().select("time", "2000-01-01T06:00", "2000-01-02")).await;
    assert_eq!(
        by_date.iter().map(|o| o[0]).collect::<Vec<_>>(),
        [1, 2, 3, 4]
    );
    let forecast = steps(
        t2m()
            .select("time", "2000-01-01T06:00", "2000-01-02")
            .forecast(2, [1]),
    )
    .await;
    assert_eq!(
        forecast.iter().map(|o| o[0]).collect::<Vec<_>>(),
        [2, 3],
        "history and targets stay inside"
    );
    // Latitudes 64.3, 38.6 and 12.9 lie between 70 and 0 (rows 1-3): two windows of two rows.
    let band = steps(
        t2m()
            .window("latitude", 2, 1)
            .window("longitude", 16, 16)
            .select("latitude", 0.0, 70.0),
    )
    .await;
    let rows: Vec<u64> = band.iter().filter(|o| o[0] == 0).map(|o| o[1]).collect();
    assert_eq!(rows, [1, 2]);
    // Adjacent splits share no time step, targets included.
    let train = steps(
        t2m()
            .select("time", "2000-01-01", "2000-01-01T12:00")
            .forecast(1, [1]),
    )
    .await;
    let validation = steps(
        t2m()
            .select("time", "2000-01-01T18:00", "2000-01-02T06:00")
            .forecast(1, [1]),
    )
    .await;
    let touched = |origins: &[Vec<u64>]| {
        origins
            .iter()
            .flat_map(|o| [o[0], o[0] + 1])
            .collect::<std::collections::BTreeSet<u64>>()
    };
    assert_eq!(touched(&train), [0, 1, 2].into());
    assert_eq!(touched(&validation), [3, 4, 5].into());
    for (builder, expected) in [
        // A range of a stacked dimension picks channels, of the variables that have it.
        (
            t2m().select("level", 0.0, 2000.0),
            "none of the variables has this dimension",
        ),
        (t2m().select("nope", 0.0, 1.0), "no 1-D coordinate"),
        (
            t2m().select("time", "2001-01-01", "2001-02-01"),
            "no coordinate value",
        ),
        (
            t2m().select("time", "first of May", "2000-01-02"),
            "not a date",
        ),
    ] {
        let error = builder.build().await.unwrap_err().to_string();
        assert!(error.contains(expected), "{error}");
    }
}

/// A process's place among the processes on its host must be one of them: a rank past them
/// (a mistyped `--rank-on-host`, or `LOCAL_RANK` beside another job's `LOCAL_WORLD_SIZE`) is
/// an error naming both, not decoding on cores that belong to another rank.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_rank_past_the_processes_on_the_host_is_refused() {
    let build = |rank| {
        Pipeline::builder(common::store_path("xr_v3"))
            .variables(["t2m"])
            .batch_size(2)
            .processes_on_host(2)
            .rank_on_host(rank)
            .build()
    };
    let error = build(2).await.unwrap_err().to_string();
    assert!(error.contains("rank 2 of 2 processes"), "{error}");
    let mut batches = build(1).await.unwrap();
    assert!(batches.try_next().await.unwrap().is_some());
}

/// A fixed split's GPU share is a fraction of the chunks: anything else is refused before a
/// GPU is opened, naming the value.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_fixed_splits_share_must_be_a_fraction() {
    for gpu_chunks in [1.5, -0.1, f64::NAN] {
        let built = Pipeline::builder(common::store_path("xr_v3"))
            .variables(["t2m"])
            .batch_size(2)
            .decode_on(zarrpipe::pipeline::DecodeOn::SplitFixed { gpu_chunks })
            .build()
            .await;
        let error = built.map(|_| ()).unwrap_err().to_string();
        assert!(
            error.contains(&format!("gpu_chunks = {gpu_chunks}")) && error.contains("from 0 to 1"),
            "{error}"
        );
    }
}

/// Ranks that share their waits (`share_waits_on_host`) must say which rank they are (a
/// table slot taken by guess would mix two ranks' waits) and name the job so that it can name
/// a file. A rank that does builds (on a host without a GPU, `auto` into host tensors decodes
/// on the CPU), and so does one whose table the file system refuses: it reads its own waits.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_rank_sharing_its_waits_must_say_which_it_is() {
    let job = format!("pipeline-test-{}", std::process::id());
    let build = |job: &str, rank: Option<usize>| {
        let builder = Pipeline::builder(common::store_path("xr_v3"))
            .variables(["t2m"])
            .batch_size(2)
            .decode_on(zarrpipe::pipeline::DecodeOn::Auto { gpu_share: None })
            .processes_on_host(2)
            .share_waits_on_host(job);
        match rank {
            Some(rank) => builder.rank_on_host(rank).build(),
            None => builder.build(),
        }
    };
    let error = build(&job, None).await.unwrap_err().to_string();
    assert!(
        error.contains(&job) && error.contains("rank_on_host"),
        "{error}"
    );
    let error = build("../x", Some(1)).await.unwrap_err().to_string();
    assert!(error.contains("job's name"), "{error}");
    let mut batches = build(&job, Some(1)).await.unwrap();
    assert!(batches.try_next().await.unwrap().is_some());
    // A folder where the table's file would be: the file system refuses it.
    let blocked = format!("{job}-blocked");
    let folder = match std::path::Path::new("/dev/shm").is_dir() {
        true => std::path::PathBuf::from("/dev/shm"),
        false => std::env::temp_dir(),
    }
    .join(format!("zarrpipe-waits-{blocked}"));
    std::fs::create_dir_all(&folder).unwrap();
    let built = build(&blocked, Some(0)).await;
    std::fs::remove_dir(&folder).unwrap();
    let mut batches = built.expect("a table that cannot be made is a warning");
    assert!(batches.try_next().await.unwrap().is_some());
}

/// `auto` into host tensors in a build without `cuda`: every chunk decodes on the CPU, and
/// the batches are the CPU pipeline's.
#[cfg(not(feature = "cuda"))]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn auto_decoding_without_the_cuda_feature_decodes_on_the_cpu() {
    let url = common::store_path("xr_v3");
    let build = |decode| {
        Pipeline::builder(url.clone())
            .variables(["t2m", "z"])
            .batch_size(2)
            .decode_on(decode)
            .build()
    };
    let auto: Vec<Batch> = build(zarrpipe::pipeline::DecodeOn::Auto { gpu_share: None })
        .await
        .expect("auto falls back to the CPU")
        .try_collect()
        .await
        .unwrap();
    let cpu: Vec<Batch> = build(zarrpipe::pipeline::DecodeOn::Cpu)
        .await
        .unwrap()
        .try_collect()
        .await
        .unwrap();
    assert_eq!(auto.len(), cpu.len());
    for (a, c) in auto.iter().zip(&cpu) {
        assert!(a
            .inputs
            .iter()
            .zip(c.inputs.iter())
            .all(|(x, y)| x.to_bits() == y.to_bits()));
    }
}
