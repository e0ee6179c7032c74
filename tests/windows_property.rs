//! Property: for any window sizes, strides, edge handling, batch size and order, every sample
//! the pipeline delivers equals the slice of the arrays read directly (pad value and mask
//! outside the data), and every sample of the epoch is delivered exactly once; likewise with
//! xbatcher's `batch_dims` and `concat_input_dims`, where each batch also covers one block.

mod common;

use std::path::PathBuf;
use std::sync::OnceLock;

use common::read_whole;
use proptest::prelude::*;
use zarrpipe::batcher::{Edge, SampleLayout, Shuffle, WindowSpec};
use zarrpipe::generate::{generate, Compression, GenerateOptions};
use zarrpipe::prelude::*;

const TIME: usize = 3;
const LAT: usize = 8;
const LON: usize = 16;

/// One small store for every case (t2m and the 2-level z), with its arrays read whole.
struct Fixture {
    _dir: tempfile::TempDir,
    path: PathBuf,
    t2m: Vec<f32>,
    z: Vec<f32>,
}

fn runtime() -> &'static tokio::runtime::Runtime {
    static RUNTIME: OnceLock<tokio::runtime::Runtime> = OnceLock::new();
    RUNTIME.get_or_init(|| {
        tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .build()
            .unwrap()
    })
}

fn fixture() -> &'static Fixture {
    static FIXTURE: OnceLock<Fixture> = OnceLock::new();
    FIXTURE.get_or_init(|| {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("w1.zarr");
        let options = GenerateOptions {
            time: TIME as u64,
            levels: 2,
            lat: LAT as u64,
            lon: LON as u64,
            compression: Compression::BloscLz4,
            shard: None,
            seed: 3,
            chunks: None,
            variables: Default::default(),
        };
        generate(&path, &options, |_, _| {}).unwrap();
        let (t2m, z) = runtime().block_on(async {
            let dataset = Dataset::open(path.to_str().unwrap()).await.unwrap();
            let read = |name: &str| {
                let variable = dataset.variable(name).unwrap().clone();
                async move { read_whole(&variable).await.unwrap() }
            };
            (floats(&read("t2m").await), floats(&read("z").await))
        });
        Fixture {
            _dir: dir,
            path,
            t2m,
            z,
        }
    })
}

fn floats(bytes: &[u8]) -> Vec<f32> {
    bytes
        .chunks_exact(4)
        .map(|b| f32::from_ne_bytes(b.try_into().unwrap()))
        .collect()
}

fn edge() -> impl Strategy<Value = Edge> {
    prop_oneof![Just(Edge::Drop), Just(Edge::Pad), Just(Edge::Shift)]
}

fn shuffle() -> impl Strategy<Value = Shuffle> {
    prop_oneof![
        Just(Shuffle::None),
        Just(Shuffle::Full),
        Just(Shuffle::Blocks)
    ]
}

/// The pipeline's batches for `spec` over t2m and z.
fn batches(spec: WindowSpec, shuffle: Shuffle, seed: u64, batch_size: usize) -> Vec<Batch> {
    // The fixture is built (with its own runtime) before entering this one.
    let path = fixture().path.to_str().unwrap();
    runtime().block_on(async {
        Pipeline::builder(path)
            .variables(["t2m", "z"])
            .window_spec(spec)
            .shuffle(shuffle)
            .seed(seed)
            .batch_size(batch_size)
            .build()
            .await
            .unwrap()
            .try_collect()
            .await
            .unwrap()
    })
}

/// Every sample of `batches` (windows of `lat` x `lon`) equals the slice of t2m and z (or the
/// pad value -7 outside the data); returns the sample numbers delivered, sorted.
fn check_slices(batches: &[Batch], lat: u64, lon: u64) -> Result<Vec<u64>, TestCaseError> {
    let fixture = fixture();
    let mut delivered = Vec::new();
    for batch in batches {
        for (position, sample) in batch.samples.iter().enumerate() {
            delivered.push(sample.index);
            let (t, la, lo) = (
                sample.origin[0] as usize,
                sample.origin[1] as usize,
                sample.origin[2] as usize,
            );
            for y in 0..lat as usize {
                for x in 0..lon as usize {
                    let inside = la + y < LAT && lo + x < LON;
                    let at = |channel: usize| batch.inputs[[position, channel, y, x]];
                    let cell = (la + y) * LON + lo + x;
                    let expect = |values: &[f32], plane: usize| {
                        if inside {
                            values[plane * LAT * LON + cell]
                        } else {
                            -7.0
                        }
                    };
                    prop_assert_eq!(at(0), expect(&fixture.t2m, t));
                    prop_assert_eq!(at(1), expect(&fixture.z, t * 2));
                    prop_assert_eq!(at(2), expect(&fixture.z, t * 2 + 1));
                    if let Some(mask) = &batch.mask {
                        prop_assert_eq!(mask[[position, y, x]], inside as u8);
                    }
                }
            }
        }
    }
    delivered.sort();
    Ok(delivered)
}

/// xbatcher's batch dims: blocks of time steps (any concat), of latitude windows (with
/// concat), or none (concat alone: one batch).
#[derive(Clone, Copy, Debug)]
enum Blocks {
    Time(u64, bool),
    Latitude(u64),
    Concat,
}

fn blocks() -> impl Strategy<Value = Blocks> {
    prop_oneof![
        (1u64..=TIME as u64, any::<bool>()).prop_map(|(n, concat)| Blocks::Time(n, concat)),
        (1u64..=LAT as u64).prop_map(Blocks::Latitude),
        Just(Blocks::Concat),
    ]
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 40, ..ProptestConfig::default() })]

    #[test]
    fn windows_equal_array_slices(
        lat in (1u64..=8, 1u64..=8),
        lon in (1u64..=16, 1u64..=16),
        edge in edge(),
        shuffle in shuffle(),
        batch_size in 1usize..6,
        seed in 0u64..1000,
    ) {
        let spec = WindowSpec::new().window("latitude", lat.0, lat.1).window("longitude", lon.0, lon.1).edge(edge).pad_value(-7.0);
        let batches = batches(spec, shuffle, seed, batch_size);
        let delivered = check_slices(&batches, lat.0, lon.0)?;
        let total = delivered.len() as u64;
        prop_assert_eq!(delivered, (0..total).collect::<Vec<u64>>());
        prop_assert!((total as usize).is_multiple_of(TIME));
    }

    #[test]
    fn batch_dims_deliver_array_slices_block_by_block(
        lat in (1u64..=8, 1u64..=8),
        lon in (1u64..=16, 1u64..=16),
        blocks in blocks(),
        shuffle in shuffle(),
        seed in 0u64..1000,
    ) {
        let mut spec = WindowSpec::new().window("latitude", lat.0, lat.1).window("longitude", lon.0, lon.1).pad_value(-7.0);
        let block = match blocks {
            Blocks::Time(n, concat) => {
                spec = spec.batch_dim("time", n).concat_input_dims(concat);
                Some((0, n))
            }
            // Blocks must hold a window.
            Blocks::Latitude(n) => {
                let n = n.max(lat.0);
                spec = spec.batch_dim("latitude", n).concat_input_dims(true);
                Some((1, n))
            }
            Blocks::Concat => {
                spec = spec.concat_input_dims(true);
                None
            }
        };
        let dataset = runtime().block_on(Dataset::open(fixture().path.to_str().unwrap())).unwrap();
        let layout = SampleLayout::new(&dataset, &["t2m", "z"], &spec).unwrap();
        let groups = layout.batch_groups().unwrap();
        // The batch size given is not used: the layout's blocks are the batches.
        let batches = batches(spec, shuffle, seed, 5);
        prop_assert_eq!(batches.len() as u64, groups.count);
        for batch in &batches {
            prop_assert_eq!(batch.samples.len() as u64, groups.size);
            prop_assert_eq!(batch.inputs.shape()[0] as u64, groups.size);
            // Every window of a batch lies inside its one block.
            if let Some((axis, n)) = block {
                let size = if axis == 0 { 1 } else { lat.0 };
                let first = batch.samples[0].origin[axis] / n;
                for sample in &batch.samples {
                    prop_assert_eq!(sample.origin[axis] / n, first);
                    prop_assert!(sample.origin[axis] + size <= (first + 1) * n);
                }
            }
        }
        let delivered = check_slices(&batches, lat.0, lon.0)?;
        prop_assert_eq!(delivered, (0..layout.num_samples()).collect::<Vec<u64>>());
    }
}
