//! Shards decoded in place ([`DirectShard`](super::DirectShard)) against zarrs' sharding
//! codec, bit for bit: stores written by zarrs with inner chains of zstd, gzip, blosc with
//! byte and bit shuffles, numcodecs shuffle, zlib under a checksum on big-endian bytes and raw
//! bytes; indexes at the start and end, with and without a checksum; inner chunks that are runs
//! of the shard and ones that are not, in 2 and 4 dimensions, with shards past the array's
//! edge; shards missing, inner chunks missing, and reads of some inner chunks. The fixtures
//! zarr-python wrote, too; and a timing against zarrs (ignored).

use std::path::Path;
use std::sync::Arc;

use bytes::Bytes;
use rayon::prelude::*;
use serde_json::{json, Value};
use zarrpipe_core::DType;
use zarrpipe_store::{fetch_chunk, ChunkRequest, Dataset, EncodedChunk};

use crate::chain::{GpuChain, ShardSpec, Step};
use crate::chunk_decode::{direct_decoder, DirectDecoder};
use crate::testing::{decode_into_own_buffers, decode_with_zarrs, fetch_all, write_cases, Case};
use crate::{decode_on_cpu, ChunkRuns, CpuDecoder, PendingChunks};

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap()
}

fn bytes_codec(endian: &str) -> Value {
    json!({"name": "bytes", "configuration": {"endian": endian}})
}

/// The inner chains tried: (label, v3 codecs) for elements of `size` bytes.
fn inner_chains(size: usize) -> Vec<(&'static str, Value)> {
    let zstd = json!({"name": "zstd", "configuration": {"level": 3, "checksum": false}});
    let blosc = |cname: &str, shuffle: &str| {
        json!({"name": "blosc", "configuration": {
            "cname": cname, "clevel": 5, "shuffle": shuffle, "typesize": size, "blocksize": 0}})
    };
    vec![
        ("zstd", json!([bytes_codec("little"), zstd.clone()])),
        (
            "gzip",
            json!([bytes_codec("little"), {"name": "gzip", "configuration": {"level": 5}}]),
        ),
        (
            "blosc_shuffle",
            json!([bytes_codec("little"), blosc("lz4", "shuffle")]),
        ),
        (
            "blosc_bitshuffle",
            json!([bytes_codec("little"), blosc("zstd", "bitshuffle")]),
        ),
        (
            "shuffle_zstd",
            json!([bytes_codec("little"),
                {"name": "numcodecs.shuffle", "configuration": {"elementsize": size}}, zstd]),
        ),
        (
            "big_zlib_crc32c",
            json!([bytes_codec("big"),
                {"name": "numcodecs.zlib", "configuration": {"level": 4}}, {"name": "crc32c"}]),
        ),
        ("raw", json!([bytes_codec("little")])),
    ]
}

/// (label, array shape, shard shape, inner chunk shape): inner chunks that are runs of the
/// shard and ones that are not, in 2 and 4 dimensions; every array has partial edge shards.
type Layout = (&'static str, Vec<u64>, Vec<u64>, Vec<u64>);

fn layouts() -> Vec<Layout> {
    vec![
        ("blocks", vec![37, 45], vec![16, 20], vec![8, 10]),
        ("rows", vec![37, 45], vec![16, 20], vec![2, 20]),
        (
            "tiles",
            vec![5, 5, 24, 40],
            vec![2, 5, 24, 40],
            vec![1, 1, 8, 10],
        ),
        (
            "fields",
            vec![5, 5, 24, 40],
            vec![2, 5, 24, 40],
            vec![1, 1, 8, 40],
        ),
    ]
}

/// Index (checksum, location) variants.
const INDEXES: [(bool, &str); 4] = [
    (true, "end"),
    (false, "end"),
    (true, "start"),
    (false, "start"),
];

fn sharded(inner: &[u64], codecs: Value, (crc32c, location): (bool, &str)) -> Value {
    let mut index = vec![bytes_codec("little")];
    if crc32c {
        index.push(json!({"name": "crc32c"}));
    }
    json!([{"name": "sharding_indexed", "configuration": {
        "chunk_shape": inner, "codecs": codecs, "index_codecs": index,
        "index_location": location}}])
}

/// Every index variant with zstd on every layout, every inner chain on every layout (indexes
/// taking turns), and other element types on blocks.
fn cases() -> Vec<Case> {
    let mut cases = Vec::new();
    let mut push = |dtype: DType, layout: &Layout, label: &str, codecs: Value, index| {
        let (name, shape, shard, inner) = layout;
        let (crc32c, location) = index;
        let crc = if crc32c { "crc" } else { "nocrc" };
        cases.push(Case {
            name: format!("{}_{name}_{label}_{location}_{crc}", dtype.zarr_name()),
            dtype,
            codecs: sharded(inner, codecs, index),
            shape: shape.clone(),
            chunks: shard.clone(),
        });
    };
    for (turn, layout) in layouts().iter().enumerate() {
        for index in INDEXES {
            push(
                DType::Float32,
                layout,
                "zstd",
                inner_chains(4)[0].1.clone(),
                index,
            );
        }
        for (number, (label, codecs)) in inner_chains(4).into_iter().enumerate().skip(1) {
            push(
                DType::Float32,
                layout,
                label,
                codecs,
                INDEXES[(turn + number) % 4],
            );
        }
    }
    let blocks = &layouts()[0];
    for (turn, dtype) in [DType::UInt8, DType::Int16, DType::Float64, DType::Bool]
        .into_iter()
        .enumerate()
    {
        for (label, codecs) in inner_chains(dtype.size()) {
            push(dtype, blocks, label, codecs, INDEXES[turn]);
        }
    }
    cases
}

fn open(dir: &Path) -> (tokio::runtime::Runtime, Dataset) {
    let runtime = runtime();
    let dataset = runtime
        .block_on(Dataset::open(dir.to_str().unwrap()))
        .unwrap();
    (runtime, dataset)
}

/// The sharding step of `chunk`'s chain, and the inner chunks in its shard.
fn shard_spec(chunk: &EncodedChunk) -> (ShardSpec, usize) {
    let variable = &chunk.request.variable;
    let chain = GpuChain::of(variable).unwrap();
    let [Step::Sharding(spec)] = chain.steps.as_slice() else {
        panic!("{}: not sharded", chunk.request)
    };
    let count = variable.inner_chunks_per_shard().unwrap() as usize;
    (*spec.clone(), count)
}

/// `chunk` decoded both ways: the same bytes, or both an error.
fn same_as_zarrs(chunk: &EncodedChunk, what: &str) {
    let direct = decode_on_cpu(chunk.clone());
    let zarrs = decode_with_zarrs(chunk.clone());
    match (&direct, &zarrs) {
        (Ok(direct), Ok(zarrs)) => {
            assert_eq!(direct.bytes.len(), zarrs.bytes.len(), "{what}");
            if direct.bytes != zarrs.bytes {
                let first = (direct.bytes.iter().zip(&zarrs.bytes)).position(|(a, b)| a != b);
                panic!("{what}: bytes differ from zarrs', first at byte {first:?}");
            }
            assert_eq!(direct.missing, zarrs.missing, "{what}");
            assert_eq!(direct.stored_len, zarrs.stored_len, "{what}");
        }
        _ => panic!("{what}: in place {direct:?}, zarrs {zarrs:?}"),
    }
}

/// `stored`, a shard of `count` inner chunks, with every inner chunk whose number `missing`
/// picks marked missing in its index (checksum recomputed).
fn with_missing(
    stored: &[u8],
    spec: &ShardSpec,
    count: usize,
    missing: impl Fn(usize) -> bool,
) -> Bytes {
    let mut bytes = stored.to_vec();
    let entries = count * 16;
    let start = match spec.index_at_end {
        true => bytes.len() - entries - if spec.index_crc32c { 4 } else { 0 },
        false => 0,
    };
    for number in (0..count).filter(|&number| missing(number)) {
        let at = start + number * 16;
        bytes[at..at + 16].fill(0xff);
    }
    if spec.index_crc32c {
        let checksum = crc32c::crc32c(&bytes[start..start + entries]);
        bytes[start + entries..start + entries + 4].copy_from_slice(&checksum.to_le_bytes());
    }
    Bytes::from(bytes)
}

#[test]
fn shards_decode_in_place_as_zarrs_decodes_them() {
    let dir = tempfile::tempdir().unwrap();
    let cases = cases();
    write_cases(dir.path(), &cases, 17);
    let (runtime, dataset) = open(dir.path());
    let chunks = runtime.block_on(fetch_all(&dataset));
    let (mut shards, mut missing_shards, mut partial) = (0, 0, 0);
    for variable in dataset.variables() {
        assert!(
            matches!(direct_decoder(variable), Some(DirectDecoder::Shard(_))),
            "{} decodes through zarrs",
            variable.name()
        );
    }
    for chunk in &chunks {
        let what = chunk.request.to_string();
        same_as_zarrs(chunk, &what);
        let Some(stored) = &chunk.bytes else {
            missing_shards += 1;
            continue;
        };
        shards += 1;
        // Inner chunks missing from the index: every third, then all of them.
        let (spec, count) = shard_spec(chunk);
        for (label, every) in [("every third", 3), ("every", 1)] {
            let mut sparse = chunk.clone();
            sparse.bytes = Some(with_missing(stored, &spec, count, |n| n % every == 0));
            same_as_zarrs(&sparse, &format!("{what}, {label} inner chunk missing"));
        }
    }
    // Reads of some inner chunks: the store hands over a compact shard of just those.
    for chunk in chunks.iter().filter(|chunk| chunk.bytes.is_some()) {
        let variable = &chunk.request.variable;
        let count = variable.inner_chunks_per_shard().unwrap();
        let picked: Vec<u64> = [0, 2, count - 1]
            .into_iter()
            .filter(|&n| n < count)
            .collect();
        if picked.len() as u64 >= count {
            continue;
        }
        let request =
            ChunkRequest::with_inner(Arc::clone(variable), chunk.request.indices.clone(), picked);
        let read = runtime.block_on(fetch_chunk(request)).unwrap();
        assert!(read.stored_len() < chunk.stored_len(), "{}", read.request);
        same_as_zarrs(
            &read,
            &format!("{}, inner chunks 0, 2 and last", read.request),
        );
        partial += 1;
    }
    assert!(
        shards > 100 && missing_shards > 10 && partial > 100,
        "{shards} {missing_shards} {partial}"
    );
}

/// Decoded into a batch's memory, as the collator has a CPU decoder's chunks decoded: in place,
/// none counted as copied, the same bytes as zarrs'.
#[test]
fn shards_decode_into_the_batch_uncopied() {
    let dir = tempfile::tempdir().unwrap();
    let cases: Vec<Case> = cases()
        .into_iter()
        .filter(|case| case.dtype == DType::Float32)
        .collect();
    write_cases(dir.path(), &cases, 23);
    let (runtime, dataset) = open(dir.path());
    let chunks = runtime.block_on(fetch_all(&dataset));
    let expected: Vec<Vec<u8>> = chunks
        .iter()
        .map(|chunk| decode_with_zarrs(chunk.clone()).unwrap().bytes)
        .collect();
    // One thread and two: shards decode on several threads when the batch has few chunks.
    for threads in [1, 2] {
        let pool = rayon::ThreadPoolBuilder::new().num_threads(threads).build();
        let decoder = CpuDecoder::with_pool(Arc::new(pool.unwrap()));
        for batch in [0..chunks.len(), 0..1, 1..2] {
            let pending = PendingChunks::new(chunks[batch.clone()].to_vec(), decoder.clone());
            let (memory, stats) = decode_into_own_buffers(pending);
            assert_eq!(stats.cpu_decoded_chunks, batch.len() as u64);
            assert_eq!(stats.cpu_copied_chunks, 0);
            for (decoded, index) in memory.iter().zip(batch) {
                assert!(
                    *decoded == expected[index],
                    "{} on {threads} threads",
                    chunks[index].request
                );
            }
        }
    }
}

/// The sharded arrays zarr-python wrote (one with inner chunks left out as fill values).
#[test]
fn zarr_python_shards_decode_in_place_as_zarrs_decodes_them() {
    let store = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../tests/fixtures/stores/zp3_v3");
    let (runtime, dataset) = open(&store);
    let chunks = runtime.block_on(fetch_all(&dataset));
    let sharded: Vec<_> = chunks
        .iter()
        .filter(|chunk| chunk.request.variable.name().contains("sharded"))
        .collect();
    assert!(sharded.len() >= 2);
    for chunk in sharded {
        assert!(matches!(
            direct_decoder(&chunk.request.variable),
            Some(DirectDecoder::Shard(_))
        ));
        same_as_zarrs(chunk, &chunk.request.to_string());
    }
}

/// Sharded chains the codec libraries cannot decode alone still decode, through zarrs.
#[test]
fn other_inner_chains_stay_with_zarrs() {
    let transpose = json!([{"name": "transpose", "configuration": {"order": [1, 0]}},
        bytes_codec("little"), {"name": "zstd", "configuration": {"level": 1, "checksum": false}}]);
    let case = Case {
        name: "float32_shard_transpose".into(),
        dtype: DType::Float32,
        codecs: sharded(&[8, 10], transpose, (true, "end")),
        shape: vec![37, 45],
        chunks: vec![16, 20],
    };
    let dir = tempfile::tempdir().unwrap();
    write_cases(dir.path(), &[case], 3);
    let (runtime, dataset) = open(dir.path());
    let chunks = runtime.block_on(fetch_all(&dataset));
    assert!(direct_decoder(&chunks[0].request.variable).is_none());
    for chunk in &chunks {
        same_as_zarrs(chunk, &chunk.request.to_string());
    }
}

/// Errors name the variable and the shard's key, and say which inner chunk failed.
#[test]
fn corrupt_shards_name_their_chunk() {
    let dir = tempfile::tempdir().unwrap();
    let case = cases()
        .into_iter()
        .find(|case| case.name == "float32_blocks_zstd_end_crc")
        .unwrap();
    write_cases(dir.path(), &[case], 5);
    let (runtime, dataset) = open(dir.path());
    let chunk = runtime
        .block_on(fetch_all(&dataset))
        .into_iter()
        .find(|chunk| chunk.bytes.is_some())
        .unwrap();
    let key = chunk.request.key();
    let stored = chunk.bytes.clone().unwrap();
    let mut bad_index = chunk.clone();
    bad_index.bytes = Some(stored.slice(..stored.len() - 1));
    let mut bad_inner = chunk.clone();
    let mut bytes = stored.to_vec();
    // The zstd frame stored first (the index is at the end).
    bytes[..8].fill(0x55);
    bad_inner.bytes = Some(Bytes::from(bytes));
    for (what, chunk) in [("index", bad_index), ("inner chunk", bad_inner)] {
        let error = decode_on_cpu(chunk).unwrap_err();
        let message = crate::testing::chain(&error);
        assert!(
            message.contains(&key) && message.contains("float32_blocks"),
            "{what}: {message}"
        );
        if what == "index" {
            assert!(matches!(error, crate::Error::Frame { .. }), "{message}");
        } else {
            assert!(message.contains("inner chunk"), "{message}");
        }
    }
}

/// Decoded bytes a second of W1-like shards, zarrs against in place: into memory of each
/// shard's own (a split decoder's CPU side), and into a batch's reused memory (the collator's),
/// where zarrs' result is copied. This test binary uses the system allocator; the program's
/// `RetainingAllocator` reuses freed shard-sized blocks.
#[test]
#[ignore = "a timing, not a check: cargo test -p zarrpipe-codec-gpu --lib --release -- \
            --ignored --nocapture shard_decode_throughput"]
fn shard_decode_throughput() {
    let zstd = json!([bytes_codec("little"),
        {"name": "zstd", "configuration": {"level": 3, "checksum": false}}]);
    // W1's shards: 4 steps of 13 levels of 640 x 1280 float32, in tiles or whole fields.
    let case = |name: &str, inner: &[u64]| Case {
        name: name.into(),
        dtype: DType::Float32,
        codecs: sharded(inner, zstd.clone(), (true, "end")),
        shape: vec![12, 13, 640, 1280],
        chunks: vec![4, 13, 640, 1280],
    };
    let cases = [
        case("tiles", &[1, 1, 160, 320]),
        case("fields", &[1, 1, 640, 1280]),
    ];
    let dir = tempfile::tempdir().unwrap();
    write_cases(dir.path(), &cases, 1);
    let (runtime, dataset) = open(dir.path());
    let chunks = runtime.block_on(fetch_all(&dataset));
    let threads = rayon::current_num_threads();
    for name in ["tiles", "fields"] {
        let shards: Vec<EncodedChunk> = chunks
            .iter()
            .filter(|chunk| chunk.request.variable.name() == name && chunk.bytes.is_some())
            .cloned()
            .collect();
        let stored: usize = shards.iter().map(EncodedChunk::stored_len).sum();
        let decoded: u64 = shards
            .iter()
            .map(|chunk| chunk.request.variable.decoded_chunk_bytes())
            .sum();
        println!(
            "{name}: {} shards of 4 x 13 x 640 x 1280 float32 (zstd level 3, {:.2} stored bytes per byte)",
            shards.len(),
            stored as f64 / decoded as f64
        );
        let one = rayon::ThreadPoolBuilder::new()
            .num_threads(1)
            .build()
            .unwrap();
        let zarrs = |chunks: &[EncodedChunk]| {
            for chunk in chunks {
                decode_with_zarrs(chunk.clone()).unwrap();
            }
        };
        let own_memory = |chunks: &[EncodedChunk]| {
            for chunk in chunks {
                decode_on_cpu(chunk.clone()).unwrap();
            }
        };
        let mut memory: Vec<Vec<u8>> = shards
            .iter()
            .map(|chunk| vec![0; chunk.request.variable.decoded_chunk_bytes() as usize])
            .collect();
        let memory = std::sync::Mutex::new(&mut memory);
        let batch = |chunks: &[EncodedChunk]| {
            let mut memory = memory.lock().unwrap();
            let pending = PendingChunks::new(chunks.to_vec(), CpuDecoder::new());
            let runs = ChunkRuns::new(memory.iter_mut().map(Vec::as_mut_slice).collect());
            let stats = pending.decode_into(&runs).unwrap();
            assert_eq!(stats.cpu_copied_chunks, 0);
        };
        // The path before: zarrs into memory of its own, copied into the batch.
        let zarrs_batch = |chunks: &[EncodedChunk]| {
            let mut memory = memory.lock().unwrap();
            (chunks.par_iter())
                .zip(memory.par_iter_mut())
                .for_each(|(chunk, memory)| {
                    memory.copy_from_slice(&decode_with_zarrs(chunk.clone()).unwrap().bytes)
                });
        };
        let modes: [(&str, &Decode); 4] = [
            ("zarrs, one shard at a time", &zarrs),
            ("in place, one shard at a time", &own_memory),
            ("zarrs, a batch, copied into it", &zarrs_batch),
            ("in place, a batch", &batch),
        ];
        // Rounds take turns, so that load from elsewhere slows every mode alike; the best
        // round of each counts.
        let mut best = [[f64::INFINITY; 2]; 4];
        for _ in 0..9 {
            for ((_, decode), best) in modes.iter().zip(&mut best) {
                best[0] = best[0].min(seconds(|| decode(&shards)));
                best[1] = best[1].min(one.install(|| seconds(|| decode(&shards))));
            }
        }
        for ((what, _), best) in modes.iter().zip(best) {
            for (threads, seconds) in [threads, 1].into_iter().zip(best) {
                let rate = decoded as f64 / seconds / 1e9;
                println!("  {what} ({threads} threads): {rate:.2} GB/s decoded");
            }
        }
    }
}

/// A way of decoding shards, for timing.
type Decode<'a> = dyn Fn(&[EncodedChunk]) + Sync + 'a;

fn seconds(work: impl FnOnce()) -> f64 {
    let started = std::time::Instant::now();
    work();
    started.elapsed().as_secs_f64()
}
