//! How long one side of a split decoder worked on each part: its busy time (the time it had
//! any part in flight) from the later of the part's start and the side's previous finish.
//! Several parts are in flight on a side at once and each waits for the others: the CPU
//! pool decodes chunks in the order they came, so a part's wall-clock time holds the parts
//! queued before it; the GPU's streams decode batches side by side. Parts finish about in the
//! order they started, so the busy time between finishes is what each one cost the side.

use std::time::{Duration, Instant};

/// Parts in flight on one side and its busy time.
#[derive(Debug)]
pub(crate) struct BusyTime {
    in_flight: usize,
    changed: Instant,
    /// Seconds with at least one part in flight.
    busy: f64,
    /// `busy` when a part last finished.
    last_finish: f64,
    /// When the first part finished: parts begun before then pay the side's setup.
    first_finish: Option<Instant>,
}

/// When a part started: the clock and the side's busy time then.
#[derive(Clone, Copy, Debug)]
pub(crate) struct PartStart {
    at: Instant,
    busy: f64,
}

impl PartStart {
    /// The part's wall-clock time so far.
    pub(crate) fn wall(&self) -> Duration {
        self.at.elapsed()
    }
}

impl BusyTime {
    pub(crate) fn new(now: Instant) -> Self {
        Self {
            in_flight: 0,
            changed: now,
            busy: 0.0,
            last_finish: 0.0,
            first_finish: None,
        }
    }

    fn advance(&mut self, now: Instant) {
        if self.in_flight > 0 {
            self.busy += now.saturating_duration_since(self.changed).as_secs_f64();
        }
        self.changed = self.changed.max(now);
    }

    /// A part starts at `now`.
    pub(crate) fn start(&mut self, now: Instant) -> PartStart {
        self.advance(now);
        self.in_flight += 1;
        PartStart {
            at: now,
            busy: self.busy,
        }
    }

    /// The part begun at `start` ends at `now`; returns the side's busy time since the later
    /// of its start and the previous finish: what it cost the side. `None` for the parts begun
    /// before any had finished: they paid the side's setup (the GPU's pinned memory and
    /// scratch buffers, a first kernel's loading) and beside a training loop its first steps.
    pub(crate) fn finish(&mut self, start: PartStart, now: Instant) -> Option<Duration> {
        self.advance(now);
        self.in_flight = self.in_flight.saturating_sub(1);
        let cost = self.busy - start.busy.max(self.last_finish);
        self.last_finish = self.busy;
        let first = *self.first_finish.get_or_insert(now);
        (start.at >= first).then(|| Duration::from_secs_f64(cost.max(0.0)))
    }

    /// Parts in flight now.
    #[cfg(test)]
    pub(crate) fn in_flight(&self) -> usize {
        self.in_flight
    }

    /// A part started ends at `now` unfinished, its work done elsewhere: the side was busy
    /// with it until now, and no finish is counted.
    pub(crate) fn forget(&mut self, now: Instant) {
        self.advance(now);
        self.in_flight = self.in_flight.saturating_sub(1);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(t0: Instant, seconds: f64) -> Instant {
        t0 + Duration::from_secs_f64(seconds)
    }

    fn close(a: Option<Duration>, seconds: f64) -> bool {
        a.is_some_and(|a| (a.as_secs_f64() - seconds).abs() < 1e-6)
    }

    /// A side whose first part ran from `t0` to half a second later.
    fn set_up(t0: Instant) -> BusyTime {
        let mut side = BusyTime::new(t0);
        let setup = side.start(t0);
        assert_eq!(side.finish(setup, at(t0, 0.5)), None);
        side
    }

    #[test]
    fn a_part_alone_takes_its_wall_clock_time() {
        let t0 = Instant::now();
        let mut side = set_up(t0);
        let part = side.start(at(t0, 1.0));
        assert!(close(side.finish(part, at(t0, 3.0)), 2.0));
    }

    #[test]
    fn queued_parts_each_cost_their_own_time() {
        // A pool that decodes parts in turn, a second each, with three queued at once: the
        // first waits for nothing, the others each for the ones before them. Each part cost
        // the side one second, not its up to three of latency, nor its latency over the
        // parts in flight (the first of a queue alone, then a third of a second each).
        let t0 = Instant::now();
        let mut side = set_up(t0);
        for round in 0..3 {
            let begun = 1.0 + round as f64 * 3.0;
            let parts: Vec<PartStart> = (0..3).map(|_| side.start(at(t0, begun))).collect();
            for (n, part) in parts.into_iter().enumerate() {
                let cost = side.finish(part, at(t0, begun + n as f64 + 1.0));
                assert!(close(cost, 1.0), "round {round}, part {n}: {cost:?}");
            }
        }
    }

    #[test]
    fn parts_decoded_side_by_side_share_the_time_between_finishes() {
        // Three parts on three streams, started together, all done after 0.3 s: together they
        // cost 0.3 s, however the finishes fall.
        let t0 = Instant::now();
        let mut side = set_up(t0);
        let parts: Vec<PartStart> = (0..3).map(|_| side.start(at(t0, 1.0))).collect();
        let costs: Vec<f64> = parts
            .into_iter()
            .zip([1.3, 1.3, 1.3])
            .map(|(part, end)| side.finish(part, at(t0, end)).unwrap().as_secs_f64())
            .collect();
        assert!((costs.iter().sum::<f64>() - 0.3).abs() < 1e-6, "{costs:?}");
    }

    #[test]
    fn an_idle_side_between_parts_does_not_count() {
        let t0 = Instant::now();
        let mut side = BusyTime::new(t0);
        let first = side.start(t0);
        assert_eq!(side.finish(first, at(t0, 1.0)), None);
        let second = side.start(at(t0, 5.0));
        assert!(close(side.finish(second, at(t0, 6.0)), 1.0));
    }

    #[test]
    fn the_parts_begun_before_the_first_finish_are_not_timed() {
        let t0 = Instant::now();
        let mut side = BusyTime::new(t0);
        let (a, b) = (side.start(t0), side.start(t0));
        assert_eq!(side.finish(a, at(t0, 2.0)), None);
        let c = side.start(at(t0, 2.0));
        assert_eq!(side.finish(b, at(t0, 2.5)), None);
        assert!(close(side.finish(c, at(t0, 3.0)), 0.5));
    }
}
