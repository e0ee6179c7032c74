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
//! decoding alone trained 27% faster (docs/training.md).
//!
//! Where the GPU already decodes most of each batch, auto also tries it with every batch, and
//! keeps that only if the consumer's steps then come clearly faster: beside a model that
//! shares the GPU, what a mixed batch costs the model does not show as waiting. Beside setup
//! B's model, auto at 82-96% of the chunks on the GPU trained 11% slower than GPU decoding
//! while the consumer waited 0.5-7.8% of its time (H100, 2026-11-27; docs/training.md).

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
/// The GPU's share from which auto tries it with every batch.
const MOSTLY_GPU: f64 = 0.5;
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

/// The waits over the `recent` batches, if the GPU decoded most of every one and the CPU
/// some: the mix a trial of every batch is compared with.
fn mostly_on_the_gpu(recent: &Recent) -> Option<Waits> {
    let mut waits = Waits::default();
    for &(delta, given) in recent.deliveries() {
        if !(MOSTLY_GPU..1.0).contains(&given) {
            return None;
        }
        waits.add(delta);
    }
    Some(waits)
}

/// A trial under way: the share it raised from, the consumer's wait and mean step there, the
/// share tried.
#[derive(Clone, Copy, Debug)]
struct Trial {
    from: f64,
    from_wait: f64,
    from_step: f64,
    to: f64,
}

impl Trial {
    /// Batches at the tried share before it is judged.
    fn batches(&self) -> u64 {
        match self.to >= 1.0 {
            true => BATCHES_TO_JUDGE_PACE,
            false => BATCHES_TO_JUDGE,
        }
    }

    /// Whether the consumer did clearly better at the tried share: a larger share, by waiting
    /// less; every batch on the GPU, by stepping faster (what it is tried for). A step time
    /// over four batches is too noisy to keep a larger share by.
    fn helped(&self, wait: f64, step: f64) -> bool {
        match self.to >= 1.0 {
            true => step < self.from_step * (1.0 - FASTER),
            false => wait < self.from_wait * HELPED,
        }
    }
}

/// Auto's trials of larger GPU shares.
#[derive(Debug, Default)]
pub(crate) struct Trials {
    running: Option<Trial>,
    paused_until: Option<Instant>,
    /// A share a trial showed to help, and until when the give-back stops there.
    held: Option<(f64, Instant)>,
    recent: Recent,
}

impl Trials {
    /// The consumer took batches with `delta`, `given` the GPU's mean share of them.
    pub(crate) fn observe(&mut self, delta: PaceDelta, given: f64) {
        self.recent.add(delta, given);
    }

    /// Judges a trial under way by the consumer's `waits` at its share: the share to go back
    /// to if it did not help.
    pub(crate) fn judge(&mut self, waits: &Waits, now: Instant) -> Option<f64> {
        let trial = self.running?;
        let (wait, step) = waits.judged_over(trial.batches())?;
        self.running = None;
        self.recent = Recent::default();
        let helped = trial.helped(wait, step);
        tracing::debug!(
            trial.from,
            trial.to,
            trial.from_wait,
            wait,
            from_step_ms = 1e3 * trial.from_step,
            step_ms = 1e3 * step,
            helped,
            "auto: a larger GPU share judged"
        );
        if helped {
            self.held = Some((trial.to, now + HOLD));
            return None;
        }
        self.paused_until = Some(now + PAUSE);
        Some(trial.from)
    }

    /// The consumer waits `waits` at `share`, which the rule would keep: the share to try.
    pub(crate) fn start(&mut self, share: f64, waits: &Waits, now: Instant) -> f64 {
        match self.may_start(share, waits, now) {
            Some((wait, _)) if wait <= NO_WAIT => share,
            Some((wait, step)) => self.run(
                share,
                wait,
                step,
                1.0 - (1.0 - share) * (1.0 - wait.max(LEAST_STEP)),
            ),
            None => share,
        }
    }

    /// The GPU decodes most of each batch at `share`: the share to go on with, every batch on
    /// the GPU if it has not been tried lately and the last batches were mostly on the GPU too.
    pub(crate) fn start_every_batch(&mut self, share: f64, now: Instant) -> Option<f64> {
        if share < MOSTLY_GPU {
            return None;
        }
        let waits = mostly_on_the_gpu(&self.recent)?;
        if waits.0.delivered < BATCHES_TO_JUDGE_PACE {
            return None;
        }
        let (wait, step) = self.may_start(share, &waits, now)?;
        Some(self.run(share, wait, step, 1.0))
    }

    /// The consumer's wait and step at `share`, when a trial from it may start.
    fn may_start(&self, share: f64, waits: &Waits, now: Instant) -> Option<(f64, f64)> {
        let paused = self.paused_until.is_some_and(|until| now < until);
        if self.running.is_some() || paused || share >= 1.0 {
            return None;
        }
        waits.judged()
    }

    fn run(&mut self, from: f64, from_wait: f64, from_step: f64, to: f64) -> f64 {
        self.running = Some(Trial {
            from,
            from_wait,
            from_step,
            to,
        });
        to
    }

    /// The rule raised the share itself: a trial under way is moot.
    pub(crate) fn cancel(&mut self) {
        self.running = None;
    }

    /// The least share the rule may give back to at `now`: a trial's while it runs, a kept
    /// one's while it holds.
    pub(crate) fn floor(&self, now: Instant) -> f64 {
        match (self.running, self.held) {
            (Some(trial), _) => trial.to,
            (None, Some((share, until))) if now < until => share,
            _ => 0.0,
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

    #[test]
    fn every_batch_is_tried_from_a_share_that_moves_each_batch_and_kept_when_faster() {
        let mut trials = Trials::default();
        let now = Instant::now();
        for n in 0..BATCHES_TO_JUDGE_PACE {
            assert_eq!(
                trials.start_every_batch(0.85, now),
                None,
                "too few steps yet"
            );
            trials.observe(batch(100), 0.8 + 0.05 * (n % 3) as f64);
        }
        assert_eq!(trials.start_every_batch(0.85, now), Some(1.0));
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
    fn every_batch_on_the_gpu_goes_back_unless_clearly_faster_and_waits_a_while() {
        let mut trials = Trials::default();
        let now = Instant::now();
        for _ in 0..BATCHES_TO_JUDGE_PACE {
            trials.observe(batch(100), 0.9);
        }
        assert_eq!(trials.start_every_batch(0.9, now), Some(1.0));
        // 2% faster, and fewer waits: not enough for every batch on the GPU.
        assert_eq!(
            trials.judge(&steps(BATCHES_TO_JUDGE_PACE, 98), now),
            Some(0.9)
        );
        for _ in 0..BATCHES_TO_JUDGE_PACE {
            trials.observe(batch(100), 0.9);
        }
        assert_eq!(trials.start_every_batch(0.9, now + PAUSE / 2), None);
        assert_eq!(trials.start_every_batch(0.9, now + PAUSE), Some(1.0));
    }

    #[test]
    fn a_larger_share_is_kept_by_fewer_waits_not_by_faster_steps() {
        let mut trials = Trials::default();
        let now = Instant::now();
        let waiting = |step_ms, wait_ms| waiting(BATCHES_TO_JUDGE, step_ms, wait_ms);
        let to = trials.start(0.2, &waiting(100, 20), now);
        assert!(to > 0.2);
        // Steps 10% faster by chance, the same waits: not kept.
        assert_eq!(trials.judge(&waiting(90, 18), now), Some(0.2));
        let to = trials.start(0.2, &waiting(100, 20), now + PAUSE);
        assert!(to > 0.2);
        assert_eq!(trials.judge(&waiting(100, 5), now + PAUSE), None);
        assert_eq!(trials.floor(now + PAUSE), to);
    }

    #[test]
    fn every_batch_is_compared_with_mixed_batches_only() {
        let mut trials = Trials::default();
        let now = Instant::now();
        for _ in 0..BATCHES_TO_JUDGE_PACE {
            trials.observe(batch(100), 1.0);
        }
        trials.observe(batch(100), 0.9);
        assert_eq!(trials.start_every_batch(0.9, now), None);
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
        assert_eq!(trials.start_every_batch(0.9, now), None);
        assert_eq!(trials.start_every_batch(0.4, now), None);
    }
}
