//! How the consumer keeps pace: the end of a chain records, for each batch it hands over,
//! whether the consumer had to wait for it; a stage that can spend more or less (a decoder
//! that may use the GPU) reads it to decide.

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

/// Waits shorter than this are the hand-over itself, not the consumer waiting on the loader.
const NOTICEABLE: Duration = Duration::from_micros(200);

/// Counts of batches handed over and of those the consumer waited for.
#[derive(Debug, Default)]
pub struct Pace {
    delivered: AtomicU64,
    waited: AtomicU64,
}

/// What happened between two looks at a [`Pace`].
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct PaceDelta {
    /// Batches handed over.
    pub delivered: u64,
    /// Of those, batches the consumer waited for.
    pub waited: u64,
}

impl Pace {
    /// Records a batch handed over after the consumer waited `waited` for it.
    pub fn record(&self, waited: Duration) {
        self.delivered.fetch_add(1, Ordering::Relaxed);
        if waited >= NOTICEABLE {
            self.waited.fetch_add(1, Ordering::Relaxed);
        }
    }

    /// The counts so far, as (delivered, waited).
    pub fn counts(&self) -> PaceDelta {
        PaceDelta {
            delivered: self.delivered.load(Ordering::Relaxed),
            waited: self.waited.load(Ordering::Relaxed),
        }
    }
}

impl std::ops::Sub for PaceDelta {
    type Output = PaceDelta;

    fn sub(self, earlier: PaceDelta) -> PaceDelta {
        PaceDelta {
            delivered: self.delivered.saturating_sub(earlier.delivered),
            waited: self.waited.saturating_sub(earlier.waited),
        }
    }
}
