//! GPU batch plans run by the CPU interpreter must decode exactly what zarrs decodes: every
//! data type and codec chain of the generated cases, and every fixture written by
//! zarr-python. The GPU suite (`tests/gpu_decode.rs`) runs the same plans on a GPU.

use std::path::Path;
use std::time::Duration;

use zarrpipe_store::{Dataset, EncodedChunk};

use crate::batch::{check_tables, groups, output_bytes, prepare, prepare_checked};
use crate::gpu::pieces;
use crate::interpret::decode_batch;
use crate::testing::{cases, compare_with_cpu, fetch_all, write_cases};
use crate::DecodePath;

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap()
}

/// Every chunk of the generated cases, written into `dir` with `seed`.
fn generated_chunks(dir: &Path, seed: u64) -> Vec<EncodedChunk> {
    write_cases(dir, &cases(), seed);
    runtime().block_on(async {
        let dataset = Dataset::open(dir.to_str().unwrap()).await.unwrap();
        fetch_all(&dataset).await
    })
}

#[test]
fn generated_cases_plan_to_the_cpu_result() {
    let dir = tempfile::tempdir().unwrap();
    let chunks = generated_chunks(dir.path(), 11);
    // Which chunks leave the GPU path, and why: only blosclz frames may.
    let prepared = prepare(chunks.clone(), false, 0);
    for chunk in &prepared.chunks {
        let (_, path) = chunk.outcome.as_ref().unwrap();
        if let DecodePath::CpuFallback { reason } = path {
            assert!(
                chunk.request.variable.name().contains("blosclz"),
                "{}: {reason}",
                chunk.request
            );
        }
    }
    let decoded = decode_batch(chunks.clone(), false);
    let compared = compare_with_cpu(&chunks, &decoded);
    assert_eq!(compared, chunks.len());
}

#[test]
fn fixtures_plan_to_the_cpu_result() {
    let stores = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../tests/fixtures/stores");
    let runtime = runtime();
    for store in ["zp3_v3", "zp3_v2", "xr_v2", "xr_v3"] {
        let chunks = runtime.block_on(async {
            let dataset = Dataset::open(stores.join(store).to_str().unwrap())
                .await
                .unwrap();
            fetch_all(&dataset).await
        });
        let decoded = decode_batch(chunks.clone(), false);
        assert!(compare_with_cpu(&chunks, &decoded) > 0, "{store}");
    }
}

/// numcodecs FixedScaleOffset (then Shuffle, zstd) as zarr-python writes it in a v2 array:
/// planned for the GPU, not left to the CPU, and decoded as zarrs decodes it.
#[test]
fn zarr_python_fixedscaleoffset_plans_for_the_gpu() {
    let store = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../tests/fixtures/stores/zp3_v2");
    let chunks: Vec<_> = runtime()
        .block_on(async {
            let dataset = Dataset::open(store.to_str().unwrap()).await.unwrap();
            fetch_all(&dataset).await
        })
        .into_iter()
        .filter(|chunk| chunk.request.variable.name() == "f8_fixedscaleoffset")
        .collect();
    assert_eq!(chunks.len(), 9);
    for chunk in &prepare(chunks.clone(), true, 0).chunks {
        let (_, path) = chunk.outcome.as_ref().unwrap();
        assert!(
            matches!(path, DecodePath::Gpu | DecodePath::Fill),
            "{}",
            chunk.request
        );
    }
    let decoded = decode_batch(chunks.clone(), true);
    assert_eq!(compare_with_cpu(&chunks, &decoded), chunks.len());
}

#[test]
fn strict_decoders_refuse_what_needs_the_cpu() {
    let dir = tempfile::tempdir().unwrap();
    let case = cases()
        .into_iter()
        .find(|case| case.name.contains("blosclz"))
        .unwrap();
    write_cases(dir.path(), std::slice::from_ref(&case), 3);
    let chunks = runtime().block_on(async {
        let dataset = Dataset::open(dir.path().to_str().unwrap()).await.unwrap();
        fetch_all(&dataset).await
    });
    let decoded = decode_batch(chunks, true);
    let error = decoded
        .iter()
        .find_map(|chunk| chunk.as_ref().err())
        .unwrap();
    assert!(error.to_string().contains("strict"), "{error}");
}

#[test]
fn corrupt_chunks_fail_alone() {
    let dir = tempfile::tempdir().unwrap();
    let picked: Vec<_> = cases()
        .into_iter()
        .filter(|case| case.name.starts_with("float32_") && case.chunks[1] == 20)
        .collect();
    write_cases(dir.path(), &picked, 5);
    let chunks = runtime().block_on(async {
        let dataset = Dataset::open(dir.path().to_str().unwrap()).await.unwrap();
        fetch_all(&dataset).await
    });
    for (index, chunk) in chunks.iter().enumerate() {
        let Some(bytes) = &chunk.bytes else { continue };
        if chunk.request.variable.name().ends_with("raw_20") || bytes.len() < 24 {
            continue;
        }
        // Truncated: a frame that ends early never reaches a decompressor as valid.
        let mut batch = chunks.clone();
        batch[index].bytes = Some(bytes.slice(..bytes.len() - 9));
        let decoded = decode_batch(batch, false);
        assert!(decoded[index].is_err(), "truncated {}", chunk.request);
        let message = decoded[index].as_ref().unwrap_err().to_string();
        assert!(message.contains(&chunk.request.key()), "{message}");
        for (other, result) in decoded.iter().enumerate() {
            if other != index {
                assert!(
                    result.is_ok(),
                    "{} broke with {}",
                    chunks[other].request,
                    chunk.request
                );
            }
        }
    }
}

/// A corrupt Huffman table (valid frame structure) is caught by the parallel table pass of
/// `prepare`, fails its chunk alone (also when the batch is planned in groups, as the GPU
/// decoder plans a large one), and would reach nvCOMP without that pass.
#[test]
fn corrupt_zstd_tables_fail_their_chunk_when_planned() {
    let dir = tempfile::tempdir().unwrap();
    let picked: Vec<_> = cases()
        .into_iter()
        .filter(|case| {
            case.name.starts_with("float32_zstd_") || case.name.starts_with("float64_zstd_")
        })
        .collect();
    write_cases(dir.path(), &picked, 9);
    let mut chunks = runtime().block_on(async {
        let dataset = Dataset::open(dir.path().to_str().unwrap()).await.unwrap();
        fetch_all(&dataset).await
    });
    // The first chunk with an FSE-compressed Huffman tree: raise its accuracy log past 6.
    let (index, corrupt) = chunks
        .iter()
        .enumerate()
        .find_map(|(index, chunk)| {
            let bytes = chunk.bytes.as_ref()?;
            let expected = chunk.request.variable.chunk_shape().iter().product::<u64>() as usize
                * chunk.request.variable.dtype().size();
            let layouts = crate::frames::zstd_layout(bytes, expected).ok()?;
            let layout = layouts
                .iter()
                .find(|layout| !layout.direct_weights && !layout.huffman_tree.is_empty())?;
            let mut corrupt = bytes.to_vec();
            corrupt[layout.huffman_tree.start + 1] |= 0x0f;
            Some((index, corrupt))
        })
        .expect("a zstd chunk with an FSE-compressed Huffman tree");
    chunks[index].bytes = Some(corrupt.into());
    let key = chunks[index].request.key();

    let checked = crate::frames::with_table_checks(true, || prepare(chunks.clone(), false, 0));
    for (other, chunk) in checked.chunks.iter().enumerate() {
        match &chunk.outcome {
            Err(error) if other == index => {
                let message = error.to_string();
                assert!(message.contains(&key), "{message}");
            }
            Err(error) => panic!("{} failed with the corrupt chunk: {error}", chunk.request),
            Ok(_) if other == index => panic!("corrupt Huffman table of {key} was planned"),
            Ok(_) => {}
        }
    }
    // In groups of three chunks' output, each with its share of the checks, as the GPU
    // decoder plans them: the same chunk fails, with the same error.
    let mut checks = crate::frames::with_table_checks(true, || check_tables(&chunks));
    let group_bytes = 3 * chunks.iter().map(output_bytes).max().unwrap();
    let (mut grouped, mut output_start) = (Vec::new(), 0);
    for group in groups(chunks.clone(), group_bytes) {
        let rest = checks.split_off(group.len());
        // The checks' time stays with the first group's.
        assert_eq!(rest.took, Duration::ZERO);
        let group_checks = std::mem::replace(&mut checks, rest);
        let prepared = prepare_checked(group, group_checks, false, output_start);
        output_start = prepared.plan.output_len;
        grouped.extend(prepared.chunks);
    }
    assert!(output_start > group_bytes, "one group only");
    let message =
        |chunk: &crate::batch::PreparedChunk| chunk.outcome.as_ref().err().map(ToString::to_string);
    let whole: Vec<_> = checked.chunks.iter().map(message).collect();
    assert_eq!(grouped.iter().map(message).collect::<Vec<_>>(), whole);
    let unchecked = crate::frames::with_table_checks(false, || prepare(chunks, false, 0));
    assert!(unchecked.chunks[index].outcome.is_ok());
}

/// The GPU decoder lets more batches decode at once when they have fewer pieces: a shard
/// counts its inner chunks (those read, when a request names them), anything else one.
#[test]
fn shards_count_their_inner_chunks_as_pieces() {
    let dir = tempfile::tempdir().unwrap();
    let chunks = generated_chunks(dir.path(), 3);
    let (mut sharded, mut plain, mut expected) = (0, 0, 0);
    for chunk in &chunks {
        let inner = chunk.request.variable.inner_chunks_per_shard();
        let one = std::slice::from_ref(chunk);
        match inner {
            Some(count) => {
                assert!(count > 1, "{}", chunk.request);
                assert_eq!(pieces(one), count as usize, "{}", chunk.request);
                let mut some = chunk.clone();
                some.request.inner = Some(vec![0, 1]);
                assert_eq!(pieces(&[some]), 2);
                sharded += 1;
                expected += count as usize;
            }
            None => {
                assert_eq!(pieces(one), 1, "{}", chunk.request);
                plain += 1;
                expected += 1;
            }
        }
    }
    assert!(sharded > 0 && plain > 0, "{sharded} shards, {plain} chunks");
    assert_eq!(pieces(&chunks), expected);
}
