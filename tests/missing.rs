//! Missing time steps on the gap stores written by xarray (`gaps_v2`, `gaps_v3`): what is
//! found, the samples `skip` leaves out (with ranks, shuffling and resume exact), what `fill`
//! delivers, and `error`'s message, against tests/fixtures/expected/gaps.json (numpy and
//! pandas).

mod common;

use std::collections::BTreeSet;

use common::{fixtures, read_whole, store_path};
use zarrpipe::batcher::{Missing, Ranks, Shuffle};
use zarrpipe::pipeline::{find_missing_steps, BatchStream, Pipeline, PipelineBuilder};
use zarrpipe::prelude::*;

fn expected() -> serde_json::Value {
    let path = fixtures().join("expected/gaps.json");
    serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap()
}

fn strings(value: &serde_json::Value) -> Vec<String> {
    let list = value.as_array().unwrap().iter();
    list.map(|v| v.as_str().unwrap().to_string()).collect()
}

fn f32s(bytes: &[u8]) -> Vec<f32> {
    let words = bytes.chunks_exact(4);
    words
        .map(|b| f32::from_ne_bytes(b.try_into().unwrap()))
        .collect()
}

/// The stored steps' dates: the fixtures' time is hours since 2020-01-01, within January.
async fn dates(url: &str) -> Vec<String> {
    let dataset = zarrpipe::store::Dataset::open(url).await.unwrap();
    let bytes = read_whole(dataset.variable("time").unwrap()).await.unwrap();
    let hours = bytes
        .chunks_exact(8)
        .map(|b| i64::from_le_bytes(b.try_into().unwrap()));
    hours
        .map(|h| {
            assert!((0..31 * 24).contains(&h));
            format!("2020-01-{:02}T{:02}:00", 1 + h / 24, h % 24)
        })
        .collect()
}

fn builder(url: &str) -> PipelineBuilder {
    Pipeline::builder(url).variables(["t2m", "z"]).batch_size(3)
}

/// Every batch of the stream, drained.
async fn drain(mut batches: BatchStream) -> Vec<zarrpipe::pipeline::Batch> {
    let mut all = Vec::new();
    while let Some(batch) = batches.try_next().await.unwrap() {
        all.push(batch);
    }
    all
}

#[tokio::test]
async fn missing_steps_are_those_numpy_finds() {
    let expected = expected();
    for store in ["gaps_v2", "gaps_v3"] {
        let dataset = zarrpipe::store::Dataset::open(&store_path(store))
            .await
            .unwrap();
        let steps = find_missing_steps(&dataset, &["t2m", "z"], "time")
            .await
            .unwrap();
        assert_eq!(steps.frequency_text.as_deref(), Some("6 hours"), "{store}");
        assert_eq!(steps.length, expected["stored_steps"].as_u64().unwrap());
        let gap_dates: Vec<String> = steps.gaps.iter().flat_map(|g| g.dates.clone()).collect();
        assert_eq!(gap_dates, strings(&expected["gap_dates"]), "{store}");
        let absent: Vec<String> = steps.absent.iter().map(|s| s.date.clone()).collect();
        assert_eq!(absent, strings(&expected["absent_dates"]), "{store}");
        assert_eq!(
            steps.dates(),
            strings(&expected["missing_dates"]),
            "{store}"
        );
        // The half-absent field of t2m at stored step 11 is not a missing step.
        assert!(steps.absent.iter().all(|s| s.index != 11));
        assert!(steps.unchecked.is_empty(), "{:?}", steps.unchecked);
        // Only t2m's fields: z's absent steps are not t2m's.
        let t2m = find_missing_steps(&dataset, &["t2m"], "time")
            .await
            .unwrap();
        assert_eq!(t2m.absent.len(), 1);
        assert_eq!(t2m.absent[0].variables, ["t2m"]);
    }
}

#[tokio::test]
async fn skip_leaves_out_samples_touching_missing_steps() {
    let expected = expected();
    for store in ["gaps_v2", "gaps_v3"] {
        let url = store_path(store);
        let dates = dates(&url).await;
        for (history, leads, key) in [
            (1, vec![], "kept_history1"),
            (2, vec![1, 2], "kept_history2_leads_1_2"),
        ] {
            let mut builder = builder(&url);
            if !leads.is_empty() {
                builder = builder.forecast(history, leads.clone());
            }
            let batches = builder.build().await.unwrap();
            let layout = batches.layout().clone();
            let dataset = batches.dataset().clone();
            let kept = strings(&expected[key]);
            assert_eq!(layout.num_samples(), kept.len() as u64, "{store} {key}");
            let positions = 13 - (history - 1) - leads.iter().max().unwrap_or(&0);
            assert_eq!(
                layout.skipped(),
                positions - kept.len() as u64,
                "{store} {key}"
            );
            let t2m = f32s(&read_whole(dataset.variable("t2m").unwrap()).await.unwrap());
            let mut seen = Vec::new();
            for batch in drain(batches).await {
                for (n, sample) in batch.samples.iter().enumerate() {
                    let step = sample.origin[0] as usize;
                    seen.push(dates[step].clone());
                    // The newest input step's t2m is the stored field (bit for bit, NaN too).
                    let channel = (history as usize - 1) * 3;
                    let field = batch.inputs.slice(ndarray::s![n, channel, .., ..]);
                    let stored = &t2m[step * 20..(step + 1) * 20];
                    let same = field
                        .iter()
                        .zip(stored)
                        .all(|(a, b)| a.to_bits() == b.to_bits());
                    assert!(same, "{store} {key} step {step}");
                }
            }
            assert_eq!(seen, kept, "{store} {key}");
        }
    }
}

#[tokio::test]
async fn skipped_epochs_share_out_shuffle_and_resume_exactly() {
    let url = store_path("gaps_v3");
    let kept: BTreeSet<u64> = {
        let batches = builder(&url).batch_size(1).build().await.unwrap();
        let samples = drain(batches).await.into_iter().flat_map(|b| b.samples);
        samples.map(|s| s.origin[0]).collect()
    };
    assert_eq!(kept.len(), 10);
    // Two ranks, shuffled: each gets half, together every kept sample once.
    let mut together = Vec::new();
    for rank in 0..2 {
        let batches = builder(&url)
            .shuffle(Shuffle::Full)
            .seed(5)
            .ranks(Ranks::new(rank, 2).unwrap())
            .build()
            .await
            .unwrap();
        assert_eq!(batches.num_batches(), 2); // 5 samples in batches of 3
        let samples = drain(batches).await.into_iter().flat_map(|b| b.samples);
        together.extend(samples.map(|s| s.origin[0]));
    }
    together.sort();
    assert_eq!(together, kept.iter().copied().collect::<Vec<_>>());
    // A resume after one batch delivers exactly the rest of the epoch.
    let shuffled = || builder(&url).shuffle(Shuffle::Full).seed(9).epoch(2);
    let whole: Vec<_> = drain(shuffled().build().await.unwrap()).await;
    let mut first = shuffled().build().await.unwrap();
    first.try_next().await.unwrap().unwrap();
    let state = first.state();
    drop(first);
    let rest = drain(shuffled().resume(state).build().await.unwrap()).await;
    let origins = |batches: &[zarrpipe::pipeline::Batch]| -> Vec<u64> {
        let samples = batches.iter().flat_map(|b| b.samples.iter());
        samples.map(|s| s.origin[0]).collect()
    };
    assert_eq!(origins(&rest), origins(&whole[1..]));
    // A state saved without missing steps handled the same way does not resume this epoch.
    let mut filled = shuffled().missing(Missing::Fill).build().await.unwrap();
    filled.try_next().await.unwrap().unwrap();
    let error = shuffled().resume(filled.state()).build().await.unwrap_err();
    assert!(error.to_string().contains("another sampler"), "{error}");
}

#[tokio::test]
async fn a_layout_kept_from_an_earlier_epoch_gives_the_same_batches() {
    let url = store_path("gaps_v3");
    let first = builder(&url).build().await.unwrap();
    let layout = first.layout().clone();
    drop(first);
    // Another epoch, shuffled, and its resume: as if built from scratch.
    let shuffled = || builder(&url).shuffle(Shuffle::Full).seed(3).epoch(1);
    let fresh = drain(shuffled().build().await.unwrap()).await;
    let kept = shuffled().layout(layout.clone()).build().await.unwrap();
    assert!(std::sync::Arc::ptr_eq(kept.layout(), &layout));
    let kept = drain(kept).await;
    assert_eq!(kept.len(), fresh.len());
    for (kept, fresh) in kept.iter().zip(&fresh) {
        assert_eq!(kept.samples, fresh.samples);
        let mut same = kept.inputs.iter().zip(&fresh.inputs);
        assert!(same.all(|(a, b)| a.to_bits() == b.to_bits()));
    }
    let mut partial = shuffled().layout(layout.clone()).build().await.unwrap();
    partial.try_next().await.unwrap().unwrap();
    let state = partial.state();
    drop(partial);
    let rest = shuffled()
        .layout(layout)
        .resume(state)
        .build()
        .await
        .unwrap();
    let rest = drain(rest).await;
    let samples = |batches: &[zarrpipe::pipeline::Batch]| -> Vec<u64> {
        batches
            .iter()
            .flat_map(|b| b.samples.iter().map(|s| s.index))
            .collect()
    };
    assert_eq!(samples(&rest), samples(&fresh[1..]));
}

#[tokio::test]
async fn fill_keeps_samples_with_nan_at_missing_steps() {
    for store in ["gaps_v2", "gaps_v3"] {
        let url = store_path(store);
        let batches = builder(&url)
            .forecast(2, [1, 2])
            .missing(Missing::Fill)
            .collate_options(CollateOptions {
                nan_mask: true,
                ..Default::default()
            })
            .build()
            .await
            .unwrap();
        let layout = batches.layout().clone();
        // The regular grid has 16 steps: 16 - 1 (history) - 2 (leads) samples.
        assert_eq!(layout.num_samples(), 13, "{store}");
        let grid = layout.missing_steps().unwrap().0.grid();
        assert_eq!(grid.len(), 16);
        let dataset = batches.dataset().clone();
        let t2m = f32s(&read_whole(dataset.variable("t2m").unwrap()).await.unwrap());
        let z = f32s(&read_whole(dataset.variable("z").unwrap()).await.unwrap());
        let mut gap_steps_seen = 0;
        for batch in drain(batches).await {
            let targets = batch.targets.as_ref().unwrap();
            for (n, sample) in batch.samples.iter().enumerate() {
                let origin = sample.origin[0] as i64;
                let steps = [(origin - 1, &batch.inputs, 0), (origin, &batch.inputs, 1)]
                    .into_iter()
                    .chain([(origin + 1, targets, 0), (origin + 2, targets, 1)]);
                for (step, tensor, slot) in steps {
                    let stored = grid[step as usize];
                    gap_steps_seen += stored.is_none() as usize;
                    for channel in 0..3 {
                        let field = tensor.slice(ndarray::s![n, slot * 3 + channel, .., ..]);
                        let want: Vec<f32> = match stored {
                            None => vec![f32::NAN; 20],
                            Some(t) if channel == 0 => t2m[t as usize * 20..][..20].to_vec(),
                            Some(t) => z[(t as usize * 2 + channel - 1) * 20..][..20].to_vec(),
                        };
                        let same = field
                            .iter()
                            .zip(&want)
                            .all(|(a, b)| a.to_bits() == b.to_bits() || (a.is_nan() && b.is_nan()));
                        assert!(same, "{store} grid step {step} channel {channel}");
                    }
                }
                // The NaN mask marks a gap's steps in the inputs.
                let mask = batch.nan_mask.as_ref().unwrap();
                let input_gap = grid[origin as usize].is_none();
                let marked = mask
                    .slice(ndarray::s![n, 3..6, .., ..])
                    .iter()
                    .all(|&m| m == 0);
                assert_eq!(marked, input_gap, "{store} sample at grid step {origin}");
            }
        }
        assert!(gap_steps_seen > 0);
    }
}

/// Under `fill`, derived channels are computed at each grid step's own time, a gap's steps
/// included (the stored time coordinate has no value there: its steps are evenly spaced
/// between their stored neighbours).
#[tokio::test]
async fn fill_computes_derived_channels_at_the_gaps_own_times() {
    for store in ["gaps_v2", "gaps_v3"] {
        let batches = Pipeline::builder(store_path(store).as_str())
            .variables(["t2m", "cos_time_of_day", "sin_time_of_day"])
            .batch_size(4)
            .missing(Missing::Fill)
            .build()
            .await
            .unwrap();
        let layout = batches.layout().clone();
        let grid = layout.missing_steps().unwrap().0.grid();
        assert_eq!(layout.num_samples(), 16, "{store}");
        let mut gap_steps_seen = 0;
        for batch in drain(batches).await {
            for (n, sample) in batch.samples.iter().enumerate() {
                let step = sample.origin[0];
                gap_steps_seen += grid[step as usize].is_none() as usize;
                // The grid runs 6-hourly from 2020-01-01T00:00.
                let hours = (step * 6 % 24) as f64;
                let angle = std::f64::consts::TAU * hours / 24.0;
                for (channel, want) in [(1, angle.cos()), (2, angle.sin())] {
                    let field = batch.inputs.slice(ndarray::s![n, channel, .., ..]);
                    assert!(
                        field.iter().all(|&v| (v as f64 - want).abs() < 1e-5),
                        "{store} grid step {step} channel {channel}: {field:?}, want {want}"
                    );
                }
            }
        }
        assert_eq!(gap_steps_seen, 3, "{store}");
    }
}

#[tokio::test]
async fn error_names_the_missing_dates() {
    let url = store_path("gaps_v3");
    let error = builder(&url)
        .missing(Missing::Error)
        .build()
        .await
        .unwrap_err();
    let message = error.to_string();
    for date in ["2020-01-01T12:00", "2020-01-01T18:00", "2020-01-03T00:00"] {
        assert!(message.contains(date), "{message}");
    }
    // Gaps alone touch no single-step sample; with leads they do.
    let error = builder(&url)
        .variables(["t2m"])
        .forecast(1, [1])
        .missing(Missing::Error)
        .build()
        .await
        .unwrap_err();
    assert!(error.to_string().contains("2020-01-02T06:00"), "{error}");
    // `ignore` does not look: every stored step is a sample, as the store holds it.
    let batches = builder(&url)
        .missing(Missing::Ignore)
        .build()
        .await
        .unwrap();
    assert_eq!(batches.layout().num_samples(), 13);
    assert!(batches.layout().missing_steps().is_none());
    // A window of steps cannot be filled across a gap.
    let error = builder(&url)
        .window("time", 4, 4)
        .missing(Missing::Fill)
        .build()
        .await
        .unwrap_err();
    assert!(
        error.to_string().contains("needs `time` iterated"),
        "{error}"
    );
}

fn zarrpipe(args: &[&str]) -> std::process::Output {
    std::process::Command::new(env!("CARGO_BIN_EXE_zarrpipe"))
        .args(args)
        .output()
        .unwrap()
}

#[test]
fn plan_and_info_report_the_missing_steps() {
    let expected = expected();
    let url = store_path("gaps_v2");
    let output = zarrpipe(&["plan", &url, "--history", "2", "--leads", "1,2", "--json"]);
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    let plan: serde_json::Value = serde_json::from_slice(&output.stdout).unwrap();
    assert_eq!(plan["samples"], 2);
    assert_eq!(plan["missing"]["policy"], "skip");
    assert_eq!(plan["missing"]["skipped"], 8);
    assert_eq!(plan["missing"]["frequency"], "6 hours");
    assert_eq!(plan["missing"]["dates"], expected["missing_dates"]);
    let text = String::from_utf8_lossy(&zarrpipe(&["plan", &url]).stdout).into_owned();
    assert!(text.contains("3 samples left out"), "{text}");
    assert!(text.contains("2020-01-03T00:00 absent: t2m"), "{text}");
    let output = zarrpipe(&["info", &url, "--json"]);
    let info: serde_json::Value = serde_json::from_slice(&output.stdout).unwrap();
    assert_eq!(info["missing"]["absent"].as_array().unwrap().len(), 3);
    let output = zarrpipe(&["run", &url, "--device", "cpu", "--missing", "error"]);
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        !output.status.success() && stderr.contains("2020-01-01T12:00"),
        "{stderr}"
    );
    let output = zarrpipe(&["plan", &url, "--missing", "sometimes"]);
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        !output.status.success() && stderr.contains("skip, fill, error, ignore"),
        "{stderr}"
    );
}
