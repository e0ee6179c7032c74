//! `zarrpipe generate --chunks LAT,LON`: the same seed writes the same values whatever the
//! chunking. Stores of whole-field chunks, of tiles, and of shards with tile-sized inner chunks
//! (tiles that divide the grid and tiles that leave partial edge chunks) are read back through
//! the CPU pipeline and `read_array` and compared bit for bit.

mod common;

use std::path::Path;

use common::read_whole;
use zarrpipe::generate::{expected_value, generate, Compression, GenerateOptions};
use zarrpipe::prelude::*;

fn options(shard: Option<u64>, chunks: Option<[u64; 2]>) -> GenerateOptions {
    GenerateOptions {
        time: 3,
        levels: 2,
        lat: 40,
        lon: 72,
        compression: Compression::Zstd,
        shard,
        seed: 5,
        chunks,
        variables: Default::default(),
    }
}

fn write(dir: &Path, name: &str, options: &GenerateOptions) -> String {
    let path = dir.join(name);
    let report = generate(&path, options, |_, _| {}).expect("generate");
    // Decoded bytes count in-bounds values only, whatever the chunking.
    assert_eq!(
        report.decoded_bytes,
        3 * (4 + 3 * 2) * 40 * 72 * 4,
        "{options:?}"
    );
    path.to_string_lossy().into_owned()
}

fn metadata(url: &str, name: &str) -> serde_json::Value {
    let text = std::fs::read_to_string(Path::new(url).join(name).join("zarr.json")).unwrap();
    serde_json::from_str(&text).unwrap()
}

/// Every sample of the CPU pipeline (all variables, whole fields) as raw bits, t2m first.
async fn samples(url: &str) -> Vec<u32> {
    let batches: Vec<Batch> = Pipeline::builder(url)
        .variables(zarrpipe::generate::variable_names())
        .batch_size(2)
        .build()
        .await
        .unwrap()
        .try_collect()
        .await
        .unwrap();
    let mut bits = Vec::new();
    for batch in &batches {
        assert_eq!(batch.inputs.shape()[1..], [4 + 3 * 2, 40, 72]);
        bits.extend(batch.inputs.iter().map(|v| v.to_bits()));
    }
    assert_eq!(bits.len(), 3 * 10 * 40 * 72);
    bits
}

/// Every variable read whole through fetch and decode.
async fn arrays(url: &str) -> Vec<Vec<u8>> {
    let dataset = zarrpipe::store::Dataset::open(url).await.unwrap();
    let mut out = Vec::new();
    for name in zarrpipe::generate::variable_names() {
        out.push(read_whole(dataset.variable(name).unwrap()).await.unwrap());
    }
    out
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn chunking_never_changes_the_values() {
    let dir = tempfile::tempdir().unwrap();
    let whole_options = options(None, None);
    let whole = write(dir.path(), "whole.zarr", &whole_options);
    let reference = samples(&whole).await;
    let reference_arrays = arrays(&whole).await;
    assert!(reference.iter().all(|&b| f32::from_bits(b).is_finite()));
    // The pipeline's first value is the generator's value function's.
    assert_eq!(
        f32::from_bits(reference[0]),
        expected_value(&whole_options, "t2m", 0, 0, 0, 0).unwrap()
    );

    // (name, shard, chunks, chunk grid's shape of z, inner chunk of z when sharded)
    type Case = (
        &'static str,
        Option<u64>,
        [u64; 2],
        [u64; 4],
        Option<[u64; 4]>,
    );
    let cases: [Case; 4] = [
        ("tiles.zarr", None, [20, 36], [1, 1, 20, 36], None),
        ("edges.zarr", None, [16, 32], [1, 1, 16, 32], None),
        (
            "shards.zarr",
            Some(1),
            [20, 36],
            [1, 2, 40, 72],
            Some([1, 1, 20, 36]),
        ),
        // Partial last shard in time, shard rounded up to whole tiles in space.
        (
            "shard-edges.zarr",
            Some(2),
            [16, 32],
            [2, 2, 48, 96],
            Some([1, 1, 16, 32]),
        ),
    ];
    for (name, shard, chunks, chunk_shape, inner) in cases {
        let url = write(dir.path(), name, &options(shard, Some(chunks)));
        let z = metadata(&url, "z");
        let t2m = metadata(&url, "t2m");
        assert_eq!(z["shape"], serde_json::json!([3, 2, 40, 72]), "{name}");
        assert_eq!(
            z["chunk_grid"]["configuration"]["chunk_shape"],
            serde_json::json!(chunk_shape),
            "{name}"
        );
        let codec = &z["codecs"][0];
        match inner {
            Some(inner) => {
                assert_eq!(codec["name"], "sharding_indexed", "{name}");
                assert_eq!(
                    codec["configuration"]["chunk_shape"],
                    serde_json::json!(inner),
                    "{name}"
                );
                let surface = &t2m["codecs"][0]["configuration"]["chunk_shape"];
                assert_eq!(surface, &serde_json::json!(inner[1..]), "{name}");
            }
            None => {
                assert_eq!(codec["name"], "bytes", "{name}");
                let surface = &t2m["chunk_grid"]["configuration"]["chunk_shape"];
                assert_eq!(surface, &serde_json::json!(chunk_shape[1..]), "{name}");
            }
        }
        // Bit for bit, through the pipeline and through whole-array reads.
        assert!(samples(&url).await == reference, "{name}: samples differ");
        let tiled = arrays(&url).await;
        for ((variable, a), b) in zarrpipe::generate::variable_names()
            .zip(&tiled)
            .zip(&reference_arrays)
        {
            assert!(a == b, "{name}: {variable} differs");
        }
    }
}

#[test]
fn tiles_are_chunk_objects() {
    let dir = tempfile::tempdir().unwrap();
    // 40 x 72 in 16 x 32 tiles: 3 x 3 chunk objects per field, 10 fields per time step.
    let report = generate(
        &dir.path().join("s"),
        &options(None, Some([16, 32])),
        |_, _| {},
    )
    .unwrap();
    assert_eq!(report.chunks, 3 * 10 * 9);
    assert!(dir.path().join("s/z/c/2/1/2/2").is_file());
    // Sharded: one object per shard, whatever the inner chunks.
    let report = generate(
        &dir.path().join("t"),
        &options(Some(2), Some([16, 32])),
        |_, _| {},
    )
    .unwrap();
    assert_eq!(report.chunks, 7 * 2);
    assert!(dir.path().join("t/z/c/1/0/0/0").is_file());
    let err = generate(
        &dir.path().join("u"),
        &options(None, Some([0, 32])),
        |_, _| {},
    )
    .unwrap_err();
    assert!(
        err.to_string().contains("chunks must be positive"),
        "{err:#}"
    );
}
