//! Levels by value on `xr_v3`, a store written by xarray (tests/fixtures/make_fixtures.py):
//! `z(time, level, latitude, longitude)` on levels 1000, 850 and 500 hPa, two levels to a
//! chunk, beside the surface variable `t2m`. Channels are named by the level's value, a list
//! or range of values picks channels (of `z` only: `t2m` keeps its one), in the order given,
//! equal bit for bit to the same channels of the whole stack, and a chunk holding several
//! selected levels is read once per batch.

mod common;

use common::store_path;
use futures::TryStreamExt;
use zarrpipe::batcher::Batcher;
use zarrpipe::pipeline::{Batch, Pipeline, PipelineBuilder};

fn builder() -> PipelineBuilder {
    Pipeline::builder(store_path("xr_v3"))
        .variables(["t2m", "z"])
        .batch_size(2)
}

async fn batches(builder: PipelineBuilder) -> (Vec<String>, Vec<Batch>) {
    let stream = builder
        .build()
        .await
        .unwrap_or_else(|e| panic!("{}", zarrpipe::error_chain(&e)));
    let labels = stream
        .layout()
        .channels()
        .iter()
        .map(|c| c.label())
        .collect();
    (labels, stream.try_collect().await.unwrap())
}

/// Channel `channel` of every sample, in order.
fn channel(batches: &[Batch], channel: usize) -> Vec<u32> {
    batches
        .iter()
        .flat_map(|batch| {
            let inputs = &batch.inputs;
            (0..inputs.shape()[0]).flat_map(move |sample| {
                let plane = inputs.index_axis(ndarray::Axis(0), sample);
                let plane = plane.index_axis(ndarray::Axis(0), channel).to_owned();
                plane.iter().map(|v| v.to_bits()).collect::<Vec<u32>>()
            })
        })
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn channels_are_named_and_picked_by_level_value() {
    let (labels, all) = batches(builder()).await;
    assert_eq!(
        labels,
        ["t2m", "z[level=1000]", "z[level=850]", "z[level=500]"]
    );
    // A list, in its own order; the surface variable keeps its channel.
    let (labels, picked) = batches(builder().select_channels("level", [500.0, 1000.0])).await;
    assert_eq!(labels, ["t2m", "z[level=500]", "z[level=1000]"]);
    assert_eq!(channel(&picked, 0), channel(&all, 0));
    assert_eq!(channel(&picked, 1), channel(&all, 3));
    assert_eq!(channel(&picked, 2), channel(&all, 1));
    // A range of values on a stacked dimension keeps the channels inside it.
    let (labels, ranged) = batches(builder().select("level", 900.0, 500.0)).await;
    assert_eq!(labels, ["t2m", "z[level=850]", "z[level=500]"]);
    assert_eq!(channel(&ranged, 1), channel(&all, 2));
    assert_eq!(channel(&ranged, 2), channel(&all, 3));
    // Windows and selections together: the same values in each window.
    let windowed = |b: PipelineBuilder| b.window("latitude", 5, 3).window("longitude", 8, 7);
    let (_, all) = batches(windowed(builder())).await;
    let (_, picked) = batches(windowed(builder().select_channels("level", [850.0]))).await;
    assert_eq!(channel(&picked, 1), channel(&all, 2));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_chunk_of_several_selected_levels_is_read_once() {
    let stream = builder()
        .select_channels("level", [1000.0, 850.0])
        .build()
        .await
        .unwrap();
    let layout = stream.layout().clone();
    let batcher = Batcher::new(layout.clone(), 2, false).unwrap();
    for (_, samples) in batcher.batches() {
        let plan = layout.read_plan(&samples);
        let z: Vec<_> = plan
            .iter()
            .filter(|request| request.variable.name() == "z")
            .collect();
        // Levels 1000 and 850 share the chunks of level block 0: one read each.
        let mut keys: Vec<String> = z.iter().map(|r| r.key()).collect();
        let count = keys.len();
        keys.sort();
        keys.dedup();
        assert_eq!(keys.len(), count, "a chunk read twice");
        assert!(z.iter().all(|request| request.indices[1] == 0), "{keys:?}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_channel_selections_say_what_is_wrong() {
    let error = |builder: PipelineBuilder| async move {
        let error = builder.build().await.expect_err("refused");
        zarrpipe::error_chain(&error)
    };
    let message = error(builder().select_channels("level", [700.0])).await;
    assert!(
        message.contains("no coordinate value 700") && message.contains("850"),
        "{message}"
    );
    let message = error(builder().select_channels("time", [1.0, 2.0])).await;
    assert!(message.contains("select a range"), "{message}");
    let message = error(builder().select_channels("height", [1.0])).await;
    assert!(message.contains("height"), "{message}");
}
