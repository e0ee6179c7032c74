//! Trials of a larger GPU share under auto. The rule of `auto_share.rs` explains a consumer's
//! wait by the CPU side's load; when the consumer waits while the CPU side is not busy enough
//! to explain it, the rule asks for no more, and the wait has another cause. A GPU side with
//! more work queued than the CPU side gives work back to the CPU (`auto_share.rs`); otherwise
//! the cause may be the CPU side's threads slowing what feeds the GPU (reading, checks,
//! staging). So auto tries: it raises the share by the wait, watches the consumer over the
//! batches that carry the new share, and keeps it only if the consumer then waits clearly
//! less; otherwise the share goes back and no trial runs for a while. A kept share holds
//! against the rule's give-back for a while, then must prove itself again.
//!
//! Beside setup B's model (43 fields in fp32, H200, 2026-11-27) the rule alone settled at a
//! tenth of the chunks on the GPU while the consumer waited 44-54% of its time, where GPU
//! decoding alone trained 27% faster (docs/training-runs.md).
//!
//! The other way round, a share the CPU side has room to take back is tried smaller, and kept
//! where the consumer's steps come no slower: a small wait the rule reads as a call for the
//! GPU may cost the model more than it saves. Beside setup A's bf16 model on 32 cores, a wait
//! in the model's first steps called the GPU in for half of each batch, which took 69% of the
//! GPU's time, and the consumer then waited 0.9% of its time, too much to give back: auto
//! trained 11% slower than CPU decoding alone (H200, 2026-11-27; docs/training-runs.md). A smaller
//! share kept holds against the rule's call-ins for a while, then the rule may call the GPU in
//! again and the trial repeats.
//!
//! Where the CPU side alone, decoding in place, took no longer for a batch than the consumer
//! computes with no GPU part beside it (`auto_share.rs`), a share of any size is tried at
//! nought, and kept where the consumer's steps come no slower and it does not wait on a busy
//! CPU side. Beside setup B's model on its advised layout, where CPU decoding alone trains
//! fastest, the rule's mixes put 72-92% of the chunks on the GPU; with this trial auto put
//! 8-10% there and trained at 56.8 / 57.3 samples/s against 42.9-53.9 (H200, 2026-11-29;
//! docs/training.md).
//!
//! Where the GPU already decodes most of each batch, auto also tries it with every batch, and
//! keeps that only if the consumer's steps then come clearly faster: beside a model that
//! shares the GPU, what a mixed batch costs the model does not show as waiting. Beside setup
//! B's model, auto at 82-96% of the chunks on the GPU trained 11% slower than GPU decoding
//! while the consumer waited 0.5-7.8% of its time (H100, 2026-11-27; docs/training-runs.md).

use std::time::{Duration, Instant};

use zarrpipe_core::PaceDelta;

use crate::last_batches::LastBatches;

/// Batches that carry a share before the consumer's waits at it count.
const BATCHES_TO_JUDGE: u64 = 4;
/// A trial of a larger share helped if the consumer then waits less than this share of what
/// it waited before; a trial of every batch on the GPU, if its steps come at least `FASTER`
/// sooner.
const HELPED: f64 = 0.8;
const FASTER: f64 = 0.03;
/// The GPU's share from which auto tries it with every batch. From half, beside setup A's bf16
/// model on 16 cores, where a third of each batch on the GPU trains fastest and every batch on
/// it 10% slower, auto's share rose past half while the consumer waited, and the trial that
/// followed (steps of 105 ms against 80) cost one run of five a tenth of its pace (H200,
/// 2026-11-30; docs/training-runs.md). Setup B's default layout, where the GPU alone keeps up
/// best, runs at 0.9 and more.
const MOSTLY_GPU: f64 = 0.75;
/// Batches that carry every batch on the GPU before they are judged: steps beside a model come
/// in bursts, so a step time needs more of them than a wait share.
const BATCHES_TO_JUDGE_PACE: u64 = 8;
/// A trial raises the share by the consumer's wait share, and by at least this share of what
/// the CPU side had, so that the change shows.
const LEAST_STEP: f64 = 0.25;
/// A consumer waiting no more than this share of its time at a share has nothing to gain.
const NO_WAIT: f64 = 0.005;
/// After a trial that did not help, none for this long.
const PAUSE: Duration = Duration::from_secs(20);
/// A share a trial kept is not given back for this long.
const HOLD: Duration = Duration::from_secs(20);
/// A smaller share is tried where the CPU side has room for at least this much more of each
/// batch; it is kept if the consumer's steps come no more than `NOT_SLOWER` later.
const LEAST_STEP_DOWN: f64 = 0.1;
const NOT_SLOWER: f64 = 0.01;
/// A smaller share under which the consumer waits at least this share of its time, while the
/// CPU side is busy at least `CPU_BUSY` of the wall clock, is not kept: the CPU side cannot
/// keep up at it, and the consumer's steps come no slower only while what the larger share
/// decoded lasts. Beside setup A's bf16 model, every batch on the CPU was kept four times on
/// steps no slower than a mix the GPU's first parts had slowed, the consumer waiting 16-28%
/// of its time there, and held while it went on waiting 25-35% (H200, 2026-11-29;
/// docs/training-runs.md). Where the CPU side is idle much of the time, the wait has another cause,
/// which the GPU does not cure. The side's busy time counts its threads' decoding, not their
/// reading (about an eighth of a zstd chunk's time from the page cache), so a side that cannot
/// keep up reads well above this.
pub(crate) const SMALLER_MOST_WAIT: f64 = 0.1;
const CPU_BUSY: f64 = 0.6;
/// Trials of every batch on the CPU that go back in a row pause twice as long each time, up
/// to `PAUSE` times two to this power: where the CPU side alone reads as keeping up and does
/// not, each costs the consumer its batches.
const CPU_ALONE_MOST_BACKOFF: u32 = 3;
/// A smaller share a trial kept holds against the rule's call-ins this long, unless the
/// consumer comes to wait `WAITS_MORE` more of its time than it did at the trial (twice as
/// much, at the least): its work changed (an evaluation loop, a larger batch).
const HOLD_DOWN: Duration = Duration::from_secs(60);
const WAITS_MORE: f64 = 0.05;

/// The consumer's waits over the batches delivered at one share.
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct Waits(PaceDelta);

impl Waits {
    pub(crate) fn add(&mut self, delta: PaceDelta) {
        self.0 += delta;
    }

    /// The share of the consumer's time spent waiting and its mean step (seconds a batch);
    /// `None` until `batches` came.
    fn judged_over(&self, batches: u64) -> Option<(f64, f64)> {
        let waits = &self.0;
        (waits.delivered >= batches.max(1) && !waits.steps.is_zero()).then(|| {
            let step = waits.steps.as_secs_f64() / waits.delivered as f64;
            (waits.wait_share(), step)
        })
    }

    fn judged(&self) -> Option<(f64, f64)> {
        self.judged_over(BATCHES_TO_JUDGE)
    }
}

/// The consumer's last steps, each with the GPU's mean share of the batches they took: what a
/// trial of every batch on the GPU is compared with. Where the GPU decodes most of each batch
/// the rule moves the share a little nearly every batch, so the steps at one share are too few.
type Recent = LastBatches<BATCHES_TO_JUDGE_PACE>;

/// The waits over the `recent` batches, if the GPU's share of every one is `given`.
fn recent_waits_where(recent: &Recent, given: impl Fn(f64) -> bool) -> Option<Waits> {
    let mut waits = Waits::default();
    for &(delta, share) in recent.deliveries() {
        if !given(share) {
            return None;
        }
        waits.add(delta);
    }
    Some(waits)
}

/// The waits over the `recent` batches, if the GPU decoded most of every one and the CPU
/// some: the mix a trial of every batch is compared with.
fn mostly_on_the_gpu(recent: &Recent) -> Option<Waits> {
    recent_waits_where(recent, |share| (MOSTLY_GPU..1.0).contains(&share))
}

/// The waits over the `recent` batches, if every one had a GPU part.
fn with_a_gpu_part(recent: &Recent) -> Option<Waits> {
    recent_waits_where(recent, |share| share > 0.0)
}

/// What a trial tries.
#[derive(Clone, Copy, Debug, PartialEq)]
enum Kind {
    /// A larger share than the rule keeps.
    Larger,
    /// Every batch on the GPU.
    EveryBatch,
    /// A smaller share, the CPU side having room for it.
    Smaller,
}

/// A trial under way: the share it moved from, the consumer's wait and mean step there, the
/// share tried.
#[derive(Clone, Copy, Debug)]
struct Trial {
    from: f64,
    from_wait: f64,
    from_step: f64,
    to: f64,
    /// The CPU side's busy seconds so far, and when, as the trial started.
    cpu_from: Option<(f64, Instant)>,
}

impl Trial {
    fn kind(&self) -> Kind {
        match self.to {
            to if to >= 1.0 => Kind::EveryBatch,
            to if to > self.from => Kind::Larger,
            _ => Kind::Smaller,
        }
    }

    /// Batches at the tried share before it is judged.
    fn batches(&self) -> u64 {
        match self.kind() {
            Kind::Larger => BATCHES_TO_JUDGE,
            Kind::EveryBatch | Kind::Smaller => BATCHES_TO_JUDGE_PACE,
        }
    }

    /// Whether the consumer did better at the tried share: a larger share, by waiting clearly
    /// less; every batch on the GPU, by stepping clearly faster (what it is tried for); a
    /// smaller one, by stepping no slower (the GPU's time spared), unless `cpu_short` (the
    /// consumer waited on a busy CPU side: `SMALLER_MOST_WAIT`). A step time over four batches
    /// is too noisy to keep a larger share by.
    fn helped(&self, wait: f64, step: f64, cpu_short: bool) -> bool {
        match self.kind() {
            Kind::Larger => wait < self.from_wait * HELPED,
            Kind::EveryBatch => step < self.from_step * (1.0 - FASTER),
            Kind::Smaller => step <= self.from_step * (1.0 + NOT_SLOWER) && !cpu_short,
        }
    }
}

/// Auto's trials of other GPU shares than the rule's.
#[derive(Debug, Default)]
pub(crate) struct Trials {
    running: Option<Trial>,
    paused_until: Option<Instant>,
    /// A larger share a trial showed to help, and until when the give-back stops there.
    held: Option<(f64, Instant)>,
    /// A smaller share a trial showed to do as well, until when call-ins stop there, and the
    /// consumer's wait share at it.
    held_down: Option<(f64, Instant, f64)>,
    /// Where the consumer waits at a share the CPU side has room to take back from, trials
    /// alternate: a larger share, then a smaller one.
    smaller_next: bool,
    /// Trials of every batch on the CPU that went back in a row since one was kept: each
    /// waits twice as long as the last before the next.
    cpu_alone_failed: u32,
    recent: Recent,
    /// The CPU side's busy seconds so far (its threads' decoding seconds over their count),
    /// and when, as last told.
    cpu_busy: Option<(f64, Instant)>,
}

impl Trials {
    /// The consumer took batches with `delta`, `given` the GPU's mean share of them.
    pub(crate) fn observe(&mut self, delta: PaceDelta, given: f64) {
        self.recent.add(delta, given);
    }

    /// The CPU side had been busy `busy` seconds so far at `now`.
    pub(crate) fn cpu_side_busy(&mut self, busy: f64, now: Instant) {
        self.cpu_busy = Some((busy, now));
    }

    /// The share of the wall clock the CPU side was busy since `from`; `None` where either
    /// read is missing.
    fn cpu_load_since(&self, from: Option<(f64, Instant)>) -> Option<f64> {
        let ((busy_then, then), (busy, now)) = (from?, self.cpu_busy?);
        let wall = now.saturating_duration_since(then).as_secs_f64();
        (wall > 0.0).then(|| (busy - busy_then) / wall)
    }

    /// Judges a trial under way by the consumer's `waits` at its share: the share to go back
    /// to if it did not help.
    pub(crate) fn judge(&mut self, waits: &Waits, now: Instant) -> Option<f64> {
        let trial = self.running?;
        let (wait, step) = waits.judged_over(trial.batches())?;
        self.running = None;
        self.recent = Recent::default();
        // Unknown, the CPU side's load is taken as busy.
        let cpu_load = self.cpu_load_since(trial.cpu_from);
        let cpu_short = wait >= SMALLER_MOST_WAIT && cpu_load.is_none_or(|load| load >= CPU_BUSY);
        let helped = trial.helped(wait, step, cpu_short);
        tracing::debug!(
            trial.from,
            trial.to,
            trial.from_wait,
            wait,
            from_step_ms = 1e3 * trial.from_step,
            step_ms = 1e3 * step,
            cpu_load,
            helped,
            "auto: another GPU share judged"
        );
        let cpu_alone = trial.to <= 0.0;
        match (helped, trial.kind()) {
            (true, Kind::Smaller) => self.held_down = Some((trial.to, now + HOLD_DOWN, wait)),
            (true, _) => self.held = Some((trial.to, now + HOLD)),
            (false, _) => {
                let backoff = match cpu_alone {
                    true => 1 << self.cpu_alone_failed.min(CPU_ALONE_MOST_BACKOFF),
                    false => 1,
                };
                self.paused_until = Some(now + PAUSE * backoff);
            }
        }
        if cpu_alone {
            self.cpu_alone_failed = match helped {
                true => 0,
                false => self.cpu_alone_failed + 1,
            };
        }
        (!helped).then_some(trial.from)
    }

    /// The consumer waits `waits` at `share`, which the rule would keep, and the CPU side has
    /// room for all but `room` of each batch: the share to try, or `share`.
    pub(crate) fn start(&mut self, share: f64, room: f64, waits: &Waits, now: Instant) -> f64 {
        let Some((wait, _)) = self.may_start(share, waits, now) else {
            return share;
        };
        let smaller = share - room >= LEAST_STEP_DOWN;
        if smaller && (self.smaller_next || wait <= NO_WAIT) {
            if let Some((wait, step)) = waits.judged_over(BATCHES_TO_JUDGE_PACE) {
                self.smaller_next = false;
                return self.run(share, wait, step, room);
            }
        }
        if wait <= NO_WAIT {
            return share;
        }
        self.smaller_next = smaller;
        let (wait, step) = waits.judged().expect("judged by may_start");
        self.run(
            share,
            wait,
            step,
            1.0 - (1.0 - share) * (1.0 - wait.max(LEAST_STEP)),
        )
    }

    /// The GPU decodes most of each batch at `share`: the share to go on with, every batch on
    /// the GPU if it has not been tried lately and the last batches were mostly on the GPU too.
    /// Where the CPU side has room for all but `room` of each batch, a smaller share takes its
    /// turn first after this trial (`start`).
    pub(crate) fn start_every_batch(&mut self, share: f64, room: f64, now: Instant) -> Option<f64> {
        if share < MOSTLY_GPU || self.smaller_next {
            return None;
        }
        let waits = mostly_on_the_gpu(&self.recent)?;
        if waits.0.delivered < BATCHES_TO_JUDGE_PACE {
            return None;
        }
        let (wait, step) = self.may_start(share, &waits, now)?;
        self.smaller_next = share - room >= LEAST_STEP_DOWN;
        Some(self.run(share, wait, step, 1.0))
    }

    /// The GPU decodes `share` of each batch, where the CPU side alone would keep up
    /// (`keeps_up`, from what it took for batches it decoded alone): every batch on the CPU to
    /// try, kept where the consumer's steps come no slower (a smaller share). A GPU part costs
    /// the model beside it more than its wait shows: beside setup B's model on its advised
    /// layout, CPU decoding alone trained at 96% of synthetic, GPU decoding at 78-85% and
    /// auto's mixes at 65-67% (H200, 2026-11-29; docs/training.md).
    pub(crate) fn start_cpu_alone(
        &mut self,
        share: f64,
        keeps_up: bool,
        waits: &Waits,
        now: Instant,
    ) -> Option<f64> {
        // A smaller share kept does not hold this trial off: it tries smaller still.
        if !keeps_up || share <= 0.0 || self.running.is_some() || self.paused(now) {
            return None;
        }
        // The share moves nearly every batch once the GPU is in, so the batches at one share
        // are too few: compared with the last batches, each with some of it on the GPU.
        let (wait, step) = with_a_gpu_part(&self.recent)
            .unwrap_or(*waits)
            .judged_over(BATCHES_TO_JUDGE_PACE)?;
        Some(self.run(share, wait, step, 0.0))
    }

    /// The consumer's wait and step at `share`, when a trial from it may start: none while a
    /// smaller share kept holds.
    fn may_start(&self, share: f64, waits: &Waits, now: Instant) -> Option<(f64, f64)> {
        if !self.free_to_start(now) || share >= 1.0 {
            return None;
        }
        waits.judged()
    }

    /// Whether a trial may start at `now`: none running, none paused after one that did not
    /// help, no smaller share kept and holding.
    fn free_to_start(&self, now: Instant) -> bool {
        let held_down = self.held_down.is_some_and(|(_, until, _)| now < until);
        self.running.is_none() && !self.paused(now) && !held_down
    }

    /// Whether trials pause at `now`, after one that did not help.
    fn paused(&self, now: Instant) -> bool {
        self.paused_until.is_some_and(|until| now < until)
    }

    fn run(&mut self, from: f64, from_wait: f64, from_step: f64, to: f64) -> f64 {
        self.running = Some(Trial {
            from,
            from_wait,
            from_step,
            to,
            cpu_from: self.cpu_busy,
        });
        to
    }

    /// The rule raised the share itself: a trial under way is moot.
    pub(crate) fn cancel(&mut self) {
        self.running = None;
    }

    /// The least share the rule may give back to at `now`: a trial's while it runs, a larger
    /// one kept while it holds.
    pub(crate) fn floor(&self, now: Instant) -> f64 {
        match (self.running, self.held) {
            (Some(trial), _) => trial.to,
            (None, Some((share, until))) if now < until => share,
            _ => 0.0,
        }
    }

    /// The largest share the rule may call the GPU in to at `now`, the consumer waiting
    /// `wait_share` of its time: a smaller share's while it is tried, or kept and holding.
    pub(crate) fn ceiling(&mut self, now: Instant, wait_share: f64) -> f64 {
        if let Some((_, until, judged)) = self.held_down {
            let waits_more = wait_share > (2.0 * judged).max(judged + WAITS_MORE);
            if now >= until || waits_more {
                self.held_down = None;
            }
        }
        match (self.running, self.held_down) {
            (Some(trial), _) if trial.kind() == Kind::Smaller => trial.to,
            (None, Some((share, _, _))) => share,
            _ => 1.0,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `count` batches, each a step of `step_ms` with a wait of `wait_ms` in it.
    fn waiting(count: u64, step_ms: u64, wait_ms: u64) -> Waits {
        let mut waits = Waits::default();
        for _ in 0..count {
            waits.add(PaceDelta {
                delivered: 1,
                wait: Duration::from_millis(wait_ms),
                steps: Duration::from_millis(step_ms),
            });
        }
        waits
    }

    fn steps(count: u64, step_ms: u64) -> Waits {
        waiting(count, step_ms, 2)
    }

    fn batch(step_ms: u64) -> PaceDelta {
        steps(1, step_ms).0
    }

    /// The consumer took the batches a step time is judged over, 100 ms each, `share` of each
    /// on the GPU.
    fn observe_a_judgement(trials: &mut Trials, share: f64) {
        for _ in 0..BATCHES_TO_JUDGE_PACE {
            trials.observe(batch(100), share);
        }
    }

    #[test]
    fn every_batch_is_tried_from_a_share_that_moves_each_batch_and_kept_when_faster() {
        let mut trials = Trials::default();
        let now = Instant::now();
        for n in 0..BATCHES_TO_JUDGE_PACE {
            assert_eq!(
                trials.start_every_batch(0.85, 0.85, now),
                None,
                "too few steps yet"
            );
            trials.observe(batch(100), 0.8 + 0.05 * (n % 3) as f64);
        }
        assert_eq!(trials.start_every_batch(0.85, 0.85, now), Some(1.0));
        assert_eq!(trials.floor(now), 1.0);
        // Not judged before enough batches came at the tried share.
        assert_eq!(
            trials.judge(&steps(BATCHES_TO_JUDGE_PACE - 1, 90), now),
            None
        );
        assert!(trials.running.is_some());
        assert_eq!(trials.judge(&steps(BATCHES_TO_JUDGE_PACE, 95), now), None);
        assert!(trials.running.is_none());
        assert_eq!(trials.floor(now + HOLD / 2), 1.0);
        assert_eq!(trials.floor(now + HOLD), 0.0);
    }

    #[test]
    fn every_batch_on_the_cpu_is_tried_where_it_keeps_up_and_kept_where_no_slower() {
        let mut trials = Trials::default();
        let now = Instant::now();
        // A share that moves each batch: too few batches at any one share.
        let few = steps(2, 130);
        for n in 0..BATCHES_TO_JUDGE_PACE {
            assert_eq!(trials.start_cpu_alone(0.6, true, &few, now), None);
            trials.observe(batch(130), 0.5 + 0.05 * (n % 3) as f64);
        }
        // Not where the CPU side alone would fall behind, nor from nought.
        assert_eq!(trials.start_cpu_alone(0.6, false, &few, now), None);
        assert_eq!(trials.start_cpu_alone(0.0, true, &few, now), None);
        assert_eq!(trials.start_cpu_alone(0.6, true, &few, now), Some(0.0));
        // A call-in may not go past the share tried, and no other trial starts.
        assert_eq!(trials.ceiling(now, 0.3), 0.0);
        assert_eq!(trials.start_cpu_alone(0.6, true, &few, now), None);
        // Steps of 131 ms against 130: no slower, kept, and holding against call-ins.
        assert_eq!(trials.judge(&steps(BATCHES_TO_JUDGE_PACE, 131), now), None);
        assert_eq!(trials.ceiling(now + HOLD_DOWN / 2, 0.0), 0.0);
        assert_eq!(trials.ceiling(now + HOLD_DOWN, 0.0), 1.0);
    }

    #[test]
    fn every_batch_on_the_cpu_is_not_kept_where_the_consumer_waits_on_a_busy_cpu_side() {
        // Steps of 100 ms with 20 ms waits at every batch on the CPU, no slower than the mix
        // before (130 ms): kept only where the CPU side was idle part of the time.
        let kept_at_load = |load: f64| {
            let mut trials = Trials::default();
            let start = Instant::now();
            for n in 0..BATCHES_TO_JUDGE_PACE {
                trials.observe(batch(130), 0.5 + 0.05 * (n % 3) as f64);
            }
            trials.cpu_side_busy(10.0, start);
            let few = steps(2, 130);
            assert_eq!(trials.start_cpu_alone(0.6, true, &few, start), Some(0.0));
            let judged_at = start + Duration::from_secs(1);
            trials.cpu_side_busy(10.0 + load, judged_at);
            let waits = waiting(BATCHES_TO_JUDGE_PACE, 100, 20);
            trials.judge(&waits, judged_at).is_none()
        };
        assert!(!kept_at_load(0.95));
        assert!(kept_at_load(0.5));
    }

    /// A trial of every batch on the CPU starts at `at` from every batch on the GPU, where
    /// the consumer stepped as `from` says, and goes back on steps 3% slower than 100 ms.
    fn a_cpu_alone_trial_goes_back(trials: &mut Trials, from: &Waits, at: Instant) {
        assert_eq!(trials.start_cpu_alone(1.0, true, from, at), Some(0.0));
        assert_eq!(
            trials.judge(&steps(BATCHES_TO_JUDGE_PACE, 103), at),
            Some(1.0)
        );
        observe_a_judgement(trials, 1.0);
    }

    #[test]
    fn every_batch_on_the_cpu_goes_back_where_the_steps_come_slower() {
        let mut trials = Trials::default();
        let now = Instant::now();
        observe_a_judgement(&mut trials, 1.0);
        // From every batch on the GPU too.
        let at_one_share = steps(BATCHES_TO_JUDGE_PACE, 100);
        a_cpu_alone_trial_goes_back(&mut trials, &at_one_share, now);
        assert_eq!(trials.start_cpu_alone(1.0, true, &at_one_share, now), None);
        // Each trial that goes back in a row waits twice as long before the next.
        let mut from = now;
        for failed in 1..=5u32 {
            let pause = PAUSE * (1 << (failed - 1).min(CPU_ALONE_MOST_BACKOFF));
            let almost = from + pause - Duration::from_millis(1);
            assert_eq!(
                trials.start_cpu_alone(1.0, true, &at_one_share, almost),
                None
            );
            from += pause;
            a_cpu_alone_trial_goes_back(&mut trials, &at_one_share, from);
        }
        // One kept starts the count again.
        from += PAUSE * (1 << CPU_ALONE_MOST_BACKOFF);
        assert_eq!(
            trials.start_cpu_alone(1.0, true, &at_one_share, from),
            Some(0.0)
        );
        assert_eq!(trials.judge(&steps(BATCHES_TO_JUDGE_PACE, 100), from), None);
        assert_eq!(trials.cpu_alone_failed, 0);
    }

    #[test]
    fn every_batch_on_the_gpu_goes_back_unless_clearly_faster_and_waits_a_while() {
        let mut trials = Trials::default();
        let now = Instant::now();
        observe_a_judgement(&mut trials, 0.9);
        assert_eq!(trials.start_every_batch(0.9, 0.9, now), Some(1.0));
        // 2% faster, and fewer waits: not enough for every batch on the GPU.
        assert_eq!(
            trials.judge(&steps(BATCHES_TO_JUDGE_PACE, 98), now),
            Some(0.9)
        );
        observe_a_judgement(&mut trials, 0.9);
        assert_eq!(trials.start_every_batch(0.9, 0.9, now + PAUSE / 2), None);
        assert_eq!(trials.start_every_batch(0.9, 0.9, now + PAUSE), Some(1.0));
    }

    #[test]
    fn a_larger_share_is_kept_by_fewer_waits_not_by_faster_steps() {
        let mut trials = Trials::default();
        let now = Instant::now();
        let waiting = |step_ms, wait_ms| waiting(BATCHES_TO_JUDGE, step_ms, wait_ms);
        let to = trials.start(0.2, 0.2, &waiting(100, 20), now);
        assert!(to > 0.2);
        // Steps 10% faster by chance, the same waits: not kept.
        assert_eq!(trials.judge(&waiting(90, 18), now), Some(0.2));
        let to = trials.start(0.2, 0.2, &waiting(100, 20), now + PAUSE);
        assert!(to > 0.2);
        assert_eq!(trials.judge(&waiting(100, 5), now + PAUSE), None);
        assert_eq!(trials.floor(now + PAUSE), to);
    }

    #[test]
    fn every_batch_is_compared_with_mixed_batches_only() {
        let mut trials = Trials::default();
        let now = Instant::now();
        observe_a_judgement(&mut trials, 1.0);
        trials.observe(batch(100), 0.9);
        assert_eq!(trials.start_every_batch(0.9, 0.9, now), None);
    }

    #[test]
    fn every_batch_is_not_tried_from_a_share_the_cpu_side_takes_a_third_of() {
        let mut trials = Trials::default();
        let now = Instant::now();
        observe_a_judgement(&mut trials, 0.65);
        assert_eq!(trials.start_every_batch(0.65, 0.65, now), None);
        observe_a_judgement(&mut trials, 0.8);
        assert_eq!(trials.start_every_batch(0.8, 0.8, now), Some(1.0));
    }

    #[test]
    fn every_batch_is_not_tried_after_batches_mostly_on_the_cpu() {
        let mut trials = Trials::default();
        let now = Instant::now();
        for n in 0..2 * BATCHES_TO_JUDGE_PACE {
            trials.observe(
                batch(100),
                if n == 2 * BATCHES_TO_JUDGE_PACE - 3 {
                    0.3
                } else {
                    0.9
                },
            );
        }
        assert_eq!(trials.start_every_batch(0.9, 0.9, now), None);
        assert_eq!(trials.start_every_batch(0.4, 0.4, now), None);
    }

    #[test]
    fn a_smaller_share_is_kept_where_the_steps_come_no_slower_and_holds_against_call_ins() {
        let mut trials = Trials::default();
        let now = Instant::now();
        // The consumer hardly waits at 0.5, and the CPU side has room for all but 0.1.
        let at_half = waiting(BATCHES_TO_JUDGE_PACE, 100, 0);
        assert_eq!(trials.start(0.5, 0.1, &at_half, now), 0.1);
        assert_eq!(trials.ceiling(now, 0.0), 0.1);
        assert_eq!(trials.floor(now), 0.1);
        // Judged on as many steps as a trial of every batch.
        assert_eq!(trials.judge(&steps(BATCHES_TO_JUDGE, 95), now), None);
        assert!(trials.running.is_some());
        // It waits more, but steps sooner: kept.
        let at_tenth = waiting(BATCHES_TO_JUDGE_PACE, 95, 4);
        assert_eq!(trials.judge(&at_tenth, now), None);
        assert_eq!(trials.ceiling(now + HOLD_DOWN / 2, 0.04), 0.1);
        assert_eq!(trials.floor(now), 0.0);
        // No other trial while it holds; then the rule may call the GPU in again.
        assert_eq!(trials.start(0.1, 0.1, &waiting(8, 100, 20), now), 0.1);
        assert_eq!(trials.ceiling(now + HOLD_DOWN, 0.04), 1.0);
    }

    #[test]
    fn a_smaller_share_kept_gives_way_when_the_consumer_comes_to_wait_much_more() {
        let mut trials = Trials::default();
        let now = Instant::now();
        let at_half = waiting(BATCHES_TO_JUDGE_PACE, 100, 0);
        assert_eq!(trials.start(0.5, 0.0, &at_half, now), 0.0);
        // Kept, the consumer waiting 4% at it.
        let at_none = waiting(BATCHES_TO_JUDGE_PACE, 95, 4);
        assert_eq!(trials.judge(&at_none, now), None);
        assert_eq!(trials.ceiling(now, 0.08), 0.0);
        // Its work changed: it waits 10% of its time.
        assert_eq!(trials.ceiling(now, 0.1), 1.0);
        assert_eq!(trials.ceiling(now, 0.0), 1.0);
    }

    #[test]
    fn a_smaller_share_goes_back_when_the_steps_come_slower() {
        let mut trials = Trials::default();
        let now = Instant::now();
        let at_half = waiting(BATCHES_TO_JUDGE_PACE, 100, 0);
        assert_eq!(trials.start(0.5, 0.2, &at_half, now), 0.2);
        assert_eq!(
            trials.judge(&steps(BATCHES_TO_JUDGE_PACE, 102), now),
            Some(0.5)
        );
        assert_eq!(trials.ceiling(now, 0.0), 1.0);
        // Too little room: nothing to try.
        assert_eq!(trials.start(0.5, 0.45, &at_half, now + PAUSE), 0.5);
    }

    #[test]
    fn where_the_cpu_side_has_room_a_larger_and_a_smaller_share_are_tried_in_turn() {
        let mut trials = Trials::default();
        let now = Instant::now();
        let waits = waiting(BATCHES_TO_JUDGE_PACE, 100, 10);
        let larger = trials.start(0.5, 0.1, &waits, now);
        assert!(larger > 0.5);
        assert_eq!(trials.judge(&waits, now), Some(0.5));
        assert_eq!(trials.start(0.5, 0.1, &waits, now + PAUSE), 0.1);
    }
}
