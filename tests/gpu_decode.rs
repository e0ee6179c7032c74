//! The GPU decoder against the CPU path, bit for bit: every data type and codec chain of the
//! generated cases, every conformance fixture, corrupt and truncated frames, and nvCOMP's
//! temporary-memory budget. Where the GPU path cannot run (no device, driver or nvCOMP, or a
//! build without `cuda`) each test says it is skipped; with `ZARRPIPE_REQUIRE_GPU=1` (on a GPU
//! host) that fails it instead. On a GPU host:
//! `ZARRPIPE_REQUIRE_GPU=1 cargo test --release --test gpu_decode`.

mod common;

use std::path::Path;
use std::sync::Arc;

use zarrpipe::codec::testing::{cases, chain, compare_with_cpu, fetch_all, write_cases, Case};
use zarrpipe::codec::{DecodePath, DecodedChunk, GpuDecoder, GpuOptions};
use zarrpipe::store::{fetch_chunk_into, Dataset, EncodedChunk, ReadMemory};

/// The GPU decoder; `None` (the test skips, saying why) where the GPU path cannot run.
fn decoder(options: GpuOptions) -> Option<GpuDecoder> {
    common::on_gpu(GpuDecoder::new(options))
}

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .unwrap()
}

fn open_all(path: &Path) -> Vec<EncodedChunk> {
    runtime().block_on(async {
        let dataset = Dataset::open(path.to_str().unwrap()).await.unwrap();
        fetch_all(&dataset).await
    })
}

fn decode(
    decoder: &GpuDecoder,
    chunks: &[EncodedChunk],
) -> Vec<zarrpipe::codec::Result<DecodedChunk>> {
    decoder
        .decode_batch(chunks.to_vec())
        .unwrap()
        .into_host()
        .unwrap()
}

#[test]
fn generated_cases_decode_bit_identical_on_the_gpu() {
    let Some(decoder) = decoder(GpuOptions::default()) else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let cases = cases();
    write_cases(dir.path(), &cases, 29);
    let chunks = open_all(dir.path());
    let batch = decoder.decode_batch(chunks.clone()).unwrap();
    for chunk in batch.chunks.iter().flatten() {
        if let DecodePath::CpuFallback { reason } = &chunk.path {
            assert!(
                chunk.request.variable.name().contains("blosclz"),
                "{reason}"
            );
        }
    }
    let decoded = batch.into_host().unwrap();
    assert_eq!(compare_with_cpu(&chunks, &decoded), chunks.len());
    println!(
        "{} chunks of {} arrays bit-identical to the CPU",
        chunks.len(),
        cases.len()
    );
}

#[test]
fn fixtures_decode_bit_identical_on_the_gpu() {
    let Some(decoder) = decoder(GpuOptions::default()) else {
        return;
    };
    for store in ["zp3_v3", "zp3_v2", "xr_v2", "xr_v3"] {
        let chunks = open_all(&common::fixtures().join("stores").join(store));
        let decoded = decode(&decoder, &chunks);
        assert!(compare_with_cpu(&chunks, &decoded) > 0, "{store}");
    }
}

/// Decodes `chunks` with chunk `index` replaced by `bytes`; returns what went wrong: the
/// chunk not failing (when `must_fail`), or any other chunk differing from `clean`.
fn damage(
    decoder: &GpuDecoder,
    chunks: &[EncodedChunk],
    clean: &[zarrpipe::codec::Result<DecodedChunk>],
    index: usize,
    bytes: Vec<u8>,
    must_fail: bool,
) -> Vec<String> {
    let mut batch = chunks.to_vec();
    batch[index].bytes = Some(bytes.into());
    let decoded = decode(decoder, &batch);
    let request = &chunks[index].request;
    let mut problems = Vec::new();
    match &decoded[index] {
        Err(error) if !chain(error).contains(&request.key()) => problems.push(format!(
            "{request}: the error does not name the chunk: {}",
            chain(error)
        )),
        Ok(_) if must_fail => problems.push(format!("{request}: damaged, yet decoded")),
        _ => {}
    }
    for (other, result) in decoded.iter().enumerate() {
        let want = &clean[other].as_ref().unwrap().bytes;
        if other != index && result.as_ref().ok().map(|r| &r.bytes) != Some(want) {
            problems.push(format!("{request} broke {}", chunks[other].request));
        }
    }
    problems
}

/// Writes the generated cases `keep` picks to `dir` and fetches all their chunks.
fn generated(dir: &Path, seed: u64, keep: impl Fn(&Case) -> bool) -> Vec<EncodedChunk> {
    let picked: Vec<_> = cases().into_iter().filter(|case| keep(case)).collect();
    write_cases(dir, &picked, seed);
    open_all(dir)
}

/// The float32 cases with large chunks (several blosc blocks) that `keep` picks by name.
fn large_float_cases(dir: &Path, keep: impl Fn(&str) -> bool) -> Vec<EncodedChunk> {
    generated(dir, 5, |case| {
        case.name.starts_with("float32_") && case.chunks[1] == 1000 && keep(&case.name)
    })
}

#[test]
fn truncated_chunks_fail_alone_on_the_gpu() {
    let Some(decoder) = decoder(GpuOptions::default()) else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let chunks = large_float_cases(dir.path(), |_| true);
    let clean = decode(&decoder, &chunks);
    let mut problems = Vec::new();
    for (index, chunk) in chunks.iter().enumerate() {
        let Some(bytes) = &chunk.bytes else { continue };
        for keep in [bytes.len() - 1, bytes.len() * 2 / 3, 17] {
            let cut = bytes[..keep].to_vec();
            problems.extend(damage(&decoder, &chunks, &clean, index, cut, true));
        }
    }
    assert!(problems.is_empty(), "{}", problems.join("\n"));
}

/// Garbage inside compressed streams: caught by checksums where the chain has them, else an
/// error or wrong values for that chunk alone, and the decoder goes on. nvCOMP's zstd decoder
/// writes out of bounds on corrupt entropy tables, so this holds for zstd without a checksum
/// only because the decoder checks those tables first (`check_zstd_tables`, on by default).
#[test]
fn scrambled_chunks_fail_alone_on_the_gpu() {
    let Some(decoder) = decoder(GpuOptions::default()) else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let chunks = large_float_cases(dir.path(), |_| true);
    let clean = decode(&decoder, &chunks);
    let mut problems = Vec::new();
    for (index, chunk) in chunks.iter().enumerate() {
        let Some(bytes) = &chunk.bytes else { continue };
        let mut noisy = bytes.to_vec();
        for at in (64..noisy.len()).step_by(97) {
            noisy[at] ^= 0x5a;
        }
        let checksummed = chunk.request.variable.name().contains("crc32c");
        problems.extend(damage(&decoder, &chunks, &clean, index, noisy, checksummed));
    }
    assert!(problems.is_empty(), "{}", problems.join("\n"));
}

#[test]
fn small_temp_budgets_split_nvcomp_calls() {
    let options = GpuOptions {
        temp_budget: 1 << 16,
        ..GpuOptions::default()
    };
    let Some(decoder) = decoder(options) else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let chunks = generated(dir.path(), 8, |case| {
        case.name.contains("zstd") && case.chunks[1] == 1000
    });
    let decoded = decode(&decoder, &chunks);
    assert_eq!(compare_with_cpu(&chunks, &decoded), chunks.len());
}

#[test]
fn strict_gpu_decoders_refuse_cpu_fallbacks() {
    let options = GpuOptions {
        strict: true,
        ..GpuOptions::default()
    };
    let Some(decoder) = decoder(options) else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let chunks = generated(dir.path(), 2, |case| {
        case.name == "float32_blosc_blosclz_shuffle_20"
    });
    let decoded = decode(&decoder, &chunks);
    assert!(decoded.iter().any(|chunk| chunk.is_err()));
}

#[test]
fn pipelined_groups_decode_bit_identical_on_the_gpu() {
    let Some(decoder) = decoder_with_groups() else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let chunks = large_float_cases(dir.path(), |_| true);
    let decoded = decode(&decoder, &chunks);
    assert_eq!(compare_with_cpu(&chunks, &decoded), chunks.len());
    // The same batch planned on another thread first, as the pipeline plans it.
    let planned =
        std::thread::scope(|scope| scope.spawn(|| decoder.plan(chunks.clone())).join().unwrap());
    let pending = decoder.submit_planned(planned).unwrap();
    let decoded = decoder.complete(pending).unwrap().into_host().unwrap();
    assert_eq!(compare_with_cpu(&chunks, &decoded), chunks.len());
}

/// True when `bytes` lie in page-locked host memory the CUDA driver knows of.
#[cfg(feature = "cuda")]
fn pinned(decoder: &GpuDecoder, bytes: &[u8]) -> bool {
    use zarrpipe::cuda::cudarc::driver::sys;
    decoder.context().bind_to_thread().unwrap();
    let mut kind = 0u32;
    // SAFETY: the driver writes one `CUmemorytype` (a u32) for a host address it knows of,
    // and only returns an error for others.
    let status = unsafe {
        sys::cuPointerGetAttribute(
            (&mut kind as *mut u32).cast(),
            sys::CUpointer_attribute::CU_POINTER_ATTRIBUTE_MEMORY_TYPE,
            bytes.as_ptr() as sys::CUdeviceptr,
        )
    };
    status == sys::CUresult::CUDA_SUCCESS && kind == sys::CUmemorytype::CU_MEMORYTYPE_HOST as u32
}

#[cfg(not(feature = "cuda"))]
fn pinned(_: &GpuDecoder, _: &[u8]) -> bool {
    unreachable!("no decoder without the `cuda` feature")
}

#[test]
fn chunks_read_into_pinned_memory_upload_unstaged_bit_identical() {
    let Some(decoder) = decoder(GpuOptions::default()) else {
        return;
    };
    let memory = decoder.read_memory().expect("read memory by default");
    let dir = tempfile::tempdir().unwrap();
    write_cases(dir.path(), &cases(), 31);
    let ordinary = open_all(dir.path());
    // Every other chunk read into pinned memory, so a group's copies mix both kinds.
    let mixed = read_again(&ordinary, |number| {
        (number % 2 == 0).then(|| memory.clone())
    });
    let mut in_pinned = 0;
    for (number, (read, expected)) in mixed.iter().zip(&ordinary).enumerate() {
        assert_eq!(read.bytes, expected.bytes, "{}", read.request);
        let Some(bytes) = &read.bytes else { continue };
        let is_pinned = pinned(&decoder, bytes);
        assert_eq!(is_pinned, number % 2 == 0, "{}", read.request);
        in_pinned += is_pinned as usize;
    }
    assert!(in_pinned > 10, "{in_pinned} chunks read into pinned memory");
    let decoded = decode(&decoder, &mixed);
    assert_eq!(compare_with_cpu(&mixed, &decoded), mixed.len());
    // Pipelined groups of 256 KiB, every chunk pinned: copies of many groups in flight.
    let Some(grouped) = decoder_with_groups() else {
        return;
    };
    let memory = grouped.read_memory().unwrap();
    let pinned_all = read_again(&ordinary, |_| Some(memory.clone()));
    let decoded = decode(&grouped, &pinned_all);
    assert_eq!(compare_with_cpu(&pinned_all, &decoded), pinned_all.len());
    println!(
        "{in_pinned} of {} chunks read into pinned memory",
        mixed.len()
    );
}

#[test]
fn pinned_read_memory_is_allocated_ahead_as_pipelines_expect_up_to_its_size() {
    let Some(decoder) = decoder(GpuOptions {
        read_memory: 256 << 20,
        ..GpuOptions::default()
    }) else {
        return;
    };
    let memory = decoder.read_memory().unwrap();
    assert_eq!(
        decoder.wait_for_read_memory(),
        0,
        "nothing before it is asked for"
    );
    // Batches of 10 MiB, two read ahead and eight the decoder holds (six streams, one
    // planning, one collating): 100 MiB, a quarter more, rounded up to slabs of 64 MiB, and
    // one more.
    memory.clone().expect_batches(10 << 20, 2);
    assert_eq!(decoder.wait_for_read_memory(), 192 << 20);
    memory.clone().expect_batches(1 << 30, 2);
    assert_eq!(
        decoder.wait_for_read_memory(),
        256 << 20,
        "no more than its size"
    );
    let pieces: Vec<_> = (0..8).map(|_| memory.buffer(32 << 20)).collect();
    assert!(
        pieces.iter().all(Option::is_some),
        "8 pieces of 32 MiB in 4 slabs"
    );
    assert!(pinned(&decoder, pieces[7].as_deref().unwrap().as_ref()));
    assert!(memory.buffer(32 << 20).is_none(), "past its size");
}

/// `chunks` read again one by one, chunk number `n` into `memory(n)` (`None`: ordinary memory).
fn read_again(
    chunks: &[EncodedChunk],
    memory: impl Fn(usize) -> Option<Arc<dyn ReadMemory>>,
) -> Vec<EncodedChunk> {
    runtime().block_on(async {
        let mut read = Vec::new();
        for (number, chunk) in chunks.iter().enumerate() {
            let request = chunk.request.clone();
            read.push(fetch_chunk_into(request, memory(number)).await.unwrap());
        }
        read
    })
}

/// Groups of 256 KiB: a batch of generated cases runs as dozens of overlapped groups.
fn decoder_with_groups() -> Option<GpuDecoder> {
    decoder(GpuOptions {
        group_bytes: 256 << 10,
        ..GpuOptions::default()
    })
}

#[test]
fn pinned_read_memory_reuses_slabs_once_free_and_declines_past_its_size() {
    // One slab of 64 MiB.
    let Some(decoder) = decoder(GpuOptions {
        read_memory: 64 << 20,
        ..GpuOptions::default()
    }) else {
        return;
    };
    let memory = decoder.read_memory().unwrap();
    let first = memory.buffer(30 << 20).expect("room in the first slab");
    let second = memory.buffer(30 << 20).expect("room in the first slab");
    assert!(memory.buffer(30 << 20).is_none(), "past the one slab");
    assert!(memory.buffer(65 << 20).is_none(), "larger than a slab");
    assert!(pinned(&decoder, (*first).as_ref()));
    let start = |buffer: &dyn zarrpipe::store::ReadBuffer| buffer.as_ref().as_ptr() as usize;
    let (first_at, second_at) = (start(&*first), start(&*second));
    assert!(second_at >= first_at + (30 << 20), "pieces do not overlap");
    drop(first);
    assert!(memory.buffer(30 << 20).is_none(), "the slab is still held");
    drop(second);
    let again = memory.buffer(30 << 20).expect("the slab, free again");
    assert_eq!(start(&*again), first_at, "reused from its start");
    assert!(GpuDecoder::new(GpuOptions {
        read_memory: 0,
        ..GpuOptions::default()
    })
    .unwrap()
    .read_memory()
    .is_none());
}
