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
    assert_eq!(json[0]["count"], array.shape.iter().product::<u64>());
    assert_eq!(json[0]["nan_count"], array.nan_count);
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
