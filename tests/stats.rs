//! Training statistics (`zarrpipe stats`) on the xarray gap stores, against numpy
//! (tests/fixtures/expected/gaps.json): per channel, values and tendencies, over a date range,
//! missing steps left out; the JSON records what it covers, and `--normalize` reads it per
//! channel.

mod common;

use std::sync::Arc;

use common::{fixtures, read_whole, store_path};
use zarrpipe::codec::CpuDecoder;
use zarrpipe::collate::Normalization;
use zarrpipe::pipeline::{index_range, Selection};
use zarrpipe::prelude::*;
use zarrpipe::stats::{channel_stats, StatsOptions};

fn expected() -> serde_json::Value {
    let path = fixtures().join("expected/gaps.json");
    serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap()
}

fn close(actual: Option<f64>, expected: &serde_json::Value, what: &str) {
    let (actual, expected) = (actual.unwrap(), expected.as_f64().unwrap());
    let tolerance = 1e-9 * expected.abs().max(1.0);
    assert!(
        (actual - expected).abs() <= tolerance,
        "{what}: {actual} against numpy's {expected}"
    );
}

#[tokio::test]
async fn channel_statistics_over_a_date_range_equal_numpy() {
    let expected = expected();
    let range = &expected["stats_range"];
    for store in ["gaps_v2", "gaps_v3"] {
        let dataset = zarrpipe::store::Dataset::open(&store_path(store))
            .await
            .unwrap();
        let selection = Selection {
            dim: "time".into(),
            from: range[0].as_str().unwrap().into(),
            to: range[1].as_str().unwrap().into(),
        };
        let steps = index_range(&dataset, &selection).await.unwrap();
        assert_eq!(
            steps.end - steps.start,
            expected["stats_steps"].as_u64().unwrap()
        );
        let options = StatsOptions {
            steps: Some(steps.clone()),
            concurrency: 3,
            ..StatsOptions::default()
        };
        let report = channel_stats(&dataset, Arc::new(CpuDecoder::new()), &options)
            .await
            .unwrap();
        let numpy = expected["stats"].as_array().unwrap();
        assert_eq!(report.channels.len(), numpy.len());
        for (ours, theirs) in report.channels.iter().zip(numpy) {
            let what = format!("{store} {}", ours.channel);
            // numpy's script names channels by index (`z[level=0]`), zarrpipe by the level's
            // value (`z[level=850]`): the same channels in the same order.
            let theirs_variable = theirs["channel"].as_str().unwrap().split('[').next();
            assert_eq!(Some(ours.variable.as_str()), theirs_variable, "{what}");
            assert_eq!(
                ours.channel.contains('['),
                theirs["channel"].as_str().unwrap().contains('['),
                "{what}"
            );
            assert_eq!(ours.count, theirs["count"].as_u64().unwrap(), "{what}");
            close(ours.mean, &theirs["mean"], &format!("{what} mean"));
            close(ours.std, &theirs["std"], &format!("{what} std"));
            close(ours.min, &theirs["min"], &format!("{what} min"));
            close(ours.max, &theirs["max"], &format!("{what} max"));
            let (tendency, numpy) = (ours.tendency.as_ref().unwrap(), &theirs["tendency"]);
            assert_eq!(tendency.count, numpy["count"].as_u64().unwrap(), "{what}");
            close(
                tendency.mean,
                &numpy["mean"],
                &format!("{what} tendency mean"),
            );
            close(tendency.std, &numpy["std"], &format!("{what} tendency std"));
            close(tendency.min, &numpy["min"], &format!("{what} tendency min"));
            close(tendency.max, &numpy["max"], &format!("{what} tendency max"));
        }
        let over = &report.computed_over;
        assert_eq!(over.steps, Some([steps.start, steps.end]));
        assert_eq!(over.variables, ["t2m", "z"]);
        assert!(over.url.ends_with(store));
        // Every missing date of the fixture lies inside this range.
        let missing: Vec<String> = expected["missing_dates"]
            .as_array()
            .unwrap()
            .iter()
            .map(|d| d.as_str().unwrap().to_string())
            .collect();
        assert_eq!(over.missing_left_out, missing);
    }
}

/// The report normalises each channel with its own statistics, NaN and all, as the CPU
/// computes `(value - mean) / std` in float32.
#[tokio::test]
async fn normalize_reads_the_report_per_channel() {
    let url = store_path("gaps_v3");
    let dataset = zarrpipe::store::Dataset::open(&url).await.unwrap();
    let report = channel_stats(
        &dataset,
        Arc::new(CpuDecoder::new()),
        &StatsOptions::default(),
    )
    .await
    .unwrap();
    let json = serde_json::to_string(&report).unwrap();
    let mut batches = Pipeline::builder(&url)
        .variables(["t2m", "z"])
        .normalize_with_stats(json.clone())
        .batch_size(2)
        .build()
        .await
        .unwrap();
    let normalization = Normalization::from_stats_json(batches.layout(), &json).unwrap();
    let levels: Vec<f32> = report
        .channels
        .iter()
        .map(|c| c.mean.unwrap() as f32)
        .collect();
    assert_eq!(normalization.mean, levels);
    assert_ne!(
        normalization.mean[1], normalization.mean[2],
        "z's levels have their own"
    );
    let z = read_whole(dataset.variable("z").unwrap()).await.unwrap();
    let z: Vec<f32> = z
        .chunks_exact(4)
        .map(|b| f32::from_ne_bytes(b.try_into().unwrap()))
        .collect();
    let batch = batches.try_next().await.unwrap().unwrap();
    let step = batch.samples[0].origin[0] as usize;
    for level in 0..2 {
        let (mean, std) = (normalization.mean[1 + level], normalization.std[1 + level]);
        let field = batch.inputs.slice(ndarray::s![0, 1 + level, .., ..]);
        let stored = &z[(step * 2 + level) * 20..][..20];
        for (got, value) in field.iter().zip(stored) {
            assert_eq!(got.to_bits(), ((value - mean) / std).to_bits());
        }
    }
    // An earlier version's list of per-variable entries still reads: one per variable.
    let old = serde_json::to_string(&report.variables).unwrap();
    let pooled = Normalization::from_stats_json(batches.layout(), &old).unwrap();
    assert_eq!(pooled.mean[1], pooled.mean[2]);
    // A report without the channel or its variable names it.
    let other = json
        .replace("\"z[level=500]\"", "\"q\"")
        .replace("\"variable\":\"z\"", "\"variable\":\"q\"");
    let error = Normalization::from_stats_json(batches.layout(), &other).unwrap_err();
    assert!(error.to_string().contains("z[level=500]"), "{error}");
}

#[test]
fn the_cli_writes_the_report_with_its_range() {
    let output = std::process::Command::new(env!("CARGO_BIN_EXE_zarrpipe"))
        .args([
            "stats",
            &store_path("gaps_v2"),
            "--start",
            "2020-01-02",
            "--json",
        ])
        .output()
        .unwrap();
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    let json: serde_json::Value = serde_json::from_slice(&output.stdout).unwrap();
    assert_eq!(json["format"], "zarrpipe-stats/3");
    let over = &json["computed_over"];
    assert_eq!(over["start"], "2020-01-02");
    assert_eq!(over["end"], serde_json::Value::Null);
    // 2020-01-02T00:00 is stored step 4 (the grid's step 5, left out, follows it).
    assert_eq!(over["steps"], serde_json::json!([4, 13]));
    assert!(over["created"].as_str().unwrap().ends_with('Z'));
    assert_eq!(json["channels"][2]["channel"], "z[level=500]");
    // A range outside the data says what the data covers.
    let output = std::process::Command::new(env!("CARGO_BIN_EXE_zarrpipe"))
        .args(["stats", &store_path("gaps_v2"), "--start", "2021-01-01"])
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        !output.status.success() && stderr.contains("2020-01-01T00:00"),
        "{stderr}"
    );
}
