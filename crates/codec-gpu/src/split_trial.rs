//! Whether balanced split's CPU side adds to what the GPU decodes alone. The balanced share
//! (`split.rs`) makes both sides finish a batch together by their measured rates, but the CPU
//! side's threads also take cores from what feeds the GPU (reading, frame checks, planning,
//! staging: 5-6.5 of 16 cores at 22 GB/s), which neither side's rate shows, and batches are
//! handed on in order, so a batch whose CPU part finishes late holds back the ones behind it.
//! Shared by rates alone, split in a row delivered 75-79% of GPU decoding alone on W1,
//! w1-small-sharded and W1 in shards of 4 steps (H100, 2026-11-28; docs/benchmarks.md, "Split
//! against the GPU alone").
//!
//! So balanced split decodes on the GPU alone at first, and every while times a few batches
//! with the GPU alone and a few with both sides, and keeps the way that decoded faster (the
//! GPU alone unless both sides are clearly faster). A way's rate is its batches' decoded bytes
//! over the decoder's busy time between their finishes ([`BusyTime`]), so idle time between
//! epochs counts for neither. A trial costs: timed as soon as a batch had decoded, the trial's
//! batches on both sides cost runs of 40 batches up to half of what they delivered, and six
//! batches each way so soon after the GPU's setup did not tell the ways apart reliably (same
//! section). So the first trial comes only after the GPU alone has decoded for a while, as the
//! later ones do. The batches shared out before the first one finishes decode on both sides:
//! both sides' setup is paid there, once.

use std::time::{Duration, Instant};

use crate::busy_time::{BusyTime, PartStart};

/// Batches of each way in one trial.
const BATCHES_PER_WAY: u64 = 6;
/// Both sides are kept only where they decode at least this much more than the GPU alone.
const CLEARLY_FASTER: f64 = 0.03;
/// How long the faster way (at first the GPU alone) is kept before both are timed again.
const KEEP: Duration = Duration::from_secs(30);

/// How a batch is shared out.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Way {
    /// Every chunk to the GPU.
    GpuAlone,
    /// Shared out by the sides' rates.
    BothSides,
}

impl Way {
    fn other(self) -> Self {
        match self {
            Way::GpuAlone => Way::BothSides,
            Way::BothSides => Way::GpuAlone,
        }
    }
}

/// A way's batches that ended, and the decoded bytes and busy seconds of those that were
/// decoded.
#[derive(Clone, Copy, Debug, Default)]
struct Timed {
    ended: u64,
    bytes: f64,
    seconds: f64,
}

impl Timed {
    fn rate(&self) -> Option<f64> {
        (self.seconds > 0.0).then(|| self.bytes / self.seconds)
    }
}

#[derive(Debug)]
enum Phase {
    /// No batch has finished yet: both sides take part.
    SettingUp,
    /// Batches `from..from + BATCHES_PER_WAY` go `first`, the next as many the other way, and
    /// the ones after `first` until both are timed.
    Timing {
        first: Way,
        from: u64,
        timed: [Timed; 2],
    },
    /// `way` is kept until `until`.
    Keeping { way: Way, until: Instant },
}

/// The trials of one split decoder.
#[derive(Debug)]
pub(crate) struct SplitTrials {
    phase: Phase,
    /// Batches shared out so far.
    batches: u64,
    /// Time with any batch in flight.
    busy: BusyTime,
}

/// One batch's way, number, bytes and start.
#[derive(Debug)]
pub(crate) struct TrialBatch {
    way: Way,
    number: u64,
    bytes: u64,
    start: PartStart,
}

impl TrialBatch {
    pub(crate) fn way(&self) -> Way {
        self.way
    }
}

impl SplitTrials {
    pub(crate) fn new(now: Instant) -> Self {
        Self {
            phase: Phase::SettingUp,
            batches: 0,
            busy: BusyTime::new(now),
        }
    }

    /// The way the next batch would go.
    pub(crate) fn way_now(&self) -> Way {
        self.way_of(self.batches)
    }

    fn way_of(&self, number: u64) -> Way {
        match self.phase {
            Phase::SettingUp => Way::BothSides,
            Phase::Timing { first, from, .. } => {
                match number >= from + BATCHES_PER_WAY && number < from + 2 * BATCHES_PER_WAY {
                    true => first.other(),
                    false => first,
                }
            }
            Phase::Keeping { way, .. } => way,
        }
    }

    /// A batch of `bytes` decoded bytes is shared out at `now`: the way it goes.
    pub(crate) fn start_batch(&mut self, bytes: u64, now: Instant) -> TrialBatch {
        if let Phase::Keeping { way, until } = self.phase {
            if now >= until {
                self.phase = Phase::Timing {
                    first: way,
                    from: self.batches,
                    timed: Default::default(),
                };
            }
        }
        let number = self.batches;
        self.batches += 1;
        TrialBatch {
            way: self.way_of(number),
            number,
            bytes,
            start: self.busy.start(now),
        }
    }

    /// `batch` ended at `now`, decoded or not (failed, or dropped with its stream).
    pub(crate) fn finish_batch(&mut self, batch: TrialBatch, decoded: bool, now: Instant) {
        let cost = self.busy.finish(batch.start, now);
        if let Phase::SettingUp = self.phase {
            self.phase = Phase::Keeping {
                way: Way::GpuAlone,
                until: now + KEEP,
            };
            return;
        }
        let Phase::Timing { first, from, timed } = &mut self.phase else {
            return;
        };
        let trial = *from..*from + 2 * BATCHES_PER_WAY;
        if !trial.contains(&batch.number) {
            return;
        }
        let of_way = &mut timed[(batch.way != *first) as usize];
        of_way.ended += 1;
        if let (Some(cost), true) = (cost, decoded) {
            of_way.bytes += batch.bytes as f64;
            of_way.seconds += cost.as_secs_f64();
        }
        if timed.iter().any(|way| way.ended < BATCHES_PER_WAY) {
            return;
        }
        let rate = |way: Way| timed[(way != *first) as usize].rate();
        let (Some(alone), Some(both)) = (rate(Way::GpuAlone), rate(Way::BothSides)) else {
            // A way none of whose batches decoded: time both again.
            self.phase = Phase::Timing {
                first: *first,
                from: self.batches,
                timed: Default::default(),
            };
            return;
        };
        let way = match both > alone * (1.0 + CLEARLY_FASTER) {
            true => Way::BothSides,
            false => Way::GpuAlone,
        };
        tracing::debug!(
            gpu_alone_gb_per_s = alone / 1e9,
            both_sides_gb_per_s = both / 1e9,
            ?way,
            "split: both ways timed"
        );
        self.phase = Phase::Keeping {
            way,
            until: now + KEEP,
        };
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(t0: Instant, seconds: f64) -> Instant {
        t0 + Duration::from_secs_f64(seconds)
    }

    /// Runs batches one at a time from `*clock`, each taking `seconds(way)`; returns their
    /// ways.
    fn run(
        trials: &mut SplitTrials,
        t0: Instant,
        clock: &mut f64,
        batches: usize,
        seconds: impl Fn(Way) -> f64,
    ) -> Vec<Way> {
        (0..batches)
            .map(|_| {
                let batch = trials.start_batch(1_000_000, at(t0, *clock));
                let way = batch.way();
                *clock += seconds(way);
                trials.finish_batch(batch, true, at(t0, *clock));
                way
            })
            .collect()
    }

    /// Seconds a batch takes each way.
    fn taking(gpu_alone: f64, both_sides: f64) -> impl Fn(Way) -> f64 + Copy {
        move |way| match way {
            Way::GpuAlone => gpu_alone,
            Way::BothSides => both_sides,
        }
    }

    fn count(ways: &[Way], way: Way) -> usize {
        ways.iter().filter(|&&w| w == way).count()
    }

    /// Trials whose first batch has set up both sides, with the clock at the first trial.
    fn set_up() -> (SplitTrials, Instant, f64) {
        let t0 = Instant::now();
        let mut trials = SplitTrials::new(t0);
        let mut clock = 0.0;
        assert_eq!(
            run(&mut trials, t0, &mut clock, 1, |_| 0.01),
            [Way::BothSides]
        );
        (trials, t0, clock + KEEP.as_secs_f64())
    }

    #[test]
    fn the_gpu_alone_decodes_until_the_first_trial() {
        let t0 = Instant::now();
        let mut trials = SplitTrials::new(t0);
        let mut clock = 0.0;
        // Batches shared out before any finishes set up both sides.
        let setting_up: Vec<TrialBatch> = (0..3)
            .map(|_| trials.start_batch(1_000_000, at(t0, clock)))
            .collect();
        assert!(setting_up.iter().all(|batch| batch.way() == Way::BothSides));
        for batch in setting_up {
            clock += 0.01;
            trials.finish_batch(batch, true, at(t0, clock));
        }
        // Then the GPU alone, however much faster both sides would be, until the first trial.
        let faster_with_the_cpu = taking(0.010, 0.001);
        let ways = run(&mut trials, t0, &mut clock, 1000, faster_with_the_cpu);
        assert_eq!(count(&ways, Way::BothSides), 0);
        clock += KEEP.as_secs_f64();
        let ways = run(&mut trials, t0, &mut clock, 20, faster_with_the_cpu);
        assert_eq!(&ways[..6], [Way::GpuAlone; 6]);
        assert_eq!(&ways[6..], [Way::BothSides; 14]);
    }

    #[test]
    fn the_gpu_alone_is_kept_where_both_sides_are_slower() {
        let (mut trials, t0, mut clock) = set_up();
        let slower_with_the_cpu = taking(0.010, 0.013);
        let ways = run(&mut trials, t0, &mut clock, 100, slower_with_the_cpu);
        // Six of each way, then the GPU alone.
        assert_eq!(count(&ways[..12], Way::BothSides), 6, "{ways:?}");
        assert!(
            ways[12..].iter().all(|&way| way == Way::GpuAlone),
            "{ways:?}"
        );
        assert_eq!(trials.way_now(), Way::GpuAlone);
    }

    #[test]
    fn both_sides_are_kept_only_where_clearly_faster() {
        for (both, kept) in [(0.009, Way::BothSides), (0.0099, Way::GpuAlone)] {
            let (mut trials, t0, mut clock) = set_up();
            let seconds = taking(0.010, both);
            let ways = run(&mut trials, t0, &mut clock, 60, seconds);
            assert!(
                ways[12..].iter().all(|&way| way == kept),
                "{both}: {ways:?}"
            );
        }
    }

    #[test]
    fn the_kept_way_is_timed_again_after_a_while() {
        let (mut trials, t0, mut clock) = set_up();
        let faster_with_the_cpu = taking(0.010, 0.005);
        run(&mut trials, t0, &mut clock, 20, faster_with_the_cpu);
        assert_eq!(trials.way_now(), Way::BothSides);
        // Past the time a way is kept, the CPU side has come to slow the GPU down: six
        // batches keep the kept way, six try the GPU alone, and the GPU alone is kept.
        clock += KEEP.as_secs_f64();
        let now_slower = taking(0.010, 0.020);
        let ways = run(&mut trials, t0, &mut clock, 20, now_slower);
        assert_eq!(count(&ways[..12], Way::GpuAlone), 6, "{ways:?}");
        assert!(
            ways[12..].iter().all(|&way| way == Way::GpuAlone),
            "{ways:?}"
        );
    }

    #[test]
    fn idle_time_and_failed_batches_count_for_neither_way() {
        let (mut trials, t0, mut clock) = set_up();
        // Batches of both ways take 10 ms each, but each of the GPU alone's begins after a
        // second with nothing in flight (epochs apart), and one of both sides' fails after
        // five seconds.
        let mut failed = false;
        for _ in 0..12 {
            if trials.way_now() == Way::GpuAlone {
                clock += 1.0;
            }
            let batch = trials.start_batch(1_000_000, at(t0, clock));
            let decoded = batch.way() == Way::GpuAlone || std::mem::replace(&mut failed, true);
            clock += if decoded { 0.01 } else { 5.0 };
            trials.finish_batch(batch, decoded, at(t0, clock));
        }
        // Timed alike, both sides are not clearly faster: the GPU alone is kept.
        assert!(
            matches!(
                trials.phase,
                Phase::Keeping {
                    way: Way::GpuAlone,
                    ..
                }
            ),
            "{:?}",
            trials.phase
        );
    }

    #[test]
    fn a_way_none_of_whose_batches_decoded_is_timed_again() {
        let (mut trials, t0, mut clock) = set_up();
        for _ in 0..12 {
            let batch = trials.start_batch(1_000_000, at(t0, clock));
            let decoded = batch.way() == Way::GpuAlone;
            clock += 0.01;
            trials.finish_batch(batch, decoded, at(t0, clock));
        }
        let ways = run(&mut trials, t0, &mut clock, 12, |_| 0.01);
        assert_eq!(count(&ways, Way::BothSides), 6, "{ways:?}");
    }

    #[test]
    fn batches_in_flight_count_by_the_time_between_finishes() {
        // Six batches at once, finishing 10 ms apart with the GPU alone and 20 ms apart with
        // both sides: the GPU alone is kept though each batch's latency is 60 ms and more.
        let (mut trials, t0, mut clock) = set_up();
        for _ in 0..6 {
            let batches: Vec<TrialBatch> = (0..6)
                .map(|_| trials.start_batch(1_000_000, at(t0, clock)))
                .collect();
            for batch in batches {
                clock += taking(0.010, 0.020)(batch.way());
                trials.finish_batch(batch, true, at(t0, clock));
            }
        }
        assert_eq!(trials.way_now(), Way::GpuAlone);
    }
}
