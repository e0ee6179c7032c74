//! The `zarrpipe` program as a user runs it: each command on real stores, JSON output that
//! parses, and failures as one line on stderr with a non-zero status, never a panic.

mod common;

use std::process::{Command, Output};

use common::{manifest, store_path};

fn zarrpipe(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_zarrpipe"))
        .args(args)
        .output()
        .expect("run zarrpipe")
}

fn stdout(output: &Output) -> String {
    assert!(
        output.status.success(),
        "failed: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    String::from_utf8(output.stdout.clone()).unwrap()
}

#[test]
fn every_command_has_help() {
    for command in [
        vec!["--help"],
        vec!["run", "--help"],
        vec!["info", "--help"],
        vec!["stats", "--help"],
        vec!["generate", "--help"],
    ] {
        let text = stdout(&zarrpipe(&command));
        assert!(text.contains("Usage"), "{command:?}: {text}");
    }
}

#[test]
fn info_describes_an_xarray_store() {
    let text = stdout(&zarrpipe(&["info", &store_path("xr_v2")]));
    assert!(text.contains("Zarr v2, consolidated"), "{text}");
    assert!(
        text.contains("t2m") && text.contains("(time, latitude, longitude)"),
        "{text}"
    );
    let json: serde_json::Value = serde_json::from_str(&stdout(&zarrpipe(&[
        "info",
        &store_path("xr_v3"),
        "--json",
    ])))
    .unwrap();
    let variables = json["variables"].as_array().unwrap();
    let z = variables.iter().find(|v| v["name"] == "z").unwrap();
    assert_eq!(
        z["dims"],
        serde_json::json!(["time", "level", "latitude", "longitude"])
    );
    assert_eq!(z["dtype"], "float32");
    assert!(z["stored_bytes"].as_u64().unwrap() > 0);
}

#[test]
fn stats_json_counts_elements_and_nans() {
    let store = manifest()
        .stores
        .into_iter()
        .find(|s| s.store == "zp3_v3")
        .unwrap();
    let array = store.arrays.iter().find(|a| a.path == "f32_zstd").unwrap();
    let output = zarrpipe(&[
        "stats",
        &store_path("zp3_v3"),
        "--var",
        "f32_zstd",
        "--json",
    ]);
    let json: serde_json::Value = serde_json::from_str(&stdout(&output)).unwrap();
    let variable = &json["variables"][0];
    assert_eq!(variable["count"], array.shape.iter().product::<u64>());
    assert_eq!(variable["nan_count"], array.nan_count);
    // Without a time dimension, one channel: the whole array.
    assert_eq!(
        json["channels"][0]["count"],
        variable["count"].as_u64().unwrap() - array.nan_count
    );
    assert_eq!(json["computed_over"]["dim"], serde_json::Value::Null);
}

#[test]
fn generate_then_run_streams_an_epoch() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("w1.zarr");
    let path = path.to_str().unwrap();
    let written = stdout(&zarrpipe(&[
        "generate",
        path,
        "--time",
        "2",
        "--levels",
        "2",
        "--lat",
        "16",
        "--lon",
        "32",
        "--codec",
        "blosc-lz4",
    ]));
    assert!(written.contains("7 variables"), "{written}");
    let window = [
        "--input-dims",
        "latitude=8,longitude=16",
        "--input-overlap",
        "longitude=8",
        "--batch-size",
        "3",
    ];
    let run = zarrpipe(&[&["run", path, "--device", "cpu", "--json"][..], &window].concat());
    let summary: serde_json::Value = serde_json::from_str(&stdout(&run)).unwrap();
    // 2 times x 2 latitude windows x 3 longitude windows.
    assert_eq!(summary["samples"], 12);
    assert_eq!(summary["batches"], 4);
    assert_eq!(summary["delivered_bytes"], 12 * (4 + 3 * 2) * 8 * 16 * 4);
    // `run` times its one epoch; `bench` times passes after a warm-up, which it reports too.
    assert_eq!(summary["warm_up_s"], serde_json::Value::Null);
    let bench = zarrpipe(&[&["bench", path, "--device", "cpu", "--json"][..], &window].concat());
    let bench: serde_json::Value = serde_json::from_str(&stdout(&bench)).unwrap();
    assert_eq!(bench["samples"], 12);
    assert!(bench["warm_up_s"].as_f64().unwrap() > 0.0, "{bench}");
    // Epochs from one stream: the three timed epochs are counted together.
    let bench_with = |extra: &[&str]| -> serde_json::Value {
        let base = ["bench", path, "--device", "cpu", "--json"];
        let run = zarrpipe(&[&base[..], &window, extra, &["--passes", "3"]].concat());
        serde_json::from_str(&stdout(&run)).unwrap()
    };
    let (apart, in_a_row) = (bench_with(&[]), bench_with(&["--epochs-in-a-row"]));
    assert_eq!(apart["epochs_in_a_row"], false);
    assert_eq!(in_a_row["epochs_in_a_row"], true);
    assert_eq!(
        (&apart["epochs"], &in_a_row["epochs"]),
        (&1.into(), &3.into())
    );
    assert_eq!(
        (&in_a_row["samples"], &in_a_row["batches"]),
        (&36.into(), &12.into())
    );
    let bytes = |summary: &serde_json::Value| summary["delivered_bytes"].as_u64().unwrap();
    assert_eq!(bytes(&in_a_row), 3 * bytes(&apart));
    let plan = zarrpipe(&[&["plan", path, "--json"][..], &window].concat());
    let plan: serde_json::Value = serde_json::from_str(&stdout(&plan)).unwrap();
    assert_eq!(plan["samples"], 12);
    assert_eq!(plan["batches"], 4);
    assert_eq!(plan["sample_shape"], serde_json::json!([10, 8, 16]));
    // Chunks are whole fields (16 x 32); each batch holds the 3 windows of one time step and
    // latitude row, so it reads that step's 10 fields: 40 reads of 512 values for 12 x 10
    // windows of 128 values.
    assert_eq!(plan["chunk_reads"], 40);
    // A full shuffle scatters windows of one time step over batches: more reads.
    let shuffled = zarrpipe(
        &[
            &["plan", path, "--json", "--shuffle", "full", "--seed", "1"][..],
            &window,
        ]
        .concat(),
    );
    let shuffled: serde_json::Value = serde_json::from_str(&stdout(&shuffled)).unwrap();
    assert_eq!(shuffled["samples"], 12);
    assert!(shuffled["chunk_reads"].as_u64().unwrap() >= 40);
    assert!((plan["read_amplification"].as_f64().unwrap() - 4.0 / 3.0).abs() < 1e-12);
    // xbatcher's batch_dims: a batch per window position, holding both time steps...
    let by_blocks = [&window[..4], &["--batch-dims", "time=2"][..]].concat();
    let run = zarrpipe(&[&["run", path, "--device", "cpu", "--json"][..], &by_blocks].concat());
    let summary: serde_json::Value = serde_json::from_str(&stdout(&run)).unwrap();
    assert_eq!(
        (&summary["samples"], &summary["batches"]),
        (&12.into(), &6.into())
    );
    let plan = zarrpipe(&[&["plan", path, "--json"][..], &by_blocks].concat());
    let plan: serde_json::Value = serde_json::from_str(&stdout(&plan)).unwrap();
    assert_eq!(
        (&plan["batches"], &plan["batch_size"]),
        (&6.into(), &2.into())
    );
    // ... and with concat_input_dims every window of the block: one batch of 12.
    let concat = [&by_blocks[..], &["--concat-input-dims"][..]].concat();
    let plan = zarrpipe(&[&["plan", path, "--json"][..], &concat].concat());
    let plan: serde_json::Value = serde_json::from_str(&stdout(&plan)).unwrap();
    assert_eq!(
        (&plan["batches"], &plan["batch_size"]),
        (&1.into(), &12.into())
    );
}

#[test]
fn failures_are_one_line_and_non_zero() {
    let dir = tempfile::tempdir().unwrap();
    let not_empty = dir.path().to_str().unwrap();
    std::fs::write(dir.path().join("file"), b"x").unwrap();
    let cases: Vec<Vec<&str>> = vec![
        vec!["info", "/no/such/store.zarr"],
        vec!["stats", "/no/such/store.zarr"],
        vec!["run", "/no/such/store.zarr"],
        vec!["info", "ftp://example/x"],
        vec!["generate", not_empty, "--time", "1"],
    ];
    for case in cases {
        let output = zarrpipe(&case);
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert!(!output.status.success(), "{case:?} should fail");
        assert_eq!(stderr.trim().lines().count(), 1, "{case:?}: {stderr}");
        assert!(
            stderr.starts_with("error: ") && !stderr.contains("panicked"),
            "{case:?}: {stderr}"
        );
    }
    let missing_variable = zarrpipe(&["stats", &store_path("xr_v2"), "--var", "nope"]);
    let stderr = String::from_utf8_lossy(&missing_variable.stderr);
    assert!(
        stderr.contains("no variable `nope`") && stderr.contains("t2m"),
        "{stderr}"
    );
}

// --- Hostile and broken inputs -------------------------------------------------------------

fn stderr_of(output: &Output) -> String {
    String::from_utf8_lossy(&output.stderr).into_owned()
}

/// Fails, with `error: ...` as its last line on stderr (a caught panic's message may come
/// before it), never a panic's exit status.
fn fails(args: &[&str]) -> String {
    let output = zarrpipe(args);
    let stderr = stderr_of(&output);
    assert_eq!(output.status.code(), Some(1), "{args:?}: {stderr}");
    let last = stderr.trim().lines().last().unwrap_or_default().to_string();
    assert!(last.starts_with("error: "), "{args:?}: {stderr}");
    last
}

/// A v3 store holding a copy of fixture array `f32_zstd` (30 x 45, chunks 8 x 16) under each
/// name, each edited by its function.
/// An edit of an array's metadata.
type Edit<'a> = &'a dyn Fn(&mut serde_json::Value);

fn store_of(arrays: &[(&str, Edit)]) -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(
        dir.path().join("zarr.json"),
        r#"{"zarr_format": 3, "node_type": "group", "attributes": {}}"#,
    )
    .unwrap();
    for (name, edit) in arrays {
        let array = dir.path().join(name);
        common::copy_dir(&common::fixtures().join("stores/zp3_v3/f32_zstd"), &array);
        let path = array.join("zarr.json");
        let mut metadata: serde_json::Value =
            serde_json::from_slice(&std::fs::read(&path).unwrap()).unwrap();
        edit(&mut metadata);
        std::fs::write(path, metadata.to_string()).unwrap();
    }
    dir
}

fn unchanged(_: &mut serde_json::Value) {}

#[test]
fn an_unreadable_variable_fails_the_default_selection_and_names_the_way_out() {
    let unknown_codec = |m: &mut serde_json::Value| {
        m["codecs"][1] = serde_json::json!({"name": "lzma_from_the_future", "configuration": {}})
    };
    let dir = store_of(&[("good", &unchanged), ("broken", &unknown_codec)]);
    let path = dir.path().to_str().unwrap();
    for command in ["run", "plan", "stats"] {
        let args: Vec<&str> = match command {
            "run" => vec!["run", path, "--device", "cpu"],
            other => vec![other, path],
        };
        let line = fails(&args);
        assert!(
            line.contains("`broken`")
                && line.contains("lzma_from_the_future")
                && line.contains("--var good"),
            "{command}: {line}"
        );
    }
    stdout(&zarrpipe(&[
        "run", path, "--device", "cpu", "--var", "good",
    ]));
    stdout(&zarrpipe(&["stats", path, "--var", "good"]));
}

/// Shapes that claim more than any store holds: 2^62 along one dimension.
#[test]
fn huge_shapes_give_results_or_clear_errors_never_a_panic() {
    let long_time = |m: &mut serde_json::Value| {
        m["shape"] = serde_json::json!([1u64 << 62, 45]);
        m["dimension_names"] = serde_json::json!(["time", "x"]);
    };
    let dir = store_of(&[("huge", &long_time)]);
    let path = dir.path().to_str().unwrap();
    let info = stdout(&zarrpipe(&["info", path]));
    assert!(
        info.contains("more than 2^64 bytes") && !info.contains("decoded 0.00 MB"),
        "{info}"
    );
    let plan: serde_json::Value =
        serde_json::from_str(&stdout(&zarrpipe(&["plan", path, "--json"]))).unwrap();
    assert_eq!(plan["samples"], 1u64 << 62);
    assert_eq!(plan["estimated"], true);
    let line = fails(&["plan", path, "--shuffle", "full"]);
    assert!(line.contains("--shuffle none"), "{line}");
    let line = fails(&["run", path, "--device", "cpu", "--shuffle", "blocks"]);
    assert!(line.contains("--shuffle none"), "{line}");
    // 2^62 along a dimension taken whole: a sample larger than memory.
    let wide = |m: &mut serde_json::Value| m["shape"] = serde_json::json!([30, 1u64 << 62]);
    let dir = store_of(&[("wide", &wide)]);
    let path = dir.path().to_str().unwrap();
    let line = fails(&["run", path, "--device", "cpu"]);
    assert!(line.contains("one sample would hold"), "{line}");
    fails(&["plan", path]);
    // Chunks of one element under a whole-field window: 2^21 chunk reads per sample.
    let tiny_chunks = |m: &mut serde_json::Value| {
        m["shape"] = serde_json::json!([2048, 1024]);
        m["chunk_grid"]["configuration"]["chunk_shape"] = serde_json::json!([1, 1]);
    };
    let dir = store_of(&[("tiny", &tiny_chunks)]);
    let line = fails(&["plan", dir.path().to_str().unwrap()]);
    assert!(
        line.contains("chunks") && line.contains("rechunk"),
        "{line}"
    );
}

/// Peak resident memory of a running process, in bytes (Linux).
fn peak_rss(pid: u32) -> Option<u64> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    let line = status.lines().find(|line| line.starts_with("VmHWM:"))?;
    let kib: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
    Some(kib * 1024)
}

/// 2^40 time steps (missing chunks, read as NaN): `run` and `stats` stream with memory that
/// does not grow with the shape (the epoch's order was a vector of 2^40 sample numbers).
#[test]
fn a_trillion_time_steps_stream_in_bounded_memory() {
    if !std::path::Path::new("/proc/self/status").exists() {
        eprintln!("skipped: no /proc to read memory from");
        return;
    }
    let long_time = |m: &mut serde_json::Value| {
        m["shape"] = serde_json::json!([1u64 << 40, 45]);
        m["dimension_names"] = serde_json::json!(["time", "x"]);
    };
    let dir = store_of(&[("long", &long_time)]);
    let path = dir.path().to_str().unwrap();
    let plan: serde_json::Value =
        serde_json::from_str(&stdout(&zarrpipe(&["plan", path, "--json"]))).unwrap();
    assert_eq!(plan["samples"], 1u64 << 40);
    for args in [
        vec!["run", path, "--device", "cpu", "--json"],
        vec!["stats", path],
    ] {
        let mut child = Command::new(env!("CARGO_BIN_EXE_zarrpipe"))
            .args(&args)
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .unwrap();
        std::thread::sleep(std::time::Duration::from_secs(3));
        let peak = peak_rss(child.id());
        let exited = child.try_wait().unwrap();
        let _ = child.kill();
        let output = child.wait_with_output().unwrap();
        assert!(
            exited.is_none(),
            "{args:?} stopped early ({exited:?}): {}",
            stderr_of(&output)
        );
        let peak = peak.expect("peak memory of a running process");
        assert!(peak < 512 << 20, "{args:?}: {} MiB resident", peak >> 20);
    }
}

/// A panic in a decoding task (zarrs' sharding codec on a shard index pointing near 2^64)
/// is an error naming the chunk, not an abort (exit 134).
#[test]
fn a_panic_while_decoding_is_an_error_naming_the_chunk() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(
        dir.path().join("zarr.json"),
        r#"{"zarr_format": 3, "node_type": "group", "attributes": {}}"#,
    )
    .unwrap();
    let array = dir.path().join("f32_sharded");
    common::copy_dir(
        &common::fixtures().join("stores/zp3_v3/f32_sharded"),
        &array,
    );
    // A big-endian index, which zarrpipe's frame checks leave to zarrs.
    let metadata_path = array.join("zarr.json");
    let mut metadata: serde_json::Value =
        serde_json::from_slice(&std::fs::read(&metadata_path).unwrap()).unwrap();
    metadata["codecs"][0]["configuration"]["index_codecs"][0]["configuration"]["endian"] =
        serde_json::json!("big");
    std::fs::write(&metadata_path, metadata.to_string()).unwrap();
    let shard = array.join("c/0/0");
    let mut bytes = std::fs::read(&shard).unwrap();
    let start = bytes.len() - 8 * 16 - 4;
    let mut words: Vec<u64> = bytes[start..start + 8 * 16]
        .chunks_exact(8)
        .map(|word| u64::from_le_bytes(word.try_into().unwrap()))
        .collect();
    words[0] = u64::MAX - 5;
    for (slot, word) in bytes[start..start + 8 * 16].chunks_exact_mut(8).zip(words) {
        slot.copy_from_slice(&word.to_be_bytes());
    }
    let checksum = crc32c::crc32c(&bytes[start..start + 8 * 16]);
    let end = bytes.len();
    bytes[end - 4..].copy_from_slice(&checksum.to_le_bytes());
    std::fs::write(&shard, bytes).unwrap();
    let line = fails(&["stats", dir.path().to_str().unwrap()]);
    assert!(
        line.contains("f32_sharded/c/0/0") && line.contains("panicked"),
        "{line}"
    );
}

#[test]
fn errors_point_the_right_way() {
    let xr = store_path("xr_v2");
    let line = fails(&["run", &xr, "--device", "cpu", "--input-dims", "latitude=0"]);
    assert!(
        line.contains("latitude=0") && !line.contains("overlap"),
        "{line}"
    );
    let line = fails(&[
        "run", &xr, "--device", "cpu", "--var", "t2m", "--var", "t2m",
    ]);
    assert!(line.contains("`t2m` is selected twice"), "{line}");
    let line = fails(&["plan", &xr, "--var", "t2m", "--var", "t2m"]);
    assert!(line.contains("`t2m` is selected twice"), "{line}");
    // A truncated statistics file.
    let dir = tempfile::tempdir().unwrap();
    let stats = dir.path().join("stats.json");
    let full = stdout(&zarrpipe(&["stats", &xr, "--var", "t2m", "--json"]));
    std::fs::write(&stats, &full[..full.len() / 2]).unwrap();
    let line = fails(&[
        "run",
        &xr,
        "--device",
        "cpu",
        "--var",
        "t2m",
        "--normalize",
        stats.to_str().unwrap(),
    ]);
    assert!(
        line.contains("stats.json")
            && line.contains("truncated")
            && !line.contains("expected a sequence"),
        "{line}"
    );
    // A file given as the store.
    let line = fails(&["info", stats.to_str().unwrap()]);
    assert!(line.contains("is a file, not a directory"), "{line}");
    // Dates outside the data are shown as dates, with the data's range.
    let line = fails(&[
        "run",
        &xr,
        "--device",
        "cpu",
        "--select",
        "time=2030-01-01..2030-02-01",
    ]);
    assert!(
        line.contains("2030-01-01T00:00") && line.contains("the data covers 2020-01-01T00:00"),
        "{line}"
    );
    // An empty epoch says why (6 time steps, 7 needed for a history of 5 and a lead of 2).
    let line = fails(&[
        "run",
        &xr,
        "--device",
        "cpu",
        "--var",
        "t2m",
        "--history",
        "5",
        "--leads",
        "2",
    ]);
    assert!(
        line.contains("no samples") && line.contains("`time`"),
        "{line}"
    );
    let plan = zarrpipe(&[
        "plan",
        &xr,
        "--var",
        "t2m",
        "--history",
        "5",
        "--leads",
        "2",
    ]);
    assert!(
        stderr_of(&plan).contains("no samples"),
        "{}",
        stderr_of(&plan)
    );
}

/// S3 without credentials names the endpoint and the missing credentials, each cause once.
#[test]
fn s3_without_credentials_names_the_endpoint() {
    let mut command = Command::new(env!("CARGO_BIN_EXE_zarrpipe"));
    for (key, _) in std::env::vars() {
        if key.starts_with("AWS_") {
            command.env_remove(key);
        }
    }
    let output = command
        .args([
            "info",
            "s3://bucket/store.zarr",
            "--store-option",
            "endpoint=http://127.0.0.1:9",
            "--store-option",
            "region=us-east-1",
            "--timeout",
            "1",
            "--retries",
            "0",
        ])
        .output()
        .unwrap();
    let stderr = stderr_of(&output);
    assert!(!output.status.success());
    assert!(
        stderr.contains("http://127.0.0.1:9") && stderr.contains("anonymous=true"),
        "{stderr}"
    );
    // No sentence twice.
    let parts: Vec<&str> = stderr.trim().split(": ").collect();
    let unique: std::collections::HashSet<&&str> = parts.iter().collect();
    assert_eq!(parts.len(), unique.len(), "{stderr}");
}

#[test]
fn static_and_derived_channels_from_the_command_line() {
    let url = store_path("xr_static");
    let args = [
        "--var",
        "t2m",
        "--var",
        "lsm",
        "--var",
        "cos_zenith",
        "--input-dims",
        "latitude=4,longitude=5",
        "--batch-size",
        "3",
    ];
    let text = stdout(&zarrpipe(&[&["plan", &url], &args[..]].concat()));
    assert!(
        text.contains("sample shape [3, 4, 5], 3 channels"),
        "{text}"
    );
    assert!(
        text.contains("static fields read once, whole, not per batch: lsm"),
        "{text}"
    );
    let run = |extra: &[&str]| {
        let output = zarrpipe(
            &[
                &["run", &url, "--json", "--device", "cpu"],
                &args[..],
                extra,
            ]
            .concat(),
        );
        serde_json::from_str::<serde_json::Value>(&stdout(&output)).unwrap()
    };
    let json = run(&[]);
    // One window of each dimension (strides of the window sizes) at each of 6 times.
    assert_eq!(json["samples"], 6);
    let text = stdout(&zarrpipe(
        &[&["run", &url, "--device", "cpu"], &args[..]].concat(),
    ));
    assert!(text.contains("3 channels (t2m, lsm, cos_zenith)"), "{text}");
    let error = fails(&["run", &url, "--var", "t2m", "--var", "cos_latitude"]);
    assert!(
        error.contains("`cos_latitude` is neither a variable") && error.contains("sin_local_time"),
        "{error}"
    );
}

// --- Real archives: what users bring, and what went wrong with it ---------------------------

fn archive(name: &str) -> std::path::PathBuf {
    common::fixtures().join("real_archives").join(name)
}

/// A copy of a real-archive store to break.
fn archive_copy(name: &str) -> (tempfile::TempDir, std::path::PathBuf) {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join(name);
    common::copy_dir(&archive(name), &path);
    (dir, path)
}

/// Fails with a message on stderr that contains `needle`, and never panics.
fn fails_saying(output: &Output, needle: &str) {
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(!output.status.success(), "succeeded: {stderr}");
    assert!(!stderr.contains("panicked"), "panicked: {stderr}");
    assert!(stderr.contains(needle), "{needle:?} not in: {stderr}");
}

#[test]
fn stats_and_info_give_the_values_xarray_decodes() {
    let expected: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(archive("expected.json")).unwrap()).unwrap();
    for store in [
        "era5_int16_packed_v2.zarr",
        "uint8_packed_v3.zarr",
        "float_fill_9999_v3.zarr",
    ] {
        let path = archive(store).to_string_lossy().into_owned();
        let json: serde_json::Value =
            serde_json::from_str(&stdout(&zarrpipe(&["stats", &path, "--json"]))).unwrap();
        assert_eq!(json["computed_over"]["values"], "decoded");
        for entry in json["variables"].as_array().unwrap() {
            let name = entry["variable"].as_str().unwrap();
            let want = &expected["stores"][store]["data_vars"][name]["decoded"];
            assert_eq!(entry["nan_count"], want["nan_count"], "{store} {name}");
            let (mean, want_mean) = (
                entry["mean"].as_f64().unwrap(),
                want["nanmean"].as_f64().unwrap(),
            );
            assert!(
                (mean - want_mean).abs() < 1e-6 * want_mean.abs().max(1.0),
                "{store} {name}: {mean} vs {want_mean}"
            );
        }
        let raw: serde_json::Value = serde_json::from_str(&stdout(&zarrpipe(&[
            "stats",
            &path,
            "--json",
            "--raw-values",
        ])))
        .unwrap();
        assert_eq!(raw["computed_over"]["values"], "stored");
    }
    let text = stdout(&zarrpipe(&[
        "info",
        &archive("era5_int16_packed_v3.zarr").to_string_lossy(),
    ]));
    assert!(text.contains("encoding t2m: missing -32767"), "{text}");
    assert!(
        text.contains("scale_factor") && text.contains("(decoded)"),
        "{text}"
    );
    let text = stdout(&zarrpipe(&[
        "info",
        &archive("valid_time_v3.zarr").to_string_lossy(),
    ]));
    assert!(text.contains("iterated as time: valid_time"), "{text}");
}

#[test]
fn statistics_of_stored_values_are_refused_for_packed_variables() {
    let path = archive("era5_int16_packed_v2.zarr")
        .to_string_lossy()
        .into_owned();
    let dir = tempfile::tempdir().unwrap();
    let stats = dir.path().join("stats.json");
    let raw = stdout(&zarrpipe(&["stats", &path, "--json", "--raw-values"]));
    std::fs::write(&stats, raw).unwrap();
    let output = zarrpipe(&["run", &path, "--normalize", stats.to_str().unwrap()]);
    fails_saying(&output, "compute them again");
    let old = stdout(&zarrpipe(&["stats", &path, "--json", "--raw-values"]))
        .replace("zarrpipe-stats/3", "zarrpipe-stats/2");
    std::fs::write(&stats, old).unwrap();
    let output = zarrpipe(&["run", &path, "--normalize", stats.to_str().unwrap()]);
    fails_saying(&output, "before zarrpipe decoded CF packing");
}

#[test]
fn stats_dim_is_iterated_and_checked() {
    let path = store_path("xr_v3");
    let json: serde_json::Value = serde_json::from_str(&stdout(&zarrpipe(&[
        "stats", &path, "--var", "z", "--dim", "level", "--json",
    ])))
    .unwrap();
    // One channel per non-iterated dimension combination: `level` is iterated, not stacked.
    let channels = json["channels"].as_array().unwrap();
    assert!(
        channels
            .iter()
            .all(|c| !c["channel"].as_str().unwrap().contains("level=")),
        "{channels:?}"
    );
    fails_saying(
        &zarrpipe(&["stats", &path, "--dim", "height"]),
        "no variable has dimension `height`",
    );
}

#[test]
fn flags_out_of_range_are_errors_not_panics() {
    let sample = store_path("xr_v3");
    let output = zarrpipe(&["run", &sample, "--timeout", "1e30", "--var", "t2m"]);
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    fails_saying(
        &zarrpipe(&["run", &sample, "--consumer-rate", "0"]),
        "--consumer-rate",
    );
    fails_saying(&zarrpipe(&["run", &sample, "--timeout=-1"]), "--timeout");
    let dir = tempfile::tempdir().unwrap();
    let target = dir.path().join("big.zarr");
    let target = target.to_str().unwrap();
    fails_saying(
        &zarrpipe(&["generate", target, "--time", "1000000000000"]),
        "--time",
    );
    fails_saying(
        &zarrpipe(&["generate", target, "--lat", "0"]),
        "--lat must be positive",
    );
}

#[test]
fn a_closed_pipe_ends_the_program_quietly() {
    use std::io::{BufRead, BufReader};
    let mut child = Command::new(env!("CARGO_BIN_EXE_zarrpipe"))
        .args(["info", &store_path("xr_v3"), "--json"])
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let mut first = String::new();
    BufReader::new(child.stdout.take().unwrap())
        .read_line(&mut first)
        .unwrap();
    let output = child.wait_with_output().unwrap();
    assert!(!String::from_utf8_lossy(&output.stderr).contains("panicked"));
}

#[test]
fn root_documents_must_be_what_zarr_python_accepts() {
    for (document, needle) in [
        ("[1, 2]", "expected a JSON object"),
        (
            r#"{"zarr_format": 4, "node_type": "group"}"#,
            "expected `zarr_format: 3`, found 4",
        ),
    ] {
        let (_dir, path) = archive_copy("valid_time_v3.zarr");
        std::fs::write(path.join("zarr.json"), document).unwrap();
        fails_saying(&zarrpipe(&["info", path.to_str().unwrap()]), needle);
    }
}

#[test]
fn a_variable_longer_than_its_time_coordinate_is_refused() {
    let (_dir, path) = archive_copy("valid_time_v3.zarr");
    let root = path.join("zarr.json");
    let mut metadata: serde_json::Value =
        serde_json::from_slice(&std::fs::read(&root).unwrap()).unwrap();
    let t2m = &mut metadata["consolidated_metadata"]["metadata"]["t2m"];
    t2m["shape"][0] = serde_json::json!(12);
    std::fs::write(&root, serde_json::to_vec(&metadata).unwrap()).unwrap();
    let output = zarrpipe(&["run", path.to_str().unwrap(), "--var", "t2m"]);
    fails_saying(&output, "conflicting sizes for dimension `valid_time`");
}

#[cfg(unix)]
#[test]
fn a_chunk_that_is_a_fifo_is_an_error_not_a_hang() {
    let (_dir, path) = archive_copy("float_fill_9999_v3.zarr");
    let chunk = path.join("sst/c/0/0/0");
    std::fs::remove_file(&chunk).unwrap();
    let made = Command::new("mkfifo").arg(&chunk).status().unwrap();
    assert!(made.success());
    let output = zarrpipe(&[
        "run",
        path.to_str().unwrap(),
        "--var",
        "sst",
        "--missing",
        "ignore",
    ]);
    fails_saying(&output, "is not a regular file");
}

#[test]
fn a_shape_of_2_62_is_refused_not_read_for_ever() {
    let (_dir, path) = archive_copy("valid_time_v3.zarr");
    let root = path.join("zarr.json");
    let mut metadata: serde_json::Value =
        serde_json::from_slice(&std::fs::read(&root).unwrap()).unwrap();
    for name in ["t2m", "valid_time"] {
        metadata["consolidated_metadata"]["metadata"][name]["shape"][0] =
            serde_json::json!(1u64 << 62);
    }
    std::fs::write(&root, serde_json::to_vec(&metadata).unwrap()).unwrap();
    let path = path.to_str().unwrap();
    fails_saying(&zarrpipe(&["stats", path]), "overflows");
    fails_saying(&zarrpipe(&["run", path]), "overflows");
}

#[test]
fn run_delivers_the_sum_xarray_decodes() {
    let expected: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(archive("expected.json")).unwrap()).unwrap();
    for store in [
        "era5_int16_packed_v3.zarr",
        "unsigned_v2.zarr",
        "valid_time_v3.zarr",
    ] {
        let data_vars = expected["stores"][store]["data_vars"].as_object().unwrap();
        let (name, want) = data_vars.iter().next().unwrap();
        let values = want["decoded"]["values"].as_array().unwrap();
        let sum: f64 = values
            .iter()
            .filter_map(|v| v.as_f64())
            .map(|v| v as f32 as f64)
            .sum();
        let path = archive(store).to_string_lossy().into_owned();
        let json: serde_json::Value = serde_json::from_str(
            stdout(&zarrpipe(&[
                "run",
                &path,
                "--var",
                name,
                "--checksum",
                "--json",
                "--missing",
                "ignore",
            ]))
            .lines()
            .last()
            .unwrap(),
        )
        .unwrap();
        let checksum = json["checksum"].as_f64().unwrap();
        assert!(
            (checksum - sum).abs() <= 1e-9 * sum.abs(),
            "{store}: {checksum} vs xarray's {sum}"
        );
        assert_eq!(json["samples"], 6, "{store}: one sample per time step");
    }
}

#[test]
fn run_says_what_missing_steps_left_out() {
    let text = stdout(&zarrpipe(&["run", &store_path("gaps_v2"), "--var", "t2m"]));
    assert!(
        text.contains("missing steps along `time`") && text.contains("--missing skip"),
        "{text}"
    );
    let json = stdout(&zarrpipe(&[
        "run",
        &store_path("xr_v3"),
        "--var",
        "t2m",
        "--json",
    ]));
    assert!(json.contains("\"io_covers\""), "{json}");
}

#[test]
fn bound_reads_and_decodes_every_chunk_file_with_the_codec_alone() {
    let dir = tempfile::tempdir().unwrap();
    for codec in ["zstd", "blosc-lz4", "gzip", "none"] {
        let path = dir.path().join(format!("{codec}.zarr"));
        let path = path.to_str().unwrap();
        stdout(&zarrpipe(&[
            "generate", path, "--time", "2", "--levels", "2", "--lat", "16", "--lon", "32",
            "--codec", codec,
        ]));
        let json: serde_json::Value = serde_json::from_str(&stdout(&zarrpipe(&[
            "bound",
            path,
            "--threads",
            "2",
            "--passes",
            "1",
            "--decode-only",
            "--json",
        ])))
        .unwrap();
        // 4 surface fields and 3 level variables of 2 levels, 2 steps, 16 x 32 float32.
        assert_eq!(json["chunks"], 2 * (4 + 3 * 2), "{codec}");
        assert_eq!(
            json["decoded_bytes"],
            2 * (4 + 3 * 2) * 16 * 32 * 4,
            "{codec}"
        );
        assert!(json["decoded_gb_per_s"].as_f64().unwrap() > 0.0, "{codec}");
        assert!(
            json["decode_only_gb_per_s"].as_f64().unwrap() > 0.0,
            "{codec}"
        );
        assert_eq!(json["into_place"], false);
        // Into places of one large buffer: the same files and bytes, each checked to decode
        // to its size.
        let into_place: serde_json::Value = serde_json::from_str(&stdout(&zarrpipe(&[
            "bound",
            path,
            "--threads",
            "3",
            "--passes",
            "2",
            "--decode-only",
            "--into-place",
            "--json",
        ])))
        .unwrap();
        assert_eq!(into_place["into_place"], true);
        assert_eq!(into_place["chunks"], json["chunks"], "{codec}");
        assert_eq!(
            into_place["decoded_bytes"], json["decoded_bytes"],
            "{codec}"
        );
        assert!(
            into_place["decoded_gb_per_s"].as_f64().unwrap() > 0.0,
            "{codec}"
        );
        // Every pass together is never faster than the best pass.
        let (best, together) = (
            into_place["decoded_gb_per_s"].as_f64().unwrap(),
            into_place["passes_gb_per_s"].as_f64().unwrap(),
        );
        assert!(
            together > 0.0 && together <= best * (1.0 + 1e-9),
            "{codec}: {together} {best}"
        );
    }
    let sharded = dir.path().join("sharded.zarr");
    let sharded = sharded.to_str().unwrap();
    stdout(&zarrpipe(&[
        "generate", sharded, "--time", "2", "--levels", "1", "--lat", "16", "--lon", "32",
        "--shard", "2",
    ]));
    fails_saying(&zarrpipe(&["bound", sharded]), "is sharded");
}

#[test]
fn decode_auto_without_a_gpu_decodes_on_the_cpu_and_says_why() {
    if std::path::Path::new("/dev/nvidia0").exists() && cfg!(feature = "cuda") {
        println!("skipped: this host has a GPU for `auto` to use");
        return;
    }
    let text = stdout(&zarrpipe(&[
        "run",
        &store_path("xr_v3"),
        "--var",
        "t2m",
        "--decode",
        "auto",
    ]));
    assert!(text.contains("decode on the CPU (auto: "), "{text}");
}

#[test]
fn a_gpu_chunks_share_needs_split_decoding() {
    let store = store_path("xr_v3");
    let error = fails(&["run", &store, "--device", "cpu", "--gpu-chunks", "0.3"]);
    assert!(error.contains("--decode split"), "{error}");
}
