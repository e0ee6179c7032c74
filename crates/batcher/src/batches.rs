use std::sync::Arc;

use crate::{Error, Result, Sample, SampleLayout};

/// Splits an epoch into batches of samples in a deterministic order (natural C order over the
/// sample dimensions). The last batch may be short unless `drop_last` is set.
#[derive(Clone, Debug)]
pub struct Batcher {
    layout: Arc<SampleLayout>,
    batch_size: usize,
    drop_last: bool,
}

impl Batcher {
    pub fn new(layout: Arc<SampleLayout>, batch_size: usize, drop_last: bool) -> Result<Self> {
        if batch_size == 0 {
            return Err(Error::ZeroBatchSize);
        }
        Ok(Self {
            layout,
            batch_size,
            drop_last,
        })
    }

    pub fn layout(&self) -> &Arc<SampleLayout> {
        &self.layout
    }

    pub fn batch_size(&self) -> usize {
        self.batch_size
    }

    /// Batches in one epoch.
    pub fn num_batches(&self) -> u64 {
        let samples = self.layout.num_samples();
        let size = self.batch_size as u64;
        if self.drop_last {
            samples / size
        } else {
            samples.div_ceil(size)
        }
    }

    /// The samples of batch number `batch`.
    pub fn batch(&self, batch: u64) -> Vec<Sample> {
        let start = batch * self.batch_size as u64;
        let end = (start + self.batch_size as u64).min(self.layout.num_samples());
        (start..end)
            .map(|index| self.layout.sample(index))
            .collect()
    }

    /// Every batch of the epoch, in order.
    pub fn batches(&self) -> impl Iterator<Item = Vec<Sample>> + Send + 'static {
        let this = self.clone();
        (0..self.num_batches()).map(move |batch| this.batch(batch))
    }
}
