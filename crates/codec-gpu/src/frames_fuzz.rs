//! Bounded fuzzing of everything that reads stored bytes before a GPU would: the frame checks
//! (zstd with its entropy tables, blosc, gzip, zlib, lz4), shard index parsing and decode
//! planning, run through the CPU interpreter of GPU plans, and zarrs' own decoding.
//!
//! Real chunks of every generated codec chain (`testing::cases`) are mutated (bytes flipped,
//! cut, appended, or overwritten with boundary numbers such as 2^64 - 6) and decoded both
//! ways. Nothing may panic; zarrs' panics are caught by `decode_on_cpu` and reported as
//! errors, so they count as handled. The same mutations check that the CPU path's frame
//! check refuses exactly what the planner refuses. `cargo test` runs a few hundred cases in
//! seconds; `ZARRPIPE_FUZZ_CASES=100000 cargo test -p zarrpipe-codec-gpu --release --lib fuzz`
//! runs more. A crash found becomes a named case in `regressions` below.

use std::collections::BTreeMap;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::Mutex;

use bytes::Bytes;
use proptest::prelude::*;
use proptest::test_runner::{Config, TestCaseError, TestRunner};
use zarrpipe_core::DType;
use zarrpipe_store::{Dataset, EncodedChunk};

use crate::chain::{Compressor, GpuChain, Step};
use crate::chunk_decode::{direct_decoder, DirectDecoder};
use crate::frame_check::check_chunk;
use crate::frames::{self, shard_index, BloscFrame, FrameError};
use crate::interpret::decode_batch;
use crate::plan::{BatchPlan, ChunkInput};
use crate::testing::{cases, decode_with_zarrs, fetch_all, random_bytes, write_cases};
use crate::{decode_on_cpu, Error};

/// Cases per property: `ZARRPIPE_FUZZ_CASES`, or 256.
fn fuzz_cases() -> u32 {
    std::env::var("ZARRPIPE_FUZZ_CASES")
        .ok()
        .and_then(|cases| cases.parse().ok())
        .unwrap_or(256)
}

/// One change to a chunk's stored bytes.
#[derive(Clone, Debug)]
enum Mutation {
    Flip { at: usize, mask: u8 },
    Cut { keep: usize },
    Append(Vec<u8>),
    Word { at: usize, value: u64 },
}

/// Numbers that break size arithmetic.
const BOUNDARIES: [u64; 10] = [
    0,
    1,
    0xff,
    0xffff,
    0x7fff_ffff,
    0xffff_ffff,
    1 << 32,
    1 << 63,
    u64::MAX - 5,
    u64::MAX,
];

fn mutation() -> impl Strategy<Value = Mutation> {
    prop_oneof![
        4 => (any::<prop::sample::Index>(), 1u8..).prop_map(|(at, mask)| Mutation::Flip {
            at: at.index(usize::MAX),
            mask
        }),
        1 => any::<prop::sample::Index>().prop_map(|keep| Mutation::Cut {
            keep: keep.index(usize::MAX)
        }),
        1 => prop::collection::vec(any::<u8>(), 1..64).prop_map(Mutation::Append),
        2 => (any::<prop::sample::Index>(), prop::sample::select(&BOUNDARIES[..]))
            .prop_map(|(at, value)| Mutation::Word { at: at.index(usize::MAX), value }),
    ]
}

fn mutate(bytes: &[u8], mutations: &[Mutation]) -> Vec<u8> {
    let mut bytes = bytes.to_vec();
    for mutation in mutations {
        let len = bytes.len().max(1);
        match mutation {
            Mutation::Flip { at, mask } => {
                if let Some(byte) = bytes.get_mut(at % len) {
                    *byte ^= mask;
                }
            }
            Mutation::Cut { keep } => bytes.truncate(keep % len),
            Mutation::Append(extra) => bytes.extend_from_slice(extra),
            Mutation::Word { at, value } => {
                // Little-endian, where headers and indexes keep their numbers.
                let at = at % len;
                let end = (at + 8).min(bytes.len());
                let word = value.to_le_bytes();
                bytes[at..end].copy_from_slice(&word[..end - at]);
            }
        }
    }
    bytes
}

/// The stored chunks of every generated case, fetched once per test binary.
fn corpus() -> &'static [EncodedChunk] {
    static CORPUS: std::sync::OnceLock<Vec<EncodedChunk>> = std::sync::OnceLock::new();
    CORPUS.get_or_init(|| {
        let dir = tempfile::tempdir().unwrap();
        // Every chain for three element sizes, on small chunks, and for bytes on chunks of
        // several blosc blocks: the whole set takes long to write in a debug build.
        let cases: Vec<_> = cases()
            .into_iter()
            .filter(|case| matches!(case.dtype, DType::UInt8 | DType::Int16 | DType::Float32))
            .filter(|case| case.chunks[1] < 100 || case.dtype == DType::UInt8)
            .collect();
        write_cases(dir.path(), &cases, 5);
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        let chunks = runtime.block_on(async {
            let dataset = Dataset::open(dir.path().to_str().unwrap()).await.unwrap();
            fetch_all(&dataset).await
        });
        // The chunks hold their bytes; the store may go.
        chunks.into_iter().filter(|c| c.bytes.is_some()).collect()
    })
}

/// Decodes `chunk` through the GPU plan (CPU interpreter) and through zarrs; a panic of
/// zarrpipe's own code fails the case, zarrs' are caught and counted as errors.
fn decode_both_ways(chunk: EncodedChunk) -> Result<(), TestCaseError> {
    let key = chunk.request.key();
    let planned = catch_unwind(AssertUnwindSafe(|| {
        frames::with_table_checks(true, || decode_batch(vec![chunk.clone()], false))
    }));
    let planned = planned.map_err(|payload| {
        TestCaseError::fail(format!(
            "planning or interpreting `{key}` panicked: {}",
            zarrpipe_core::panic_message(payload.as_ref())
        ))
    })?;
    let cpu = decode_on_cpu(chunk);
    // Both lossless: when both decode, they agree (or the frame checks let a lie through).
    if let ([Ok(gpu)], Ok(cpu)) = (&planned[..], &cpu) {
        prop_assert!(
            gpu.bytes == cpu.bytes,
            "`{key}`: the GPU plan and zarrs decode the mutated chunk differently"
        );
    }
    if let Err(Error::Panicked { message, .. }) = &cpu {
        eprintln!("zarrs panicked on mutated `{key}` (caught): {message}");
    }
    Ok(())
}

#[test]
fn mutated_chunks_of_every_codec_chain_never_panic() {
    let corpus = corpus();
    assert!(!corpus.is_empty());
    let mut runner = TestRunner::new(Config {
        cases: fuzz_cases(),
        failure_persistence: None,
        ..Config::default()
    });
    let strategy = (0..corpus.len(), prop::collection::vec(mutation(), 1..4));
    runner
        .run(&strategy, |(index, mutations)| {
            let original = &corpus[index];
            let stored = original.bytes.as_ref().expect("stored chunk");
            let mut chunk = original.clone();
            chunk.bytes = Some(Bytes::from(mutate(stored, &mutations)));
            decode_both_ways(chunk)
        })
        .unwrap();
}

/// Mutated shards whose inner chunks decode in place (`direct_shard`) decode as zarrs' sharding
/// codec decodes them: the same bytes where both decode, an error from both where either fails.
#[test]
fn mutated_shards_decode_in_place_as_zarrs_decodes_them() {
    let shards: Vec<&EncodedChunk> = corpus()
        .iter()
        .filter(|chunk| {
            matches!(
                direct_decoder(&chunk.request.variable),
                Some(DirectDecoder::Shard(_))
            )
        })
        .collect();
    assert!(shards.len() >= 6, "{} shards", shards.len());
    let outcomes = Mutex::new(BTreeMap::<(&str, bool), usize>::new());
    let mut runner = TestRunner::new(Config {
        cases: 4 * fuzz_cases(),
        failure_persistence: None,
        ..Config::default()
    });
    let strategy = (
        0..shards.len(),
        prop::collection::vec(mutation(), 1..4),
        any::<bool>(),
    );
    runner
        .run(&strategy, |(index, mutations, reseal)| {
            let mut chunk = shards[index].clone();
            let stored = chunk.bytes.as_ref().expect("stored chunk");
            let mut mutated = mutate(stored, &mutations);
            // The corpus' indexes lie at the end under a checksum: written anew, a mutated
            // index reaches the bounds checks instead of failing its checksum.
            let variable = &chunk.request.variable;
            let index_len = 16 * variable.inner_chunks_per_shard().expect("sharded") as usize;
            if reseal && mutated.len() >= index_len + 4 {
                let end = mutated.len() - 4;
                let checksum = crc32c::crc32c(&mutated[end - index_len..end]);
                mutated[end..].copy_from_slice(&checksum.to_le_bytes());
            }
            chunk.bytes = Some(Bytes::from(mutated));
            let key = chunk.request.key();
            let direct = decode_on_cpu(chunk.clone());
            let zarrs = decode_with_zarrs(chunk);
            let outcome = match (&direct, &zarrs) {
                (Ok(direct), Ok(zarrs)) => {
                    prop_assert!(direct.bytes == zarrs.bytes, "`{key}`: bytes differ");
                    "both decode"
                }
                (Err(Error::Panicked { message, .. }), _) => {
                    return Err(TestCaseError::fail(format!("`{key}` panicked: {message}")))
                }
                (Err(_), Err(_)) => "both refuse",
                _ => {
                    return Err(TestCaseError::fail(format!(
                        "`{key}`: in place {:?}, zarrs {:?}",
                        direct.as_ref().map(|_| ()),
                        zarrs.as_ref().map(|_| ())
                    )))
                }
            };
            *outcomes
                .lock()
                .unwrap()
                .entry((outcome, reseal))
                .or_default() += 1;
            Ok(())
        })
        .unwrap();
    let outcomes = outcomes.into_inner().unwrap();
    eprintln!(
        "{} shards, mutated (outcome, index resealed): {outcomes:?}",
        shards.len()
    );
    assert_eq!(outcomes.len(), 4, "{outcomes:?}");
}

/// A stored chunk as the frame checks see it.
struct Stored {
    name: String,
    bytes: Bytes,
    chain: GpuChain,
    /// The decoded (full, unclipped) shape.
    shape: Vec<u64>,
    element_size: usize,
}

/// Every chunk of the corpus, and numcodecs lz4 chunks, bare and under crc32c (zarrs writes
/// no lz4 chunks, so no generated case has them).
fn stored_chunks() -> Vec<Stored> {
    let mut stored: Vec<Stored> = corpus()
        .iter()
        .map(|chunk| {
            let variable = &chunk.request.variable;
            Stored {
                name: chunk.request.key(),
                bytes: chunk.bytes.clone().expect("stored"),
                chain: GpuChain::of(variable).expect("every generated chain is the GPU's"),
                shape: variable
                    .chunk_region(&chunk.request.indices)
                    .expect("in the grid")
                    .1,
                element_size: variable.dtype().size(),
            }
        })
        .collect();
    for (seed, dtype) in [DType::UInt8, DType::Int16, DType::Float32]
        .into_iter()
        .enumerate()
    {
        let data = random_bytes(dtype, 320, seed as u64);
        let mut lz4 = (data.len() as u32).to_le_bytes().to_vec();
        lz4.extend(lz4_flex::block::compress(&data));
        let mut trailed = lz4.clone();
        trailed.extend(crc32c::crc32c(&lz4).to_le_bytes());
        let lz4_step = Step::Decompress(Compressor::Lz4);
        for (label, bytes, steps) in [
            ("lz4", lz4, vec![lz4_step.clone()]),
            ("lz4_crc32c", trailed, vec![Step::Crc32c, lz4_step]),
        ] {
            stored.push(Stored {
                name: format!("{}_{label}", dtype.zarr_name()),
                bytes: Bytes::from(bytes),
                chain: GpuChain { steps },
                shape: vec![16, 20],
                element_size: dtype.size(),
            });
        }
    }
    stored
}

/// How `check_chunk` and the planner judged `bytes` of `chunk`, once they agree, with the
/// entropy-table checks off (the CPU path's) and on.
fn judge(chunk: &Stored, bytes: &Bytes) -> Result<&'static str, TestCaseError> {
    let mut verdict = "";
    for tables in [false, true] {
        let (checked, planned) = frames::with_table_checks(tables, || {
            let input = ChunkInput {
                bytes: Some(bytes),
                chain: &chunk.chain,
                shape: &chunk.shape,
                element_size: chunk.element_size,
                fill: &[0; 8][..chunk.element_size],
            };
            let planned = BatchPlan::default().add(0, &input).map(|_| ());
            let checked = check_chunk(bytes, &chunk.chain, &chunk.shape, chunk.element_size);
            (checked, planned)
        });
        prop_assert_eq!(
            &checked,
            &planned,
            "{} with table checks {}",
            &chunk.name,
            if tables { "on" } else { "off" }
        );
        if !tables {
            verdict = match checked {
                Ok(()) => "accepted",
                Err(FrameError::NeedsCpu(_)) => "needs the CPU",
                Err(FrameError::Truncated { .. }) => "truncated",
                Err(FrameError::BadHeader { .. }) => "bad header",
                Err(FrameError::DeclaredSize { .. }) => "declared size",
                Err(FrameError::Checksum { .. }) => "checksum",
                Err(FrameError::OutOfBounds { .. }) => "out of bounds",
            };
        }
    }
    Ok(verdict)
}

/// The CPU path's frame check gives the planner's verdict, error for error, on every stored
/// chunk and on mutations of them: zstd, gzip, zlib, lz4, blosc with every shuffle and inner
/// codec, crc32c, shuffle, transpose, scale-offset and sharded chains.
#[test]
fn the_frame_check_refuses_exactly_what_the_planner_refuses() {
    let chunks = stored_chunks();
    let verdicts = Mutex::new(BTreeMap::<&str, usize>::new());
    let count = |verdict| *verdicts.lock().unwrap().entry(verdict).or_default() += 1;
    for chunk in &chunks {
        let verdict = judge(chunk, &chunk.bytes).unwrap_or_else(|error| panic!("{error}"));
        // Accepted, or blosclz.
        assert!(
            ["accepted", "needs the CPU"].contains(&verdict),
            "{}",
            chunk.name
        );
    }
    let mut runner = TestRunner::new(Config {
        cases: 16 * fuzz_cases(),
        failure_persistence: None,
        ..Config::default()
    });
    let strategy = (0..chunks.len(), prop::collection::vec(mutation(), 1..4));
    runner
        .run(&strategy, |(index, mutations)| {
            let chunk = &chunks[index];
            let mutated = Bytes::from(mutate(&chunk.bytes, &mutations));
            count(judge(chunk, &mutated)?);
            Ok(())
        })
        .unwrap();
    let verdicts = verdicts.into_inner().unwrap();
    eprintln!("{} stored chunks, mutated: {verdicts:?}", chunks.len());
    assert!(
        verdicts.len() >= 4,
        "too few kinds of verdict: {verdicts:?}"
    );
}

proptest! {
    #![proptest_config(Config { cases: fuzz_cases(), failure_persistence: None, ..Config::default() })]

    #[test]
    fn frame_checks_take_any_bytes(bytes in prop::collection::vec(any::<u8>(), 0..512), expected in 0usize..100_000) {
        let _ = frames::with_table_checks(true, || frames::check_zstd(&bytes, expected));
        let _ = frames::gzip_payload(&bytes, expected);
        let _ = frames::zlib_payload(&bytes);
        let _ = frames::lz4_payload(&bytes, expected);
        if let Ok(frame) = BloscFrame::parse(&bytes, expected) {
            for block in &frame.blocks {
                for split in &block.splits {
                    prop_assert!(split.bytes.end <= bytes.len());
                }
            }
        }
    }

    #[test]
    fn shard_indexes_only_give_ranges_inside_the_shard(
        words in prop::collection::vec(prop::sample::select(&BOUNDARIES[..]), 0..16),
        payload in 0usize..64,
        inner_chunks in 0usize..8,
        crc in any::<bool>(),
        at_end in any::<bool>(),
    ) {
        let mut shard = vec![0u8; payload];
        for word in &words {
            shard.extend(word.to_le_bytes());
        }
        if crc {
            let start = payload.min(shard.len());
            let checksum = crc32c::crc32c(&shard[start..]);
            shard.extend(checksum.to_le_bytes());
        }
        if let Ok(index) = shard_index(&shard, inner_chunks, crc, at_end) {
            prop_assert_eq!(index.len(), inner_chunks);
            for range in index.into_iter().flatten() {
                prop_assert!(range.start <= range.end && range.end <= shard.len());
            }
        }
    }
}

/// Crashes fuzzing found, kept as named cases.
mod regressions {
    use super::*;

    /// The shard of the sharded case with its first index entry pointing at 2^64 - 6: zarrs'
    /// sharding codec overflows adding the length and panics, so the frame checks refuse the
    /// index before zarrs sees it (and a panic would be caught).
    #[test]
    fn shard_offset_near_2_64() {
        let corpus = corpus();
        let sharded = corpus
            .iter()
            .find(|chunk| chunk.request.variable.name().contains("shard_blocks"))
            .expect("a sharded case");
        let stored = sharded.bytes.as_ref().unwrap();
        let variable = &sharded.request.variable;
        let shape = variable.chunk_shape();
        let inner_shape = sharding_inner_shape(variable);
        let count: u64 = shape.iter().zip(&inner_shape).map(|(s, i)| s / i).product();
        let count = count as usize;
        // The first index entry's offset, checksum fixed up, index at the end.
        let index_len = count * 16;
        let start = stored.len() - index_len - 4;
        let mut bytes = stored.to_vec();
        bytes[start..start + 8].copy_from_slice(&(u64::MAX - 5).to_le_bytes());
        let checksum = crc32c::crc32c(&bytes[start..start + index_len]);
        let end = bytes.len();
        bytes[end - 4..].copy_from_slice(&checksum.to_le_bytes());
        let mut chunk = sharded.clone();
        chunk.bytes = Some(Bytes::from(bytes));
        decode_both_ways(chunk.clone()).unwrap();
        assert!(decode_on_cpu(chunk).is_err());
    }

    /// Found by a long run: a zstd frame naming a dictionary (so the GPU path leaves it to
    /// the CPU) and declaring 2^48 decoded bytes; zarrs' zstd codec allocated that much and
    /// the failed allocation aborted the process. The declared size is now checked first.
    #[test]
    fn zstd_frame_with_a_dictionary_declaring_2_48_bytes() {
        let corpus = corpus();
        let zstd = corpus
            .iter()
            .find(|chunk| chunk.request.variable.name() == "float32_zstd_20")
            .expect("the float32 zstd case");
        let mut frame = vec![0x28, 0xb5, 0x2f, 0xfd];
        // Content size in 8 bytes, single segment, a 1-byte dictionary id.
        frame.push(0b1110_0001);
        frame.push(7);
        frame.extend((1u64 << 48).to_le_bytes());
        let payload = [0u8; 16];
        let header = 1 | ((payload.len() as u32) << 3); // last block, raw
        frame.extend(&header.to_le_bytes()[..3]);
        frame.extend(payload);
        let mut chunk = zstd.clone();
        chunk.bytes = Some(Bytes::from(frame));
        decode_both_ways(chunk.clone()).unwrap();
        // The CPU decodes zstd into the chunk's own size, whatever the header declares, so
        // the frame fails in the codec instead of asking for 2^48 bytes.
        match decode_on_cpu(chunk) {
            Err(Error::Frame { source, .. }) => assert!(
                matches!(source, frames::FrameError::DeclaredSize { declared, .. } if declared == 1 << 48),
                "{source:?}"
            ),
            Err(Error::Codec { codec: "zstd", .. }) => {}
            other => panic!("expected a frame or codec error, got {other:?}"),
        }
    }

    fn sharding_inner_shape(variable: &zarrpipe_store::Variable) -> Vec<u64> {
        let zarrs::array::ArrayMetadata::V3(metadata) = variable.array().metadata() else {
            panic!("sharding is v3");
        };
        let configuration = metadata.codecs[0].configuration().expect("configured");
        configuration["chunk_shape"]
            .as_array()
            .unwrap()
            .iter()
            .map(|n| n.as_u64().unwrap())
            .collect()
    }
}
