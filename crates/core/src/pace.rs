//! How the consumer keeps pace: the end of a chain records, for each batch it hands over,
//! whether the consumer had to wait for it; a stage that can spend more or less (a decoder
//! that may use the GPU) reads it to decide.

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

/// Waits shorter than this are the hand-over itself, not the consumer waiting on the loader.
const NOTICEABLE: Duration = Duration::from_micros(200);
/// Nor does a wait count under this fraction of the consumer's step (the time from one batch
/// handed over to the next): a consumer waiting half a percent of its time keeps pace. At
/// 0.2 ms alone, `auto` beside a consumer at 3.2 GiB/s (steps of 164 ms) took waits of a
/// fraction of a millisecond for a loader falling behind, and used 4.7-9.0% of the GPU's
/// time in three runs where the consumer waited 0.06-0.21% of its time (docs/benchmarks.md).
const NOTICEABLE_SHARE_OF_STEP: f64 = 0.005;

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
    /// Records a batch handed over after the consumer waited `waited` for it, `step` after the
    /// batch before it was handed over (the consumer's work and this wait).
    pub fn record(&self, waited: Duration, step: Duration) {
        self.delivered.fetch_add(1, Ordering::Relaxed);
        let share = waited.as_secs_f64() / step.as_secs_f64().max(f64::MIN_POSITIVE);
        if waited >= NOTICEABLE && share >= NOTICEABLE_SHARE_OF_STEP {
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_wait_counts_when_it_is_noticeable_and_a_share_of_the_step() {
        let pace = Pace::default();
        let ms = Duration::from_millis;
        pace.record(ms(5), ms(100)); // 5% of the step
        pace.record(Duration::from_micros(100), Duration::from_micros(150)); // the hand-over
        pace.record(ms(1), ms(400)); // 0.25% of a long step
        pace.record(ms(2), ms(400)); // 0.5%
        pace.record(Duration::ZERO, Duration::ZERO);
        let counts = pace.counts();
        assert_eq!((counts.delivered, counts.waited), (5, 2));
    }
}
