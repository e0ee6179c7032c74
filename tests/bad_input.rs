//! Bad input gives a typed error naming what and where: a missing store or variable, malformed
//! metadata, an unsupported codec or data type, a truncated or corrupt chunk, a chunk of the
//! wrong decoded size. Each case copies a real fixture array (written by zarr-python) into a
//! scratch store and breaks one thing.

mod common;

use std::path::Path;

use common::*;
use zarrpipe::codec::Error as DecodeError;
use zarrpipe::store::{Dataset, Error as StoreError};

/// A scratch v3 store holding copies of fixture arrays from `zp3_v3`, without consolidated
/// metadata so each array's own zarr.json is read.
fn scratch_store(arrays: &[&str]) -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(
        dir.path().join("zarr.json"),
        r#"{"zarr_format": 3, "node_type": "group", "attributes": {}}"#,
    )
    .unwrap();
    for array in arrays {
        copy_dir(
            &fixtures().join("stores/zp3_v3").join(array),
            &dir.path().join(array),
        );
    }
    dir
}

fn edit_metadata(store: &Path, array: &str, edit: impl FnOnce(&mut serde_json::Value)) {
    let path = store.join(array).join("zarr.json");
    let mut metadata: serde_json::Value =
        serde_json::from_slice(&std::fs::read(&path).unwrap()).unwrap();
    edit(&mut metadata);
    std::fs::write(path, serde_json::to_vec(&metadata).unwrap()).unwrap();
}

async fn open(dir: &tempfile::TempDir) -> Result<Dataset, StoreError> {
    Dataset::open(dir.path().to_str().unwrap()).await
}

#[tokio::test]
async fn missing_store_is_named() {
    let error = Dataset::open("/no/such/store.zarr").await.unwrap_err();
    assert!(
        matches!(error, StoreError::StoreNotFound { .. }),
        "{error:?}"
    );
    assert!(error.to_string().contains("/no/such/store.zarr"));
}

#[tokio::test]
async fn directory_without_zarr_metadata_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let error = open(&dir).await.unwrap_err();
    assert!(matches!(error, StoreError::NotZarr { .. }), "{error:?}");
}

#[tokio::test]
async fn missing_variable_lists_the_others() {
    let dir = scratch_store(&["f32_zstd"]);
    let dataset = open(&dir).await.unwrap();
    let error = dataset.variable("t2m").unwrap_err();
    assert!(matches!(error, StoreError::MissingVariable { .. }));
    let message = error.to_string();
    assert!(
        message.contains("t2m") && message.contains("f32_zstd"),
        "{message}"
    );
}

/// The reason behind the error of a variable zarrpipe cannot read, which must also name the
/// variable and how to go on without it.
fn unreadable_reason<'a>(error: &'a StoreError, variable: &str) -> &'a StoreError {
    let StoreError::Unreadable { source, .. } = error else {
        panic!("expected Unreadable, got {error:?}");
    };
    let message = error.to_string();
    assert!(
        message.contains(&format!("`{variable}`")) && message.contains("--var"),
        "{message}"
    );
    source
}

#[tokio::test]
async fn malformed_metadata_names_its_key_when_the_variable_is_used() {
    let dir = scratch_store(&["f32_zstd"]);
    std::fs::write(
        dir.path().join("f32_zstd/zarr.json"),
        b"{\"shape\": [30, 45], ",
    )
    .unwrap();
    let dataset = open(&dir)
        .await
        .expect("the rest of the dataset stays usable");
    let error = dataset.variable("f32_zstd").unwrap_err();
    let reason = unreadable_reason(&error, "f32_zstd");
    assert!(
        matches!(reason, StoreError::MalformedMetadata { .. }),
        "{reason:?}"
    );
    assert!(
        reason.to_string().contains("f32_zstd/zarr.json"),
        "{reason}"
    );
}

#[tokio::test]
async fn metadata_of_the_wrong_shape_names_its_key() {
    let dir = scratch_store(&["f32_zstd"]);
    edit_metadata(dir.path(), "f32_zstd", |m| {
        m["shape"] = serde_json::json!("thirty")
    });
    let dataset = open(&dir).await.unwrap();
    let error = dataset.variable("f32_zstd").unwrap_err();
    let reason = unreadable_reason(&error, "f32_zstd");
    assert!(
        matches!(reason, StoreError::MalformedMetadata { .. }),
        "{reason:?}"
    );
}

#[tokio::test]
async fn unsupported_codec_names_variable_and_codec() {
    let dir = scratch_store(&["f32_zstd"]);
    edit_metadata(
        dir.path(),
        "f32_zstd",
        |m| {
            m["codecs"][1] =
                serde_json::json!({"name": "lzma_from_the_future", "configuration": {}})
        },
    );
    let dataset = open(&dir)
        .await
        .expect("the rest of the dataset stays usable");
    let error = dataset.variable("f32_zstd").unwrap_err();
    let reason = unreadable_reason(&error, "f32_zstd");
    assert!(
        matches!(reason, StoreError::InvalidArray { .. }),
        "{reason:?}"
    );
    let message = zarrpipe::error_chain(&error);
    assert!(
        message.contains("f32_zstd") && message.contains("lzma_from_the_future"),
        "{message}"
    );
}

#[tokio::test]
async fn unsupported_data_type_names_variable_and_type() {
    let dir = scratch_store(&["f32_zstd"]);
    edit_metadata(dir.path(), "f32_zstd", |m| {
        m["data_type"] = serde_json::json!("complex64");
        m["fill_value"] = serde_json::json!([0.0, 0.0]);
    });
    let dataset = open(&dir)
        .await
        .expect("the rest of the dataset stays usable");
    let error = dataset.variable("f32_zstd").unwrap_err();
    let reason = unreadable_reason(&error, "f32_zstd");
    assert!(
        matches!(reason, StoreError::UnsupportedDataType { .. }),
        "{reason:?}"
    );
    let message = zarrpipe::error_chain(&error);
    assert!(message.contains("complex64") && message.contains("f32_zstd"));
}

/// Every way of breaking a v3 array's metadata that zarrpipe cannot read past.
/// An edit of an array's metadata.
type Edit = Box<dyn Fn(&mut serde_json::Value)>;

fn v3_breakages() -> Vec<(&'static str, Edit)> {
    vec![
        (
            "chunk shape 0",
            Box::new(|m| {
                m["chunk_grid"]["configuration"]["chunk_shape"] = serde_json::json!([0, 16])
            }),
        ),
        (
            "unknown data type",
            Box::new(|m| m["data_type"] = serde_json::json!("float128_from_the_future")),
        ),
        (
            "unknown codec",
            Box::new(|m| {
                m["codecs"][1] =
                    serde_json::json!({"name": "lzma_from_the_future", "configuration": {}})
            }),
        ),
        (
            "zstd level out of range",
            Box::new(|m| m["codecs"][1]["configuration"]["level"] = serde_json::json!(1_000_000)),
        ),
        (
            "dimension_names of the wrong length",
            Box::new(|m| m["dimension_names"] = serde_json::json!(["y"])),
        ),
        (
            "a shape too large for its chunks to be counted",
            Box::new(|m| {
                m["shape"] = serde_json::json!([u64::MAX, u64::MAX]);
                m["chunk_grid"]["configuration"]["chunk_shape"] = serde_json::json!([1, 1]);
            }),
        ),
        (
            "a chunk larger than memory can address",
            Box::new(|m| {
                m["shape"] = serde_json::json!([1u64 << 62, 1u64 << 62]);
                m["chunk_grid"]["configuration"]["chunk_shape"] =
                    serde_json::json!([1u64 << 62, 1u64 << 62]);
            }),
        ),
        (
            "zarr.json without a node type",
            Box::new(|m| *m = serde_json::json!("not metadata")),
        ),
    ]
}

/// A store with a readable `f32_zstd` and a copy of it, `broken`, broken by `edit`.
fn store_with_a_broken_copy(edit: &dyn Fn(&mut serde_json::Value)) -> tempfile::TempDir {
    let dir = scratch_store(&["f32_zstd"]);
    copy_dir(&dir.path().join("f32_zstd"), &dir.path().join("broken"));
    edit_metadata(dir.path(), "broken", edit);
    dir
}

/// A variable zarrpipe cannot read is never left out of a default selection: the dataset
/// opens, the variable is in the default names, and laying out samples from them fails,
/// naming it and `--var`.
#[tokio::test]
async fn unreadable_variables_are_never_silently_left_out_of_the_default_selection() {
    use zarrpipe::batcher::{Error as LayoutError, SampleLayout, WindowSpec};
    for (case, edit) in v3_breakages() {
        let dir = store_with_a_broken_copy(&*edit);
        let dataset = open(&dir)
            .await
            .unwrap_or_else(|e| panic!("{case}: the dataset must open: {e}"));
        assert_eq!(
            dataset.data_variable_names(),
            ["broken", "f32_zstd"],
            "{case}"
        );
        let error = SampleLayout::new(&dataset, &dataset.data_variable_names(), &WindowSpec::new())
            .expect_err(case);
        let LayoutError::Store(error) = &error else {
            panic!("{case}: {error:?}");
        };
        let reason = unreadable_reason(error, "broken");
        assert!(
            error.to_string().contains("--var f32_zstd"),
            "{case}: the readable variables are named: {error}"
        );
        eprintln!("{case}: {}", zarrpipe::error_chain(reason));
        // Naming the readable ones goes on without it.
        SampleLayout::new(&dataset, &["f32_zstd"], &WindowSpec::new())
            .unwrap_or_else(|e| panic!("{case}: {e}"));
        // The pipeline's default selection fails the same way.
        let built = zarrpipe::pipeline::Pipeline::builder(dir.path().to_str().unwrap())
            .build()
            .await;
        let message = zarrpipe::error_chain(&built.expect_err(case));
        assert!(
            message.contains("`broken`") && message.contains("--var"),
            "{case}: {message}"
        );
    }
}

/// Zarr v2: an unknown compressor and `_ARRAY_DIMENSIONS` of the wrong length.
#[tokio::test]
async fn unreadable_v2_variables_are_named() {
    let breakages: [(&str, &str, serde_json::Value); 2] = [
        (
            "unknown compressor",
            ".zarray",
            serde_json::json!({"compressor": {"id": "lzma_from_the_future"}}),
        ),
        (
            "dimension names of the wrong length",
            ".zattrs",
            serde_json::json!({"_ARRAY_DIMENSIONS": ["y"]}),
        ),
    ];
    for (case, file, patch) in breakages {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join(".zgroup"), br#"{"zarr_format": 2}"#).unwrap();
        let source = fixtures().join("stores/zp3_v2/f4_bigendian");
        copy_dir(&source, &dir.path().join("good"));
        copy_dir(&source, &dir.path().join("broken"));
        for array in ["good", "broken"] {
            std::fs::write(
                dir.path().join(array).join(".zattrs"),
                br#"{"_ARRAY_DIMENSIONS": ["y", "x"]}"#,
            )
            .unwrap();
        }
        let path = dir.path().join("broken").join(file);
        let mut document: serde_json::Value =
            serde_json::from_slice(&std::fs::read(&path).unwrap()).unwrap();
        for (key, value) in patch.as_object().unwrap() {
            document[key] = value.clone();
        }
        std::fs::write(&path, serde_json::to_vec(&document).unwrap()).unwrap();
        let dataset = open(&dir).await.unwrap();
        assert_eq!(dataset.data_variable_names(), ["broken", "good"], "{case}");
        let error = dataset.variable("broken").unwrap_err();
        unreadable_reason(&error, "broken");
        assert!(dataset.variable("good").is_ok(), "{case}");
    }
}

/// Reads the whole array and returns the decode error it must give.
async fn read_error(dir: &tempfile::TempDir, array: &str) -> DecodeError {
    let dataset = open(dir).await.unwrap();
    read_whole(dataset.variable(array).unwrap())
        .await
        .expect_err("the broken chunk must fail")
}

#[tokio::test]
async fn truncated_chunk_names_variable_and_key() {
    let dir = scratch_store(&["f32_zstd"]);
    let chunk = dir.path().join("f32_zstd/c/1/1");
    let bytes = std::fs::read(&chunk).unwrap();
    std::fs::write(&chunk, &bytes[..bytes.len() / 2]).unwrap();
    let error = read_error(&dir, "f32_zstd").await;
    assert!(
        matches!(
            error,
            DecodeError::Decode { .. } | DecodeError::Codec { .. } | DecodeError::Frame { .. }
        ),
        "{error:?}"
    );
    assert!(error.to_string().contains("f32_zstd/c/1/1"), "{error}");
}

#[tokio::test]
async fn corrupt_chunk_names_variable_and_key() {
    let dir = scratch_store(&["f32_zstd"]);
    let chunk = dir.path().join("f32_zstd/c/0/2");
    let mut bytes = std::fs::read(&chunk).unwrap();
    for byte in bytes.iter_mut().skip(4) {
        *byte ^= 0x5a;
    }
    std::fs::write(&chunk, &bytes).unwrap();
    let error = read_error(&dir, "f32_zstd").await;
    assert!(
        matches!(
            error,
            DecodeError::Decode { .. } | DecodeError::Codec { .. } | DecodeError::Frame { .. }
        ),
        "{error:?}"
    );
    assert!(error.to_string().contains("f32_zstd/c/0/2"), "{error}");
}

#[tokio::test]
async fn checksum_mismatch_is_an_error() {
    let dir = scratch_store(&["f32_zstd_crc32c"]);
    let chunk = dir.path().join("f32_zstd_crc32c/c/0/0");
    let mut bytes = std::fs::read(&chunk).unwrap();
    let last = bytes.len() - 1;
    bytes[last] ^= 0xff;
    std::fs::write(&chunk, &bytes).unwrap();
    let error = read_error(&dir, "f32_zstd_crc32c").await;
    assert!(
        error.to_string().contains("f32_zstd_crc32c/c/0/0"),
        "{error}"
    );
}

#[tokio::test]
async fn chunk_of_the_wrong_decoded_size_names_variable_and_key() {
    let dir = scratch_store(&["u8_raw"]);
    let chunk = dir.path().join("u8_raw/c/0/0/0");
    let mut bytes = std::fs::read(&chunk).unwrap();
    bytes.extend_from_slice(&[1, 2, 3]);
    std::fs::write(&chunk, &bytes).unwrap();
    let error = read_error(&dir, "u8_raw").await;
    assert!(
        matches!(
            error,
            DecodeError::Decode { .. }
                | DecodeError::DecodedSize { .. }
                | DecodeError::Frame { .. }
        ),
        "{error:?}"
    );
    assert!(error.to_string().contains("u8_raw/c/0/0/0"), "{error}");
}

#[tokio::test]
async fn chunk_outside_the_grid_is_refused() {
    use zarrpipe::store::{fetch_chunk, ChunkRequest};
    let dir = scratch_store(&["f32_zstd"]);
    let dataset = open(&dir).await.unwrap();
    let variable = dataset.variable("f32_zstd").unwrap().clone();
    let error = fetch_chunk(ChunkRequest::new(variable, vec![99, 0]))
        .await
        .unwrap_err();
    assert!(
        matches!(error, StoreError::ChunkOutOfGrid { .. }),
        "{error:?}"
    );
}

/// Rewrites the index at the end of a shard (`bytes` + `crc32c` index codecs, 8 entries):
/// entry 0 becomes `(offset, length)`, every entry is written in `big`-endian order or not,
/// and the checksum is valid, so only the offset is hostile.
fn corrupt_shard_index(shard: &Path, offset: u64, length: u64, big: bool) {
    let mut bytes = std::fs::read(shard).unwrap();
    let index_len = 8 * 16;
    let start = bytes.len() - index_len - 4;
    let mut words: Vec<u64> = bytes[start..start + index_len]
        .chunks_exact(8)
        .map(|word| u64::from_le_bytes(word.try_into().unwrap()))
        .collect();
    words[0] = offset;
    words[1] = length;
    for (slot, word) in bytes[start..start + index_len]
        .chunks_exact_mut(8)
        .zip(words)
    {
        slot.copy_from_slice(&if big {
            word.to_be_bytes()
        } else {
            word.to_le_bytes()
        });
    }
    let checksum = crc32c::crc32c(&bytes[start..start + index_len]);
    let end = bytes.len();
    bytes[end - 4..].copy_from_slice(&checksum.to_le_bytes());
    std::fs::write(shard, bytes).unwrap();
}

/// Batches of 10 x 10 windows of `f32_sharded` (read by inner chunk): the error of the first
/// failing batch, as one line.
async fn pipeline_error(url: &str) -> String {
    use futures::TryStreamExt;
    let mut batches = zarrpipe::pipeline::Pipeline::builder(url)
        .variables(["f32_sharded"])
        .window("y", 10, 10)
        .window("x", 10, 10)
        .build()
        .await
        .unwrap();
    loop {
        match batches.try_next().await {
            Ok(Some(_)) => continue,
            Ok(None) => panic!("the corrupt shard must fail its batch"),
            Err(error) => return zarrpipe::error_chain(&error),
        }
    }
}

/// A shard whose index points an inner chunk at an offset near 2^64 (checksum valid) made
/// zarrs' sharding codec panic in a rayon task, which aborted the whole process. With a
/// little-endian index the frame checks refuse it before zarrs sees it; with a big-endian
/// index (which the checks leave to zarrs) zarrs still panics, and the panic is caught and
/// becomes an error naming the chunk. Whole shards (zarrs) and inner chunks read by range
/// (zarrpipe), from a local store and over HTTP.
#[tokio::test(flavor = "multi_thread")]
async fn a_shard_index_pointing_near_2_64_is_an_error_not_an_abort() {
    for big in [false, true] {
        let dir = scratch_store(&["f32_sharded"]);
        if big {
            edit_metadata(dir.path(), "f32_sharded", |m| {
                m["codecs"][0]["configuration"]["index_codecs"][0]["configuration"]["endian"] =
                    serde_json::json!("big")
            });
        }
        corrupt_shard_index(&dir.path().join("f32_sharded/c/0/0"), u64::MAX - 5, 10, big);
        let expected = |error: DecodeError| {
            if big {
                assert!(matches!(error, DecodeError::Panicked { .. }), "{error:?}");
            } else {
                assert!(matches!(error, DecodeError::Frame { .. }), "{error:?}");
            }
            assert!(error.to_string().contains("f32_sharded/c/0/0"), "{error}");
            eprintln!("big-endian index {big}: {}", zarrpipe::error_chain(&error));
        };
        expected(read_error(&dir, "f32_sharded").await);
        let message = pipeline_error(dir.path().to_str().unwrap()).await;
        assert!(message.contains("f32_sharded/c/0/0"), "{message}");
        // Over HTTP.
        consolidate(dir.path());
        let base = serve_directory(dir.path().to_path_buf()).await;
        let dataset = Dataset::open(&base).await.unwrap();
        let error = read_whole(dataset.variable("f32_sharded").unwrap())
            .await
            .expect_err("the corrupt shard must fail over HTTP too");
        expected(error);
        let message = pipeline_error(&base).await;
        assert!(message.contains("f32_sharded/c/0/0"), "{message}");
    }
}
