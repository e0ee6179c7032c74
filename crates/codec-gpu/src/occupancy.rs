//! How busy one side of a split decoder is: the parts in flight on it over time, so that a
//! part's wall-clock time can be turned into its share of the side's time. Several parts run
//! on a side at once (the GPU's decode streams, the CPU pool's batches) and each takes longer
//! for sharing the side; its latency alone understates the side's throughput.

use std::time::{Duration, Instant};

/// Parts in flight on one side over time.
#[derive(Debug)]
pub(crate) struct Occupancy {
    in_flight: usize,
    changed: Instant,
    /// The integral of `in_flight` over time, in part-seconds.
    part_seconds: f64,
}

/// When a part started: the clock and the occupancy integral then.
#[derive(Clone, Copy, Debug)]
pub(crate) struct PartStart {
    at: Instant,
    part_seconds: f64,
}

impl PartStart {
    /// The part's wall-clock time so far.
    pub(crate) fn wall(&self) -> Duration {
        self.at.elapsed()
    }
}

impl Occupancy {
    pub(crate) fn new(now: Instant) -> Self {
        Self {
            in_flight: 0,
            changed: now,
            part_seconds: 0.0,
        }
    }

    fn advance(&mut self, now: Instant) {
        let elapsed = now.saturating_duration_since(self.changed).as_secs_f64();
        self.part_seconds += self.in_flight as f64 * elapsed;
        self.changed = self.changed.max(now);
    }

    /// A part starts at `now`.
    pub(crate) fn start(&mut self, now: Instant) -> PartStart {
        self.advance(now);
        self.in_flight += 1;
        PartStart {
            at: now,
            part_seconds: self.part_seconds,
        }
    }

    /// The part begun at `start` ends at `now`; returns its wall-clock time divided by the
    /// mean number of parts in flight on this side meanwhile (itself included): its share of
    /// the side's time.
    pub(crate) fn finish(&mut self, start: PartStart, now: Instant) -> Duration {
        self.advance(now);
        self.in_flight = self.in_flight.saturating_sub(1);
        let wall = now.saturating_duration_since(start.at);
        let seconds = wall.as_secs_f64();
        if seconds <= 0.0 {
            return wall;
        }
        let mean_in_flight = ((self.part_seconds - start.part_seconds) / seconds).max(1.0);
        wall.div_f64(mean_in_flight)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(t0: Instant, seconds: f64) -> Instant {
        t0 + Duration::from_secs_f64(seconds)
    }

    fn close(a: Duration, seconds: f64) -> bool {
        (a.as_secs_f64() - seconds).abs() < 1e-6
    }

    #[test]
    fn a_part_alone_takes_its_wall_clock_time() {
        let t0 = Instant::now();
        let mut side = Occupancy::new(t0);
        let part = side.start(at(t0, 1.0));
        assert!(close(side.finish(part, at(t0, 3.0)), 2.0));
    }

    #[test]
    fn parts_sharing_a_side_each_take_a_share_of_it() {
        // A side that serves one second of work per part, three parts always in flight
        // (started a second apart, each done three seconds after it started): every part
        // after the first two is worth one second of the side, not its three of latency.
        let t0 = Instant::now();
        let mut side = Occupancy::new(t0);
        let mut parts = std::collections::VecDeque::new();
        let mut shares = Vec::new();
        for second in 0..12 {
            if second >= 3 {
                let part = parts.pop_front().unwrap();
                shares.push(side.finish(part, at(t0, second as f64)));
            }
            parts.push_back(side.start(at(t0, second as f64)));
        }
        assert!(
            shares[2..].iter().all(|share| close(*share, 1.0)),
            "{shares:?}"
        );
    }

    #[test]
    fn an_idle_side_between_parts_does_not_shrink_them() {
        let t0 = Instant::now();
        let mut side = Occupancy::new(t0);
        let first = side.start(t0);
        assert!(close(side.finish(first, at(t0, 1.0)), 1.0));
        let second = side.start(at(t0, 5.0));
        assert!(close(side.finish(second, at(t0, 6.0)), 1.0));
    }
}
