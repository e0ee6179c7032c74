//! Epoch sampling: which samples each rank sees in an epoch, in which order, cut into batches,
//! and how to carry on after a restart (xbatcher's shuffle, torch's `DistributedSampler` and
//! torchdata's resumable state in one place).
//!
//! An epoch's order is a pure function of the [`SamplerSpec`] and the epoch number: every rank
//! computes the same global order and keeps its own share, so ranks need not talk to each other.
//!
//! ```
//! use zarrpipe_batcher::{EpochSampler, Ranks, SamplerSpec, Shuffle};
//!
//! # fn demo() -> zarrpipe_batcher::Result<()> {
//! let spec = SamplerSpec {
//!     shuffle: Shuffle::Full,
//!     ranks: Ranks::single(), // or Ranks::from_env()? under torchrun
//!     ..SamplerSpec::new(1000, 8)
//! };
//! let sampler = EpochSampler::new(spec.clone(), 0)?;
//! let first = sampler.batch(0); // sample numbers, as `SampleLayout::sample` takes them
//! let saved = sampler.state(1); // after delivering one batch
//! let (resumed, next) = EpochSampler::resume(spec, &saved)?;
//! assert_eq!(resumed.batch(next), sampler.batch(1));
//! # let _ = first; Ok(()) }
//! # demo().unwrap();
//! ```

use std::borrow::Cow;
use std::sync::Arc;

use serde::{Deserialize, Serialize};

use crate::{Error, Result};

const RANK: &str = "RANK";
const WORLD_SIZE: &str = "WORLD_SIZE";
const LOCAL_RANK: &str = "LOCAL_RANK";

/// The most samples (or batches, when the layout fixes them) a shuffled epoch may have: a
/// shuffle keeps the epoch's order in memory, 8 bytes a sample (16 while blocks are sorted).
/// Natural order is computed on the fly and has no limit.
pub const MAX_SHUFFLED_SAMPLES: u64 = 1 << 28;

/// How samples are ordered within an epoch.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum Shuffle {
    /// Natural order (0, 1, 2, ...).
    None,
    /// A full seeded permutation, reseeded each epoch with `seed + epoch` (as torch's
    /// `DistributedSampler` does).
    Full,
    /// Chunk-aware block shuffle: samples are grouped by a block id (e.g. the chunk their window
    /// starts in, from [`SamplerSpec::block_of`]), the blocks are permuted, and samples are
    /// permuted within each block; so each block's chunks are read once per block. Still every
    /// sample exactly once per epoch. Reseeded each epoch with `seed + epoch`.
    Blocks,
}

/// What to do when samples don't divide evenly across ranks (`DistributedSampler`'s
/// `drop_last`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum Uneven {
    /// Repeat samples from the start of the (shuffled) order so every rank gets
    /// `ceil(num_samples / world_size)` samples.
    Pad,
    /// Drop the tail of the (shuffled) order so every rank gets
    /// `floor(num_samples / world_size)` samples.
    Drop,
}

/// This process's place among the processes training together.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct Ranks {
    /// Which share of each epoch this process takes, `0..world_size`.
    pub rank: usize,
    /// How many processes share each epoch.
    pub world_size: usize,
}

impl Default for Ranks {
    fn default() -> Self {
        Self::single()
    }
}

impl Ranks {
    /// One process that sees every sample.
    pub fn single() -> Self {
        Self {
            rank: 0,
            world_size: 1,
        }
    }

    /// Rank `rank` of `world_size`; refused unless `rank < world_size`.
    pub fn new(rank: usize, world_size: usize) -> Result<Self> {
        let ranks = Self { rank, world_size };
        ranks.validate()?;
        Ok(ranks)
    }

    /// From `RANK` and `WORLD_SIZE` (as torchrun sets them). `LOCAL_RANK` picks the device (see
    /// [`Ranks::local_rank_from_env`]) but the shard is `RANK`'s. Neither set: [`Ranks::single`].
    /// Only one set, a value that is not a non-negative integer, `WORLD_SIZE=0` or
    /// `RANK >= WORLD_SIZE`: an error naming the variable and its value.
    pub fn from_env() -> Result<Self> {
        let rank = read_env(RANK)?;
        let world_size = read_env(WORLD_SIZE)?;
        Self::from_values(rank.as_deref(), world_size.as_deref())
    }

    /// What [`Ranks::from_env`] makes of the values of `RANK` and `WORLD_SIZE` (`None`: unset).
    /// Surrounding whitespace is ignored.
    pub fn from_values(rank: Option<&str>, world_size: Option<&str>) -> Result<Self> {
        let (rank_text, world_text) = match (rank, world_size) {
            (None, None) => return Ok(Self::single()),
            (Some(_), None) => return Err(missing_env(WORLD_SIZE, RANK)),
            (None, Some(_)) => return Err(missing_env(RANK, WORLD_SIZE)),
            (Some(rank), Some(world_size)) => (rank, world_size),
        };
        let world_size = parse_env_count(WORLD_SIZE, world_text)?;
        if world_size == 0 {
            return Err(bad_env(WORLD_SIZE, world_text, "must be at least 1"));
        }
        let rank = parse_env_count(RANK, rank_text)?;
        if rank >= world_size {
            let reason = format!("must be below WORLD_SIZE ({world_size})");
            return Err(bad_env(RANK, rank_text, reason));
        }
        Ok(Self { rank, world_size })
    }

    /// `LOCAL_RANK` (the device index on this host, as torchrun sets it): `None` when unset, an
    /// error naming the value when it is not a non-negative integer.
    pub fn local_rank_from_env() -> Result<Option<usize>> {
        parse_local_rank(read_env(LOCAL_RANK)?.as_deref())
    }

    fn validate(&self) -> Result<()> {
        if self.world_size == 0 || self.rank >= self.world_size {
            return Err(Error::InvalidRanks {
                rank: self.rank,
                world_size: self.world_size,
            });
        }
        Ok(())
    }
}

/// What [`Ranks::local_rank_from_env`] makes of the value of `LOCAL_RANK`.
fn parse_local_rank(value: Option<&str>) -> Result<Option<usize>> {
    value
        .map(|text| parse_env_count(LOCAL_RANK, text))
        .transpose()
}

/// An environment variable's value; `None` when unset.
fn read_env(variable: &'static str) -> Result<Option<String>> {
    match std::env::var(variable) {
        Ok(value) => Ok(Some(value)),
        Err(std::env::VarError::NotPresent) => Ok(None),
        Err(std::env::VarError::NotUnicode(value)) => Err(bad_env(
            variable,
            &value.to_string_lossy(),
            "not valid UTF-8",
        )),
    }
}

fn parse_env_count(variable: &'static str, text: &str) -> Result<usize> {
    text.trim()
        .parse()
        .map_err(|_| bad_env(variable, text, "expected a non-negative integer"))
}

fn bad_env(variable: &'static str, value: &str, reason: impl Into<String>) -> Error {
    Error::BadEnvVar {
        variable,
        value: value.into(),
        reason: reason.into(),
    }
}

fn missing_env(variable: &'static str, set: &'static str) -> Error {
    Error::MissingEnvVar { variable, set }
}

/// Everything that decides an epoch's batches, apart from the epoch number.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SamplerSpec {
    /// Samples in one epoch (`SampleLayout::num_samples`).
    pub num_samples: u64,
    /// Base seed of the shuffle; epoch `e` is shuffled with `seed + e`.
    pub seed: u64,
    /// How samples are ordered within an epoch.
    pub shuffle: Shuffle,
    /// This process's share of each epoch.
    pub ranks: Ranks,
    /// What happens to samples that don't divide evenly across ranks.
    pub uneven: Uneven,
    /// Samples per batch, at least 1.
    pub batch_size: usize,
    /// Drop this rank's last batch when it is short.
    pub drop_last_batch: bool,
    /// For [`Shuffle::Blocks`] (required there): a block id per sample, `num_samples` long.
    /// Ids need not be contiguous or sorted; samples with equal ids form one block.
    pub block_of: Option<Arc<[u64]>>,
    /// A hash of what the sample numbers mean, mixed into [`SamplerSpec::spec_hash`] so that a
    /// saved state is refused once they mean something else. The caller computes it over the
    /// dataset, variables and window spec (say FNV-1a over their names, shapes, sizes and
    /// strides); 0 when there is nothing to add.
    pub layout_hash: u64,
}

impl SamplerSpec {
    /// `num_samples` in natural order, in batches of `batch_size`, on a single process, padded
    /// (irrelevant for one process), keeping a short last batch; seed 0, layout hash 0.
    pub fn new(num_samples: u64, batch_size: usize) -> Self {
        Self {
            num_samples,
            seed: 0,
            shuffle: Shuffle::None,
            ranks: Ranks::single(),
            uneven: Uneven::Pad,
            batch_size,
            drop_last_batch: false,
            block_of: None,
            layout_hash: 0,
        }
    }

    /// A stable hash (FNV-1a, the same on every platform and run) of everything that shapes
    /// the batches except the seed and the epoch, which [`SamplerState`] carries itself:
    /// `num_samples`, `shuffle`, `ranks`, `uneven`, `batch_size`, `drop_last_batch`, the block
    /// ids (only under [`Shuffle::Blocks`], the one mode they change the order in) and
    /// `layout_hash`.
    pub fn spec_hash(&self) -> u64 {
        let mut hash = Fnv1a::new();
        hash.bytes(b"zarrpipe-sampler/1");
        hash.u64(self.num_samples);
        hash.u64(shuffle_tag(self.shuffle));
        hash.u64(self.ranks.rank as u64);
        hash.u64(self.ranks.world_size as u64);
        hash.u64(uneven_tag(self.uneven));
        hash.u64(self.batch_size as u64);
        hash.u64(u64::from(self.drop_last_batch));
        if let (Shuffle::Blocks, Some(blocks)) = (self.shuffle, &self.block_of) {
            hash.u64(blocks.len() as u64);
            blocks.iter().for_each(|&block| hash.u64(block));
        }
        hash.u64(self.layout_hash);
        hash.finish()
    }

    fn validate(&self) -> Result<()> {
        if self.batch_size == 0 {
            return Err(Error::ZeroBatchSize);
        }
        self.ranks.validate()?;
        if self.shuffle != Shuffle::None && self.num_samples > MAX_SHUFFLED_SAMPLES {
            return Err(Error::TooManyToShuffle {
                samples: self.num_samples,
                limit: MAX_SHUFFLED_SAMPLES,
            });
        }
        match &self.block_of {
            Some(blocks) if blocks.len() as u64 != self.num_samples => {
                Err(Error::BlockCountMismatch {
                    num_samples: self.num_samples,
                    found: blocks.len() as u64,
                })
            }
            None if self.shuffle == Shuffle::Blocks => Err(Error::MissingBlocks),
            _ => Ok(()),
        }
    }

    /// Samples each rank gets in an epoch.
    fn per_rank(&self) -> u64 {
        let world_size = self.ranks.world_size as u64;
        match self.uneven {
            Uneven::Pad => self.num_samples.div_ceil(world_size),
            Uneven::Drop => self.num_samples / world_size,
        }
    }
}

/// Fixed numbers, so reordering the variants never changes a hash.
fn shuffle_tag(shuffle: Shuffle) -> u64 {
    match shuffle {
        Shuffle::None => 0,
        Shuffle::Full => 1,
        Shuffle::Blocks => 2,
    }
}

fn uneven_tag(uneven: Uneven) -> u64 {
    match uneven {
        Uneven::Pad => 0,
        Uneven::Drop => 1,
    }
}

/// Where a rank stands in an epoch, to save with a checkpoint and hand to
/// [`EpochSampler::resume`].
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct SamplerState {
    /// The epoch the state was taken in.
    pub epoch: u64,
    /// Batches of the epoch already delivered.
    pub position: u64,
    /// [`SamplerSpec::seed`] of the spec the state was taken under.
    pub seed: u64,
    /// [`SamplerSpec::spec_hash`] of the spec the state was taken under.
    pub spec_hash: u64,
}

/// One rank's samples for one epoch, in delivery order, cut into batches.
#[derive(Clone, Debug)]
pub struct EpochSampler {
    spec: SamplerSpec,
    spec_hash: u64,
    epoch: u64,
    /// Exactly the samples delivered: a short last batch is already cut when it is dropped.
    indices: Delivered,
}

/// The samples a rank delivers, in order.
#[derive(Clone, Debug)]
enum Delivered {
    /// Natural order, computed on the fly (an epoch may have more samples than memory):
    /// position `i < len` is sample `(start + i) % num_samples`.
    Natural {
        start: u64,
        len: u64,
        num_samples: u64,
    },
    /// A shuffled order, stored.
    Stored(Vec<u64>),
}

impl Delivered {
    fn len(&self) -> u64 {
        match self {
            Delivered::Natural { len, .. } => *len,
            Delivered::Stored(indices) => indices.len() as u64,
        }
    }

    /// Positions `range` (within `0..len`).
    fn slice(&self, range: std::ops::Range<u64>) -> Cow<'_, [u64]> {
        match self {
            Delivered::Natural {
                start, num_samples, ..
            } => Cow::Owned(
                range
                    .map(|position| (start + position) % num_samples)
                    .collect(),
            ),
            Delivered::Stored(indices) => {
                Cow::Borrowed(&indices[range.start as usize..range.end as usize])
            }
        }
    }
}

impl EpochSampler {
    /// Plans epoch `epoch` of `spec` for `spec.ranks`. Refused: batch size 0, invalid ranks,
    /// [`Shuffle::Blocks`] without block ids, block ids not `num_samples` long.
    pub fn new(spec: SamplerSpec, epoch: u64) -> Result<Self> {
        spec.validate()?;
        let spec_hash = spec.spec_hash();
        Ok(Self::plan(spec, spec_hash, epoch))
    }

    /// Carries on from `state`, taken by [`EpochSampler::state`] under the same spec: returns
    /// the sampler of the state's epoch and the first batch not yet delivered, so the batches
    /// from there on are exactly those the interrupted run had left. Refused when the spec
    /// hash or the seed differ from the state's ([`Error::StateMismatch`]), or the state's
    /// position lies beyond the epoch ([`Error::PositionBeyondEpoch`]).
    pub fn resume(spec: SamplerSpec, state: &SamplerState) -> Result<(Self, u64)> {
        spec.validate()?;
        let spec_hash = spec.spec_hash();
        check_same("spec_hash", spec_hash, state.spec_hash)?;
        check_same("seed", spec.seed, state.seed)?;
        let sampler = Self::plan(spec, spec_hash, state.epoch);
        let num_batches = sampler.num_batches();
        if state.position > num_batches {
            return Err(Error::PositionBeyondEpoch {
                epoch: state.epoch,
                position: state.position,
                num_batches,
            });
        }
        Ok((sampler, state.position))
    }

    fn plan(spec: SamplerSpec, spec_hash: u64, epoch: u64) -> Self {
        let order = epoch_order(&spec, epoch);
        let mut indices = rank_share(&spec, order.as_deref());
        if spec.drop_last_batch {
            let batch_size = spec.batch_size as u64;
            match &mut indices {
                Delivered::Natural { len, .. } => *len -= *len % batch_size,
                Delivered::Stored(indices) => {
                    indices.truncate(indices.len() - indices.len() % spec.batch_size)
                }
            }
        }
        Self {
            spec,
            spec_hash,
            epoch,
            indices,
        }
    }

    /// The epoch after this one, under the same spec (checked when this one was made); `None`
    /// after epoch `u64::MAX`.
    pub fn next_epoch(&self) -> Option<Self> {
        let epoch = self.epoch.checked_add(1)?;
        Some(Self::plan(self.spec.clone(), self.spec_hash, epoch))
    }

    /// The spec this sampler was planned from.
    pub fn spec(&self) -> &SamplerSpec {
        &self.spec
    }

    /// The epoch this sampler plans.
    pub fn epoch(&self) -> u64 {
        self.epoch
    }

    /// This rank's sample indices for the epoch, in delivery order (every batch, one after the
    /// other). In natural order they are computed here, all at once: for inspecting small
    /// epochs; [`batch`](Self::batch) costs one batch.
    pub fn indices(&self) -> Cow<'_, [u64]> {
        self.indices.slice(0..self.indices.len())
    }

    /// Samples this rank delivers in the epoch.
    pub fn num_samples(&self) -> u64 {
        self.indices.len()
    }

    /// Batches this rank delivers in the epoch.
    pub fn num_batches(&self) -> u64 {
        self.indices.len().div_ceil(self.spec.batch_size as u64)
    }

    /// Sample indices of batch `batch` of this rank; empty past the last batch.
    pub fn batch(&self, batch: u64) -> Cow<'_, [u64]> {
        let size = self.spec.batch_size as u64;
        let len = self.indices.len();
        let start = batch.saturating_mul(size).min(len);
        self.indices
            .slice(start..start.saturating_add(size).min(len))
    }

    /// This rank's batches from batch `first` to the end of the epoch.
    pub fn batches_from(&self, first: u64) -> impl Iterator<Item = Cow<'_, [u64]>> + '_ {
        (first..self.num_batches()).map(|batch| self.batch(batch))
    }

    /// State after `delivered_batches` batches were delivered, to save with a checkpoint.
    pub fn state(&self, delivered_batches: u64) -> SamplerState {
        SamplerState {
            epoch: self.epoch,
            position: delivered_batches,
            seed: self.spec.seed,
            spec_hash: self.spec_hash,
        }
    }
}

fn check_same(field: &'static str, expected: u64, found: u64) -> Result<()> {
    if expected != found {
        return Err(Error::StateMismatch {
            field,
            expected,
            found,
        });
    }
    Ok(())
}

/// The whole epoch's order before it is shared out; `None` for natural order, which is
/// computed on the fly rather than stored.
fn epoch_order(spec: &SamplerSpec, epoch: u64) -> Option<Vec<u64>> {
    // Reseeding with seed + epoch (not a stream continued across epochs) lets any epoch be
    // planned, or resumed, on its own.
    let mut rng = Rng::seeded(spec.seed.wrapping_add(epoch));
    match (spec.shuffle, &spec.block_of) {
        (Shuffle::None, _) => None,
        (Shuffle::Blocks, Some(blocks)) => Some(block_order(blocks, &mut rng)),
        // Blocks without ids is refused by `validate`; a full shuffle is the fallback.
        (Shuffle::Full | Shuffle::Blocks, _) => {
            let mut order: Vec<u64> = (0..spec.num_samples).collect();
            rng.shuffle(&mut order);
            Some(order)
        }
    }
}

/// Blocks in random order, each block's samples in random order.
fn block_order(block_of: &[u64], rng: &mut Rng) -> Vec<u64> {
    // Sorting (block, sample) pairs groups the blocks; sorting the pairs themselves rather
    // than sample numbers by a looked-up key keeps the sort cache-friendly, and the sample
    // number breaks ties, so the grouping never depends on the sort algorithm.
    let mut keyed: Vec<(u64, u64)> = block_of.iter().copied().zip(0..).collect();
    keyed.sort_unstable();
    let mut blocks: Vec<&[(u64, u64)]> = keyed.chunk_by(|a, b| a.0 == b.0).collect();
    rng.shuffle(&mut blocks);
    let mut order = Vec::with_capacity(block_of.len());
    for block in blocks {
        let start = order.len();
        order.extend(block.iter().map(|&(_, sample)| sample));
        rng.shuffle(&mut order[start..]);
    }
    order
}

/// This rank's contiguous share of the (padded or cut) epoch order. Contiguous rather than
/// torch's every-`world_size`-th sample: under [`Shuffle::Blocks`] and [`Shuffle::None`] a
/// block's samples then go to one rank, so a chunk is read by one rank rather than by all.
/// Padding wraps around to the start of the order.
fn rank_share(spec: &SamplerSpec, order: Option<&[u64]>) -> Delivered {
    let per_rank = spec.per_rank();
    let start = spec.ranks.rank as u64 * per_rank;
    let positions = start..start + per_rank;
    // per_rank is 0 when num_samples is, so the modulo never divides by zero.
    match order {
        None => Delivered::Natural {
            start: start % spec.num_samples.max(1),
            len: per_rank,
            num_samples: spec.num_samples.max(1),
        },
        Some(order) => Delivered::Stored(
            positions
                .map(|p| order[(p % spec.num_samples) as usize])
                .collect(),
        ),
    }
}

/// 64-bit FNV-1a: tiny, stable across platforms and runs (unlike std's `DefaultHasher`).
pub(crate) struct Fnv1a(u64);

impl Fnv1a {
    pub(crate) fn new() -> Self {
        Self(0xcbf2_9ce4_8422_2325)
    }

    pub(crate) fn bytes(&mut self, bytes: &[u8]) {
        for &byte in bytes {
            self.0 = (self.0 ^ u64::from(byte)).wrapping_mul(0x0000_0100_0000_01b3);
        }
    }

    pub(crate) fn u64(&mut self, value: u64) {
        self.bytes(&value.to_le_bytes());
    }

    pub(crate) fn finish(&self) -> u64 {
        self.0
    }
}

/// splitmix64: expands one seed into well-mixed words to seed [`Rng`].
struct SplitMix64(u64);

impl SplitMix64 {
    fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }
}

/// xoshiro256**: small, fast, and the same sequence everywhere, so an order can be recomputed
/// on resume, on another rank or by another build.
struct Rng([u64; 4]);

impl Rng {
    fn seeded(seed: u64) -> Self {
        let mut seeder = SplitMix64(seed);
        Self(std::array::from_fn(|_| seeder.next_u64()))
    }

    fn next_u64(&mut self) -> u64 {
        let s = &mut self.0;
        let result = s[1].wrapping_mul(5).rotate_left(7).wrapping_mul(9);
        let t = s[1] << 17;
        s[2] ^= s[0];
        s[3] ^= s[1];
        s[1] ^= s[2];
        s[0] ^= s[3];
        s[2] ^= t;
        s[3] = s[3].rotate_left(45);
        result
    }

    /// Uniform in `0..bound` (bound > 0): Lemire's multiply-shift, rejecting the few values
    /// that would bias it.
    fn below(&mut self, bound: u64) -> u64 {
        let mut product = u128::from(self.next_u64()) * u128::from(bound);
        if (product as u64) < bound {
            let threshold = bound.wrapping_neg() % bound;
            while (product as u64) < threshold {
                product = u128::from(self.next_u64()) * u128::from(bound);
            }
        }
        (product >> 64) as u64
    }

    /// Fisher-Yates.
    fn shuffle<T>(&mut self, items: &mut [T]) {
        for last in (1..items.len()).rev() {
            let other = self.below(last as u64 + 1) as usize;
            items.swap(last, other);
        }
    }
}

#[cfg(test)]
#[path = "sampler_tests.rs"]
mod tests;
