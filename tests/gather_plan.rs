//! The gather plan that the GPU collator launches, run on the CPU, rebuilds every batch of
//! the host pipeline bit for bit (padded edges, stacked levels, forecasting targets, patches
//! across chunk borders, sharded stores); and the host's normalisation and NaN handling
//! compute what the GPU's `finish` kernel is written to compute.

use std::sync::Arc;

use futures::{stream, TryStreamExt};
use zarrpipe::batcher::Edge;
use zarrpipe::batcher::WindowSpec;
use zarrpipe::codec::{CpuDecoder, DecodeExt};
use zarrpipe::collate::{CollateOptions, GatherPlan, Normalization};
use zarrpipe::generate::{generate, Compression, GenerateOptions};
use zarrpipe::pipeline::PipelineBuilder;
use zarrpipe::prelude::*;
use zarrpipe::store::FetchExt;

fn store(dir: &std::path::Path, shard: Option<u64>) -> String {
    let options = GenerateOptions {
        time: 4,
        levels: 2,
        lat: 10,
        lon: 12,
        compression: Compression::Zstd,
        shard,
        seed: 3,
        chunks: None,
        variables: Default::default(),
    };
    let path = dir.join("w1.zarr");
    generate(&path, &options, |_, _| {}).expect("generate");
    path.to_string_lossy().into_owned()
}

/// Runs the plan of every batch on the CPU and compares with the host collator's tensors.
async fn check(builder: PipelineBuilder) {
    let mut batches = builder.build().await.unwrap();
    let layout = batches.layout().clone();
    let background = if layout.padded() {
        layout.pad_value()
    } else {
        0.0
    };
    let mut checked = 0;
    while let Some(batch) = batches.try_next().await.unwrap() {
        let requests = layout.read_plan(&batch.samples);
        let chunks: Vec<_> = stream::iter(requests)
            .fetch(8)
            .decode(Arc::new(CpuDecoder::new()), 8)
            .try_collect()
            .await
            .unwrap();
        let requests: Vec<_> = chunks.iter().map(|chunk| &chunk.request).collect();
        let bytes: Vec<&[u8]> = chunks.iter().map(|chunk| &chunk.bytes[..]).collect();
        let plan = GatherPlan::new(&layout, &batch.samples, &requests).unwrap();
        assert_eq!(plan.input_shape, batch.inputs.shape());
        let gathered = GatherPlan::run_on_host(
            &plan.inputs,
            &plan.decodings,
            &bytes,
            batch.inputs.len(),
            background,
        );
        let expected = batch.inputs.as_slice().unwrap();
        assert!(
            gathered
                .iter()
                .zip(expected)
                .all(|(a, b)| a.to_bits() == b.to_bits()),
            "batch {} differs",
            batch.index
        );
        match (&plan.targets, &batch.targets) {
            (Some((pieces, shape)), Some(targets)) => {
                assert_eq!(shape, targets.shape());
                let gathered = GatherPlan::run_on_host(
                    pieces,
                    &plan.decodings,
                    &bytes,
                    targets.len(),
                    background,
                );
                assert_eq!(gathered, targets.as_slice().unwrap());
            }
            (None, None) => {}
            _ => panic!("targets planned but not delivered, or the reverse"),
        }
        checked += 1;
    }
    assert!(checked > 1);
}

#[tokio::test]
async fn plans_rebuild_padded_patches_across_chunk_borders() {
    let dir = tempfile::tempdir().unwrap();
    let url = store(dir.path(), None);
    check(
        Pipeline::builder(&url)
            .variables(["z", "t2m"])
            .window_spec(
                WindowSpec::new()
                    .window("latitude", 4, 3)
                    .window("longitude", 5, 4)
                    .edge(Edge::Pad)
                    .pad_value(-1.5),
            )
            .batch_size(3),
    )
    .await;
}

#[tokio::test]
async fn plans_rebuild_forecasting_pairs_from_shards() {
    let dir = tempfile::tempdir().unwrap();
    let url = store(dir.path(), Some(2));
    check(
        Pipeline::builder(&url)
            .variables(["t2m", "u10", "z"])
            .forecast(2, [1])
            .batch_size(1),
    )
    .await;
}

#[tokio::test]
async fn normalisation_and_nan_fill_follow_the_formula() {
    let dir = tempfile::tempdir().unwrap();
    let url = store(dir.path(), None);
    let builder = || {
        Pipeline::builder(&url)
            .variables(["t2m", "z"])
            .batch_size(2)
    };
    let plain: Vec<_> = builder()
        .build()
        .await
        .unwrap()
        .try_collect()
        .await
        .unwrap();
    let normalization = Normalization {
        mean: vec![280.0, 1000.0, 2000.0],
        std: vec![10.0, 300.0, 3.0],
    };
    let options = CollateOptions {
        normalize: Some(normalization.clone()),
        nan_fill: Some(-9.0),
        nan_mask: true,
        ..Default::default()
    };
    let normalized: Vec<_> = builder()
        .collate_options(options)
        .build()
        .await
        .unwrap()
        .try_collect()
        .await
        .unwrap();
    for (plain, normalized) in plain.iter().zip(&normalized) {
        let mask = normalized.nan_mask.as_ref().expect("a NaN mask");
        for ((index, &raw), &value) in plain.inputs.indexed_iter().zip(normalized.inputs.iter()) {
            let channel = index[1];
            let expected = (raw - normalization.mean[channel]) / normalization.std[channel];
            if raw.is_nan() {
                assert_eq!((value, mask[&index]), (-9.0, 0));
            } else {
                assert_eq!((value.to_bits(), mask[&index]), (expected.to_bits(), 1));
            }
        }
    }
    let error = Pipeline::builder(&url)
        .variables(["t2m"])
        .collate_options(CollateOptions {
            normalize: Some(Normalization {
                mean: vec![0.0],
                std: vec![0.0],
            }),
            ..Default::default()
        })
        .build()
        .await
        .unwrap_err();
    assert!(
        error.to_string().contains("standard deviation 0"),
        "{error}"
    );
}

#[tokio::test]
async fn latitude_weights_follow_the_cosine_of_each_window_row() {
    let dir = tempfile::tempdir().unwrap();
    let url = store(dir.path(), None);
    let dataset = Arc::new(zarrpipe::store::Dataset::open(&url).await.unwrap());
    let latitude = dataset.variable("latitude").unwrap();
    let bytes = zarrpipe::codec::read_array(latitude, Arc::new(CpuDecoder::new()), 4)
        .await
        .unwrap();
    let degrees = zarrpipe::core::values_f64(latitude.dtype(), &bytes);
    let mean = degrees.iter().map(|d| d.to_radians().cos()).sum::<f64>() / degrees.len() as f64;
    let batches: Vec<_> = Pipeline::from_dataset(dataset)
        .variables(["t2m"])
        .window("latitude", 4, 3)
        .latitude_weights("latitude")
        .batch_size(3)
        .build()
        .await
        .unwrap()
        .try_collect()
        .await
        .unwrap();
    for batch in &batches {
        let weights = batch.latitude_weights.as_ref().expect("weights");
        assert_eq!(weights.shape(), [batch.samples.len(), 4]);
        for (position, sample) in batch.samples.iter().enumerate() {
            for row in 0..4 {
                let lat = degrees[sample.origin[1] as usize + row];
                let expected = (lat.to_radians().cos() / mean) as f32;
                assert_eq!(weights[[position, row]], expected);
            }
        }
    }
    let error = Pipeline::builder(&url)
        .latitude_weights("level")
        .build()
        .await
        .unwrap_err();
    assert!(error.to_string().contains("level"), "{error}");
}
