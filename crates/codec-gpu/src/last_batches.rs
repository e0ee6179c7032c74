//! The consumer's last few deliveries, each with the GPU's mean share of the batches in it:
//! the window `auto` reads the consumer's recent steps from.

use std::collections::VecDeque;

use zarrpipe_core::PaceDelta;

/// The fewest latest deliveries that hold at least `BATCHES` batches.
#[derive(Debug, Default)]
pub(crate) struct LastBatches<const BATCHES: u64>(VecDeque<(PaceDelta, f64)>);

impl<const BATCHES: u64> LastBatches<BATCHES> {
    /// Batches delivered with `delta`, `given` the GPU's mean share of them.
    pub(crate) fn add(&mut self, delta: PaceDelta, given: f64) {
        self.0.push_back((delta, given));
        let mut delivered: u64 = self.0.iter().map(|(delta, _)| delta.delivered).sum();
        while let Some((front, _)) = self.0.front() {
            if delivered - front.delivered < BATCHES {
                break;
            }
            delivered -= front.delivered;
            self.0.pop_front();
        }
    }

    /// Each delivery kept, oldest first, with its GPU share.
    pub(crate) fn deliveries(&self) -> impl Iterator<Item = &(PaceDelta, f64)> {
        self.0.iter()
    }

    /// The kept deliveries added up; `None` before they hold `BATCHES` batches.
    pub(crate) fn total(&self) -> Option<PaceDelta> {
        let mut total = PaceDelta::default();
        for &(delta, _) in &self.0 {
            total += delta;
        }
        (total.delivered >= BATCHES).then_some(total)
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    fn delivered(batches: u64) -> PaceDelta {
        PaceDelta {
            delivered: batches,
            wait: Duration::ZERO,
            steps: Duration::from_millis(100 * batches),
        }
    }

    #[test]
    fn it_keeps_the_latest_deliveries_that_hold_enough_batches() {
        let mut last = LastBatches::<4>::default();
        last.add(delivered(3), 0.0);
        assert_eq!(last.total(), None);
        last.add(delivered(2), 0.5);
        assert_eq!(last.total().map(|total| total.delivered), Some(5));
        // The first delivery goes once the others hold four batches without it.
        last.add(delivered(2), 1.0);
        let shares: Vec<f64> = last.deliveries().map(|&(_, share)| share).collect();
        assert_eq!(shares, [0.5, 1.0]);
        assert_eq!(last.total().map(|total| total.delivered), Some(4));
    }
}
