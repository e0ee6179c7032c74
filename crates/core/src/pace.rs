//! How the consumer keeps pace: the end of a chain records, for each batch it hands over, how
//! long the consumer waited for it and how long its step took; a stage that can spend more or
//! less (a decoder that may use the GPU) reads it to decide.

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

/// Waits shorter than this are the hand-over itself, not the consumer waiting on the loader.
const NOTICEABLE: Duration = Duration::from_micros(200);

/// Batches handed over, and the time the consumer spent waiting for them and in all.
#[derive(Debug, Default)]
pub struct Pace {
    delivered: AtomicU64,
    wait_nanos: AtomicU64,
    step_nanos: AtomicU64,
}

/// What happened between two looks at a [`Pace`].
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct PaceDelta {
    /// Batches handed over.
    pub delivered: u64,
    /// Time the consumer waited for them (waits under 0.2 ms, the hand-over, left out).
    pub wait: Duration,
    /// Their steps: the consumer's work and its waits.
    pub steps: Duration,
}

impl Pace {
    /// Records a batch handed over after the consumer waited `waited` for it, `step` after the
    /// batch before it was handed over (the consumer's work and this wait).
    pub fn record(&self, waited: Duration, step: Duration) {
        self.delivered.fetch_add(1, Ordering::Relaxed);
        if waited >= NOTICEABLE {
            self.wait_nanos.fetch_add(nanos(waited), Ordering::Relaxed);
        }
        self.step_nanos.fetch_add(nanos(step), Ordering::Relaxed);
    }

    /// Records the first batch a consumer is handed: delivered, but its wait is the chain
    /// filling up, not the consumer's pace, and no step came before it.
    pub fn record_first(&self) {
        self.delivered.fetch_add(1, Ordering::Relaxed);
    }

    /// What happened so far.
    pub fn counts(&self) -> PaceDelta {
        PaceDelta {
            delivered: self.delivered.load(Ordering::Relaxed),
            wait: Duration::from_nanos(self.wait_nanos.load(Ordering::Relaxed)),
            steps: Duration::from_nanos(self.step_nanos.load(Ordering::Relaxed)),
        }
    }
}

fn nanos(duration: Duration) -> u64 {
    duration.as_nanos().try_into().unwrap_or(u64::MAX)
}

impl PaceDelta {
    /// The share of the consumer's time spent waiting (0 when no step was recorded).
    pub fn wait_share(&self) -> f64 {
        match self.steps.is_zero() {
            true => 0.0,
            false => (self.wait.as_secs_f64() / self.steps.as_secs_f64()).min(1.0),
        }
    }
}

impl std::ops::Sub for PaceDelta {
    type Output = PaceDelta;

    fn sub(self, earlier: PaceDelta) -> PaceDelta {
        PaceDelta {
            delivered: self.delivered.saturating_sub(earlier.delivered),
            wait: self.wait.saturating_sub(earlier.wait),
            steps: self.steps.saturating_sub(earlier.steps),
        }
    }
}

impl std::ops::AddAssign for PaceDelta {
    fn add_assign(&mut self, later: PaceDelta) {
        self.delivered = self.delivered.saturating_add(later.delivered);
        self.wait = self.wait.saturating_add(later.wait);
        self.steps = self.steps.saturating_add(later.steps);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn waits_add_up_past_the_hand_over() {
        let pace = Pace::default();
        let ms = Duration::from_millis;
        pace.record(ms(5), ms(100));
        pace.record(Duration::from_micros(100), ms(150)); // the hand-over
        let before = pace.counts();
        pace.record(ms(1), ms(400));
        pace.record(Duration::ZERO, Duration::ZERO);
        pace.record_first();
        let counts = pace.counts();
        assert_eq!(counts.delivered, 5);
        assert_eq!((counts.wait, counts.steps), (ms(6), ms(650)));
        let since = counts - before;
        assert_eq!(
            (since.delivered, since.wait, since.steps),
            (3, ms(1), ms(400))
        );
        assert!((since.wait_share() - 0.0025).abs() < 1e-12);
        assert_eq!(PaceDelta::default().wait_share(), 0.0);
        // Deltas add back up to the counts.
        let mut summed = before;
        summed += since;
        assert_eq!(summed, counts);
    }
}
