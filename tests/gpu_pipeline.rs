//! Every combination of stages (CPU, GPU, split or auto decoding; host or device tensors)
//! against the CPU pipeline, bit for bit, for the same seed: zstd, blosc and sharded stores, shuffled patches
//! with padded edges, forecasting pairs, normalisation with NaN handling, and bf16/f16
//! tensors against the CPU's values rounded by the `half` crate. Dropping the stream
//! mid-epoch leaves no device memory behind (that test has the device to itself: the others
//! wait for it); a corrupt chunk fails its batch and no other; with the `candle` feature,
//! batches become candle tensors without a copy. Missing time steps (the xarray gap
//! fixtures), skipped and filled, match too. Built without `cuda`, the suite is one
//! ignored test; built with it, where the GPU path cannot run, each test says it is skipped
//! (with `ZARRPIPE_REQUIRE_GPU=1`, on a GPU host, that fails it instead). On a GPU host:
//! `ZARRPIPE_REQUIRE_GPU=1 cargo test --release --test gpu_pipeline`. Static fields and
//! derived channels (the xarray fixture `xr_static`) match the CPU bit for bit too: the GPU
//! computes derived channels from the host's tables with the same float32 operations. A
//! thread waiting for the GPU on zarrpipe's events sleeps instead of spinning on a core.

#![cfg_attr(not(feature = "cuda"), allow(dead_code, unused_imports))]

mod common;

use std::path::Path;

use zarrpipe::batcher::{Edge, Shuffle, WindowSpec};
use zarrpipe::codec::{GpuDecoder, GpuOptions};
use zarrpipe::collate::{CollateOptions, Normalization, TensorDType};
use zarrpipe::generate::{generate, Compression, GenerateOptions};
use zarrpipe::pipeline::PipelineBuilder;
use zarrpipe::prelude::*;

/// The device is shared by the tests (read) except by those that measure its free memory
/// (write), which must have it to themselves.
static DEVICE: std::sync::RwLock<()> = std::sync::RwLock::new(());

/// Shares the device with the other tests; `None` (the test skips, saying why) where the GPU
/// path cannot run.
fn share_gpu() -> Option<std::sync::RwLockReadGuard<'static, ()>> {
    let guard = DEVICE.read().unwrap_or_else(|poison| poison.into_inner());
    gpu_here().then_some(guard)
}

/// Takes the device from every other test of this binary until dropped.
fn own_gpu() -> Option<std::sync::RwLockWriteGuard<'static, ()>> {
    let guard = DEVICE.write().unwrap_or_else(|poison| poison.into_inner());
    gpu_here().then_some(guard)
}

fn gpu_here() -> bool {
    common::on_gpu(GpuDecoder::new(GpuOptions::default())).is_some()
}

fn store(dir: &Path, compression: Compression, shard: Option<u64>) -> String {
    let options = GenerateOptions {
        time: 6,
        levels: 3,
        lat: 40,
        lon: 72,
        compression,
        shard,
        seed: 11,
        chunks: None,
        variables: Default::default(),
    };
    let path = dir.join("w1.zarr");
    generate(&path, &options, |_, _| {}).expect("generate");
    path.to_string_lossy().into_owned()
}

/// A fixture store written by xarray (tests/fixtures/stores), found as tests/common finds it.
fn fixtures_store(name: &str) -> String {
    let built = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/stores");
    let root = match built.exists() {
        true => built,
        false => Path::new("tests/fixtures/stores").to_path_buf(),
    };
    root.join(name).to_string_lossy().into_owned()
}

fn patches(url: &str) -> PipelineBuilder {
    Pipeline::builder(url)
        .variables(["t2m", "z", "u"])
        .window_spec(
            WindowSpec::new()
                .window("latitude", 16, 12)
                .window("longitude", 24, 20)
                .edge(Edge::Pad)
                .pad_value(-3.0),
        )
        .shuffle(Shuffle::Full)
        .seed(5)
        .batch_size(5)
}

#[cfg(feature = "cuda")]
mod on_gpu {
    use super::*;
    use zarrpipe::codec::DecodedChunks;
    use zarrpipe::collate::dlpack::dlpark;
    use zarrpipe::cuda::cudarc::driver::CudaContext;

    /// Every batch of the GPU pipeline, as host float32 (inputs, targets, padding and NaN
    /// masks as 0/1, latitude weights), with its sample indices.
    type HostView = (
        Vec<u64>,
        Vec<f32>,
        Option<Vec<f32>>,
        Option<Vec<f32>>,
        Option<Vec<f32>>,
        Option<Vec<f32>>,
    );

    /// Batches with device tensors, decoded on `decode`'s side.
    async fn gpu_batches(builder: PipelineBuilder, decode: DecodeOn) -> Vec<HostView> {
        let batches = builder
            .decode_on(decode)
            .collate_on_gpu()
            .build()
            .await
            .unwrap();
        // Each batch is read back and dropped before the next is asked for, as a training
        // loop lets go of them: under a tight tensor budget the next waits for that.
        let mut views = Vec::new();
        let mut batches = std::pin::pin!(batches);
        while let Some(batch) = batches.try_next().await.unwrap() {
            views.push({
                let batch = &batch;
                batch.synchronize().unwrap();
                let host = |t: &zarrpipe::collate::DeviceTensor| {
                    t.to_host_f32()
                        .unwrap()
                        .iter()
                        .copied()
                        .collect::<Vec<f32>>()
                };
                (
                    batch.samples.iter().map(|s| s.index).collect(),
                    host(&batch.inputs),
                    batch.targets.as_ref().map(host),
                    batch.mask.as_ref().map(host),
                    batch.nan_mask.as_ref().map(host),
                    batch.latitude_weights.as_ref().map(host),
                )
            });
        }
        views
    }

    async fn cpu_batches(builder: PipelineBuilder, round: fn(f32) -> f32) -> Vec<HostView> {
        let batches: Vec<_> = builder.build().await.unwrap().try_collect().await.unwrap();
        let floats = |a: &ndarray::ArrayD<f32>| a.iter().map(|&v| round(v)).collect::<Vec<_>>();
        let flags = |a: &ndarray::ArrayD<u8>| a.iter().map(|&v| f32::from(v)).collect::<Vec<_>>();
        batches
            .iter()
            .map(|batch| {
                (
                    batch.samples.iter().map(|s| s.index).collect(),
                    floats(&batch.inputs),
                    batch.targets.as_ref().map(floats),
                    batch.mask.as_ref().map(flags),
                    batch.nan_mask.as_ref().map(flags),
                    batch
                        .latitude_weights
                        .as_ref()
                        .map(|w| w.iter().copied().collect()),
                )
            })
            .collect()
    }

    fn same_bits(a: &[f32], b: &[f32]) -> bool {
        a.len() == b.len() && a.iter().zip(b).all(|(x, y)| x.to_bits() == y.to_bits())
    }

    /// Every combination of stages against CPU decoding into host tensors: device tensors
    /// from GPU and from CPU decoding, and (for float32) host tensors from GPU decoding.
    async fn check_equal(builder: impl Fn() -> PipelineBuilder, round: fn(f32) -> f32) {
        let host = |decode| {
            builder()
                .decode_on(decode)
                .collate_options(host_options(&builder()))
        };
        let cpu = cpu_batches(host(DecodeOn::Cpu), round).await;
        let split = DecodeOn::Split;
        let auto = DecodeOn::Auto { gpu_share: None };
        let mut combinations = vec![
            (
                "GPU decode, GPU collate",
                gpu_batches(builder(), DecodeOn::Gpu).await,
            ),
            (
                "CPU decode, GPU collate",
                gpu_batches(builder(), DecodeOn::Cpu).await,
            ),
            (
                "split decode, GPU collate",
                gpu_batches(builder(), split).await,
            ),
            (
                "auto decode, GPU collate",
                gpu_batches(builder(), auto).await,
            ),
            (
                "a fixed split (0.4 on the GPU), GPU collate",
                gpu_batches(builder(), DecodeOn::SplitFixed { gpu_chunks: 0.4 }).await,
            ),
        ];
        if builder().collate_options_ref().dtype == TensorDType::F32 {
            let decoded_on_gpu = cpu_batches(host(DecodeOn::Gpu), |v| v).await;
            combinations.push(("GPU decode, CPU collate", decoded_on_gpu));
            let split_to_host = cpu_batches(host(split), |v| v).await;
            combinations.push(("split decode, CPU collate", split_to_host));
        }
        for (name, gpu) in combinations {
            eprintln!("  {name}");
            same_batches(&gpu, &cpu);
        }
    }

    fn same_batches(gpu: &[HostView], cpu: &[HostView]) {
        assert_eq!(gpu.len(), cpu.len(), "batch count");
        for (number, (g, c)) in gpu.iter().zip(cpu).enumerate() {
            assert_eq!(g.0, c.0, "samples of batch {number}");
            assert!(same_bits(&g.1, &c.1), "inputs of batch {number} differ");
            match (&g.2, &c.2) {
                (Some(g), Some(c)) => assert!(same_bits(g, c), "targets of batch {number}"),
                (None, None) => {}
                _ => panic!("targets on one device only"),
            }
            assert_eq!(g.3, c.3, "padding mask of batch {number}");
            assert_eq!(g.4, c.4, "NaN mask of batch {number}");
            assert_eq!(g.5, c.5, "latitude weights of batch {number}");
        }
    }

    /// The builder's collate options with the tensor type the host delivers (float32).
    fn host_options(builder: &PipelineBuilder) -> CollateOptions {
        CollateOptions {
            dtype: TensorDType::F32,
            ..builder.collate_options_ref().clone()
        }
    }

    fn runtime() -> tokio::runtime::Runtime {
        tokio::runtime::Builder::new_multi_thread()
            .enable_all()
            .build()
            .unwrap()
    }

    #[test]
    fn batches_equal_the_cpu_pipeline_bit_for_bit() {
        let Some(_gpu) = share_gpu() else {
            return;
        };
        let dir = tempfile::tempdir().unwrap();
        runtime().block_on(async {
            for (name, compression, shard) in [
                ("zstd", Compression::Zstd, None),
                ("blosc-lz4", Compression::BloscLz4, None),
                ("sharded zstd", Compression::Zstd, Some(2)),
            ] {
                eprintln!("{name}");
                let url = store(&dir.path().join(name), compression, shard);
                check_equal(|| patches(&url), |v| v).await;
                let whole_fields = || Pipeline::builder(&url).forecast(2, [1, 2]).batch_size(2);
                check_equal(whole_fields, |v| v).await;
            }
        });
    }

    /// Under a GPU memory budget smaller than one batch, batches still come (one always goes
    /// through) and equal the CPU pipeline's; the device reports the budget it was given.
    #[test]
    fn a_budget_under_one_batch_still_delivers_every_batch() {
        let Some(_gpu) = share_gpu() else {
            return;
        };
        let dir = tempfile::tempdir().unwrap();
        runtime().block_on(async {
            let url = store(&dir.path().join("zstd"), Compression::Zstd, None);
            let cpu = cpu_batches(patches(&url), |v| v).await;
            let gpu = GpuDevice::open_within(GpuOptions::default(), Some(2 << 10), None).unwrap();
            let memory = gpu.memory_budget();
            assert_eq!(
                (memory.budget, memory.decoding, memory.tensors),
                (2048, 1024, 1024)
            );
            for decode in [DecodeOn::Gpu, DecodeOn::Split] {
                let tight = gpu_batches(patches(&url).gpu(gpu.clone()), decode).await;
                same_batches(&tight, &cpu);
            }
        });
    }

    /// A batch that finds the device's memory full fails with an out-of-memory error; once
    /// memory is free again the same decoder decodes the next batch (the error does not stick
    /// to the decoder as a faulted context does).
    #[test]
    fn running_out_of_device_memory_fails_a_batch_not_the_decoder() {
        use zarrpipe::codec::testing::{compare_with_cpu, fetch_all};
        let Some(_gpu) = own_gpu() else {
            return;
        };
        let dir = tempfile::tempdir().unwrap();
        runtime().block_on(async {
            let url = store(&dir.path().join("zstd"), Compression::Zstd, None);
            let dataset = zarrpipe::store::Dataset::open(&url).await.unwrap();
            let chunks = fetch_all(&dataset).await;
            let decoder = GpuDecoder::new(GpuOptions::default()).unwrap();
            let context = decoder.context().clone();
            let stream = context.new_stream().unwrap();
            zarrpipe::cuda::trim_memory_pool(&context);
            // Every block the device still gives, largest first.
            let mut hog = Vec::new();
            for block in [1usize << 30, 64 << 20, 2 << 20] {
                // SAFETY: never read; held only to fill the device.
                while let Ok(taken) = unsafe { stream.alloc::<u8>(block) } {
                    hog.push(taken);
                }
            }
            stream.synchronize().unwrap();
            let error = decoder.decode_batch(chunks.clone()).unwrap_err();
            let out_of_memory = matches!(
                &error,
                zarrpipe::codec::Error::Cuda(cuda) if cuda.is_out_of_memory()
            );
            assert!(out_of_memory, "{}", zarrpipe::error_chain(&error));
            drop(hog);
            stream.synchronize().unwrap();
            zarrpipe::cuda::trim_memory_pool(&context);
            let decoded = decoder
                .decode_batch(chunks.clone())
                .unwrap()
                .into_host()
                .unwrap();
            assert_eq!(compare_with_cpu(&chunks, &decoded), chunks.len());
        });
    }

    /// A decoder of the test's own, outside zarrpipe's crates: each chunk decoded on the CPU,
    /// the batch's chunks uploaded into one device buffer it allocates itself, handed on as a
    /// device batch. The device collator gathers from it as from the GPU decoder's.
    #[derive(Debug)]
    struct UploadingDecoder {
        stream: std::sync::Arc<zarrpipe::cuda::cudarc::driver::CudaStream>,
    }

    impl BatchDecoder for UploadingDecoder {
        fn decode_chunks(
            self: std::sync::Arc<Self>,
            chunks: Vec<zarrpipe::store::EncodedChunk>,
        ) -> futures::future::BoxFuture<'static, zarrpipe::codec::Result<DecodedChunks>> {
            use futures::FutureExt;
            use zarrpipe::codec::{decode_on_cpu, DecodePath, DeviceBatch, DeviceChunk};
            use zarrpipe::cuda::{DeviceBuffer, During};
            async move {
                let decoded = tokio::task::spawn_blocking(move || {
                    chunks.into_iter().map(decode_on_cpu).collect::<Vec<_>>()
                })
                .await
                .expect("decoding task");
                let (mut bytes, mut placed) = (Vec::new(), Vec::new());
                for chunk in decoded {
                    let chunk = chunk?;
                    // An odd offset of the decoder's choosing: the collator reads where told.
                    bytes.resize(bytes.len().next_multiple_of(64) + 8, 0xAB);
                    placed.push(Ok(DeviceChunk {
                        offset: bytes.len(),
                        len: chunk.bytes.len(),
                        path: match chunk.missing {
                            true => DecodePath::Fill,
                            false => DecodePath::Gpu,
                        },
                        stored_len: chunk.stored_len,
                        fetch_time: chunk.fetch_time,
                        request: chunk.request,
                    }));
                    bytes.extend_from_slice(&chunk.bytes);
                }
                let uploaded = self.stream.clone_htod(&bytes).during("uploading a batch")?;
                let buffer = DeviceBuffer::written_on(uploaded, &self.stream)?;
                Ok(DecodedChunks::Device(DeviceBatch::new(buffer, placed)?))
            }
            .boxed()
        }
    }

    /// A decoder written outside zarrpipe's crates feeds the device collator: its batches
    /// equal the CPU pipeline's bit for bit. A chunk placed past the end of its buffer is
    /// refused, naming the chunk, before any kernel reads it.
    #[test]
    fn a_decoder_of_ones_own_feeds_the_device_collator() {
        use zarrpipe::codec::{DecodePath, DeviceBatch, DeviceChunk};
        use zarrpipe::cuda::{DeviceBuffer, During};
        let Some(_gpu) = share_gpu() else {
            return;
        };
        let dir = tempfile::tempdir().unwrap();
        let context = zarrpipe::cuda::open_device(0).unwrap();
        let stream = context.new_stream().unwrap();
        runtime().block_on(async {
            let url = store(&dir.path().join("zstd"), Compression::Zstd, None);
            let cpu = cpu_batches(patches(&url), |v| v).await;
            let decoder = std::sync::Arc::new(UploadingDecoder {
                stream: stream.clone(),
            });
            let own = gpu_batches(patches(&url).decoder(decoder), DecodeOn::Cpu).await;
            same_batches(&own, &cpu);

            let dataset = zarrpipe::store::Dataset::open(&url).await.unwrap();
            let variable = dataset.variable("t2m").unwrap();
            let request = zarrpipe::store::ChunkRequest::new(variable.clone(), vec![0, 0, 0]);
            let len = variable.decoded_chunk_bytes() as usize;
            let bytes = stream.alloc_zeros::<u8>(len).during("allocating").unwrap();
            let buffer = DeviceBuffer::written_on(bytes, &stream).unwrap();
            let outside = DeviceChunk {
                request,
                offset: 8,
                len,
                path: DecodePath::Gpu,
                stored_len: 0,
                fetch_time: std::time::Duration::ZERO,
            };
            let error = DeviceBatch::new(buffer, vec![Ok(outside)]).unwrap_err();
            let message = error.to_string();
            assert!(
                message.contains("variable `t2m`") && message.contains("device buffer"),
                "{message}"
            );
        });
    }

    /// One stream of three shuffled epochs, decoded on the GPU, split or auto, into device
    /// tensors: epoch by epoch the CPU pipeline's epochs built apart, bit for bit.
    #[test]
    fn epochs_in_a_row_equal_the_cpu_pipeline_epoch_by_epoch() {
        let Some(_gpu) = share_gpu() else {
            return;
        };
        let dir = tempfile::tempdir().unwrap();
        runtime().block_on(async {
            let url = store(&dir.path().join("zstd"), Compression::Zstd, None);
            let mut cpu = Vec::new();
            for epoch in 0..3 {
                cpu.extend(cpu_batches(patches(&url).epoch(epoch), |v| v).await);
            }
            let auto = DecodeOn::Auto { gpu_share: None };
            for decode in [DecodeOn::Gpu, DecodeOn::Split, auto] {
                eprintln!("  {decode:?}");
                let gpu = gpu_batches(patches(&url).epochs(3), decode).await;
                same_batches(&gpu, &cpu);
            }
        });
    }

    /// Two ranks of one job on this host, each with its own `auto` pipeline, share their
    /// waits: a wait recorded by one rank's consumer shows in the other's pace, and each
    /// rank's batches are the CPU pipeline's, bit for bit.
    #[test]
    fn ranks_that_share_their_waits_see_each_others() {
        let Some(_gpu) = share_gpu() else {
            return;
        };
        let dir = tempfile::tempdir().unwrap();
        let job = format!("gpu-test-{}", std::process::id());
        runtime().block_on(async {
            let url = store(&dir.path().join("zstd"), Compression::Zstd, None);
            let rank = |rank: usize| {
                patches(&url)
                    .processes_on_host(2)
                    .rank_on_host(rank)
                    .share_waits_on_host(job.clone())
            };
            let auto = DecodeOn::Auto { gpu_share: None };
            let mut paces = Vec::new();
            let mut streams = Vec::new();
            for number in 0..2 {
                let builder = rank(number).decode_on(auto).collate_on_gpu();
                let mut batches = Box::pin(builder.build().await.unwrap());
                let first = batches.try_next().await.unwrap().unwrap();
                let pace = first.pace.clone().expect("auto attaches its pace");
                assert!(pace.shares_waits(), "rank {number}");
                paces.push(pace);
                streams.push((batches, first));
            }
            let before = paces[0].counts().wait;
            let ms = std::time::Duration::from_millis;
            paces[1].record(ms(50), ms(100));
            let after = paces[0].counts().wait;
            assert!(after - before >= ms(50), "{before:?} -> {after:?}");
            drop(streams);
            let cpu = cpu_batches(patches(&url), |v| v).await;
            same_batches(&gpu_batches(rank(1), auto).await, &cpu);
        });
    }

    /// The xarray gap stores (tests/missing.rs): samples left out (`skip`, shuffled) and gap
    /// steps filled with NaN (`fill`, with the NaN mask and a NaN fill), on every combination
    /// of stages, bit for bit.
    #[test]
    fn missing_steps_skip_and_fill_as_on_the_cpu() {
        use zarrpipe::batcher::Missing;
        let Some(_gpu) = share_gpu() else {
            return;
        };
        runtime().block_on(async {
            for store in ["gaps_v2", "gaps_v3"] {
                let url = fixtures_store(store);
                eprintln!("{store}, skip");
                let skip = || {
                    Pipeline::builder(&url)
                        .forecast(2, [1])
                        .shuffle(Shuffle::Full)
                        .seed(3)
                        .batch_size(2)
                };
                check_equal(skip, |v| v).await;
                eprintln!("{store}, fill");
                let fill = || {
                    Pipeline::builder(&url)
                        .forecast(2, [1, 2])
                        .missing(Missing::Fill)
                        .batch_size(3)
                        .collate_options(CollateOptions {
                            nan_mask: true,
                            ..Default::default()
                        })
                };
                check_equal(fill, |v| v).await;
                let filled = || {
                    fill().collate_options(CollateOptions {
                        nan_mask: true,
                        nan_fill: Some(0.0),
                        ..Default::default()
                    })
                };
                check_equal(filled, |v| v).await;
            }
        });
    }

    /// With a pinned budget smaller than any batch, one batch decodes at a time, and the
    /// batches are unchanged.
    #[test]
    fn a_pinned_memory_budget_holds_batches_back() {
        let Some(_gpu) = share_gpu() else {
            return;
        };
        let dir = tempfile::tempdir().unwrap();
        let url = store(dir.path(), Compression::Zstd, None);
        let tight = || patches(&url).gpu_pinned_memory(1);
        runtime().block_on(async {
            let mut batches = tight()
                .decode_on(DecodeOn::Gpu)
                .collate_on_gpu()
                .build()
                .await
                .unwrap();
            let mut count = 0;
            while let Some(batch) = batches.try_next().await.unwrap() {
                batch.synchronize().unwrap();
                count += 1;
            }
            assert!(count > 2, "{count} batches");
            check_equal(tight, |value| value).await;
        });
    }

    #[test]
    fn normalised_masked_and_half_precision_tensors_match_the_cpu() {
        let Some(_gpu) = share_gpu() else {
            return;
        };
        let dir = tempfile::tempdir().unwrap();
        let url = store(dir.path(), Compression::Zstd, None);
        let normalization = Normalization {
            mean: vec![280.0, 900.0, 1000.0, 1100.0, 5.0, 6.0, 7.0],
            std: vec![12.0, 300.0, 310.0, 320.0, 8.0, 9.0, 10.0],
        };
        let options = |dtype| CollateOptions {
            dtype,
            normalize: Some(normalization.clone()),
            nan_fill: Some(0.0),
            nan_mask: true,
            ..Default::default()
        };
        runtime().block_on(async {
            let url = &url;
            let with = |dtype| {
                move || {
                    patches(url)
                        .collate_options(options(dtype))
                        .latitude_weights("latitude")
                }
            };
            check_equal(with(TensorDType::F32), |v| v).await;
            check_equal(with(TensorDType::BF16), |v| {
                half::bf16::from_f32(v).to_f32()
            })
            .await;
            check_equal(with(TensorDType::F16), |v| half::f16::from_f32(v).to_f32()).await;
        });
    }

    /// CF-packed and masked stores as xarray writes them (tests/fixtures/real_archives):
    /// the gather kernel decodes them (masks, scales in float64, `_Unsigned`) to the CPU's
    /// values bit for bit, in padded shuffled patches, float32 and bfloat16, and stored
    /// values with `mask_and_scale` off.
    #[test]
    fn cf_decoding_matches_the_cpu() {
        let Some(_gpu) = share_gpu() else {
            return;
        };
        let archives = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/real_archives");
        let archives = match archives.exists() {
            true => archives,
            false => Path::new("tests/fixtures/real_archives").to_path_buf(),
        };
        let stores = [
            ("era5_int16_packed_v2.zarr", vec!["t2m"]),
            ("era5_int16_packed_v3.zarr", vec!["t2m"]),
            ("uint8_packed_v3.zarr", vec!["tcc"]),
            ("float_fill_9999_v2.zarr", vec!["sst", "swh", "sp_nc"]),
            ("float_fill_9999_v3.zarr", vec!["sst", "swh", "sp_nc"]),
            ("unsigned_v2.zarr", vec!["lsm_class"]),
        ];
        runtime().block_on(async {
            for (store, variables) in &stores {
                let url = archives.join(store).to_string_lossy().into_owned();
                for decoded in [true, false] {
                    let builder = |dtype| {
                        let (url, variables) = (url.clone(), variables.clone());
                        move || {
                            Pipeline::builder(&url)
                                .variables(variables.clone())
                                .store_options(
                                    zarrpipe::store::StoreOptions::new().mask_and_scale(decoded),
                                )
                                .missing(zarrpipe::batcher::Missing::Ignore)
                                .window_spec(
                                    WindowSpec::new()
                                        .window("latitude", 6, 5)
                                        .window("longitude", 10, 9)
                                        .edge(Edge::Pad),
                                )
                                .shuffle(Shuffle::Full)
                                .seed(2)
                                .batch_size(3)
                                .collate_options(CollateOptions {
                                    dtype,
                                    ..Default::default()
                                })
                        }
                    };
                    check_equal(builder(TensorDType::F32), |v| v).await;
                    check_equal(builder(TensorDType::BF16), |v| {
                        half::bf16::from_f32(v).to_f32()
                    })
                    .await;
                }
            }
        });
    }

    /// Channels picked by level value (`xr_v3`: levels 1000, 850, 500, two to a chunk), out of
    /// order and beside a surface variable, gathered on the GPU as on the CPU.
    #[test]
    fn selected_levels_match_the_cpu() {
        let Some(_gpu) = share_gpu() else {
            return;
        };
        let url = common::store_path("xr_v3");
        runtime().block_on(async {
            let url = &url;
            for levels in [vec![500.0, 1000.0], vec![850.0]] {
                let picked = || {
                    Pipeline::builder(url)
                        .variables(["t2m", "z"])
                        .select_channels("level", levels.clone())
                        .window_spec(
                            WindowSpec::new()
                                .window("latitude", 5, 3)
                                .window("longitude", 7, 6)
                                .edge(Edge::Pad),
                        )
                        .shuffle(Shuffle::Full)
                        .seed(4)
                        .batch_size(3)
                };
                check_equal(picked, |v| v).await;
            }
        });
    }

    /// Static fields and derived channels, in padded shuffled patches and in forecasting
    /// pairs, normalised (derived channels named in the statistics or not) and cast.
    #[test]
    fn static_and_derived_channels_match_the_cpu() {
        let Some(_gpu) = share_gpu() else {
            return;
        };
        let url = common::store_path("xr_static");
        let channels = [
            "t2m",
            "orography",
            "cos_lat",
            "sin_lon",
            "lsm",
            "sin_time_of_day",
            "cos_day_of_year",
            "sin_local_time",
            "cos_zenith",
        ];
        let patches = || {
            Pipeline::builder(&url)
                .variables(channels)
                .window_spec(
                    WindowSpec::new()
                        .window("latitude", 3, 2)
                        .window("longitude", 4, 3)
                        .edge(Edge::Pad),
                )
                .shuffle(Shuffle::Full)
                .seed(3)
                .batch_size(7)
        };
        let forecast = || {
            Pipeline::builder(&url)
                .variables(channels)
                .forecast(2, [1, 2])
                .batch_size(2)
        };
        // A windowed time dimension: derived channels move along it (no static field then:
        // a windowed dimension must be in every variable).
        let time_windows = || {
            let derived = channels
                .iter()
                .filter(|name| !matches!(**name, "orography" | "lsm"));
            Pipeline::builder(&url)
                .variables(derived.copied())
                .window("time", 3, 1)
                .window("latitude", 5, 2)
                .window("longitude", 9, 9)
                .batch_size(3)
        };
        let stats = r#"[{"variable": "t2m", "mean": 280.0, "std": 8.0},
                        {"variable": "orography", "mean": 600.0, "std": 500.0},
                        {"variable": "lsm", "mean": 0.5, "std": 0.5},
                        {"variable": "cos_zenith", "mean": 0.3, "std": 0.4}]"#;
        let finished = |dtype| {
            move || {
                patches()
                    .normalize_with_stats(stats)
                    .collate_options(CollateOptions {
                        dtype,
                        nan_fill: Some(0.0),
                        nan_mask: true,
                        ..Default::default()
                    })
            }
        };
        runtime().block_on(async {
            eprintln!("patches");
            check_equal(patches, |v| v).await;
            eprintln!("forecasting pairs");
            check_equal(forecast, |v| v).await;
            eprintln!("time windows");
            check_equal(time_windows, |v| v).await;
            eprintln!("normalised, float32 and bfloat16");
            check_equal(finished(TensorDType::F32), |v| v).await;
            check_equal(finished(TensorDType::BF16), |v| {
                half::bf16::from_f32(v).to_f32()
            })
            .await;
        });
    }

    /// Derived channels within 1e-5 of the CPU's values, and the CPU's within 1e-5 of the
    /// formulas (tests/channels.rs): checked apart from the bit-for-bit comparison so that a
    /// failure says how far off the device is.
    #[test]
    fn derived_channels_are_within_tolerance_of_the_cpu() {
        let Some(_gpu) = share_gpu() else {
            return;
        };
        let url = common::store_path("xr_static");
        let builder = || {
            Pipeline::builder(&url)
                .variables(["cos_zenith", "t2m", "cos_local_time", "sin_day_of_year"])
                .batch_size(6)
        };
        runtime().block_on(async {
            let cpu = cpu_batches(builder(), |v| v).await;
            let gpu = gpu_batches(builder(), DecodeOn::Gpu).await;
            assert_eq!(gpu.len(), cpu.len());
            for (g, c) in gpu.iter().zip(&cpu) {
                let worst =
                    g.1.iter()
                        .zip(&c.1)
                        .map(|(g, c)| (g - c).abs())
                        .fold(0f32, f32::max);
                assert!(worst <= 1e-5, "largest difference {worst}");
            }
        });
    }

    #[test]
    fn a_corrupt_chunk_fails_its_batch_only() {
        let Some(_gpu) = share_gpu() else {
            return;
        };
        let dir = tempfile::tempdir().unwrap();
        let url = store(dir.path(), Compression::Zstd, None);
        std::fs::write(Path::new(&url).join("z/c/2/1/0/0"), b"not zstd at all").unwrap();
        // A truncated frame, caught on the device side of the checks.
        let frame = std::fs::read(Path::new(&url).join("u/c/4/0/0/0")).unwrap();
        std::fs::write(
            Path::new(&url).join("u/c/4/0/0/0"),
            &frame[..frame.len() / 2],
        )
        .unwrap();
        runtime().block_on(async {
            let batches = Pipeline::builder(&url)
                .variables(["t2m", "z", "u"])
                .batch_size(1)
                .decode_on(DecodeOn::Gpu)
                .collate_on_gpu()
                .build()
                .await
                .unwrap();
            let outcomes: Vec<_> = batches.collect().await;
            assert_eq!(outcomes.len(), 6);
            for (time, outcome) in outcomes.iter().enumerate() {
                match (time, outcome) {
                    (2, Err(error)) => {
                        let error = error.to_string();
                        assert!(
                            error.contains("z/c/2/1/0/0") && error.contains("`z`"),
                            "{error}"
                        );
                    }
                    (4, Err(error)) => {
                        let error = error.to_string();
                        assert!(error.contains("u/c/4/0/0/0"), "{error}");
                    }
                    (2 | 4, Ok(_)) => panic!("batch {time} should fail"),
                    (_, Err(error)) => panic!("batch {time} failed: {error}"),
                    (_, Ok(batch)) => batch.synchronize().unwrap(),
                }
            }
        });
    }

    #[test]
    fn batches_leave_through_dlpack_without_a_copy() {
        let Some(_gpu) = share_gpu() else {
            return;
        };
        let dir = tempfile::tempdir().unwrap();
        let url = store(dir.path(), Compression::Zstd, None);
        runtime().block_on(async {
            let mut batches = Pipeline::builder(&url)
                .batch_size(2)
                .decode_on(DecodeOn::Gpu)
                .collate_on_gpu()
                .build()
                .await
                .unwrap();
            let batch = batches.try_next().await.unwrap().unwrap();
            batch.synchronize().unwrap();
            let expected = batch.inputs.to_host_f32().unwrap();
            let (address, shape) = (batch.inputs.device_ptr(), batch.inputs.shape().to_vec());
            let managed: dlpark::legacy::Dlpack = batch.inputs.into_dlpack();
            let dl = managed.validate().unwrap();
            assert_eq!(dl.data_ptr() as u64, address, "no copy");
            assert_eq!(dl.device(), dlpark::ffi::DLDevice::cuda(0));
            let dims: Vec<i64> = shape.iter().map(|&n| n as i64).collect();
            assert_eq!(dl.shape(), dims);
            let mut host = vec![0f32; expected.len()];
            // SAFETY: `host` holds the tensor's bytes; the tensor is complete (synchronised).
            unsafe {
                let bytes =
                    std::slice::from_raw_parts_mut(host.as_mut_ptr().cast::<u8>(), host.len() * 4);
                zarrpipe::cuda::cudarc::driver::result::memcpy_dtoh_sync(bytes, address).unwrap();
            }
            assert_eq!(host, expected.iter().copied().collect::<Vec<_>>());
            // The consumer's deleter, once: the buffer goes back to the pool.
            let raw = managed.into_raw();
            // SAFETY: a live tensor from `into_dlpack`, deleted once.
            unsafe { ((*raw).deleter.unwrap())(raw) };
            while batches.try_next().await.unwrap().is_some() {}
        });
    }

    /// Batches handed to candle hold the pipeline's own device memory (no copy), equal the CPU
    /// pipeline's batches bit for bit, and candle's kernels compute on them.
    #[cfg(feature = "candle")]
    #[test]
    fn batches_become_candle_tensors_without_a_copy() {
        use zarrpipe::candle::{self, DType, Storage};
        use zarrpipe::cuda::cudarc::driver::DevicePtr;
        let Some(_gpu) = share_gpu() else {
            return;
        };
        let dir = tempfile::tempdir().unwrap();
        let url = store(dir.path(), Compression::Zstd, None);
        let device = candle::Device::new_cuda(0).unwrap();
        runtime().block_on(async {
            let cpu = cpu_batches(patches(&url), |v| v).await;
            let mut gpu = patches(&url)
                .decode_on(DecodeOn::Gpu)
                .collate_on_gpu()
                .build()
                .await
                .unwrap();
            let mut number = 0;
            while let Some(batch) = gpu.try_next().await.unwrap() {
                let address = batch.inputs.device_ptr();
                let shape = batch.inputs.shape().to_vec();
                let handed = batch.into_candle(&device).unwrap();
                let inputs = &handed.inputs;
                assert_eq!(inputs.dims(), shape.as_slice());
                assert_eq!(inputs.dtype(), DType::F32);
                let (storage, _) = inputs.storage_and_layout();
                let Storage::Cuda(storage) = &*storage else {
                    panic!("candle tensor not on the GPU")
                };
                let slice = storage.as_cuda_slice::<f32>().unwrap();
                let stream = device.as_cuda_device().unwrap().cuda_stream();
                assert_eq!(slice.device_ptr(&stream).0, address, "no copy");

                let expected = &cpu[number];
                assert_eq!(
                    handed.samples.iter().map(|s| s.index).collect::<Vec<_>>(),
                    expected.0
                );
                let values = inputs.flatten_all().unwrap().to_vec1::<f32>().unwrap();
                assert!(same_bits(&values, &expected.1), "inputs of batch {number}");
                let mask = handed.mask.as_ref().expect("padded windows have a mask");
                let mask: Vec<f32> = mask
                    .flatten_all()
                    .unwrap()
                    .to_vec1::<u8>()
                    .unwrap()
                    .into_iter()
                    .map(f32::from)
                    .collect();
                assert_eq!(Some(mask), expected.3, "padding mask of batch {number}");

                // A candle kernel on the handed memory: the sum, against the CPU's in f64.
                let sum = inputs
                    .to_dtype(DType::F64)
                    .unwrap()
                    .sum_all()
                    .unwrap()
                    .to_scalar::<f64>()
                    .unwrap();
                let cpu_sum: f64 = expected.1.iter().map(|&v| f64::from(v)).sum();
                assert!(
                    (sum - cpu_sum).abs() <= 1e-9 * cpu_sum.abs().max(1.0),
                    "{sum} vs {cpu_sum}"
                );
                number += 1;
            }
            assert_eq!(number, cpu.len(), "batch count");
        });
    }

    #[test]
    fn dropping_the_stream_mid_epoch_frees_the_device_memory() {
        let Some(_gpu) = own_gpu() else {
            return;
        };
        let dir = tempfile::tempdir().unwrap();
        let options = GenerateOptions {
            time: 24,
            levels: 4,
            lat: 256,
            lon: 512,
            compression: Compression::Zstd,
            shard: None,
            seed: 2,
            chunks: None,
            variables: Default::default(),
        };
        let path = dir.path().join("big.zarr");
        generate(&path, &options, |_, _| {}).unwrap();
        let url = path.to_string_lossy().into_owned();
        let context = CudaContext::new(0).unwrap();
        let free = || context.mem_get_info().unwrap().0 as i64;
        runtime().block_on(async {
            let before = free();
            let mut batches = Pipeline::builder(&url)
                .batch_size(2)
                .prefetch(4)
                .decode_on(DecodeOn::Gpu)
                .collate_on_gpu()
                .build()
                .await
                .unwrap();
            let first = batches.try_next().await.unwrap().expect("a first batch");
            first.synchronize().unwrap();
            let during = free();
            drop(first);
            drop(batches);
            let mut after = free();
            for _ in 0..50 {
                if before - after < 64 << 20 {
                    break;
                }
                tokio::time::sleep(std::time::Duration::from_millis(100)).await;
                after = free();
            }
            eprintln!(
                "device memory in use: {} MiB during the epoch, {} MiB after the drop",
                (before - during) >> 20,
                (before - after) >> 20
            );
            assert!(
                before - during > 16 << 20,
                "the pipeline used no device memory?"
            );
            assert!(
                before - after < 64 << 20,
                "{} MiB left behind",
                (before - after) >> 20
            );
        });
    }
    /// A consumer's wait for a batch is read on the GPU's timeline: from when it asked for
    /// the batch, with its stream idle (or once the kernels it had queued have run), to when
    /// the batch was complete and handed over. A batch whose kernels still run is waited for,
    /// and so is one handed over late (decoded on the CPU); one complete and handed over while
    /// the consumer's own kernels run is not, however long they run.
    #[test]
    fn the_consumers_wait_is_timed_on_the_gpu() {
        use std::sync::Arc;
        use std::time::Duration;
        use zarrpipe::collate::HandoverClock;
        use zarrpipe::core::Pace;
        use zarrpipe::cuda::cudarc::driver::sys::CUevent_flags;
        use zarrpipe::cuda::cudarc::driver::{CudaSlice, CudaStream};
        // Its waits are timed on the device: other tests' kernels beside them would lengthen
        // them (a consumer's wait of 40 ms where its own kernels ran, H200, 2026-11-29).
        let Some(_gpu) = own_gpu() else {
            return;
        };
        let context = CudaContext::new(0).unwrap();
        let (loader, consumer) = (context.new_stream().unwrap(), context.new_stream().unwrap());
        let mut buffers = [0, 1].map(|_| loader.alloc_zeros::<u8>(1 << 30).unwrap());
        loader.synchronize().unwrap();
        // About 20 ms of work on `stream` at a few TB/s.
        let busy = |stream: &Arc<CudaStream>, buffer: &mut CudaSlice<u8>| {
            for _ in 0..50 {
                stream.memset_zeros(buffer).unwrap();
            }
        };
        let ready = |stream: &Arc<CudaStream>| {
            Arc::new(
                stream
                    .record_event(Some(CUevent_flags::CU_EVENT_DEFAULT))
                    .unwrap(),
            )
        };
        let pace = Arc::new(Pace::default());
        let clock = HandoverClock::default();
        // SAFETY (here and below): `consumer` is a live stream of the events' context.
        let hand_over = |ready: &Arc<_>| unsafe {
            clock
                .handed_over(consumer.cu_stream(), ready, &pace)
                .unwrap()
        };
        // The first hand-over tells the clock the consumer's stream; it was not asked for.
        hand_over(&ready(&loader));
        let [first, second] = &mut buffers;
        // Times one hand-over: the consumer's step queued (about 20 ms of kernels, or none),
        // then it asks for the batch that `handed` makes.
        let mut waited = |what: &str, step_queued: bool, handed: &mut dyn FnMut() -> Arc<_>| {
            context.synchronize().unwrap();
            let before = pace.counts().wait;
            if step_queued {
                busy(&consumer, second);
            }
            unsafe { clock.asked() }.unwrap();
            let batch = handed();
            hand_over(&batch);
            consumer.wait(&batch).unwrap();
            context.synchronize().unwrap();
            clock.record_resolved().unwrap();
            let ms = (pace.counts().wait - before).as_secs_f64() * 1e3;
            eprintln!("{what}: waited {ms:.2} ms");
            ms
        };
        let loader_busy = waited("the batch's kernels still run", false, &mut || {
            busy(&loader, first);
            ready(&loader)
        });
        let late = waited("handed over late", false, &mut || {
            std::thread::sleep(Duration::from_millis(15));
            ready(&loader)
        });
        let consumer_busy = waited("the consumer's kernels run", true, &mut || ready(&loader));
        assert!(pace.waits_on_device());
        assert!(loader_busy > 2.0, "{loader_busy} ms");
        assert!(late > 10.0, "{late} ms");
        assert!(consumer_busy < 0.5, "{consumer_busy} ms");
    }

    /// A consumer's step is read on the GPU's timeline too, from one request for a batch to
    /// the next: a loop that queues its kernels ahead of the GPU hands batches over as fast as
    /// it queues them, while its GPU steps at the pace of its kernels.
    #[test]
    fn the_consumers_step_is_timed_on_the_gpu() {
        use std::sync::Arc;
        use std::time::{Duration, Instant};
        use zarrpipe::collate::HandoverClock;
        use zarrpipe::core::Pace;
        use zarrpipe::cuda::cudarc::driver::sys::CUevent_flags;
        let Some(_gpu) = own_gpu() else {
            return;
        };
        let context = CudaContext::new(0).unwrap();
        let (loader, consumer) = (context.new_stream().unwrap(), context.new_stream().unwrap());
        let mut buffer = consumer.alloc_zeros::<u8>(1 << 30).unwrap();
        // One batch, complete before any step: the loader keeps pace with any consumer.
        let batch = Arc::new(
            loader
                .record_event(Some(CUevent_flags::CU_EVENT_DEFAULT))
                .unwrap(),
        );
        context.synchronize().unwrap();
        let pace = Arc::new(Pace::default());
        let clock = HandoverClock::default();
        // SAFETY (here and below): `consumer` is a live stream of the events' context.
        unsafe { clock.handed_over(consumer.cu_stream(), &batch, &pace) }.unwrap();
        // Five steps queued without a sync, each about 15-20 ms of kernels on the consumer's
        // stream, timed on the thread and on the GPU.
        let started = Instant::now();
        let mut handed = started;
        for _ in 0..5 {
            for _ in 0..50 {
                consumer.memset_zeros(&mut buffer).unwrap();
            }
            unsafe { clock.asked() }.unwrap();
            unsafe { clock.handed_over(consumer.cu_stream(), &batch, &pace) }.unwrap();
            let now = Instant::now();
            pace.record(Duration::ZERO, now - handed);
            handed = now;
        }
        let queued = started.elapsed();
        context.synchronize().unwrap();
        let ran = started.elapsed();
        clock.record_resolved().unwrap();
        let steps = pace.counts().steps;
        eprintln!("queued in {queued:?}, ran in {ran:?}; steps {steps:?}");
        // Four steps between five requests, timed as the GPU ran the kernels between them,
        // with the thread's steps before the first (the queueing alone) beside them.
        assert!(
            queued < ran / 2,
            "the loop did not run ahead: {queued:?} of {ran:?}"
        );
        assert!(steps > ran / 2, "{steps:?} of {ran:?}");
        assert!(steps < ran + queued, "{steps:?} of {ran:?}");
    }

    /// A Rust consumer's waits through `ConsumerStream`, timed on the GPU: a batch handed over
    /// 30 ms after an idle stream asked for it is waited for; one handed over while the
    /// consumer's own kernels still run is not, though its thread waited the same.
    #[test]
    fn a_rust_consumers_wait_is_timed_on_the_gpu() {
        use futures::StreamExt;
        use std::time::Duration;
        use zarrpipe::pipeline::ConsumerStream;
        let Some(_gpu) = own_gpu() else {
            return;
        };
        let dir = tempfile::tempdir().unwrap();
        runtime().block_on(async {
            let url = store(&dir.path().join("zstd"), Compression::Zstd, None);
            let batches = patches(&url)
                .epochs(2)
                .decode_on(DecodeOn::Auto { gpu_share: None })
                .collate_on_gpu()
                .build()
                .await
                .unwrap();
            // Each batch comes 30 ms after the consumer asks for it.
            let mut late = Box::pin(batches.then(|batch| async {
                tokio::time::sleep(Duration::from_millis(30)).await;
                batch
            }));
            let context = CudaContext::new(0).unwrap();
            let consumer = ConsumerStream::new(context.new_stream().unwrap());
            let mut busy_buffer = consumer.stream().alloc_zeros::<u8>(1 << 30).unwrap();
            let first = consumer.next(&mut late).await.unwrap().unwrap();
            let pace = first.pace.clone().expect("auto attaches its pace");
            // Asks for the next batch with the consumer's stream idle, or with about 100 ms
            // of its kernels queued.
            let mut take = async |queue_work: bool| {
                if queue_work {
                    for _ in 0..250 {
                        consumer.stream().memset_zeros(&mut busy_buffer).unwrap();
                    }
                } else {
                    consumer.stream().synchronize().unwrap();
                }
                consumer.next(&mut late).await.unwrap().unwrap()
            };
            let start = pace.counts().wait;
            for _ in 0..4 {
                take(false).await;
            }
            // The four idle asks' waits are resolved by the next hand-over; its own is not,
            // its kernels still running.
            take(true).await;
            let idle = pace.counts().wait - start;
            for _ in 0..4 {
                take(true).await;
            }
            context.synchronize().unwrap();
            take(false).await;
            let busy = pace.counts().wait - start - idle;
            eprintln!("waited {idle:?} over 4 idle asks, {busy:?} over 5 busy ones");
            assert!(pace.waits_on_device());
            assert!(idle >= Duration::from_millis(4 * 20), "{idle:?}");
            assert!(busy <= Duration::from_millis(5), "{busy:?}");
        });
    }

    /// zarrpipe's threads wait for the GPU asleep: a thread waiting for about 100 ms of queued
    /// work on an event of `HOST_WAITED_EVENT` spends a fraction of it on its core, where the
    /// driver spins a thread waiting on a default event (a process with fewer contexts than
    /// cores) and takes a core from CPU decoding.
    #[test]
    fn a_thread_waiting_for_the_gpu_sleeps() {
        use std::time::{Duration, Instant};
        use zarrpipe::codec::testing::thread_cpu_time;
        use zarrpipe::cuda::cudarc::driver::sys::CUevent_flags;
        use zarrpipe::cuda::HOST_WAITED_EVENT;
        let cpu_time = || thread_cpu_time().expect("the thread's CPU clock");
        let Some(_gpu) = own_gpu() else {
            return;
        };
        let context = CudaContext::new(0).unwrap();
        let stream = context.new_stream().unwrap();
        let mut busy_buffer = stream.alloc_zeros::<u8>(1 << 30).unwrap();
        let mut wait = |flags: CUevent_flags| {
            stream.synchronize().unwrap();
            for _ in 0..250 {
                stream.memset_zeros(&mut busy_buffer).unwrap();
            }
            let done = stream.record_event(Some(flags)).unwrap();
            let (wall, cpu) = (Instant::now(), cpu_time());
            done.synchronize().unwrap();
            (wall.elapsed(), cpu_time() - cpu)
        };
        let (spun_wall, spun_cpu) = wait(CUevent_flags::CU_EVENT_DEFAULT);
        let (slept_wall, slept_cpu) = wait(HOST_WAITED_EVENT);
        eprintln!(
            "default event: {spun_cpu:?} on the core over {spun_wall:?}; \
             HOST_WAITED_EVENT: {slept_cpu:?} over {slept_wall:?}"
        );
        assert!(slept_wall >= Duration::from_millis(30), "{slept_wall:?}");
        assert!(
            slept_cpu < slept_wall / 4,
            "{slept_cpu:?} over {slept_wall:?}"
        );
    }
}

#[cfg(not(feature = "cuda"))]
#[test]
#[ignore = "needs the `cuda` feature and a CUDA device: cargo test --features cuda --test gpu_pipeline"]
fn gpu_pipeline_tests() {}
