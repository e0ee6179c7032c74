//! Test support shared by this crate's tests and the GPU suite (feature `testing`): stores of
//! random data in every supported data type and codec chain, written by zarrs, a check that
//! a batch decoder gives exactly what the CPU path gives, and the calling thread's CPU clock.

use std::borrow::Cow;
use std::path::Path;
use std::sync::Arc;

use futures::{stream, TryStreamExt};
use rayon::prelude::*;
use serde_json::{json, Value};
use zarrpipe_core::{BatchStats, DType};
use zarrpipe_store::{ChunkRequest, Dataset, EncodedChunk, FetchExt};
use zarrs::array::{Array, ArrayBytes, ArrayMetadata};
use zarrs::filesystem::FilesystemStore;

use crate::{decode_on_cpu, ChunkRuns, DecodedChunk, PendingChunks, Result};

pub use crate::decode_clock::thread_cpu_time;

/// One generated array: a data type, a codec chain and a chunking.
#[derive(Clone, Debug)]
pub struct Case {
    /// The array's name: data type, chain, and chunk size along the last axis.
    pub name: String,
    /// The element type.
    pub dtype: DType,
    /// The Zarr v3 `codecs` array.
    pub codecs: Value,
    /// The array's shape.
    pub shape: Vec<u64>,
    /// The chunk shape.
    pub chunks: Vec<u64>,
}

const DTYPES: [DType; 11] = [
    DType::Bool,
    DType::Int8,
    DType::UInt8,
    DType::Int16,
    DType::UInt16,
    DType::Int32,
    DType::UInt32,
    DType::Int64,
    DType::UInt64,
    DType::Float32,
    DType::Float64,
];

fn bytes(endian: &str) -> Value {
    json!({"name": "bytes", "configuration": {"endian": endian}})
}

fn blosc(cname: &str, shuffle: &str, typesize: usize) -> Value {
    json!({"name": "blosc", "configuration": {
        "cname": cname, "clevel": 5, "shuffle": shuffle, "typesize": typesize, "blocksize": 0}})
}

/// The codec chains every data type is tried with: (label, chain).
fn chains(dtype: DType, shape: &[u64]) -> Vec<(&'static str, Value)> {
    let size = dtype.size();
    let zstd = json!({"name": "zstd", "configuration": {"level": 3, "checksum": false}});
    let gzip = json!({"name": "gzip", "configuration": {"level": 5}});
    // Inner chunks that tile the shard without being contiguous runs of it.
    let smallest_divisor = |n: u64| (2..=n).find(|&d| n.is_multiple_of(d)).unwrap_or(1);
    let inner: Vec<u64> = shape.iter().map(|&n| n / smallest_divisor(n)).collect();
    let row: Vec<u64> = std::iter::once(1)
        .chain(shape[1..].iter().copied())
        .collect();
    let shard = |inner: Vec<u64>| {
        json!([{"name": "sharding_indexed", "configuration": {
            "chunk_shape": inner,
            "codecs": [bytes("little"), zstd.clone()],
            "index_codecs": [bytes("little"), {"name": "crc32c"}],
            "index_location": "end"}}])
    };
    let order: Vec<usize> = (0..shape.len()).rev().collect();
    let mut chains = vec![
        ("raw", json!([bytes("little")])),
        ("raw_big", json!([bytes("big")])),
        ("zstd", json!([bytes("little"), zstd.clone()])),
        ("gzip_big", json!([bytes("big"), gzip])),
        (
            "zlib",
            json!([bytes("little"), {"name": "numcodecs.zlib", "configuration": {"level": 4}}]),
        ),
        (
            "zstd_crc32c",
            json!([bytes("little"), zstd.clone(), {"name": "crc32c"}]),
        ),
        (
            "shuffle_zstd",
            json!([bytes("little"),
            {"name": "numcodecs.shuffle", "configuration": {"elementsize": size}}, zstd.clone()]),
        ),
        (
            "transpose_zstd",
            json!([{"name": "transpose", "configuration": {"order": order}},
            bytes("little"), zstd.clone()]),
        ),
        (
            "blosc_lz4_shuffle",
            json!([bytes("little"), blosc("lz4", "shuffle", size)]),
        ),
        (
            "blosc_lz4_bitshuffle",
            json!([bytes("little"), blosc("lz4", "bitshuffle", size)]),
        ),
        (
            "blosc_lz4hc_noshuffle",
            json!([bytes("little"), blosc("lz4hc", "noshuffle", size)]),
        ),
        (
            "blosc_zstd_shuffle",
            json!([bytes("little"), blosc("zstd", "shuffle", size)]),
        ),
        (
            "blosc_zlib_bitshuffle",
            json!([bytes("little"), blosc("zlib", "bitshuffle", size)]),
        ),
        (
            "blosc_blosclz_shuffle",
            json!([bytes("little"), blosc("blosclz", "shuffle", size)]),
        ),
        ("shard_blocks", shard(inner.clone())),
        ("shard_rows", shard(row)),
    ];
    let Some(numpy) = numpy_name(dtype) else {
        return chains;
    };
    // Floats packed into 16-bit integers (offset not exact in f32), integers into bytes, and
    // no cast at all; stored big-endian and shuffled in one chain, inside shards in another.
    let packed = if dtype.zarr_name().starts_with("float") {
        "<i2"
    } else {
        "u1"
    };
    let scale_offset = |astype: Option<&str>| {
        let mut config = json!({"offset": 273.15, "scale": 100.0, "dtype": numpy});
        if let Some(astype) = astype {
            config["astype"] = json!(astype);
            config["scale"] = json!(if packed == "u1" { 0.25 } else { 100.0 });
        }
        json!({"name": "numcodecs.fixedscaleoffset", "configuration": config})
    };
    let stored_size = if packed == "u1" { 1 } else { 2 };
    chains.extend([
        (
            "scaleoffset_zstd",
            json!([scale_offset(Some(packed)), bytes("little"), zstd.clone()]),
        ),
        (
            "scaleoffset_big_shuffle",
            json!([scale_offset(Some(packed)), bytes("big"),
            {"name": "numcodecs.shuffle", "configuration": {"elementsize": stored_size}},
            zstd.clone()]),
        ),
        (
            "scaleoffset_nocast_transpose",
            json!([scale_offset(None),
            {"name": "transpose", "configuration": {"order": order}}, bytes("little"), zstd.clone()]),
        ),
        (
            "scaleoffset_in_shard",
            json!([{"name": "sharding_indexed", "configuration": {
                "chunk_shape": inner,
                "codecs": [scale_offset(Some(packed)), bytes("little"), zstd],
                "index_codecs": [bytes("little"), {"name": "crc32c"}],
                "index_location": "end"}}]),
        ),
    ]);
    chains
}

/// numpy's name of `dtype`, as numcodecs configurations spell it. zarrs 0.23 reads no name of
/// int8 here (it prefixes `|i1` with `<`).
fn numpy_name(dtype: DType) -> Option<&'static str> {
    Some(match dtype {
        DType::UInt8 => "u1",
        DType::Int16 => "<i2",
        DType::UInt16 => "<u2",
        DType::Int32 => "<i4",
        DType::UInt32 => "<u4",
        DType::Int64 => "<i8",
        DType::UInt64 => "<u8",
        DType::Float32 => "<f4",
        DType::Float64 => "<f8",
        _ => return None,
    })
}

/// Every case: all data types with every chain on small chunks with partial edges, and a few
/// types on chunks large enough for several blosc blocks with a leftover block.
pub fn cases() -> Vec<Case> {
    let mut cases = Vec::new();
    let small = (vec![37u64, 45], vec![16u64, 20]);
    let large = (vec![70u64, 1100], vec![63u64, 1000]);
    for dtype in DTYPES {
        let mut shapes = vec![small.clone()];
        if matches!(
            dtype,
            DType::UInt8 | DType::Int16 | DType::Float32 | DType::Float64
        ) {
            shapes.push(large.clone());
        }
        for (shape, chunks) in shapes {
            for (label, codecs) in chains(dtype, &chunks) {
                cases.push(Case {
                    name: format!("{}_{label}_{}", dtype.zarr_name(), chunks[1]),
                    dtype,
                    codecs,
                    shape: shape.clone(),
                    chunks: chunks.clone(),
                });
            }
        }
    }
    cases
}

/// Smooth values with noise, so every codec compresses them (and some blosc streams stay
/// raw): like real fields, never constant.
pub fn random_bytes(dtype: DType, count: usize, seed: u64) -> Vec<u8> {
    let mut state = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    let mut next = move || {
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        state
    };
    let mut out = Vec::with_capacity(count * dtype.size());
    for i in 0..count {
        let smooth = ((i as f64) * 0.01).sin() * 100.0;
        let noise = (next() % 1000) as f64 / 100.0;
        let value = smooth + noise;
        match dtype {
            DType::Bool => out.push((next() % 2) as u8),
            DType::Int8 | DType::UInt8 => out.push(value as i64 as u8),
            DType::Int16 | DType::UInt16 | DType::Float16 | DType::BFloat16 => {
                out.extend((value as i64 as i16).to_ne_bytes())
            }
            DType::Int32 | DType::UInt32 => out.extend((value as i32).to_ne_bytes()),
            DType::Int64 | DType::UInt64 => out.extend(((value * 1e6) as i64).to_ne_bytes()),
            DType::Float32 => out.extend(((value * 100.0).round() as f32 / 100.0).to_ne_bytes()),
            DType::Float64 => out.extend(value.to_ne_bytes()),
        }
    }
    out
}

/// Writes every case as an array of a Zarr v3 group at `dir`; the second chunk of each array
/// in C order (chunk (0, 1) of a 2-D grid of several columns) is left out, so missing chunks
/// are covered too.
pub fn write_cases(dir: &Path, cases: &[Case], seed: u64) {
    let store = Arc::new(FilesystemStore::new(dir).expect("a writable directory"));
    std::fs::write(
        dir.join("zarr.json"),
        r#"{"zarr_format": 3, "node_type": "group", "attributes": {}}"#,
    )
    .expect("group metadata written");
    for (index, case) in cases.iter().enumerate() {
        let fill = match case.dtype {
            DType::Float32 | DType::Float64 => json!("NaN"),
            DType::Bool => json!(false),
            _ => json!(7),
        };
        let dims: Vec<String> = match case.shape.len() {
            2 => vec!["y".into(), "x".into()],
            rank => (0..rank).map(|axis| format!("d{axis}")).collect(),
        };
        let metadata = json!({
            "zarr_format": 3, "node_type": "array", "shape": case.shape,
            "data_type": case.dtype.zarr_name(),
            "chunk_grid": {"name": "regular", "configuration": {"chunk_shape": case.chunks}},
            "chunk_key_encoding": {"name": "default", "configuration": {"separator": "/"}},
            "fill_value": fill, "codecs": case.codecs, "attributes": {},
            "dimension_names": dims,
        });
        let metadata: ArrayMetadata =
            serde_json::from_value(metadata).expect("valid array metadata");
        let array = Array::new_with_metadata(store.clone(), &format!("/{}", case.name), metadata)
            .unwrap_or_else(|error| panic!("{}: {error}", case.name));
        array.store_metadata().expect("metadata stored");
        let grid = array.chunk_grid_shape().to_vec();
        let positions: Vec<Vec<u64>> = (0..grid.iter().product::<u64>())
            .filter(|&number| number != 1)
            .map(|number| nth_position(number, &grid))
            .collect();
        positions.into_par_iter().for_each(|position| {
            let subset = array.chunk_subset(&position).expect("chunk in grid");
            let count = subset.num_elements_usize();
            // Seeded as the 2-D cases always were: by the first two chunk indices.
            let [y, x] = [0, 1].map(|axis| position.get(axis).copied().unwrap_or(0));
            let rest: u64 = position.iter().skip(2).sum();
            let seed = seed + index as u64 * 131 + y * 7 + x + rest * 1009;
            let data = random_bytes(case.dtype, count, seed);
            array
                .store_chunk(&position, ArrayBytes::new_flen(Cow::Owned(data)))
                .unwrap_or_else(|error| panic!("{}: {error}", case.name));
        });
    }
}

/// The C-order `number`-th position of `grid`.
fn nth_position(mut number: u64, grid: &[u64]) -> Vec<u64> {
    let mut position = vec![0; grid.len()];
    for (at, &extent) in position.iter_mut().zip(grid).rev() {
        *at = number % extent;
        number /= extent;
    }
    position
}

/// Every chunk of every variable of `dataset` (present or missing), fetched.
pub async fn fetch_all(dataset: &Dataset) -> Vec<EncodedChunk> {
    let mut requests = Vec::new();
    for variable in dataset.variables() {
        let all: Vec<std::ops::Range<u64>> = variable.shape().iter().map(|&n| 0..n).collect();
        for indices in variable.chunks_in(&all) {
            requests.push(ChunkRequest::new(Arc::clone(variable), indices));
        }
    }
    stream::iter(requests)
        .fetch(32)
        .try_collect()
        .await
        .expect("every chunk fetched")
}

/// Every chunk of the fixture cases written with `seed`, the directory that holds them and
/// the runtime that fetched them.
#[cfg(test)]
pub(crate) fn fixture_chunks(
    seed: u64,
) -> (
    tempfile::TempDir,
    tokio::runtime::Runtime,
    Vec<EncodedChunk>,
) {
    let dir = tempfile::tempdir().unwrap();
    write_cases(dir.path(), &cases(), seed);
    let runtime = tokio::runtime::Builder::new_current_thread()
        .build()
        .unwrap();
    let chunks = runtime.block_on(async {
        let dataset = Dataset::open(dir.path().to_str().unwrap()).await.unwrap();
        fetch_all(&dataset).await
    });
    (dir, runtime, chunks)
}

/// One buffer per chunk of `pending`, of its decoded size, each filled with 0xAB so that bytes
/// a decoder leaves unwritten show.
pub fn marked_buffers(pending: &PendingChunks) -> Vec<Vec<u8>> {
    (0..pending.chunks().len())
        .map(|index| vec![0xAB; pending.decoded_len(index)])
        .collect()
}

/// Decodes `pending` in place into one buffer per chunk, each filled with 0xAB first so that
/// bytes a decoder leaves unwritten show; returns the buffers, in the part's order, and the
/// part's stats.
pub fn decode_into_own_buffers(pending: PendingChunks) -> (Vec<Vec<u8>>, BatchStats) {
    let mut memory = marked_buffers(&pending);
    let runs = ChunkRuns::new(memory.iter_mut().map(Vec::as_mut_slice).collect());
    let stats = pending.decode_into(&runs).unwrap();
    drop(runs);
    (memory, stats)
}

/// Decodes a chunk with zarrs' codecs, whatever its chain (after the CPU path's frame checks,
/// a panic caught as in [`decode_on_cpu`]): the reference [`decode_on_cpu`]'s direct decoding
/// is checked against.
pub fn decode_with_zarrs(chunk: EncodedChunk) -> Result<DecodedChunk> {
    crate::chunk_decode::decode_with_zarrs(chunk)
}

/// Checks each decoded chunk against the CPU path ([`decode_on_cpu`]: the codec libraries, or
/// zarrs), bit for bit; returns how many chunks were compared. Chunks the CPU path cannot
/// decode are skipped.
pub fn compare_with_cpu(chunks: &[EncodedChunk], decoded: &[Result<DecodedChunk>]) -> usize {
    assert_eq!(chunks.len(), decoded.len());
    let mut compared = 0;
    for (chunk, decoded) in chunks.iter().zip(decoded) {
        let Ok(expected) = decode_on_cpu(chunk.clone()) else {
            continue;
        };
        let what = chunk.request.to_string();
        let decoded = decoded
            .as_ref()
            .unwrap_or_else(|error| panic!("{what}: {}", chain(error)));
        assert_eq!(decoded.bytes.len(), expected.bytes.len(), "{what}");
        if decoded.bytes != expected.bytes {
            let first = decoded
                .bytes
                .iter()
                .zip(&expected.bytes)
                .position(|(a, b)| a != b)
                .unwrap_or(0);
            panic!("{what}: bytes differ from the CPU's, first at byte {first}");
        }
        compared += 1;
    }
    compared
}

/// An error with its sources, one line.
pub fn chain(error: &dyn std::error::Error) -> String {
    let mut text = error.to_string();
    let mut source = error.source();
    while let Some(cause) = source {
        text.push_str(&format!(": {cause}"));
        source = cause.source();
    }
    text
}
