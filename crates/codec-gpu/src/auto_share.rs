//! How much of each batch [`SplitPolicy::Auto`](crate::SplitPolicy) sends the GPU: the share
//! that lets the CPU side keep up with the consumer, computed from what the last batches
//! delivered cost, and moved there at once.
//!
//! The consumer's step holds its compute `C` and its wait `W`; over the same time the CPU
//! side's threads were busy a fraction `L` of the wall clock decoding its part, `1 - g` of
//! each batch. At
//! share `g'` the CPU spends `(1 - g') / (1 - g)` of that per batch, and keeping up asks for
//! no more than `C` of busy time per step, with headroom:
//!
//! `1 - g' = HEADROOM * (1 - g) * (C / (C + W)) / L`
//!
//! A consumer that waits asks for the GPU's help in one move, sized by its wait; one that
//! does not, with the CPU side idle part of the time, gives the GPU's share back. The same
//! rule moves work back to the CPU when the GPU side is what the consumer waits for (the CPU
//! is then idle). Waits already in the pipe when the share changed are judged against the
//! share their batches were given, so a change is not repeated while it takes effect.
//!
//! A wait the rule does not explain (the CPU side idle part of the time) is met by trials of
//! a larger share, kept only where the consumer then waits less, and of a smaller one, kept
//! where its steps come no slower; and where the CPU side alone, in place, kept up with the
//! consumer, every batch on the CPU is tried the same way (`auto_trial.rs`).

use std::collections::VecDeque;
use std::time::{Duration, Instant};

use zarrpipe_core::PaceDelta;

use crate::auto_trial::{Trials, Waits, SMALLER_MOST_WAIT};
use crate::last_batches::LastBatches;

/// The CPU side is given at most this share of its busy time, so small changes in the
/// consumer's steps do not make it wait.
const HEADROOM: f64 = 0.9;
/// The consumer waiting for less than this share of its time is keeping up: the GPU is not
/// called in for it. Counted batch by batch (any wait of half a percent of its step), a single
/// wait of a few milliseconds sent the next several batches partly to the GPU: beside a
/// consumer at 3.2 GB/s that waited 0.2-0.3% of its time, auto used 4.7-5.5% of the GPU's time
/// in two runs of four, against 0.6% in the others (H200, 2026-11-26: docs/benchmarks.md,
/// "Defaults and the measurements behind them").
const MOST_WAIT_SHARE: f64 = 0.005;
/// The GPU is called in before a wait only where the CPU side alone decodes a batch in more
/// than this many times the consumer's compute per batch. Its first batches decode slower than
/// later ones (125-163 ms against 95-110 beside setup B's model on its advised layout, where
/// the model computes about 112): read off them, a CPU side that keeps up looked short, and
/// the GPU's first parts beside the model then cost the consumer 2 s of waits (H200,
/// 2026-11-29; docs/training-runs.md). A wait, timed on the GPU, still calls the GPU in at once.
const FORESEEN_PAST: f64 = 1.5;
/// Waits and the CPU side's load are averaged over about this many seconds of steps.
const WINDOW_SECONDS: f64 = 2.0;
/// A batch shared out this long ago and still not delivered never will be (its stream was
/// dropped): its share no longer explains a wait.
const STALE: Duration = Duration::from_secs(30);
/// The CPU side's load is read as at least this, so a quiet moment does not divide by zero.
const LEAST_LOAD: f64 = 0.05;

/// What auto reads of the CPU side when it shares a batch out.
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct CpuSide {
    /// Its busy seconds so far: its threads' decoding seconds over their count, so that the
    /// load read from it follows the work the side was given.
    pub(crate) busy: f64,
    /// The seconds it would take for the whole batch at its measured rate, once measured: the
    /// lesser of two reads, by its threads' decoding seconds over their count and by its busy
    /// time. Threads that share their cores (with the consumer, with the GPU side's reading)
    /// decode slower than their seconds say: beside setup B's model on 16 cores the first
    /// read put a batch at about twice what the side took, and the GPU was called in for half
    /// of each batch with the consumer not waiting (H200, 2026-11-29; docs/training-runs.md). The
    /// second reads high where parts are smaller than the pool.
    pub(crate) batch_seconds: Option<f64>,
    /// The seconds it took for a batch decoded alone, in place, once measured: what it would
    /// take with no GPU part.
    pub(crate) alone_in_place_seconds: Option<f64>,
}

/// The consumer's last batches, from which its compute per batch is read: enough to leave out
/// the first step after a model's set-up (seconds where later steps take milliseconds) soon.
type ComputeSteps = LastBatches<4>;

/// Seconds of the consumer's compute (its steps less its waits) per batch over `steps`;
/// `None` before enough batches.
fn compute_per_batch(steps: &ComputeSteps) -> Option<f64> {
    let total = steps.total()?;
    Some(total.steps.saturating_sub(total.wait).as_secs_f64() / total.delivered as f64)
}

/// The GPU's share of each batch under auto, and what it is computed from.
#[derive(Debug)]
pub(crate) struct AutoShare {
    /// The GPU's share of each kind's chunks the next batches get.
    share: f64,
    /// The consumer's waits and steps as last read.
    seen: PaceDelta,
    /// The consumer's share of time waiting, averaged over about `WINDOW_SECONDS`.
    wait_share: f64,
    /// The share of wall-clock time the CPU side was busy, averaged the same way.
    cpu_load: f64,
    /// When the CPU side's busy time was last read, and what it was.
    looked: Option<(Instant, f64)>,
    /// The GPU's share of the decoded bytes of each batch shared out and not yet delivered,
    /// oldest first, with when it was shared out.
    in_the_pipe: VecDeque<(Instant, f64)>,
    /// Batches shared out so far.
    shared: u64,
    /// The first batch shared out at the current share, and the consumer's waits over the
    /// batches delivered from it on.
    since: u64,
    carried: Waits,
    trials: Trials,
    /// A trial's share went back, and the batches given it are still being delivered.
    after_trial: bool,
    compute: ComputeSteps,
    /// The consumer's last batches with no GPU part: its compute where the GPU decodes
    /// nothing beside it, as it would compute with every batch on the CPU.
    compute_alone: ComputeSteps,
}

impl AutoShare {
    pub(crate) fn new() -> Self {
        Self {
            share: 0.0,
            seen: PaceDelta::default(),
            wait_share: 0.0,
            cpu_load: 1.0,
            looked: None,
            in_the_pipe: VecDeque::new(),
            shared: 0,
            since: 0,
            carried: Waits::default(),
            trials: Trials::default(),
            after_trial: false,
            compute: ComputeSteps::default(),
            compute_alone: ComputeSteps::default(),
        }
    }

    /// The GPU's share of each kind's bytes for the next batch.
    pub(crate) fn share(&self) -> f64 {
        self.share
    }

    /// The consumer's averaged wait share, for traces.
    pub(crate) fn wait_share(&self) -> f64 {
        self.wait_share
    }

    /// Scales the share down, when the GPU has used more than its budget of time.
    pub(crate) fn scale_down(&mut self, factor: f64) {
        self.set_share(self.share * factor);
    }

    /// Sets the share for the batches shared out from now on.
    fn set_share(&mut self, share: f64) {
        if (share - self.share).abs() > 1e-9 {
            self.share = share;
            self.since = self.shared;
            self.carried = Waits::default();
        }
    }

    /// Reads what happened since the last look: `pace` (the consumer's counts so far), the
    /// `cpu` side and `queued` (each side's work queued, in seconds: `[cpu, gpu]`) at `now`;
    /// sets the share for the batches shared out next.
    pub(crate) fn update(&mut self, pace: PaceDelta, cpu: CpuSide, queued: [f64; 2], now: Instant) {
        let cpu_busy = cpu.busy;
        let (looked_at, busy_then) = *self.looked.get_or_insert((now, cpu_busy));
        let wall = now.saturating_duration_since(looked_at).as_secs_f64();
        let delta = pace - self.seen;
        if delta.delivered == 0 || wall <= 0.0 {
            return;
        }
        self.seen = pace;
        self.looked = Some((now, cpu_busy));
        let weight = |seconds: f64| 1.0 - (-seconds / WINDOW_SECONDS).exp();
        let lately = delta.wait_share();
        self.wait_share += (lately - self.wait_share) * weight(delta.steps.as_secs_f64());
        let load = ((cpu_busy - busy_then) / wall).clamp(0.0, 1.0);
        self.cpu_load += (load - self.cpu_load) * weight(wall);
        let passed_before = self.passed();
        let given = self.delivered(delta.delivered, now);
        if passed_before >= self.since {
            self.carried.add(delta);
        }
        self.trials.observe(delta, given);
        self.trials.cpu_side_busy(cpu_busy, now);
        self.compute.add(delta, given);
        if given <= 0.0 {
            self.compute_alone.add(delta, given);
        }
        if let Some(back) = self.trials.judge(&self.carried, now) {
            self.set_share(back);
            self.after_trial = true;
            return;
        }
        // After a trial, the batches still in the pipe carry the share tried: every chunk on
        // the GPU says nothing of the CPU side, so the rule waits for the share gone back to.
        if self.after_trial && passed_before < self.since {
            return;
        }
        self.after_trial = false;
        // A single short wait is noise: the consumer keeps up.
        let waiting = lately > MOST_WAIT_SHARE && self.wait_share > MOST_WAIT_SHARE;
        // Keeping up over the window, not only in the last batch: beside setup B's model
        // (8 samples of 43 fields a batch) one batch in three or four came without a wait
        // while the consumer waited 34-45% of its time, and giving back on each of those held
        // the share down (H100, 2026-11-27; docs/training-runs.md).
        let keeping_up = self.wait_share <= MOST_WAIT_SHARE;
        let compute = 1.0 - if waiting { lately } else { 0.0 };
        let cpu_part = HEADROOM * (1.0 - given) * compute / self.cpu_load.max(LEAST_LOAD);
        let wanted = (1.0 - cpu_part).clamp(0.0, 1.0);
        // Batches with every chunk on the GPU say nothing of what the CPU side would take.
        let cpu_measured = given < 1.0;
        let compute_seconds = compute_per_batch(&self.compute);
        // Whether the CPU side alone, in place, decodes a batch within `times` the consumer's
        // compute now.
        let cpu_alone_within = |times: f64| match (compute_seconds, cpu.alone_in_place_seconds) {
            (Some(compute), Some(alone)) => alone <= compute * times,
            _ => false,
        };
        // Whether the CPU side alone would keep up: against the consumer's compute where the
        // GPU decoded nothing beside it, where that was read (no more than its compute now: the
        // first batches hold the model's set-up). The compute read beside GPU parts is the
        // model's slowed by them: beside setup A's bf16 model it read 89-94 ms a batch with
        // every batch on the GPU, where the model computes 75 alone, and every batch on the
        // CPU (90-108 ms a batch) was tried from there in nine runs of sixteen, which trained
        // at 127-169 samples/s against 173-180 without (H200, 2026-11-29; docs/training-runs.md).
        let compute_alone = compute_per_batch(&self.compute_alone)
            .filter(|&alone| compute_seconds.is_some_and(|compute| alone <= compute));
        let cpu_alone_keeps_up = match (compute_alone, cpu.alone_in_place_seconds) {
            // Short enough that the consumer would wait less than a smaller share is kept at:
            // it may still train faster than beside GPU parts that slow its model.
            (Some(compute_alone), Some(alone)) => {
                alone * (1.0 - SMALLER_MOST_WAIT) <= compute_alone
            }
            _ => cpu_alone_within(1.0),
        };
        // The share the CPU side's measured rate leaves the GPU, the consumer computing as it
        // did over its last batches: called in before the consumer has eaten the batches in
        // the pipe and waits, where the CPU side alone falls clearly short. Waited for, beside
        // setup B's model the first 23 batches went to the CPU alone (the pipe held 14 when
        // the model started), where the CPU decodes a batch in 345 ms and the model takes one
        // every 184 (H100, 2026-11-27; docs/training-runs.md).
        let foreseen = match (compute_seconds, cpu.batch_seconds) {
            _ if cpu_alone_within(FORESEEN_PAST) => 0.0,
            (Some(compute), Some(cpu_batch)) if cpu_batch > 0.0 => {
                (1.0 - HEADROOM * compute / cpu_batch).clamp(0.0, 1.0)
            }
            _ => 0.0,
        };
        let floor = self.trials.floor(now).max(foreseen);
        // The least share the CPU side's load or rate asks of the GPU: what trials of a
        // smaller share go down to.
        let room = wanted.max(foreseen);
        // A smaller share under trial, or kept, holds against call-ins (`auto_trial.rs`).
        let ceiling = self.trials.ceiling(now, self.wait_share);
        // The consumer waits on the CPU side only where it has at least as much queued as the
        // GPU side. Beside setup A's bf16 model the GPU side's first parts (its set-up beside
        // the model's kernels) took 210-380 ms each, and the waits they caused called the GPU
        // in for 93% of each batch, where 30% trains fastest (H200, 2026-11-29;
        // docs/training-runs.md).
        let cpu_behind = queued[0] >= queued[1];
        // Halfway back to the share that keeps the CPU side busy, not below a share under
        // trial or kept or the one the CPU side's rate calls for, and never forward.
        let halfway_back = self.share.min(((self.share + wanted) / 2.0).max(floor));
        let (share, why) =
            if waiting && cpu_behind && wanted > self.share && cpu_measured && self.share < ceiling
            {
                // Called in: at once, as much as the wait asks for.
                self.trials.cancel();
                (room.min(ceiling), "called in by a wait")
            } else if foreseen > self.share && self.share < ceiling {
                (foreseen.min(ceiling), "foreseen from the CPU side's rate")
            } else if let Some(alone) =
                (self.trials).start_cpu_alone(self.share, cpu_alone_keeps_up, &self.carried, now)
            {
                // The CPU side alone would keep up: try it, kept where steps come no slower.
                (alone, "every batch on the CPU tried")
            } else if let Some(every) = self.trials.start_every_batch(self.share, room, now) {
                // The GPU decodes most of each batch: try it with all of them (`auto_trial.rs`).
                (every, "every batch on the GPU tried")
            } else if !keeping_up && !cpu_behind {
                // The batches wait for the GPU side (or did over the window): work goes back to
                // the CPU, halfway, and no larger share is tried. Beside setup B's model the GPU,
                // shared with the model, fell up to a second behind at 94% of the chunks while
                // the CPU side had 30-60 ms queued (H100, 2026-11-27; docs/training-runs.md).
                (halfway_back, "back to a CPU side the GPU side waits on")
            } else if keeping_up {
                // Give back, halfway each batch, so that a moment's quiet does not send
                // everything back to the CPU.
                (halfway_back, "given back, the consumer keeping up")
            } else {
                // Still waiting, with the batches in the pipe carrying the share or neither side
                // behind: keep the share, or try a larger one, or a smaller one where the CPU side
                // has room for it.
                let tried = self.trials.start(self.share, room, &self.carried, now);
                (tried, "kept, or another tried, the consumer waiting")
            };
        tracing::debug!(
            share,
            why,
            given,
            wanted,
            foreseen,
            floor,
            ceiling,
            cpu_load = self.cpu_load,
            cpu_alone_keeps_up,
            compute_ms = compute_seconds.map(|seconds| 1e3 * seconds),
            compute_alone_ms = compute_alone.map(|seconds| 1e3 * seconds),
            "auto: the share set"
        );
        self.set_share(share);
    }

    /// Batches shared out and since delivered (or dropped as stale).
    fn passed(&self) -> u64 {
        self.shared - self.in_the_pipe.len() as u64
    }

    /// A batch was shared out at `now` with `gpu_fraction` of its decoded bytes on the GPU.
    pub(crate) fn shared_out(&mut self, gpu_fraction: f64, now: Instant) {
        self.in_the_pipe.push_back((now, gpu_fraction));
        self.shared += 1;
    }

    /// Takes the `count` oldest batches in the pipe as delivered; returns their mean GPU
    /// fraction (the current share when none is known).
    fn delivered(&mut self, count: u64, now: Instant) -> f64 {
        while let Some(&(at, _)) = self.in_the_pipe.front() {
            match now.saturating_duration_since(at) > STALE {
                true => self.in_the_pipe.pop_front(),
                false => break,
            };
        }
        let taken = (count as usize).min(self.in_the_pipe.len());
        if taken == 0 {
            return self.share;
        }
        let sum: f64 = self
            .in_the_pipe
            .drain(..taken)
            .map(|(_, share)| share)
            .sum();
        sum / taken as f64
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A consumer computing `compute` seconds a batch, fed by a CPU side that decodes a whole
    /// batch in `cpu_batch` seconds and a GPU that is never the bottleneck, `depth` batches
    /// shared out ahead of the one delivered. Runs `batches` batches from `auto`'s state and
    /// returns the GPU share of each batch shared out and the consumer's waits.
    struct Simulation {
        auto: AutoShare,
        clock: Instant,
        pace: PaceDelta,
        cpu_busy: f64,
        ahead: VecDeque<f64>,
        /// Seconds the GPU side takes for a whole batch, where it is modelled (its queue then
        /// tells auto which side is behind).
        gpu_batch: Option<f64>,
        /// Whether auto is told the CPU side's measured rate.
        cpu_measured: bool,
        /// Batches in the pipe decoded already (while the consumer set up): the next this
        /// many deliveries cost the CPU nothing.
        ready: usize,
        /// What auto reads of the CPU side's time for a batch alone, where it reads other than
        /// the side takes.
        alone_read: Option<f64>,
    }

    impl Simulation {
        fn new(depth: usize) -> Self {
            let mut auto = AutoShare::new();
            let clock = Instant::now();
            auto.update(PaceDelta::default(), CpuSide::default(), [0.0; 2], clock);
            for _ in 0..depth {
                auto.shared_out(0.0, clock);
            }
            Self {
                auto,
                clock,
                pace: PaceDelta::default(),
                cpu_busy: 0.0,
                ahead: std::iter::repeat_n(0.0, depth).collect(),
                gpu_batch: None,
                cpu_measured: true,
                ready: 0,
                alone_read: None,
            }
        }

        /// One batch delivered and one shared out; returns (the share given, the wait).
        fn step(&mut self, compute: f64, cpu_batch: f64) -> (f64, f64) {
            self.step_beside(compute, cpu_batch, |_| 0.0)
        }

        /// `step`, with something other than the CPU side taking `elsewhere(share)` seconds
        /// of each batch delivered with that GPU share (what feeds the GPU, slowed by the
        /// CPU side's threads; a GPU side that is not fast enough).
        fn step_beside(
            &mut self,
            compute: f64,
            cpu_batch: f64,
            elsewhere: impl Fn(f64) -> f64,
        ) -> (f64, f64) {
            self.step_with(|_| compute, cpu_batch, elsewhere)
        }

        /// `step_beside`, with the consumer computing `compute(share)` seconds beside a
        /// batch delivered with that GPU share (a model sharing the GPU with the decoding).
        fn step_with(
            &mut self,
            compute: impl Fn(f64) -> f64,
            cpu_batch: f64,
            elsewhere: impl Fn(f64) -> f64,
        ) -> (f64, f64) {
            let delivered = self.ahead.pop_front().expect("a batch in the pipe");
            let compute = compute(delivered);
            let cpu = match self.ready {
                0 => (1.0 - delivered) * cpu_batch,
                _ => {
                    self.ready -= 1;
                    0.0
                }
            };
            let period = compute.max(cpu).max(elsewhere(delivered));
            let wait = period - compute;
            self.clock += Duration::from_secs_f64(period);
            self.cpu_busy += cpu;
            self.pace.delivered += 1;
            self.pace.wait += Duration::from_secs_f64(wait);
            self.pace.steps += Duration::from_secs_f64(period);
            let queued = match self.gpu_batch {
                Some(gpu_batch) => self.ahead.iter().fold([0.0; 2], |[cpu, gpu], &share| {
                    [cpu + (1.0 - share) * cpu_batch, gpu + share * gpu_batch]
                }),
                None => [0.0; 2],
            };
            let cpu = CpuSide {
                busy: self.cpu_busy,
                batch_seconds: self.cpu_measured.then_some(cpu_batch),
                alone_in_place_seconds: self
                    .cpu_measured
                    .then_some(self.alone_read.unwrap_or(cpu_batch)),
            };
            self.auto.update(self.pace, cpu, queued, self.clock);
            let share = self.auto.share();
            self.auto.shared_out(share, self.clock);
            self.ahead.push_back(share);
            (share, wait / period)
        }
    }

    #[test]
    fn a_waiting_consumer_calls_the_gpu_in_at_once_and_it_settles() {
        // The CPU decodes a batch in 150 ms, the consumer computes 100: the GPU must take a
        // third, and with headroom about 40%.
        let mut simulation = Simulation::new(6);
        let steps: Vec<_> = (0..60).map(|_| simulation.step(0.1, 0.15)).collect();
        let settled = steps[59].0;
        assert!((0.38..0.45).contains(&settled), "{settled}");
        // Settled within the warm-up: the pipe's depth and a few batches more.
        let first_settled = steps
            .iter()
            .position(|&(share, _)| (share - settled).abs() < 0.02);
        assert!(first_settled.unwrap() <= 10, "{steps:?}");
        // Never far above where it settles while the first waits drain.
        assert!(
            steps.iter().all(|&(share, _)| share < settled + 0.1),
            "{steps:?}"
        );
        assert!(
            steps[20..].iter().all(|&(_, wait)| wait < 0.005),
            "{steps:?}"
        );
    }

    #[test]
    fn a_gpu_side_that_falls_behind_gives_work_back_to_the_cpu() {
        // The CPU side decodes a whole batch in 500 ms and the GPU side (shared with the
        // consumer's model) in 200, the consumer computes 100: both sides finish together at
        // a share of 5/7 (a batch every 143 ms); the GPU alone would take 200 ms a batch.
        let mut simulation = Simulation::new(6);
        simulation.gpu_batch = Some(0.2);
        let steps: Vec<_> = (0..80)
            .map(|_| simulation.step_beside(0.1, 0.5, |share| 0.2 * share))
            .collect();
        let periods: Vec<f64> = steps.iter().map(|&(_, wait)| 0.1 / (1.0 - wait)).collect();
        let late = periods[40..].iter().sum::<f64>() / 40.0;
        assert!(late < 0.17, "a batch every {late} s: {steps:?}");
        assert!(
            steps[40..].iter().all(|&(share, _)| share < 0.9),
            "{steps:?}"
        );
    }

    #[test]
    fn waits_on_the_gpu_sides_first_parts_do_not_call_the_gpu_in() {
        // The CPU side decodes a batch in 120 ms for a consumer computing 100: about a third
        // of each batch on the GPU keeps up. The GPU side's first four parts pay its set-up,
        // 400 ms each, and its rate, measured over its last parts, reads slow for four more.
        let mut simulation = Simulation::new(6);
        let gpu_parts = std::cell::Cell::new(0);
        let mut shares = Vec::new();
        for _ in 0..120 {
            let setting_up = gpu_parts.get() < 4;
            simulation.gpu_batch = Some(if gpu_parts.get() < 8 { 1.0 } else { 0.1 });
            let elsewhere = |share: f64| match share > 0.0 {
                true => {
                    gpu_parts.set(gpu_parts.get() + 1);
                    if setting_up {
                        0.4
                    } else {
                        0.1 * share
                    }
                }
                false => 0.0,
            };
            shares.push(simulation.step_beside(0.1, 0.12, elsewhere).0);
        }
        assert!(
            shares.iter().all(|&share| share < 0.6),
            "called in for the GPU side's set-up: {shares:?}"
        );
        assert!(shares[119] > 0.1, "{shares:?}");
    }

    #[test]
    fn every_batch_goes_to_the_gpu_where_mixed_batches_slow_the_consumer() {
        // The consumer's model shares the GPU: it steps in 100 ms beside batches decoded on
        // the GPU alone and in 115 ms beside mixed ones; the CPU side decodes a whole batch in
        // 500 ms, so the rule alone settles on a mix with no wait.
        let mut simulation = Simulation::new(6);
        let compute = |share: f64| if share >= 1.0 { 0.1 } else { 0.115 };
        let steps: Vec<_> = (0..120)
            .map(|_| simulation.step_with(compute, 0.5, |_| 0.0))
            .collect();
        let whole = steps[60..]
            .iter()
            .filter(|&&(share, _)| share >= 1.0)
            .count();
        assert!(whole >= 55, "{steps:?}");
    }

    #[test]
    fn the_gpu_is_called_in_before_the_consumer_has_eaten_the_batches_ready_for_it() {
        // The pipe holds 14 batches decoded while the model set up (its first step: 21 s);
        // then the model takes a batch every 184 ms where the CPU decodes one in 345.
        let called_in_after = |cpu_measured: bool| {
            let mut simulation = Simulation::new(14);
            simulation.cpu_measured = cpu_measured;
            simulation.ready = 14;
            simulation.step(21.0, 0.345);
            let shares: Vec<f64> = (0..40).map(|_| simulation.step(0.184, 0.345).0).collect();
            shares.iter().position(|&share| share > 0.4)
        };
        let foreseen = called_in_after(true).expect("called in");
        assert!(foreseen <= 4, "{foreseen}");
        // Waits alone call it in only once the ready batches are eaten.
        assert!(called_in_after(false).is_none_or(|waited| waited >= 13));
    }

    #[test]
    fn a_consumer_that_keeps_up_leaves_the_gpu_out() {
        let mut simulation = Simulation::new(6);
        for _ in 0..50 {
            assert_eq!(simulation.step(0.2, 0.15).0, 0.0);
        }
    }

    #[test]
    fn the_gpu_gives_back_when_the_consumer_slows_down() {
        let mut simulation = Simulation::new(6);
        for _ in 0..40 {
            simulation.step(0.1, 0.15);
        }
        // The consumer now computes 300 ms a batch: the CPU alone suffices.
        let later: Vec<_> = (0..40).map(|_| simulation.step(0.3, 0.15).0).collect();
        assert!(later[39] < 0.01, "{later:?}");
        // And when it speeds up again, the GPU comes back.
        let again: Vec<_> = (0..40).map(|_| simulation.step(0.05, 0.15).0).collect();
        assert!((0.65..0.75).contains(&again[39]), "{again:?}");
    }

    #[test]
    fn a_wait_the_cpu_sides_load_does_not_explain_is_met_by_a_larger_share_that_stays() {
        // The consumer computes 100 ms a batch and the CPU side decodes a whole batch in 100,
        // but what feeds the GPU is slowed by the CPU side's decoding: 300 ms a batch with
        // every chunk on the CPU, less as the GPU takes more.
        let mut simulation = Simulation::new(6);
        let steps: Vec<_> = (0..80)
            .map(|_| simulation.step_beside(0.1, 0.1, |share| 0.3 * (1.0 - share)))
            .collect();
        assert!(steps[79].0 >= 0.6, "{steps:?}");
        assert!(
            steps[50..].iter().all(|&(_, wait)| wait < 0.01),
            "{steps:?}"
        );
    }

    #[test]
    fn a_larger_share_that_does_not_help_goes_back() {
        // The consumer waits on something the GPU's share does not change.
        let mut simulation = Simulation::new(6);
        let steps: Vec<_> = (0..60)
            .map(|_| simulation.step_beside(0.1, 0.1, |_| 0.3))
            .collect();
        // The rule raises the share while the CPU side's load it reads lags behind; then a
        // trial raises it further, does not help, and the share goes back to where it was,
        // with no other trial during the pause.
        let tried = steps.iter().map(|&(share, _)| share).fold(0.0, f64::max);
        let settled = steps[59].0;
        assert!(tried > settled + 0.1, "no trial: {steps:?}");
        assert!(
            steps[30..].iter().all(|&(share, _)| share == settled),
            "{steps:?}"
        );
    }

    #[test]
    fn one_batch_without_a_wait_among_waits_gives_nothing_back() {
        // The CPU side alone would not keep up (150 ms a batch for 100 of compute), so the
        // share is not tried at nought.
        let mut simulation = Simulation::new(6);
        for _ in 0..40 {
            simulation.step_beside(0.1, 0.15, |_| 0.3);
        }
        let before = simulation.auto.share();
        assert!(before > 0.0);
        // A batch the consumer did not wait for, its step longer than the pipe's.
        let (after, wait) = simulation.step_beside(0.4, 0.15, |_| 0.3);
        assert_eq!(wait, 0.0);
        assert_eq!(after, before);
    }

    #[test]
    fn batches_never_delivered_stop_counting() {
        let mut auto = AutoShare::new();
        let start = Instant::now();
        auto.shared_out(0.9, start);
        let later = start + STALE + Duration::from_secs(1);
        auto.shared_out(0.1, later);
        assert!((auto.delivered(1, later) - 0.1).abs() < 1e-12);
        assert_eq!(auto.delivered(1, later), 0.0);
    }

    #[test]
    fn a_share_called_in_for_a_wait_goes_back_where_it_slows_the_consumer_more() {
        // The consumer's model shares the GPU: any GPU share slows its steps, up to a quarter
        // from a third of each batch on (an nvCOMP call lasts about as long as its largest
        // chunk). The CPU side decodes a batch in 170 ms while the model sets up, then in
        // 104: alone it leaves the consumer waiting 4% of its time, which costs it less than
        // the GPU's share would. Something else leaves a wait of 0.8% at every share.
        let mut simulation = Simulation::new(6);
        let compute = |share: f64| 0.1 * (1.0 + 0.25 * (share / 0.3).min(1.0));
        let mut periods = Vec::new();
        for n in 0..900 {
            let cpu_batch = if n < 30 { 0.17 } else { 0.104 };
            let (share, wait) =
                simulation.step_with(compute, cpu_batch, |share| compute(share) * 1.008);
            periods.push((share, compute(share) / (1.0 - wait)));
        }
        let called_in = periods[..60]
            .iter()
            .map(|&(share, _)| share)
            .fold(0.0, f64::max);
        assert!(called_in > 0.3, "{periods:?}");
        // The rule alone keeps half of each batch on the GPU (126 ms a step); the CPU side
        // alone, in place, decodes a batch within the consumer's compute, so it is tried and
        // kept, and holds until the rule may call the GPU in again (`auto_trial.rs`).
        let late = &periods[250..700];
        let mean = late.iter().map(|&(_, period)| period).sum::<f64>() / late.len() as f64;
        assert!(mean < 1.01 * 0.104, "a batch every {mean} s: {periods:?}");
        assert!(late.iter().all(|&(share, _)| share < 0.05), "{periods:?}");
    }

    #[test]
    fn a_cpu_side_nearly_keeping_up_alone_is_not_called_in_before_a_wait() {
        // The CPU side alone decodes a batch in 110 ms for a consumer computing 100, and the
        // pipe holds batches decoded while the consumer set up. Any GPU part slows the
        // consumer's model by 30%: the CPU alone is the fastest.
        let mut simulation = Simulation::new(6);
        simulation.ready = 6;
        let compute = |share: f64| if share > 0.0 { 0.13 } else { 0.1 };
        let mut steps = Vec::new();
        for _ in 0..600 {
            let (share, wait) = simulation.step_with(compute, 0.11, |_| 0.0);
            steps.push((share, wait, compute(share) / (1.0 - wait)));
        }
        let first_wait = steps.iter().position(|&(_, wait, _)| wait > 0.0).unwrap();
        assert!(
            steps[..first_wait]
                .iter()
                .all(|&(share, _, _)| share == 0.0),
            "{steps:?}"
        );
        let late = &steps[100..];
        let mean = late.iter().map(|&(_, _, period)| period).sum::<f64>() / late.len() as f64;
        assert!(mean < 1.02 * 0.11, "a batch every {mean} s: {steps:?}");
    }

    #[test]
    fn where_the_cpu_side_cannot_keep_up_the_share_it_needs_is_not_tried_smaller() {
        // The CPU side decodes a batch in 200 ms, the consumer computes 100 and steps 10%
        // slower beside any GPU share: the GPU must take over half of each batch.
        let mut simulation = Simulation::new(6);
        let compute = |share: f64| if share > 0.0 { 0.11 } else { 0.1 };
        let steps: Vec<_> = (0..900)
            .map(|_| simulation.step_with(compute, 0.2, |_| 0.0))
            .collect();
        assert!(
            steps[100..].iter().all(|&(share, _)| share > 0.45),
            "{steps:?}"
        );
        let late_waits = steps[100..].iter().map(|&(_, wait)| wait).sum::<f64>() / 800.0;
        assert!(late_waits < 0.01, "{late_waits}");
    }

    #[test]
    fn the_cpu_alone_is_not_tried_where_it_falls_short_of_the_models_own_compute() {
        // Setup A's bf16 model: 75 ms of compute a batch with no GPU part beside it, up to a
        // quarter more beside GPU parts; the CPU side decodes a batch in 100 ms and reads as
        // 85. Against the compute beside GPU parts it would read as keeping up.
        let mut simulation = Simulation::new(6);
        simulation.ready = 6;
        simulation.alone_read = Some(0.085);
        let compute = |share: f64| 0.075 * (1.0 + 0.25 * (share / 0.3).min(1.0));
        let steps: Vec<_> = (0..900)
            .map(|_| simulation.step_with(compute, 0.1, |_| 0.0))
            .collect();
        let called_in = steps.iter().position(|&(share, _)| share > 0.0).unwrap();
        assert!(
            steps[called_in..].iter().all(|&(share, _)| share > 0.0),
            "{steps:?}"
        );
    }

    #[test]
    fn a_cpu_side_that_keeps_up_after_a_slow_warm_up_takes_every_batch_back() {
        // Setup A's bf16 model on a host whose cores feed it alone (75 ms of compute a batch,
        // up to a quarter more beside GPU parts): the CPU side decodes the first 20 batches in
        // 90-120 ms, as the model sets up, and then in 68-74 ms.
        for (warm_up, later) in [(0.09, 0.068), (0.10, 0.071), (0.10, 0.074), (0.12, 0.072)] {
            let mut simulation = Simulation::new(6);
            let compute = |share: f64| 0.075 * (1.0 + 0.25 * (share / 0.3).min(1.0));
            let shares: Vec<_> = (0..400)
                .map(|n| {
                    let cpu_batch = if n < 20 { warm_up } else { later };
                    simulation.step_with(compute, cpu_batch, |_| 0.0).0
                })
                .collect();
            assert!(shares[..20].iter().any(|&share| share > 0.0), "{shares:?}");
            assert!(shares[20..].iter().all(|&share| share == 0.0), "{shares:?}");
        }
    }
}
