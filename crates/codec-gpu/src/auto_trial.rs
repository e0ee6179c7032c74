//! Trials of a larger GPU share under auto. The rule of `auto_share.rs` explains a consumer's
//! wait by the CPU side's load; when the consumer waits while the CPU side is not busy enough
//! to explain it, the rule asks for no more, and the wait has another cause. A GPU side with
//! more work queued than the CPU side gives work back to the CPU (`auto_share.rs`); otherwise
//! the cause may be the CPU side's threads slowing what feeds the GPU (reading, checks,
//! staging). So auto tries: it raises the share by the wait, watches the consumer over the
//! batches that carry the new share, and keeps it only if the consumer then waits clearly
//! less; otherwise the share goes back and no trial runs for a while. A kept share holds against the rule's
//! give-back for a while, then must prove itself again.
//!
//! Beside setup B's model (43 fields in fp32, H200, 2026-11-27) the rule alone settled at a
//! tenth of the chunks on the GPU while the consumer waited 44-54% of its time, where GPU
//! decoding alone trained 27% faster (docs/training.md).

use std::time::{Duration, Instant};

use zarrpipe_core::PaceDelta;

/// Batches that carry a share before the consumer's waits at it count.
const BATCHES_TO_JUDGE: u64 = 4;
/// A trial helped if the consumer then waits less than this share of what it waited before.
const HELPED: f64 = 0.8;
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

    /// The share of the consumer's time spent waiting; `None` until enough batches came.
    fn judged(&self) -> Option<f64> {
        let waits = &self.0;
        (waits.delivered >= BATCHES_TO_JUDGE && !waits.steps.is_zero()).then(|| waits.wait_share())
    }
}

/// A trial under way: the share it raised from, the consumer's wait there, the share tried.
#[derive(Clone, Copy, Debug)]
struct Trial {
    from: f64,
    from_wait: f64,
    to: f64,
}

/// Auto's trials of larger GPU shares.
#[derive(Debug, Default)]
pub(crate) struct Trials {
    running: Option<Trial>,
    paused_until: Option<Instant>,
    /// A share a trial showed to help, and until when the give-back stops there.
    held: Option<(f64, Instant)>,
}

impl Trials {
    /// Judges a trial under way by the consumer's `waits` at its share: the share to go back
    /// to if it did not help.
    pub(crate) fn judge(&mut self, waits: &Waits, now: Instant) -> Option<f64> {
        let trial = self.running?;
        let wait = waits.judged()?;
        self.running = None;
        if wait < trial.from_wait * HELPED {
            self.held = Some((trial.to, now + HOLD));
            tracing::debug!(
                trial.from,
                trial.to,
                trial.from_wait,
                wait,
                "auto: a larger GPU share kept"
            );
            return None;
        }
        self.paused_until = Some(now + PAUSE);
        tracing::debug!(
            trial.from,
            trial.to,
            trial.from_wait,
            wait,
            "auto: a larger GPU share did not help"
        );
        Some(trial.from)
    }

    /// The consumer waits `waits` at `share`, which the rule would keep: the share to try.
    pub(crate) fn start(&mut self, share: f64, waits: &Waits, now: Instant) -> f64 {
        let paused = self.paused_until.is_some_and(|until| now < until);
        let Some(wait) = waits.judged() else {
            return share;
        };
        if self.running.is_some() || paused || share >= 1.0 || wait <= NO_WAIT {
            return share;
        }
        let to = 1.0 - (1.0 - share) * (1.0 - wait.max(LEAST_STEP));
        self.running = Some(Trial {
            from: share,
            from_wait: wait,
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
