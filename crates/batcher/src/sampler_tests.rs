//! Epoch sampler: coverage across ranks, determinism, block shuffling, resume, env parsing.

use std::collections::HashSet;
use std::sync::Arc;
use std::time::Instant;

use proptest::prelude::*;

use super::{parse_local_rank, Rng, SplitMix64};
use crate::{EpochSampler, Error, Ranks, SamplerSpec, SamplerState, Shuffle, Uneven};

/// One random sampler configuration; `spec(rank)` builds it for a rank.
#[derive(Clone, Debug)]
struct Case {
    num_samples: u64,
    world_size: usize,
    batch_size: usize,
    seed: u64,
    shuffle: Shuffle,
    uneven: Uneven,
    drop_last_batch: bool,
    blocks: u64,
}

impl Case {
    fn spec(&self, rank: usize) -> SamplerSpec {
        SamplerSpec {
            seed: self.seed,
            shuffle: self.shuffle,
            ranks: Ranks::new(rank, self.world_size).unwrap(),
            uneven: self.uneven,
            drop_last_batch: self.drop_last_batch,
            block_of: Some(scattered_blocks(self.num_samples, self.blocks, self.seed)),
            ..SamplerSpec::new(self.num_samples, self.batch_size)
        }
    }

    /// Every rank's samples, keeping short last batches.
    fn shares(&self) -> Vec<Vec<u64>> {
        let case = Case {
            drop_last_batch: false,
            ..self.clone()
        };
        (0..self.world_size)
            .map(|rank| sampler(case.spec(rank), 0).indices().to_vec())
            .collect()
    }
}

/// Block ids in `0..blocks`, scattered over the samples (not sorted), so grouping is tested.
fn scattered_blocks(num_samples: u64, blocks: u64, seed: u64) -> Arc<[u64]> {
    let mut rng = Rng::seeded(seed ^ 0x5eed);
    (0..num_samples).map(|_| rng.below(blocks)).collect()
}

fn sampler(spec: SamplerSpec, epoch: u64) -> EpochSampler {
    EpochSampler::new(spec, epoch).unwrap()
}

fn shuffle() -> impl Strategy<Value = Shuffle> {
    prop_oneof![
        Just(Shuffle::None),
        Just(Shuffle::Full),
        Just(Shuffle::Blocks)
    ]
}

fn uneven() -> impl Strategy<Value = Uneven> {
    prop_oneof![Just(Uneven::Pad), Just(Uneven::Drop)]
}

prop_compose! {
    fn case()(
        num_samples in 0u64..2000,
        world_size in 1usize..=8,
        batch_size in 1usize..=70,
        seed in any::<u64>(),
        shuffle in shuffle(),
        uneven in uneven(),
        drop_last_batch in any::<bool>(),
        blocks in 1u64..60,
    ) -> Case {
        Case { num_samples, world_size, batch_size, seed, shuffle, uneven, drop_last_batch, blocks }
    }
}

/// How often each sample appears across `shares`.
fn counts(num_samples: u64, shares: &[Vec<u64>]) -> Vec<u64> {
    let mut counts = vec![0; num_samples as usize];
    for &sample in shares.iter().flatten() {
        counts[sample as usize] += 1;
    }
    counts
}

/// The block ids of `order`, one per run of equal ids.
fn block_runs(order: &[u64], block_of: &[u64]) -> Vec<u64> {
    let mut runs: Vec<u64> = order.iter().map(|&s| block_of[s as usize]).collect();
    runs.dedup();
    runs
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(96))]

    #[test]
    fn ranks_share_the_epoch_as_uneven_says(case in case()) {
        let shares = case.shares();
        let counts = counts(case.num_samples, &shares);
        let (n, world) = (case.num_samples, case.world_size as u64);
        let per_rank = match case.uneven {
            Uneven::Pad => n.div_ceil(world),
            Uneven::Drop => n / world,
        };
        for share in &shares {
            prop_assert_eq!(share.len() as u64, per_rank);
        }
        prop_assert_eq!(counts.iter().sum::<u64>(), per_rank * world);
        match case.uneven {
            Uneven::Drop => prop_assert!(counts.iter().all(|&c| c <= 1)),
            Uneven::Pad => prop_assert!(counts.iter().all(|&c| c >= 1)),
        }
        if world == 1 {
            prop_assert!(counts.iter().all(|&c| c == 1));
        }
    }

    #[test]
    fn batches_cut_the_share_in_order(case in case(), rank in 0usize..8) {
        let s = sampler(case.spec(rank % case.world_size), 0);
        let size = case.batch_size;
        let batches: Vec<Vec<u64>> = (0..s.num_batches()).map(|b| s.batch(b).to_vec()).collect();
        prop_assert_eq!(batches.concat(), s.indices().to_vec());
        prop_assert!(s.batch(s.num_batches()).is_empty());
        if let Some((last, full)) = batches.split_last() {
            prop_assert!(full.iter().all(|batch| batch.len() == size));
            prop_assert!(!last.is_empty() && last.len() <= size);
            prop_assert!(!case.drop_last_batch || last.len() == size);
        }
        let share = &case.shares()[rank % case.world_size];
        let kept = if case.drop_last_batch { share.len() - share.len() % size } else { share.len() };
        prop_assert_eq!(&s.indices()[..], &share[..kept]);
    }

    #[test]
    fn same_seed_and_epoch_same_order(case in case(), epoch in 0u64..1000) {
        let rank = case.world_size - 1;
        let first = sampler(case.spec(rank), epoch);
        let again = sampler(case.spec(rank), epoch);
        prop_assert_eq!(first.indices(), again.indices());
    }

    #[test]
    fn full_shuffle_changes_with_the_epoch(
        num_samples in 10u64..2000, seed in any::<u64>(), epoch in 0u64..1000,
    ) {
        let spec = SamplerSpec { seed, shuffle: Shuffle::Full, ..SamplerSpec::new(num_samples, 4) };
        let this = sampler(spec.clone(), epoch);
        let next = sampler(spec, epoch + 1);
        prop_assert_ne!(this.indices(), next.indices());
    }

    #[test]
    fn block_shuffle_keeps_blocks_contiguous(case in case()) {
        let case = Case { shuffle: Shuffle::Blocks, world_size: 1, drop_last_batch: false, ..case };
        let spec = case.spec(0);
        let blocks = spec.block_of.clone().unwrap();
        let order = sampler(spec, 3).indices().to_vec();
        let runs = block_runs(&order, &blocks);
        let distinct: HashSet<u64> = blocks.iter().copied().collect();
        // One run per block: a block never comes back once left.
        prop_assert_eq!(runs.len(), distinct.len());
        prop_assert_eq!(counts(case.num_samples, &[order]), vec![1; case.num_samples as usize]);
    }

    #[test]
    fn resuming_delivers_exactly_the_rest(case in case(), rank in 0usize..8, cut in 0.0f64..=1.0) {
        let spec = case.spec(rank % case.world_size);
        let whole = sampler(spec.clone(), 7);
        let delivered = (whole.num_batches() as f64 * cut) as u64;
        let state = whole.state(delivered);
        let saved = serde_json::to_string(&state).unwrap();
        let state: SamplerState = serde_json::from_str(&saved).unwrap();
        let (resumed, first) = EpochSampler::resume(spec, &state).unwrap();
        prop_assert_eq!(first, delivered);
        prop_assert_eq!(resumed.epoch(), 7);
        let before = (0..delivered).map(|b| whole.batch(b));
        let after = resumed.batches_from(first);
        let joined: Vec<u64> = before.chain(after).flat_map(|batch| batch.to_vec()).collect();
        prop_assert_eq!(joined, whole.indices().to_vec());
    }
}

#[test]
fn natural_order_single_process() {
    let s = sampler(SamplerSpec::new(10, 4), 5);
    assert_eq!(s.indices(), (0..10).collect::<Vec<_>>());
    assert_eq!(s.num_batches(), 3);
    assert_eq!(s.batch(2)[..], [8, 9]);
    assert_eq!(s.batch(3)[..], [0u64; 0]);
    assert_eq!(s.batch(u64::MAX)[..], [0u64; 0]);
}

#[test]
fn ranks_take_contiguous_shares_padded_from_the_start() {
    let share = |rank, uneven| {
        let spec = SamplerSpec {
            ranks: Ranks::new(rank, 4).unwrap(),
            uneven,
            ..SamplerSpec::new(10, 2)
        };
        sampler(spec, 0).indices().to_vec()
    };
    assert_eq!(share(0, Uneven::Pad), [0, 1, 2]);
    assert_eq!(share(3, Uneven::Pad), [9, 0, 1]);
    assert_eq!(share(0, Uneven::Drop), [0, 1]);
    assert_eq!(share(3, Uneven::Drop), [6, 7]);
}

#[test]
fn padding_wraps_more_than_once_when_ranks_outnumber_samples() {
    let share = |rank| {
        let spec = SamplerSpec {
            ranks: Ranks::new(rank, 5).unwrap(),
            ..SamplerSpec::new(2, 1)
        };
        sampler(spec, 0).indices().to_vec()
    };
    let shares: Vec<Vec<u64>> = (0..5).map(share).collect();
    assert_eq!(shares, [[0], [1], [0], [1], [0]]);
}

#[test]
fn drop_last_batch_cuts_the_short_batch() {
    let spec = SamplerSpec {
        drop_last_batch: true,
        ..SamplerSpec::new(10, 4)
    };
    let s = sampler(spec, 0);
    assert_eq!(s.num_batches(), 2);
    assert_eq!(s.indices(), (0..8).collect::<Vec<_>>());
}

#[test]
fn empty_epoch_has_no_batches() {
    let spec = SamplerSpec {
        shuffle: Shuffle::Full,
        ranks: Ranks::new(2, 3).unwrap(),
        ..SamplerSpec::new(0, 4)
    };
    let s = sampler(spec.clone(), 0);
    assert_eq!(s.num_batches(), 0);
    let (_, first) = EpochSampler::resume(spec, &s.state(0)).unwrap();
    assert_eq!(first, 0);
}

/// The order must never change between versions: saved states would resume into other
/// batches. Pinned values come from this implementation (xoshiro256** seeded by splitmix64).
#[test]
fn orders_and_hashes_are_pinned() {
    let spec = SamplerSpec {
        seed: 42,
        shuffle: Shuffle::Full,
        ..SamplerSpec::new(10, 4)
    };
    let order = sampler(spec.clone(), 0).indices().to_vec();
    assert_eq!(order, [9, 1, 4, 2, 8, 7, 6, 5, 3, 0]);
    assert_eq!(spec.spec_hash(), 5_816_834_479_330_207_247);
    let blocks = SamplerSpec {
        shuffle: Shuffle::Blocks,
        block_of: Some(Arc::from([0u64, 1, 0, 2, 1, 0, 2, 2, 1, 0].as_slice())),
        ..spec
    };
    let order = sampler(blocks.clone(), 1).indices().to_vec();
    // Block 0 {0, 2, 5, 9}, then block 2 {3, 6, 7}, then block 1 {1, 4, 8}.
    assert_eq!(order, [2, 9, 0, 5, 7, 6, 3, 4, 8, 1]);
    assert_eq!(blocks.spec_hash(), 1_740_055_840_242_287_717);
}

#[test]
fn generators_match_reference_outputs() {
    // splitmix64 from seed 1234567, and xoshiro256** from state [1, 2, 3, 4], as published
    // with the reference C implementations.
    let mut split = SplitMix64(1_234_567);
    assert_eq!(split.next_u64(), 6_457_827_717_110_365_317);
    assert_eq!(split.next_u64(), 3_203_168_211_198_807_973);
    let mut rng = Rng([1, 2, 3, 4]);
    let outputs: Vec<u64> = (0..4).map(|_| rng.next_u64()).collect();
    assert_eq!(
        outputs,
        [11520, 0, 1_509_978_240, 1_215_971_899_390_074_240]
    );
}

#[test]
fn bounded_draws_cover_the_range_evenly() {
    let mut rng = Rng::seeded(9);
    let mut seen = [0u32; 6];
    for _ in 0..60_000 {
        seen[rng.below(6) as usize] += 1;
    }
    assert!(
        seen.iter().all(|&n| (9_000..11_000).contains(&n)),
        "{seen:?}"
    );
}

/// A field's name, and how to change it.
type Change = (&'static str, fn(&mut SamplerSpec));

#[test]
fn a_state_from_another_spec_is_refused() {
    let spec = SamplerSpec {
        seed: 3,
        shuffle: Shuffle::Full,
        ranks: Ranks::new(1, 2).unwrap(),
        ..SamplerSpec::new(100, 8)
    };
    let state = sampler(spec.clone(), 2).state(1);
    let changes: [Change; 8] = [
        ("num_samples", |s| s.num_samples += 1),
        ("shuffle", |s| s.shuffle = Shuffle::None),
        ("rank", |s| s.ranks.rank = 0),
        ("world_size", |s| s.ranks.world_size = 3),
        ("uneven", |s| s.uneven = Uneven::Drop),
        ("batch_size", |s| s.batch_size = 9),
        ("drop_last_batch", |s| s.drop_last_batch = true),
        ("layout_hash", |s| s.layout_hash = 1),
    ];
    for (what, change) in changes {
        let mut other = spec.clone();
        change(&mut other);
        let err = EpochSampler::resume(other.clone(), &state).unwrap_err();
        let Error::StateMismatch {
            field,
            expected,
            found,
        } = err
        else {
            panic!("changing {what}: {err}");
        };
        assert_eq!(field, "spec_hash", "changing {what}");
        assert_eq!((expected, found), (other.spec_hash(), state.spec_hash));
    }
}

#[test]
fn a_state_with_another_seed_is_refused() {
    let spec = SamplerSpec {
        shuffle: Shuffle::Full,
        ..SamplerSpec::new(100, 8)
    };
    let state = SamplerState {
        seed: 5,
        ..sampler(spec.clone(), 0).state(2)
    };
    let err = EpochSampler::resume(spec, &state).unwrap_err();
    assert!(matches!(
        err,
        Error::StateMismatch {
            field: "seed",
            expected: 0,
            found: 5
        }
    ));
    assert!(err.to_string().contains("seed is 5"), "{err}");
}

#[test]
fn block_ids_count_towards_the_hash_only_when_blocks_shuffle() {
    let blocks = |ids: &[u64]| Some(Arc::from(ids));
    let spec = |shuffle, block_of| SamplerSpec {
        shuffle,
        block_of,
        ..SamplerSpec::new(3, 1)
    };
    let hash = |s: SamplerSpec| s.spec_hash();
    assert_ne!(
        hash(spec(Shuffle::Blocks, blocks(&[0, 0, 1]))),
        hash(spec(Shuffle::Blocks, blocks(&[0, 1, 1])))
    );
    assert_eq!(
        hash(spec(Shuffle::Full, blocks(&[0, 0, 1]))),
        hash(spec(Shuffle::Full, None))
    );
}

#[test]
fn a_position_beyond_the_epoch_is_refused() {
    let spec = SamplerSpec::new(10, 4);
    let s = sampler(spec.clone(), 1);
    let (_, first) = EpochSampler::resume(spec.clone(), &s.state(3)).unwrap();
    assert_eq!(first, 3);
    let err = EpochSampler::resume(spec, &s.state(4)).unwrap_err();
    assert!(matches!(
        err,
        Error::PositionBeyondEpoch {
            epoch: 1,
            position: 4,
            num_batches: 3
        }
    ));
}

#[test]
fn invalid_specs_are_refused() {
    let refused = |spec: SamplerSpec| EpochSampler::new(spec, 0).unwrap_err();
    let base = SamplerSpec::new(4, 2);
    assert!(matches!(
        refused(SamplerSpec {
            batch_size: 0,
            ..base.clone()
        }),
        Error::ZeroBatchSize
    ));
    assert!(matches!(
        refused(SamplerSpec {
            shuffle: Shuffle::Blocks,
            ..base.clone()
        }),
        Error::MissingBlocks
    ));
    assert!(matches!(
        refused(SamplerSpec {
            block_of: Some(Arc::from([0u64, 1].as_slice())),
            ..base.clone()
        }),
        Error::BlockCountMismatch {
            num_samples: 4,
            found: 2
        }
    ));
    assert!(matches!(
        refused(SamplerSpec {
            ranks: Ranks {
                rank: 2,
                world_size: 2
            },
            ..base.clone()
        }),
        Error::InvalidRanks {
            rank: 2,
            world_size: 2
        }
    ));
    assert!(Ranks::new(0, 0).is_err());
}

#[test]
fn ranks_from_torchrun_values() {
    assert_eq!(Ranks::from_values(None, None).unwrap(), Ranks::single());
    assert_eq!(
        Ranks::from_values(Some("3"), Some("8")).unwrap(),
        Ranks::new(3, 8).unwrap()
    );
    assert_eq!(
        Ranks::from_values(Some(" 0\n"), Some("1")).unwrap(),
        Ranks::single()
    );
}

#[test]
fn malformed_rank_values_name_the_variable_and_value() {
    let cases = [
        (Some("x"), Some("2"), "RANK", "x"),
        (Some("-1"), Some("2"), "RANK", "-1"),
        (Some(""), Some("2"), "RANK", ""),
        (Some("2"), Some("2"), "RANK", "2"),
        (Some("0"), Some("0"), "WORLD_SIZE", "0"),
        (Some("0"), Some("two"), "WORLD_SIZE", "two"),
    ];
    for (rank, world_size, bad, bad_value) in cases {
        let err = Ranks::from_values(rank, world_size).unwrap_err();
        let message = err.to_string();
        let Error::BadEnvVar {
            variable, value, ..
        } = err
        else {
            panic!("{rank:?} {world_size:?}: {message}");
        };
        assert_eq!((variable, value.as_str()), (bad, bad_value), "{message}");
        assert!(
            message.contains(&format!("{bad}=`{bad_value}`")),
            "{message}"
        );
    }
}

#[test]
fn rank_without_world_size_is_refused() {
    let err = Ranks::from_values(Some("1"), None).unwrap_err();
    assert!(matches!(
        err,
        Error::MissingEnvVar {
            variable: "WORLD_SIZE",
            set: "RANK"
        }
    ));
    let err = Ranks::from_values(None, Some("4")).unwrap_err();
    assert!(matches!(
        err,
        Error::MissingEnvVar {
            variable: "RANK",
            set: "WORLD_SIZE"
        }
    ));
}

#[test]
fn local_rank_values() {
    assert_eq!(parse_local_rank(None).unwrap(), None);
    assert_eq!(parse_local_rank(Some("1")).unwrap(), Some(1));
    let err = parse_local_rank(Some("gpu1")).unwrap_err();
    assert!(err.to_string().contains("LOCAL_RANK=`gpu1`"), "{err}");
}

#[test]
fn plans_a_million_samples_quickly() {
    let samples = 1_000_000;
    for shuffle in [Shuffle::Full, Shuffle::Blocks] {
        let spec = SamplerSpec {
            seed: 17,
            shuffle,
            ranks: Ranks::new(3, 8).unwrap(),
            block_of: Some((0..samples).map(|s| (s / 64) % 4096).collect()),
            ..SamplerSpec::new(samples, 32)
        };
        let start = Instant::now();
        let hash = spec.spec_hash();
        let hashed = start.elapsed();
        let s = sampler(spec, 0);
        let elapsed = start.elapsed() - hashed;
        assert_eq!(s.state(0).spec_hash, hash);
        assert_eq!(s.indices().len(), 125_000);
        println!(
            "planned {samples} samples ({shuffle:?}, rank 3 of 8) in {elapsed:?} (spec hash alone {hashed:?})"
        );
    }
}
