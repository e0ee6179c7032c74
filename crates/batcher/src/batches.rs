use std::sync::Arc;
use zarrpipe_core::Staged;
use zarrpipe_store::ChunkRequest;

use crate::{
    EpochSampler, Error, Ranks, Result, Sample, SampleLayout, SamplerSpec, SamplerState, Shuffle,
    Uneven,
};

/// How an epoch is ordered and shared: shuffling, seed, ranks (see [`EpochSampler`]).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct EpochOptions {
    /// The epoch's number; shuffling is reseeded with `seed + epoch`.
    pub epoch: u64,
    /// The shuffling seed.
    pub seed: u64,
    /// How samples are ordered.
    pub shuffle: Shuffle,
    /// This process's share of the epoch.
    pub ranks: Ranks,
    /// What to do when samples do not divide evenly across ranks.
    pub uneven: Uneven,
    /// Drop a last, short batch.
    pub drop_last: bool,
}

impl Default for EpochOptions {
    fn default() -> Self {
        Self {
            epoch: 0,
            seed: 0,
            shuffle: Shuffle::None,
            ranks: Ranks::single(),
            uneven: Uneven::Pad,
            drop_last: false,
        }
    }
}

/// Splits this rank's share of an epoch into batches of samples, in the sampler's order
/// (natural C order over the sample dimensions unless shuffled).
///
/// When the layout fixes the batches ([`SampleLayout::batch_groups`]: xbatcher's `batch_dims`
/// or `concat_input_dims`), the sampler orders, shuffles and shares out whole batches, each
/// one block of the layout, and `batch_size` is not used.
#[derive(Clone, Debug)]
pub struct Batcher {
    layout: Arc<SampleLayout>,
    sampler: Arc<EpochSampler>,
    /// The first batch still to deliver (after a resume).
    first: u64,
}

impl Batcher {
    /// Natural order, one rank: every sample once, in batches of `batch_size`.
    pub fn new(layout: Arc<SampleLayout>, batch_size: usize, drop_last: bool) -> Result<Self> {
        Self::with_options(
            layout,
            batch_size,
            &EpochOptions {
                drop_last,
                ..EpochOptions::default()
            },
        )
    }

    /// The epoch `options` describe.
    pub fn with_options(
        layout: Arc<SampleLayout>,
        batch_size: usize,
        options: &EpochOptions,
    ) -> Result<Self> {
        let spec = sampler_spec(&layout, batch_size, options)?;
        let sampler = EpochSampler::new(spec, options.epoch)?;
        Ok(Self {
            layout,
            sampler: Arc::new(sampler),
            first: 0,
        })
    }

    /// Continues the epoch of `state` with exactly the batches not yet delivered; refused when
    /// the layout or options differ from those the state was saved with.
    pub fn resume(
        layout: Arc<SampleLayout>,
        batch_size: usize,
        options: &EpochOptions,
        state: &SamplerState,
    ) -> Result<Self> {
        let spec = sampler_spec(&layout, batch_size, options)?;
        let (sampler, first) = EpochSampler::resume(spec, state)?;
        Ok(Self {
            layout,
            sampler: Arc::new(sampler),
            first,
        })
    }

    /// How samples are cut (the layout the batcher was made with).
    pub fn layout(&self) -> &Arc<SampleLayout> {
        &self.layout
    }

    /// Samples per batch (the last may be short unless dropped).
    pub fn batch_size(&self) -> usize {
        match self.layout.batch_groups() {
            Some(groups) => groups.size as usize,
            None => self.sampler.spec().batch_size,
        }
    }

    /// The epoch's number.
    pub fn epoch(&self) -> u64 {
        self.sampler.epoch()
    }

    /// The whole epoch after this one (reshuffled with its own seed), from its first batch;
    /// `None` after epoch `u64::MAX`.
    pub fn next_epoch(&self) -> Option<Self> {
        Some(Self {
            layout: self.layout.clone(),
            sampler: Arc::new(self.sampler.next_epoch()?),
            first: 0,
        })
    }

    /// This epoch's batches still to deliver, then those of the `more` epochs after it, each
    /// with its number and epoch and the chunks it needs: the head of a chain that carries
    /// epochs in a row, so the next epoch's first batches load while this one's last are used.
    pub fn read_plans_with_epochs_after(
        &self,
        more: u64,
    ) -> impl Iterator<Item = Staged<Vec<Sample>, Vec<ChunkRequest>>> + Send + 'static {
        let epochs = std::iter::successors(Some(self.clone()), Batcher::next_epoch);
        epochs
            .take(
                usize::try_from(more)
                    .unwrap_or(usize::MAX)
                    .saturating_add(1),
            )
            .flat_map(|batcher| batcher.read_plans())
    }

    /// Batches in this rank's epoch, those already delivered before a resume included.
    pub fn num_batches(&self) -> u64 {
        self.sampler.num_batches()
    }

    /// The first batch this batcher delivers (0 unless resumed).
    pub fn first_batch(&self) -> u64 {
        self.first
    }

    /// The samples of batch number `batch`.
    pub fn batch(&self, batch: u64) -> Vec<Sample> {
        let picked = self.sampler.batch(batch);
        let picked = picked.iter();
        match self.layout.batch_groups() {
            // The sampler picks batches of the layout: expand each into its samples.
            Some(groups) => picked
                .flat_map(|&group| group * groups.size..(group + 1) * groups.size)
                .map(|index| self.layout.sample(index))
                .collect(),
            None => picked.map(|&index| self.layout.sample(index)).collect(),
        }
    }

    /// The batches still to deliver, with their numbers, in order.
    pub fn batches(&self) -> impl Iterator<Item = (u64, Vec<Sample>)> + Send + 'static {
        let this = self.clone();
        (self.first..self.num_batches()).map(move |batch| (batch, this.batch(batch)))
    }

    /// The batches still to deliver, each with the chunks it needs: the head of a stage chain
    /// (`stream::iter(batcher.read_plans()).fetch_batches(..)...`).
    pub fn read_plans(
        &self,
    ) -> impl Iterator<Item = Staged<Vec<Sample>, Vec<ChunkRequest>>> + Send + 'static {
        let (layout, epoch) = (self.layout.clone(), self.epoch());
        self.batches().map(move |(index, samples)| {
            let requests = layout.read_plan(&samples);
            Staged::new(index, samples, requests).in_epoch(epoch)
        })
    }

    /// The state to save after `delivered` batches of this epoch (counted from its start).
    pub fn state(&self, delivered: u64) -> SamplerState {
        self.sampler.state(delivered)
    }

    /// The state to save after `delivered` batches of epoch `epoch` under the same options:
    /// every epoch has this one's seed, spec and batch count, so its order is not needed.
    pub fn state_in_epoch(&self, epoch: u64, delivered: u64) -> SamplerState {
        SamplerState {
            epoch,
            ..self.state(delivered)
        }
    }
}

fn sampler_spec(
    layout: &SampleLayout,
    batch_size: usize,
    options: &EpochOptions,
) -> Result<SamplerSpec> {
    if batch_size == 0 {
        return Err(Error::ZeroBatchSize);
    }
    let units = match layout.batch_groups() {
        Some(groups) => groups.count,
        None => layout.num_samples(),
    };
    // Checked before the block ids (one per unit) are computed.
    if options.shuffle != Shuffle::None && units > crate::MAX_SHUFFLED_SAMPLES {
        return Err(Error::TooManyToShuffle {
            samples: units,
            limit: crate::MAX_SHUFFLED_SAMPLES,
        });
    }
    let block_of = (options.shuffle == Shuffle::Blocks).then(|| layout.block_ids().into());
    // Batches fixed by the layout are the sampler's units, one per batch.
    let (units, batch_size) = match layout.batch_groups() {
        Some(groups) => (groups.count, 1),
        None => (layout.num_samples(), batch_size),
    };
    Ok(SamplerSpec {
        seed: options.seed,
        shuffle: options.shuffle,
        ranks: options.ranks,
        uneven: options.uneven,
        drop_last_batch: options.drop_last,
        block_of,
        layout_hash: layout.layout_hash(),
        ..SamplerSpec::new(units, batch_size)
    })
}
