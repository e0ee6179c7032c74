//! Which chunk layout feeds this machine fastest (`zarrpipe advise`): measured, not guessed.
//!
//! On a sample of one variable (up to 4 steps of its first dimension, whole in the others;
//! one element of the middle dimensions when a step alone exceeds the sample size), it
//! measures this machine's read rate from the store (one request alone for the per-request
//! time, then every chunk of the sample at once for the bandwidth) and its decode rate on the
//! CPU (every core, the faster of two passes) and, with the `cuda` feature and a GPU, on the
//! GPU. It then writes the sample in a temporary directory in candidate layouts (whole fields
//! or quarter-field tiles, tiles sharded into fields, zstd, blosc-lz4 or uncompressed),
//! decodes each there, and estimates each one's read time from the store's measured rates:
//! the larger of its stored bytes over the bandwidth and its objects times the per-request
//! time over the requests in flight. A layout feeds at the sample's decoded size over the
//! larger of its read and decode times (reading and decoding overlap in the pipeline; with a
//! GPU, the CPU and the GPU decode together, as split decoding does). Samples here are whole
//! fields (the default window); a pipeline reading patches reads part of each field, which
//! favours tiles more than these figures say.
//!
//! It also names where to decode the layout it advises beside a model training on the GPU
//! ([`decode_side`]): on the CPU's cores alone where they decode the sample no slower than it
//! is read, since the GPU then adds nothing to the feed and its time is the model's; under
//! `auto` otherwise.

use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{bail, Context};
use futures::{stream, TryStreamExt};
use serde::Serialize;
use zarrpipe_codec_gpu::{ChunkDecoder, CpuDecoder, DecodeExt, GpuDecoder, GpuOptions};
use zarrpipe_store::{ChunkRequest, Dataset, EncodedChunk, FetchExt, Variable};
use zarrs::array::codec::BytesCodec;
use zarrs::array::{ArrayBuilder, ArrayBytes, ArraySubset, Endianness};
use zarrs::filesystem::FilesystemStore;
use zarrs::group::GroupBuilder;

use crate::rechunk::Codec;

/// Options of [`advise`].
#[derive(Clone, Debug)]
pub struct AdviseOptions {
    /// The variable to sample; default: the largest data variable of two or more dimensions.
    pub variable: Option<String>,
    /// The decoded size the sample aims at (at least one step is taken).
    pub sample_bytes: u64,
    /// Requests in flight when measuring the store's bandwidth (and assumed for candidates).
    pub requests_in_flight: usize,
    /// Measure the GPU too (when built with `cuda` and a GPU is present).
    pub gpu: bool,
    /// Candidates left when this much time has passed are reported as not measured.
    pub time_limit: Duration,
}

impl Default for AdviseOptions {
    fn default() -> Self {
        Self {
            variable: None,
            sample_bytes: 64 << 20,
            requests_in_flight: 16,
            gpu: true,
            time_limit: Duration::from_secs(20),
        }
    }
}

/// One layout's figures on the sample.
#[derive(Clone, Debug, Serialize)]
pub struct LayoutFigures {
    /// What the layout is, e.g. "whole fields, zstd".
    pub name: String,
    /// Chunk shape (inner chunk when sharded).
    pub chunk: Vec<u64>,
    /// Shard shape, when sharded.
    pub shard: Option<Vec<u64>>,
    /// The codec chain as names, outermost first.
    pub codecs: Vec<String>,
    /// Objects read for the sample (chunks, or shards).
    pub objects: u64,
    /// Bytes the sample took in the store.
    pub stored_bytes: u64,
    /// Bytes of the sample decoded (whole chunks).
    pub decoded_bytes: u64,
    /// Seconds to read the sample: measured for the source, estimated for candidates.
    pub read_s: f64,
    /// Seconds to decode the sample on every CPU core.
    pub cpu_decode_s: f64,
    /// Seconds to decode it on the GPU, when measured.
    pub gpu_decode_s: Option<f64>,
    /// Bytes of the sample per second this layout feeds: the sample's decoded size over the
    /// larger of the read and decode times (chunks reaching past the sample cost time, not
    /// credit).
    pub feed_bytes_per_s: f64,
    /// "reads" or "decoding": which of the two sets the feed rate.
    pub limited_by: &'static str,
}

/// What [`advise`] found.
#[derive(Clone, Debug, Serialize)]
pub struct Advice {
    /// The variable measured.
    pub variable: String,
    /// The sample: start and end along each dimension.
    pub sample: Vec<[u64; 2]>,
    /// Its decoded size.
    pub sample_bytes: u64,
    /// The store's measured bandwidth over `requests_in_flight` requests, bytes per second.
    pub read_bytes_per_s: f64,
    /// One request alone, seconds.
    pub request_s: f64,
    /// Requests in flight while measuring reads.
    pub requests_in_flight: usize,
    /// The GPU measured (its name).
    pub gpu: Option<String>,
    /// Why no GPU was measured.
    pub gpu_not_measured: Option<String>,
    /// The store's own layout.
    pub source: LayoutFigures,
    /// Other layouts, each written and measured on the sample.
    pub candidates: Vec<LayoutFigures>,
    /// Candidates not measured within the time limit.
    pub not_measured: Vec<String>,
    /// Index in `candidates` of the fastest.
    pub best: usize,
    /// Whether the store's own layout fed faster than every candidate: then the advice is
    /// to keep it.
    pub keep_store_layout: bool,
    /// Why it is the fastest, in a sentence or two.
    pub reason: String,
    /// The `zarrpipe rechunk` options that write the fastest layout (`--chunks`, `--shard`,
    /// `--codec`); `None` when the store's layout is kept.
    pub rechunk: Option<Vec<String>>,
    /// Where to decode the advised layout beside a model training on the GPU: `"cpu"` or
    /// `"auto"` (the pipeline's `decode_on`, the CLI's `--decode`).
    pub decode_on: &'static str,
    /// Why, in a sentence.
    pub decode_on_reason: String,
}

/// Measures the store and candidate layouts on a sample; see the module documentation.
pub async fn advise(dataset: &Dataset, options: &AdviseOptions) -> anyhow::Result<Advice> {
    let started = Instant::now();
    let variable = pick_variable(dataset, options.variable.as_deref())?;
    let region = sample_region(&variable, options.sample_bytes);
    let gpu = if !options.gpu {
        Err("not asked for (--no-gpu)".to_string())
    } else {
        GpuDecoder::new(GpuOptions::default()).map_err(|error| crate::error_chain(&error))
    };

    // The store as it is: one request alone, then every chunk of the sample at once.
    let requests: Vec<ChunkRequest> = variable
        .chunks_in(&region.iter().map(|r| r[0]..r[1]).collect::<Vec<_>>())
        .into_iter()
        .map(|indices| ChunkRequest::new(variable.clone(), indices))
        .collect();
    let first = Instant::now();
    fetch(vec![requests[0].clone()], 1).await?;
    let request_s = first.elapsed().as_secs_f64();
    let fetched = Instant::now();
    let chunks = fetch(requests, options.requests_in_flight).await?;
    let read_s = fetched.elapsed().as_secs_f64();
    let stored: u64 = chunks.iter().map(|c| c.stored_len() as u64).sum();
    let read_bytes_per_s = stored as f64 / read_s.max(1e-9);
    let source_layout = (
        variable
            .inner_chunk_shape()
            .unwrap_or_else(|| variable.chunk_shape()),
        variable.inner_chunk_shape().map(|_| variable.chunk_shape()),
    );
    let mut source = measure(
        "the store's layout",
        &variable,
        chunks,
        source_layout,
        gpu.as_ref().ok(),
    )
    .await?;
    source.read_s = read_s;
    let shape: Vec<u64> = region.iter().map(|r| r[1] - r[0]).collect();
    let sample_bytes = shape.iter().product::<u64>() * variable.dtype().size() as u64;
    finish(&mut source, sample_bytes);

    // The sample in candidate layouts.
    let subset =
        ArraySubset::new_with_ranges(&region.iter().map(|r| r[0]..r[1]).collect::<Vec<_>>());
    let values: ArrayBytes<'static> = variable
        .array()
        .async_retrieve_array_subset(&subset)
        .await
        .with_context(|| format!("cannot read the sample of {}", variable.name()))?;
    let rates = ReadModel {
        bytes_per_s: read_bytes_per_s,
        request_s,
        in_flight: options.requests_in_flight,
    };
    let mut candidates = Vec::new();
    let mut measured = Vec::new();
    let mut not_measured = Vec::new();
    for candidate in candidates_for(&shape) {
        if started.elapsed() > options.time_limit {
            not_measured.push(candidate.name.to_string());
            continue;
        }
        let dir = tempfile::tempdir().context("cannot make a temporary directory")?;
        let written =
            write_sample(dir.path(), &variable, &shape, &candidate, values.clone()).await?;
        let chunks = fetch(written.requests, options.requests_in_flight).await?;
        let mut figures = measure(
            candidate.name,
            &written.variable,
            chunks,
            (candidate.chunk.clone(), candidate.shard.clone()),
            gpu.as_ref().ok(),
        )
        .await?;
        figures.read_s = rates.read_s(figures.stored_bytes, figures.objects);
        finish(&mut figures, sample_bytes);
        candidates.push(figures);
        measured.push(candidate);
    }
    if candidates.is_empty() {
        bail!(
            "no candidate layout was measured within {:?}",
            options.time_limit
        );
    }
    let best = (0..candidates.len())
        .max_by(|&a, &b| {
            candidates[a]
                .feed_bytes_per_s
                .total_cmp(&candidates[b].feed_bytes_per_s)
        })
        .unwrap_or(0);
    let keep_store_layout = keeps_store_layout(&source, &candidates[best]);
    let reason = match keep_store_layout {
        true => keep_reason(&source, &candidates[best]),
        false => reason(&candidates[best], &source, &candidates, &rates),
    };
    let rechunk = (!keep_store_layout).then(|| rechunk_options(&variable, &measured[best]));
    let advised = match keep_store_layout {
        true => &source,
        false => &candidates[best],
    };
    let (decode_on, decode_on_reason) = decode_side(advised, gpu.is_ok());
    Ok(Advice {
        decode_on,
        decode_on_reason,
        rechunk,
        variable: variable.name().to_string(),
        sample: region,
        sample_bytes,
        read_bytes_per_s,
        request_s,
        requests_in_flight: options.requests_in_flight,
        gpu_not_measured: gpu.as_ref().err().cloned(),
        gpu: gpu.ok().map(|gpu| gpu.device_name()),
        source,
        candidates,
        not_measured,
        best,
        keep_store_layout,
        reason,
    })
}

fn pick_variable(dataset: &Dataset, name: Option<&str>) -> anyhow::Result<Arc<Variable>> {
    if let Some(name) = name {
        return Ok(dataset.variable(name)?.clone());
    }
    dataset
        .data_variables()
        .filter(|v| v.shape().len() >= 2 && v.shape().iter().all(|&n| n > 0))
        .max_by_key(|v| v.decoded_bytes().unwrap_or(0))
        .cloned()
        .with_context(|| {
            format!(
                "{} has no data variable of two or more dimensions to sample; name one with --var",
                dataset.url()
            )
        })
}

/// Up to 4 steps of the first dimension, whole in the others, aiming at `bytes`; one element
/// of the middle dimensions when a step alone is larger. A 2-D array is sampled whole, or as
/// many rows as `bytes` allows.
fn sample_region(variable: &Variable, bytes: u64) -> Vec<[u64; 2]> {
    let shape = variable.shape();
    let size = variable.dtype().size() as u64;
    let mut region: Vec<[u64; 2]> = shape.iter().map(|&n| [0, n]).collect();
    let field: u64 = shape[shape.len() - 2..].iter().product::<u64>() * size;
    let mut step: u64 = shape[1..].iter().product::<u64>() * size;
    if step > bytes && shape.len() > 2 {
        let middle = shape.len() - 2;
        for range in &mut region[1..middle] {
            *range = [0, 1];
        }
        step = field;
    }
    // A 2-D array is one field: as many rows as the size allows.
    let most = if shape.len() == 2 { shape[0] } else { 4 };
    region[0] = [0, (bytes / step.max(1)).clamp(1, most).min(shape[0])];
    region
}

/// The `zarrpipe rechunk` options that write `candidate`'s layout, its sizes named by
/// `variable`'s dimensions.
fn rechunk_options(variable: &Variable, candidate: &Candidate) -> Vec<String> {
    let sizes = |shape: &[u64]| {
        let named = variable.dims().iter().zip(shape);
        let named: Vec<String> = named.map(|(dim, n)| format!("{dim}={n}")).collect();
        named.join(",")
    };
    let mut options = vec!["--chunks".to_string(), sizes(&candidate.chunk)];
    if let Some(shard) = &candidate.shard {
        options.extend(["--shard".to_string(), sizes(shard)]);
    }
    options.extend(["--codec".to_string(), candidate.codec.to_string()]);
    options
}

/// A candidate layout of the sample.
struct Candidate {
    name: &'static str,
    chunk: Vec<u64>,
    shard: Option<Vec<u64>>,
    codec: Codec,
}

fn candidates_for(shape: &[u64]) -> Vec<Candidate> {
    let rank = shape.len();
    let (lat, lon) = (shape[rank - 2], shape[rank - 1]);
    let with = |spatial: [u64; 2]| -> Vec<u64> {
        let mut chunk = vec![1; rank - 2];
        chunk.extend(spatial);
        chunk
    };
    let field = with([lat, lon]);
    let quarter = with([lat.div_ceil(2), lon.div_ceil(2)]);
    let quarter_shard = with([2 * lat.div_ceil(2), 2 * lon.div_ceil(2)]);
    vec![
        Candidate {
            name: "whole fields, zstd",
            chunk: field.clone(),
            shard: None,
            codec: Codec::Zstd(3),
        },
        Candidate {
            name: "whole fields, blosc-lz4",
            chunk: field.clone(),
            shard: None,
            codec: Codec::BloscLz4(5),
        },
        Candidate {
            name: "whole fields, uncompressed",
            chunk: field,
            shard: None,
            codec: Codec::None,
        },
        Candidate {
            name: "quarter-field tiles, zstd",
            chunk: quarter.clone(),
            shard: None,
            codec: Codec::Zstd(3),
        },
        Candidate {
            name: "quarter tiles in field shards, zstd",
            chunk: quarter,
            shard: Some(quarter_shard),
            codec: Codec::Zstd(3),
        },
    ]
}

struct WrittenSample {
    variable: Arc<Variable>,
    requests: Vec<ChunkRequest>,
}

/// Writes the sample as a one-array store in `dir` and opens it.
async fn write_sample(
    dir: &std::path::Path,
    variable: &Variable,
    shape: &[u64],
    candidate: &Candidate,
    values: ArrayBytes<'static>,
) -> anyhow::Result<WrittenSample> {
    let store = Arc::new(FilesystemStore::new(dir).context("cannot open the temporary store")?);
    GroupBuilder::new()
        .build(store.clone(), "/")
        .and_then(|group| group.store_metadata().map_err(Into::into))
        .context("cannot write the temporary group")?;
    let source = variable.array();
    let element_size = variable.dtype().size();
    let mut builder = ArrayBuilder::new(
        shape.to_vec(),
        candidate
            .shard
            .clone()
            .unwrap_or_else(|| candidate.chunk.clone()),
        source.data_type().clone(),
        source.fill_value().clone(),
    );
    builder
        .array_to_bytes_codec(Arc::new(BytesCodec::new(
            (element_size > 1).then_some(Endianness::Little),
        )))
        .bytes_to_bytes_codecs(candidate.codec.codecs(element_size)?);
    if candidate.shard.is_some() {
        builder.subchunk_shape(candidate.chunk.clone());
    }
    let array = builder
        .build(store.clone(), "/sample")
        .context("cannot build the sample array")?;
    array
        .store_metadata()
        .context("cannot write the sample's metadata")?;
    array
        .store_array_subset(&array.subset_all(), values)
        .context("cannot write the sample")?;
    let requests = ArraySubset::new_with_shape(array.chunk_grid_shape().to_vec())
        .indices()
        .into_iter()
        .map(|indices| indices.to_vec())
        .collect::<Vec<_>>();
    let dataset = Dataset::open(&dir.to_string_lossy())
        .await
        .context("cannot open the sample store")?;
    let variable = dataset.variable("sample")?.clone();
    let requests = requests
        .into_iter()
        .map(|indices| ChunkRequest::new(variable.clone(), indices))
        .collect();
    Ok(WrittenSample { variable, requests })
}

async fn fetch(requests: Vec<ChunkRequest>, in_flight: usize) -> anyhow::Result<Vec<EncodedChunk>> {
    Ok(stream::iter(requests)
        .fetch(in_flight.max(1))
        .try_collect()
        .await?)
}

/// Decodes `chunks` on the CPU (every core; twice, the faster pass counted) and, when there
/// is one, the GPU (once to warm it up, then timed).
async fn measure(
    name: &str,
    variable: &Variable,
    chunks: Vec<EncodedChunk>,
    (chunk, shard): (Vec<u64>, Option<Vec<u64>>),
    gpu: Option<&GpuDecoder>,
) -> anyhow::Result<LayoutFigures> {
    let objects = chunks.len() as u64;
    let stored_bytes = chunks.iter().map(|c| c.stored_len() as u64).sum();
    let gpu_decode_s = match gpu {
        Some(gpu) => {
            gpu.decode_batch(chunks.clone())?;
            let timed = Instant::now();
            let batch = gpu.decode_batch(chunks.clone())?;
            let seconds = timed.elapsed().as_secs_f64();
            if let Some(Err(error)) = batch.chunks.into_iter().find(Result::is_err) {
                return Err(error).context("a sample chunk failed on the GPU");
            }
            Some(seconds)
        }
        None => None,
    };
    // Twice, the faster counted: the first pass also warms the thread pool and the allocator.
    let decoder: Arc<dyn ChunkDecoder> = Arc::new(CpuDecoder::new());
    let in_flight = 4 * std::thread::available_parallelism().map_or(2, |n| n.get());
    let mut cpu_decode_s = f64::INFINITY;
    let mut decoded = Vec::new();
    for _ in 0..2 {
        let timed = Instant::now();
        decoded = stream::iter(chunks.iter().cloned().map(Ok))
            .decode(decoder.clone(), in_flight)
            .try_collect::<Vec<_>>()
            .await?;
        cpu_decode_s = cpu_decode_s.min(timed.elapsed().as_secs_f64());
    }
    Ok(LayoutFigures {
        name: name.to_string(),
        chunk,
        shard,
        codecs: variable.codec_names(),
        objects,
        stored_bytes,
        decoded_bytes: decoded.iter().map(|c| c.bytes.len() as u64).sum(),
        read_s: 0.0,
        cpu_decode_s,
        gpu_decode_s,
        feed_bytes_per_s: 0.0,
        limited_by: "",
    })
}

/// The decode time with every decoder measured (CPU and GPU together share by their rates).
fn decode_s(figures: &LayoutFigures) -> f64 {
    match figures.gpu_decode_s {
        Some(gpu) => 1.0 / (1.0 / figures.cpu_decode_s.max(1e-9) + 1.0 / gpu.max(1e-9)),
        None => figures.cpu_decode_s,
    }
}

fn finish(figures: &mut LayoutFigures, sample_bytes: u64) {
    let decode = decode_s(figures);
    figures.limited_by = if figures.read_s >= decode {
        "reads"
    } else {
        "decoding"
    };
    figures.feed_bytes_per_s = sample_bytes as f64 / figures.read_s.max(decode).max(1e-9);
}

/// Where a layout with `figures` decodes best beside a model training on the GPU (`gpu`: one
/// was measured), and why. Where every core decodes the sample no slower than it is read, the
/// GPU adds nothing to the feed and its time is the model's: beside setup B's model on whole
/// fields in blosc-lz4, which this names (every core 4.3 ms for the sample, read in 5.1), CPU
/// decoding trained at 96% of synthetic, GPU decoding at 78-85% and `auto` at 65-67% (H200,
/// 2026-11-29; docs/training.md). Otherwise `auto` decodes on the CPU first and calls the GPU
/// in for the part the model's pace asks.
fn decode_side(figures: &LayoutFigures, gpu: bool) -> (&'static str, String) {
    let mb_per_s = |seconds: f64| figures.decoded_bytes as f64 / seconds.max(1e-9) / 1e6;
    let (cpu, read) = (mb_per_s(figures.cpu_decode_s), mb_per_s(figures.read_s));
    let cores = format!("every CPU core decodes it at {cpu:.1} MB/s");
    if !gpu {
        return ("cpu", format!("{cores}; no GPU was measured"));
    }
    if figures.cpu_decode_s <= figures.read_s {
        let reason = format!(
            "{cores}, no slower than it is read ({read:.1} MB/s): the GPU would add nothing to the feed, and its time is left to the model"
        );
        return ("cpu", reason);
    }
    let reason = format!(
        "{cores}, slower than it is read ({read:.1} MB/s): auto decodes on the CPU first and calls the GPU in for what the consumer's pace asks"
    );
    ("auto", reason)
}

/// The store's measured read rates, applied to another layout's objects and bytes.
struct ReadModel {
    bytes_per_s: f64,
    request_s: f64,
    in_flight: usize,
}

impl ReadModel {
    fn read_s(&self, stored_bytes: u64, objects: u64) -> f64 {
        let bandwidth = stored_bytes as f64 / self.bytes_per_s.max(1.0);
        let requests = objects as f64 * self.request_s / self.in_flight.max(1) as f64;
        bandwidth.max(requests)
    }
}

/// Whether the store's own layout fed at least as fast as the fastest candidate: then no
/// candidate is worth a rewrite.
fn keeps_store_layout(source: &LayoutFigures, best: &LayoutFigures) -> bool {
    source.feed_bytes_per_s >= best.feed_bytes_per_s
}

fn keep_reason(source: &LayoutFigures, best: &LayoutFigures) -> String {
    format!(
        "the store's own layout: it feeds {:.1} MB/s decoded, and the fastest other layout measured, {}, {:.1} MB/s ({:.2}x): keep it",
        source.feed_bytes_per_s / 1e6,
        best.name,
        best.feed_bytes_per_s / 1e6,
        best.feed_bytes_per_s / source.feed_bytes_per_s.max(1e-9)
    )
}

fn reason(
    best: &LayoutFigures,
    source: &LayoutFigures,
    all: &[LayoutFigures],
    rates: &ReadModel,
) -> String {
    let mb = |bytes_per_s: f64| bytes_per_s / 1e6;
    let mut text = format!(
        "{} feeds {:.1} MB/s decoded, {:.2}x the store's layout ({:.1} MB/s), limited by {}",
        best.name,
        mb(best.feed_bytes_per_s),
        best.feed_bytes_per_s / source.feed_bytes_per_s.max(1e-9),
        mb(source.feed_bytes_per_s),
        best.limited_by,
    );
    if best.limited_by == "reads" {
        let by_requests = best.objects as f64 * rates.request_s / rates.in_flight.max(1) as f64
            >= best.stored_bytes as f64 / rates.bytes_per_s.max(1.0);
        if by_requests {
            text.push_str(&format!(
                ": requests set the pace here ({:.1} ms each, {} in flight), so fewer, larger objects win ({} for the sample)",
                rates.request_s * 1e3,
                rates.in_flight,
                best.objects
            ));
        } else {
            text.push_str(&format!(
                ": the store's bandwidth ({:.1} MB/s) sets the pace, so the smallest stored size wins ({:.2} MB for the sample, ratio {:.2})",
                mb(rates.bytes_per_s),
                best.stored_bytes as f64 / 1e6,
                best.decoded_bytes as f64 / best.stored_bytes.max(1) as f64
            ));
        }
    } else {
        let fastest_decode = all.iter().map(decode_s).fold(f64::INFINITY, f64::min);
        text.push_str(&format!(
            ": this machine decodes it at {:.1} MB/s (the fastest candidate to decode: {:.1} MB/s) and reads it faster than that",
            mb(best.decoded_bytes as f64 / decode_s(best).max(1e-9)),
            mb(best.decoded_bytes as f64 / fastest_decode.max(1e-9)),
        ));
    }
    text.push('.');
    text
}

#[cfg(test)]
mod tests {
    use super::*;

    fn figures(name: &str, feed_bytes_per_s: f64) -> LayoutFigures {
        LayoutFigures {
            name: name.to_string(),
            chunk: vec![1, 640, 1280],
            shard: None,
            codecs: vec!["zstd".into()],
            objects: 8,
            stored_bytes: 1 << 20,
            decoded_bytes: 2 << 20,
            read_s: 0.01,
            cpu_decode_s: 0.01,
            gpu_decode_s: None,
            feed_bytes_per_s,
            limited_by: "reads",
        }
    }

    #[test]
    fn a_slower_candidate_is_never_recommended_over_the_store() {
        let source = figures("the store's layout", 100e6);
        let slower = figures("tiles 320 x 640", 42e6);
        assert!(keeps_store_layout(&source, &slower));
        let text = keep_reason(&source, &slower);
        assert!(text.contains("keep it") && text.contains("0.42x"), "{text}");
        assert!(!keeps_store_layout(&source, &figures("shards", 150e6)));
    }

    #[test]
    fn the_cores_alone_decode_a_layout_they_decode_as_fast_as_it_is_read() {
        let mut layout = figures("whole fields, blosc-lz4", 400e6);
        (layout.read_s, layout.cpu_decode_s) = (0.0051, 0.0043);
        let (side, why) = decode_side(&layout, true);
        assert_eq!(side, "cpu");
        assert!(why.contains("no slower than it is read"), "{why}");
        layout.cpu_decode_s = 0.0136;
        let (side, why) = decode_side(&layout, true);
        assert_eq!(side, "auto");
        assert!(why.contains("154.2 MB/s"), "{why}");
        assert_eq!(decode_side(&layout, false).0, "cpu");
    }
}
