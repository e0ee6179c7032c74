//! `zarrpipe rechunk` on the stores zarr-python and xarray wrote: the result read back through
//! zarrpipe equals what zarr-python reads from the source (values, dims, attributes, chunking
//! asked for), an interrupted rechunk resumes, and bad options fail with a clear error.
//! (`python/tests/test_rechunk.py` reads the results back with zarr-python and xarray.)

mod common;

use std::path::Path;
use std::process::{Command, Output};

use common::{expected_bytes, manifest, read_whole, same_values, store_path};
use zarrpipe::store::Dataset;

fn zarrpipe(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_zarrpipe"))
        .args(args)
        .output()
        .expect("run zarrpipe")
}

fn succeed(output: Output) -> String {
    assert!(
        output.status.success(),
        "failed: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    String::from_utf8(output.stdout).unwrap()
}

/// The one-line error of a failed run (never a panic).
fn fail(output: Output) -> String {
    let stderr = String::from_utf8(output.stderr).unwrap();
    assert!(!output.status.success(), "succeeded: {stderr}");
    assert!(!stderr.contains("panicked"), "{stderr}");
    stderr
}

/// Every array of the fixture store `store` that zarrpipe reads, read back from `rechunked`:
/// values equal zarr-python's reading of the source; shape, dims and attributes kept.
async fn check_read_back(store: &str, rechunked: &Path) {
    let entry = manifest()
        .stores
        .into_iter()
        .find(|s| s.store == store)
        .unwrap();
    let source = Dataset::open(&store_path(store)).await.unwrap();
    let dataset = Dataset::open(rechunked.to_str().unwrap()).await.unwrap();
    assert_eq!(dataset.zarr_format(), 3);
    assert_eq!(dataset.consolidated(), entry.consolidated, "{store}");
    assert_eq!(dataset.attributes(), &entry.attributes, "{store}");
    let mut checked = 0;
    for array in entry
        .arrays
        .iter()
        .filter(|a| a.unsupported_codec().is_none())
    {
        let Ok(variable) = dataset.variable(&array.path) else {
            continue; // left out with --var
        };
        let original = source.variable(&array.path).unwrap();
        assert_eq!(variable.shape(), array.shape.as_slice(), "{}", array.path);
        assert_eq!(variable.dims(), original.dims(), "{}", array.path);
        assert_eq!(variable.dtype(), original.dtype(), "{}", array.path);
        assert_eq!(variable.is_coordinate(), original.is_coordinate());
        let mut attributes = original.attributes().clone();
        attributes.remove("_ARRAY_DIMENSIONS");
        let mut kept = variable.attributes().clone();
        if !original.attributes().contains_key("_FillValue") {
            kept.remove("_FillValue"); // added for xarray's v3 reading of a v2 fill value
        }
        assert_eq!(kept, attributes, "{}", array.path);
        let values = read_whole(variable).await.unwrap();
        assert!(
            same_values(&array.dtype, &values, &expected_bytes(array)),
            "{store}/{}: values differ",
            array.path
        );
        checked += 1;
    }
    assert!(checked >= 3, "{store}: only {checked} arrays checked");
}

#[tokio::test]
async fn xarray_stores_rechunked_and_sharded_read_back_equal() {
    let dir = tempfile::tempdir().unwrap();
    for store in ["xr_v2", "xr_v3"] {
        let out = dir.path().join(store);
        let text = succeed(zarrpipe(&[
            "rechunk",
            &store_path(store),
            out.to_str().unwrap(),
            "--chunks",
            "time=1,latitude=4,longitude=8",
            "--shard",
            "latitude=8,longitude=16",
            "--codec",
            "blosc-lz4",
        ]));
        assert!(text.contains("9 arrays"), "{text}");
        check_read_back(store, &out).await;
        let dataset = Dataset::open(out.to_str().unwrap()).await.unwrap();
        let z = dataset.variable("z").unwrap();
        // (time, level, latitude, longitude): level keeps the source's chunk (2); shards of
        // 8 x 16 clipped to the 11 x 15 grid rounded up to whole 4 x 8 tiles.
        assert_eq!(z.inner_chunk_shape(), Some(vec![1, 2, 4, 8]));
        assert_eq!(z.chunk_shape(), vec![1, 2, 8, 16]);
        assert_eq!(z.codec_names()[0], "sharding_indexed");
        // 1-D coordinates are one chunk.
        assert_eq!(dataset.variable("time").unwrap().chunk_shape(), vec![6]);
        assert!(!out.join(zarrpipe::rechunk::PLAN_FILE).exists());
    }
}

#[tokio::test]
async fn zarr_python_stores_v3_and_big_endian_v2_read_back_equal() {
    let dir = tempfile::tempdir().unwrap();
    let v3 = dir.path().join("zp3_v3");
    succeed(zarrpipe(&[
        "rechunk",
        &store_path("zp3_v3"),
        v3.to_str().unwrap(),
        "--chunks",
        "y=7,x=6",
        "--codec",
        "zstd:5",
    ]));
    check_read_back("zp3_v3", &v3).await;
    // Transpose, big-endian bytes and the sub-group's array come out as plain little-endian
    // chunks of the asked size.
    let dataset = Dataset::open(v3.to_str().unwrap()).await.unwrap();
    for name in [
        "f32_bigendian",
        "f32_transpose",
        "nested/i32_zstd",
        "f32_sharded",
    ] {
        let variable = dataset.variable(name).unwrap();
        let chunk = variable.chunk_shape();
        assert_eq!(&chunk[chunk.len() - 2..], &[7, 6], "{name}");
        assert_eq!(variable.codec_names(), vec!["bytes", "zstd"], "{name}");
    }

    // zp3_v2: the delta-filtered array cannot be read; the big-endian ones are picked by name.
    let v2 = dir.path().join("zp3_v2");
    succeed(zarrpipe(&[
        "rechunk",
        &store_path("zp3_v2"),
        v2.to_str().unwrap(),
        "--var",
        "f4_bigendian",
        "--var",
        "i2_bigendian_raw",
        "--var",
        "f8_order_f",
        "--chunks",
        "dim_0=3",
        "--codec",
        "gzip",
    ]));
    check_read_back("zp3_v2", &v2).await;
    let dataset = Dataset::open(v2.to_str().unwrap()).await.unwrap();
    assert_eq!(dataset.variables().len(), 3);
}

#[tokio::test]
async fn an_interrupted_rechunk_resumes_where_it_stopped() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("out");
    let out_arg = out.to_str().unwrap();
    let source = store_path("xr_v3");
    let args = |extra: &[&str]| -> Vec<String> {
        let mut args: Vec<String> = ["rechunk", &source, out_arg, "--chunks", "time=1,latitude=6"]
            .iter()
            .map(|s| s.to_string())
            .collect();
        args.extend(extra.iter().map(|s| s.to_string()));
        args
    };
    let run = |args: Vec<String>| zarrpipe(&args.iter().map(String::as_str).collect::<Vec<_>>());

    let error = fail(run(args(&["--stop-after", "7", "--concurrency", "2"])));
    assert!(error.contains("stopped after 7"), "{error}");
    let log_path = out.join(zarrpipe::rechunk::LOG_FILE);
    let log = std::fs::read_to_string(&log_path).unwrap();
    assert_eq!(log.lines().count(), 7, "{log}");
    // As if the process died after writing these chunks and before logging them, mid-write:
    // their files are garbage (edge chunks among them, which zarrs updates by reading them).
    for line in log.lines() {
        let (array, indices) = line.split_once('\t').unwrap();
        let key = out.join(array).join("c").join(indices.replace(',', "/"));
        std::fs::write(&key, b"half a chunk").unwrap();
    }
    std::fs::write(&log_path, "").unwrap();
    // A rechunk with other options is refused on the interrupted destination.
    let error = fail(zarrpipe(&[
        "rechunk",
        &source,
        out_arg,
        "--chunks",
        "time=2,latitude=6",
    ]));
    assert!(
        error.contains("other arguments") && error.contains("chunk_shape"),
        "{error}"
    );
    // Stopped a second time, then finished: chunks are written once each.
    fail(run(args(&["--stop-after", "5"])));
    let text = succeed(run(args(&[])));
    assert!(text.contains("5 by an earlier run"), "{text}");
    let total: u64 = text
        .split(" chunks")
        .next()
        .unwrap()
        .rsplit(' ')
        .next()
        .unwrap()
        .parse()
        .unwrap();
    assert!(
        text.contains(&format!("{} written now", total - 5)),
        "{text}"
    );
    assert!(!out.join(zarrpipe::rechunk::LOG_FILE).exists());
    check_read_back("xr_v3", &out).await;
    // Complete: a rerun is refused like any non-empty directory.
    let error = fail(run(args(&[])));
    assert!(error.contains("not empty"), "{error}");
}

#[test]
fn bad_options_say_what_and_where() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("out");
    let out = out.to_str().unwrap();
    let source = store_path("xr_v2");
    let cases: &[(&[&str], &str)] = &[
        (
            &["--chunks", "lat=4"],
            "--chunks names dimension \"lat\", which no array of",
        ),
        (&["--chunks", "time=0"], "sizes must be at least 1"),
        (&["--chunks", "time"], "expected DIM=N"),
        (
            &["--chunks", "time=2", "--shard", "time=3"],
            "--shard time=3 is not a multiple of the chunk size 2",
        ),
        (
            &["--chunks", "time=2", "--shard", "latitude=4"],
            "--shard latitude=4 without a chunk size",
        ),
        (
            &["--shard", "level=3", "--chunks", "level=1,depth=2"],
            "dimension \"depth\"",
        ),
        (&["--codec", "lz5"], "unknown codec \"lz5\""),
        (&["--var", "nope"], "nope"),
    ];
    for (extra, message) in cases {
        let mut args = vec!["rechunk", source.as_str(), out];
        args.extend_from_slice(extra);
        let error = fail(zarrpipe(&args));
        assert!(error.contains(message), "{extra:?}: {error}");
        assert!(!Path::new(out).exists(), "{extra:?} wrote {out}");
    }
    // A non-empty destination without a journal.
    std::fs::create_dir_all(out).unwrap();
    std::fs::write(Path::new(out).join("notes.txt"), "mine").unwrap();
    let error = fail(zarrpipe(&["rechunk", &source, out]));
    assert!(error.contains("exists and is not empty"), "{error}");
    // An array zarrpipe cannot read (numcodecs delta): named, with how to leave it out.
    let error = fail(zarrpipe(&[
        "rechunk",
        &store_path("zp3_v2"),
        &format!("{out}-v2"),
    ]));
    assert!(
        error.contains("u1_delta_gzip cannot be read") && error.contains("--var f4_bigendian"),
        "{error}"
    );
}

#[test]
fn advise_measures_the_store_and_every_candidate_layout() {
    let output = zarrpipe(&["advise", &store_path("xr_v3"), "--json"]);
    let advice: serde_json::Value = serde_json::from_str(&succeed(output)).unwrap();
    // The largest variable, z (time, level, latitude, longitude), 4 steps of whole fields.
    assert_eq!(advice["variable"], "z");
    assert_eq!(
        advice["sample"],
        serde_json::json!([[0, 4], [0, 3], [0, 11], [0, 15]])
    );
    assert_eq!(advice["sample_bytes"], 4 * 3 * 11 * 15 * 4);
    // The store's chunks (1, 2, 6, 8) overlapping the sample: 4 x 2 x 2 x 2.
    assert_eq!(advice["source"]["objects"], 32);
    let candidates = advice["candidates"].as_array().unwrap();
    let objects: Vec<u64> = candidates
        .iter()
        .map(|c| c["objects"].as_u64().unwrap())
        .collect();
    // Whole fields (3 codecs): one object per field; quarter tiles: 4; sharded: one per field.
    assert_eq!(objects, vec![12, 12, 12, 48, 12]);
    let feeds: Vec<f64> = candidates
        .iter()
        .map(|c| c["feed_bytes_per_s"].as_f64().unwrap())
        .collect();
    assert!(feeds.iter().all(|&f| f > 0.0 && f.is_finite()), "{feeds:?}");
    let best = advice["best"].as_u64().unwrap() as usize;
    assert!(feeds.iter().all(|&f| f <= feeds[best]), "{feeds:?}");
    // The uncompressed candidate stores every byte of its fields.
    assert_eq!(candidates[2]["stored_bytes"], 4 * 3 * 11 * 15 * 4);
    for candidate in candidates {
        let limited = candidate["limited_by"].as_str().unwrap();
        assert!(limited == "reads" || limited == "decoding", "{limited}");
    }
    // Where to decode: the cores alone without a GPU; with one, as the cores keep up with reads.
    let decode_on = advice["decode_on"].as_str().unwrap();
    let advised = match advice["keep_store_layout"].as_bool().unwrap() {
        true => &advice["source"],
        false => &candidates[best],
    };
    let keeps_up = advised["cpu_decode_s"].as_f64() <= advised["read_s"].as_f64();
    let expected = match advice["gpu"].is_null() || keeps_up {
        true => "cpu",
        false => "auto",
    };
    assert_eq!(decode_on, expected, "{advice}");
    if cfg!(not(feature = "cuda")) {
        let why = advice["gpu_not_measured"].as_str().unwrap();
        assert!(why.contains("`cuda` feature"), "{why}");
    }

    // The advice as `zarrpipe rechunk` options, which write the layout it names.
    match advice["keep_store_layout"].as_bool().unwrap() {
        true => assert!(advice["rechunk"].is_null(), "{advice}"),
        false => {
            let options: Vec<&str> = advice["rechunk"]
                .as_array()
                .unwrap()
                .iter()
                .map(|option| option.as_str().unwrap())
                .collect();
            let dir = tempfile::tempdir().unwrap();
            let written = dir.path().join("advised.zarr");
            let written = written.to_str().unwrap();
            let source = store_path("xr_v3");
            let mut rechunk = vec!["rechunk", &source, written, "--var", "z"];
            rechunk.extend(&options);
            succeed(zarrpipe(&rechunk));
            let again = succeed(zarrpipe(&["advise", written, "--var", "z", "--json"]));
            let again: serde_json::Value = serde_json::from_str(&again).unwrap();
            let (layout, advised) = (&again["source"], &candidates[best]);
            assert_eq!(layout["chunk"], advised["chunk"], "{options:?}");
            assert_eq!(layout["shard"], advised["shard"], "{options:?}");
        }
    }

    let text = succeed(zarrpipe(&["advise", &store_path("xr_v2"), "--var", "t2m"]));
    assert!(text.contains("sampled t2m[0:4, 0:11, 0:15]"), "{text}");
    assert!(
        text.contains("quarter tiles in field shards, zstd"),
        "{text}"
    );
    assert!(text.contains("fastest: "), "{text}");
    assert!(text.contains("decode it: --decode "), "{text}");
    let error = fail(zarrpipe(&["advise", &store_path("xr_v2"), "--var", "nope"]));
    assert!(error.contains("nope"), "{error}");
}
