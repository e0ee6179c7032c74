//! GPU decode throughput per codec and chunk size, next to decoding on every CPU core and to
//! the bare nvCOMP call on the same chunks, all in one run. float32 chunks of 256 KiB, 1 MiB
//! and 4 MiB, `ZARRPIPE_BENCH_MB` (default 1024) MB decoded per case, each case one batch.
//!
//! Two GPU figures: one batch per case (`decode_batch`: planning, staging, upload and decoding
//! one after the other), and the same chunks streamed as the pipeline decodes them: batches of
//! `ZARRPIPE_STREAM_MB` (default 256) MB, `ZARRPIPE_STREAM_IN_FLIGHT` (default 3) submitted
//! at once, each planned on a helper thread while the one before is submitted.
//!
//! `cargo bench --features cuda --bench gpu_decode [-- --json PATH]`; without a GPU only the
//! CPU column is measured.

use std::collections::VecDeque;
use std::path::Path;
use std::time::{Duration, Instant};

use rayon::prelude::*;
use serde_json::json;
use zarrpipe::codec::testing::{fetch_all, write_cases, Case};
use zarrpipe::codec::{decode_on_cpu, DecodePath, GpuDecoder, GpuOptions};
use zarrpipe::core::DType;
use zarrpipe::store::{Dataset, EncodedChunk};

const REPEATS: usize = 5;

fn codecs() -> Vec<(&'static str, serde_json::Value)> {
    let bytes = json!({"name": "bytes", "configuration": {"endian": "little"}});
    let blosc = |cname: &str, shuffle: &str| {
        json!({"name": "blosc", "configuration": {
            "cname": cname, "clevel": 5, "shuffle": shuffle, "typesize": 4, "blocksize": 0}})
    };
    vec![
        (
            "zstd",
            json!([bytes, {"name": "zstd", "configuration": {"level": 3, "checksum": false}}]),
        ),
        (
            "blosc-lz4 bitshuffle",
            json!([bytes, blosc("lz4", "bitshuffle")]),
        ),
        ("blosc-lz4", json!([bytes, blosc("lz4", "shuffle")])),
        ("blosc-zstd", json!([bytes, blosc("zstd", "shuffle")])),
        (
            "gzip",
            json!([bytes, {"name": "gzip", "configuration": {"level": 5}}]),
        ),
    ]
}

fn best(repeats: usize, mut run: impl FnMut() -> Duration) -> Duration {
    (0..repeats).map(|_| run()).min().unwrap_or_default()
}

fn rate(bytes: usize, time: Duration) -> f64 {
    bytes as f64 / time.as_secs_f64() / 1e9
}

/// Where a streamed run's time went on the host: inside `submit` (planning, staging, upload
/// and enqueueing) and waiting in `complete`, with the planning and staging parts.
#[derive(Clone, Copy, Debug, Default)]
struct StreamTimes {
    total: Duration,
    submit: Duration,
    complete: Duration,
    plan: Duration,
    stage: Duration,
}

/// Decodes `chunks` in batches of `per_batch`, at most `in_flight` submitted and not yet
/// completed, each batch planned on a helper thread while the one before is submitted (as in
/// the pipeline's worker); `ZARRPIPE_STREAM_PLAN_INLINE=1` plans inside `submit` instead.
fn streamed(
    decoder: &GpuDecoder,
    chunks: &[EncodedChunk],
    per_batch: usize,
    in_flight: usize,
) -> StreamTimes {
    let mut times = StreamTimes::default();
    let started = Instant::now();
    let mut pending = VecDeque::new();
    let complete = |batch, times: &mut StreamTimes| {
        let waited = Instant::now();
        let batch = decoder.complete(batch).expect("GPU decode");
        times.complete += waited.elapsed();
        times.plan += batch.timings.plan;
        times.stage += batch.timings.stage;
    };
    let inline = std::env::var_os("ZARRPIPE_STREAM_PLAN_INLINE").is_some();
    std::thread::scope(|scope| {
        let (sender, planned) = std::sync::mpsc::sync_channel(1);
        scope.spawn(move || {
            for batch in chunks.chunks(per_batch.max(1)) {
                let batch = match inline {
                    true => Err(batch.to_vec()),
                    false => Ok(decoder.plan(batch.to_vec())),
                };
                if sender.send(batch).is_err() {
                    break;
                }
            }
        });
        for batch in planned {
            let submitted = Instant::now();
            let batch = match batch {
                Ok(planned) => decoder.submit_planned(planned),
                Err(chunks) => decoder.submit(chunks),
            };
            pending.push_back(batch.expect("GPU submit"));
            times.submit += submitted.elapsed();
            if pending.len() >= in_flight {
                complete(pending.pop_front().unwrap(), &mut times);
            }
        }
    });
    for batch in pending {
        complete(batch, &mut times);
    }
    times.total = started.elapsed();
    times
}

fn load(dir: &Path) -> Vec<EncodedChunk> {
    let runtime = tokio::runtime::Runtime::new().unwrap();
    runtime.block_on(async {
        let dataset = Dataset::open(dir.to_str().unwrap()).await.unwrap();
        fetch_all(&dataset).await
    })
}

fn main() {
    let json_path = std::env::args().skip_while(|arg| arg != "--json").nth(1);
    let megabytes: u64 = std::env::var("ZARRPIPE_BENCH_MB")
        .ok()
        .and_then(|mb| mb.parse().ok())
        .unwrap_or(1024);
    let mut options = GpuOptions::default();
    if let Some(group) = std::env::var("ZARRPIPE_GROUP_MB")
        .ok()
        .and_then(|mb| mb.parse::<usize>().ok())
    {
        options.group_bytes = group << 20;
    }
    if let Some(streams) = std::env::var("ZARRPIPE_DECODE_STREAMS")
        .ok()
        .and_then(|n| n.parse::<usize>().ok())
    {
        options.decode_streams = streams;
    }
    let (group_mb, streams) = (options.group_bytes >> 20, options.decode_streams);
    let stream_mb: u64 = std::env::var("ZARRPIPE_STREAM_MB")
        .ok()
        .and_then(|mb| mb.parse().ok())
        .unwrap_or(256);
    let in_flight: usize = std::env::var("ZARRPIPE_STREAM_IN_FLIGHT")
        .ok()
        .and_then(|n| n.parse().ok())
        .unwrap_or(3);
    let decoder = match GpuDecoder::new(options) {
        Ok(decoder) => Some(decoder),
        Err(error) => {
            eprintln!("GPU columns skipped: {error}");
            None
        }
    };
    let device = decoder.as_ref().map_or("none".into(), |d| d.device_name());
    println!(
        "device: {device}; CPU threads: {}; {megabytes} MB decoded per case in groups of {group_mb} MB, best of {REPEATS}",
        rayon::current_num_threads()
    );
    println!(
        "streamed: batches of {stream_mb} MB, {in_flight} in flight, {streams} decode streams"
    );
    println!("| codec | chunk | ratio | CPU GB/s | GPU GB/s | GPU device GB/s | bare nvCOMP GB/s | GPU / bare | GPU streamed GB/s | streamed / bare | GPU / CPU |");
    println!("| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |");
    let mut rows = Vec::new();
    for side in [256u64, 512, 1024] {
        let chunk_bytes = side * side * 4;
        let chunks_per_case = (megabytes << 20) / chunk_bytes;
        let rows_of_chunks = chunks_per_case.div_ceil(4);
        let only = std::env::var("ZARRPIPE_BENCH_CODEC").ok();
        for (label, codecs) in codecs() {
            if only.as_deref().is_some_and(|only| only != label) {
                continue;
            }
            let dir = tempfile::tempdir().unwrap();
            let case = Case {
                name: "bench".into(),
                dtype: DType::Float32,
                codecs,
                shape: vec![rows_of_chunks * side, 4 * side],
                chunks: vec![side, side],
            };
            write_cases(dir.path(), &[case], 1);
            let chunks = load(dir.path());
            let stored: usize = chunks.iter().map(EncodedChunk::stored_len).sum();
            let decoded = chunks.len() * chunk_bytes as usize;
            let cpu = best(REPEATS, || {
                let started = Instant::now();
                chunks.par_iter().for_each(|chunk| {
                    decode_on_cpu(chunk.clone()).expect("CPU decode");
                });
                started.elapsed()
            });
            let mut row = json!({
                "codec": label, "chunk_bytes": chunk_bytes, "chunks": chunks.len(),
                "compression_ratio": decoded as f64 / stored as f64,
                "cpu_gbps": rate(decoded, cpu),
            });
            let mut cells = vec!["-".to_string(); 7];
            if let Some(decoder) = &decoder {
                let batch = decoder.decode_batch(chunks.clone()).expect("GPU decode");
                let fallbacks = batch
                    .chunks
                    .iter()
                    .flatten()
                    .filter(|chunk| matches!(chunk.path, DecodePath::CpuFallback { .. }))
                    .count();
                assert_eq!(fallbacks, 0, "{label}: chunks left the GPU");
                // The timings of the fastest run.
                let mut fastest = (Duration::MAX, Default::default());
                for _ in 0..REPEATS {
                    let started = Instant::now();
                    let batch = decoder.decode_batch(chunks.clone()).expect("GPU decode");
                    let elapsed = started.elapsed();
                    if elapsed < fastest.0 {
                        fastest = (elapsed, batch.timings);
                    }
                }
                let (gpu, timings): (Duration, zarrpipe::codec::BatchTimings) = fastest;
                let (host, device) = ((timings.plan, timings.stage), timings.device);
                row["plan_ms"] = json!(host.0.as_secs_f64() * 1e3);
                row["stage_ms"] = json!(host.1.as_secs_f64() * 1e3);
                row["device_ms"] = json!(device.as_secs_f64() * 1e3);
                let (bare, bare_bytes) = decoder
                    .time_bare_nvcomp(chunks.clone(), REPEATS)
                    .expect("bare nvCOMP");
                let per_batch = ((stream_mb << 20) / chunk_bytes) as usize;
                let mut fastest = StreamTimes {
                    total: Duration::MAX,
                    ..Default::default()
                };
                for _ in 0..REPEATS {
                    let times = streamed(decoder, &chunks, per_batch, in_flight);
                    if times.total < fastest.total {
                        fastest = times;
                    }
                }
                let stream = fastest.total;
                let ms = |d: Duration| d.as_secs_f64() * 1e3;
                row["streamed_ms"] = json!({
                    "total": ms(fastest.total), "in_submit": ms(fastest.submit),
                    "waiting_in_complete": ms(fastest.complete), "plan": ms(fastest.plan),
                    "stage": ms(fastest.stage)});
                eprintln!(
                    "{label} {} KiB streamed: {}",
                    chunk_bytes >> 10,
                    row["streamed_ms"]
                );
                let (gpu_rate, bare_rate) = (rate(decoded, gpu), rate(bare_bytes, bare));
                let stream_rate = rate(decoded, stream);
                cells = vec![
                    format!("{gpu_rate:.1}"),
                    format!("{:.1}", rate(decoded, device)),
                    format!("{bare_rate:.1}"),
                    format!("{:.0}%", 100.0 * gpu_rate / bare_rate),
                    format!("{stream_rate:.1}"),
                    format!("{:.0}%", 100.0 * stream_rate / bare_rate),
                    format!("{:.1}x", gpu_rate / rate(decoded, cpu)),
                ];
                row["gpu_streamed_gbps"] = json!(stream_rate);
                row["gpu_gbps"] = json!(gpu_rate);
                row["gpu_device_gbps"] = json!(rate(decoded, device));
                row["bare_nvcomp_gbps"] = json!(bare_rate);
            }
            println!(
                "| {label} | {} KiB | {:.2} | {:.1} | {} |",
                chunk_bytes >> 10,
                decoded as f64 / stored as f64,
                rate(decoded, cpu),
                cells.join(" | ")
            );
            rows.push(row);
        }
    }
    if let Some(path) = json_path {
        let report = json!({"device": device, "megabytes_per_case": megabytes, "rows": rows});
        std::fs::write(path, serde_json::to_string_pretty(&report).unwrap()).unwrap();
    }
}
