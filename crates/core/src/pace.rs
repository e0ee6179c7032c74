//! How the consumer keeps pace: the end of a chain records, for each batch it hands over, how
//! long the consumer waited for it and how long its step took; a stage that can spend more or
//! less (a decoder that may use the GPU) reads it to decide. Consumers that step together
//! (the ranks of one data-parallel job) may share their waits ([`PeerWaits`]).
//!
//! A consumer whose work runs on a GPU, queued ahead of the device, waits for a batch on the
//! GPU's timeline, not on its thread's: its thread also waits in the hand-over while its own
//! kernels run (the pipeline's buffers come back only once they have read them). Where the
//! hand-over measures that wait ([`Pace::record_device_wait`]), it replaces the thread's; and
//! where it measures the step there too ([`Pace::record_device_step`]), that replaces the
//! thread's step. A loop that runs ahead of its GPU between syncs hands batches over in bursts
//! on its thread's clock (steps of 47-61 ms where the model computes 82 a batch, setup A bf16,
//! H200, 2026-11-30), while its GPU steps at its own pace.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::OnceLock;
use std::time::Duration;

/// Waits shorter than this are the hand-over itself, not the consumer waiting on the loader.
const NOTICEABLE: Duration = Duration::from_micros(200);

/// Batches handed over, and the time the consumer spent waiting for them and in all.
#[derive(Debug, Default)]
pub struct Pace {
    delivered: AtomicU64,
    wait_nanos: AtomicU64,
    step_nanos: AtomicU64,
    /// Whether a wait was measured on the GPU's timeline: from then on the consumer's waits
    /// are those (counted on in `wait_nanos`), not its thread's.
    on_device: AtomicBool,
    /// Whether a step was measured on the GPU's timeline: from then on the consumer's steps
    /// are those (counted on in `step_nanos`).
    steps_on_device: AtomicBool,
    peers: OnceLock<Box<dyn PeerWaits>>,
}

/// What happened between two looks at a [`Pace`].
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct PaceDelta {
    /// Batches handed over.
    pub delivered: u64,
    /// Time the consumer waited for them (waits under 0.2 ms, the hand-over, left out), or
    /// its job's where it shares its waits ([`Pace::share_waits`]).
    pub wait: Duration,
    /// Their steps: the consumer's work and its waits.
    pub steps: Duration,
}

/// The waits of processes whose consumers step together with this one: the ranks of a
/// data-parallel job, each with a pipeline of its own. A rank that waits for its batch holds
/// every rank up at the next all-reduce, where the others count the time as their consumer's
/// work: shared, each rank's pace shows what the job waits for.
pub trait PeerWaits: Send + Sync + std::fmt::Debug {
    /// Adds a wait of this process's consumer.
    fn add(&self, wait: Duration);
    /// What the job waited since this process started sharing: over each span between two
    /// calls, the longest any of its processes (this one included) waited, added up. Ranks in
    /// step wait together; the slowest one's wait is the job's.
    fn waited(&self) -> Duration;
}

impl Pace {
    /// Records a batch handed over after the consumer waited `waited` for it, `step` after the
    /// batch before it was handed over (the consumer's work and this wait).
    pub fn record(&self, waited: Duration, step: Duration) {
        self.delivered.fetch_add(1, Ordering::Relaxed);
        if waited >= NOTICEABLE && !self.on_device.load(Ordering::Relaxed) {
            self.add_wait(waited);
        }
        if !self.steps_on_device.load(Ordering::Relaxed) {
            self.step_nanos.fetch_add(nanos(step), Ordering::Relaxed);
        }
    }

    /// Records a step of the consumer's GPU: from one hand-over to the next on its stream (its
    /// kernels for the batch and its wait for the next). Once one is recorded, the consumer's
    /// steps are these, not its thread's; like the device's waits, each is recorded once, a
    /// batch or two after its hand-over.
    pub fn record_device_step(&self, step: Duration) {
        self.steps_on_device.store(true, Ordering::Relaxed);
        self.step_nanos.fetch_add(nanos(step), Ordering::Relaxed);
    }

    /// Records a wait of the consumer's GPU for a batch: from the moment its stream had run
    /// all it was given before the hand-over to the moment the batch was complete there
    /// (nought where the batch came first). Once one is recorded, the consumer's waits are
    /// these, not its thread's; each is recorded once, in the order they resolve, which may
    /// come a batch or two after the hand-over.
    pub fn record_device_wait(&self, waited: Duration) {
        self.on_device.store(true, Ordering::Relaxed);
        if waited >= NOTICEABLE {
            self.add_wait(waited);
        }
    }

    /// Whether the consumer's waits are measured on the GPU's timeline
    /// ([`record_device_wait`](Self::record_device_wait)).
    pub fn waits_on_device(&self) -> bool {
        self.on_device.load(Ordering::Relaxed)
    }

    fn add_wait(&self, waited: Duration) {
        self.wait_nanos.fetch_add(nanos(waited), Ordering::Relaxed);
        if let Some(peers) = self.peers.get() {
            peers.add(waited);
        }
    }

    /// Shares this consumer's waits with `peers`, and counts the job's waits
    /// ([`PeerWaits::waited`]) as its own from now on, so that a wait of any of them shows in
    /// [`counts`](Self::counts). Returns false, leaving the pace as it was, when it shares
    /// with peers already.
    pub fn share_waits(&self, peers: Box<dyn PeerWaits>) -> bool {
        self.peers.set(peers).is_ok()
    }

    /// Whether this pace counts the waits of peers ([`share_waits`](Self::share_waits)).
    pub fn shares_waits(&self) -> bool {
        self.peers.get().is_some()
    }

    /// Records the first batch a consumer is handed: delivered, but its wait is the chain
    /// filling up, not the consumer's pace, and no step came before it.
    pub fn record_first(&self) {
        self.delivered.fetch_add(1, Ordering::Relaxed);
    }

    /// What happened so far; where the consumer shares its waits
    /// ([`share_waits`](Self::share_waits)), the waits are its job's.
    pub fn counts(&self) -> PaceDelta {
        let wait = match self.peers.get() {
            Some(peers) => peers.waited(),
            None => Duration::from_nanos(self.wait_nanos.load(Ordering::Relaxed)),
        };
        PaceDelta {
            delivered: self.delivered.load(Ordering::Relaxed),
            wait,
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

    #[test]
    fn waits_on_the_gpus_timeline_replace_the_threads() {
        let ms = Duration::from_millis;
        let table = Table::default();
        let pace = Pace::default();
        pace.share_waits(Box::new(table.clone()));
        pace.record(ms(30), ms(100));
        assert!(!pace.waits_on_device());
        // The consumer's thread waits in the hand-over while its own kernels run: once its
        // GPU's waits are measured, those count, on from the thread's so far.
        pace.record_device_wait(ms(2));
        pace.record(ms(50), ms(100));
        pace.record_device_wait(Duration::ZERO);
        pace.record_device_wait(Duration::from_micros(100));
        assert!(pace.waits_on_device());
        assert_eq!(table.added.load(Ordering::Relaxed), 32_000_000);
        let alone = Pace::default();
        alone.record(ms(30), ms(100));
        alone.record_device_wait(ms(2));
        alone.record(ms(50), ms(100));
        let counts = alone.counts();
        assert_eq!(
            (counts.delivered, counts.wait, counts.steps),
            (2, ms(32), ms(200))
        );
    }

    #[test]
    fn steps_on_the_gpus_timeline_replace_the_threads() {
        let ms = Duration::from_millis;
        let pace = Pace::default();
        pace.record(Duration::ZERO, ms(100));
        // A loop running ahead of its GPU: its thread's steps come in bursts, its GPU's at
        // the model's pace; once the GPU's are measured, they count, on from the thread's.
        pace.record_device_step(ms(80));
        pace.record(Duration::ZERO, ms(10));
        pace.record(Duration::ZERO, ms(150));
        pace.record_device_step(ms(80));
        let counts = pace.counts();
        assert_eq!((counts.delivered, counts.steps), (3, ms(260)));
    }

    /// A job's table as a rank sees it: what this rank added, and what the job waited.
    #[derive(Debug, Default, Clone)]
    struct Table {
        added: std::sync::Arc<AtomicU64>,
        job: std::sync::Arc<AtomicU64>,
    }

    impl PeerWaits for Table {
        fn add(&self, wait: Duration) {
            self.added.fetch_add(nanos(wait), Ordering::Relaxed);
        }
        fn waited(&self) -> Duration {
            Duration::from_nanos(self.job.load(Ordering::Relaxed))
        }
    }

    #[test]
    fn a_pace_that_shares_its_waits_counts_its_jobs() {
        let ms = Duration::from_millis;
        let table = Table::default();
        let pace = Pace::default();
        assert!(!pace.shares_waits());
        assert!(pace.share_waits(Box::new(table.clone())));
        assert!(pace.shares_waits());
        pace.record(ms(40), ms(140));
        pace.record(Duration::from_micros(50), ms(100)); // the hand-over: not shared
        assert_eq!(table.added.load(Ordering::Relaxed), 40_000_000);
        // Another rank waited longer: the job's wait is the pace's.
        table.job.store(90_000_000, Ordering::Relaxed);
        let counts = pace.counts();
        assert_eq!(
            (counts.delivered, counts.wait, counts.steps),
            (2, ms(90), ms(240))
        );
        // Sharing is set once.
        assert!(!pace.share_waits(Box::new(Table::default())));
    }
}
