//! The work each side of a split decoder has been given and not yet finished, in seconds at
//! the rates it was shared out by. A batch is shared out so that both sides finish it at the
//! same time counting that queued work, not as if each side were idle: when every batch got
//! the idle-side share, the first batches of an epoch (fetched quickly, shared out at once)
//! queued a quarter of a second of work on the CPU side while the GPU finished its parts in
//! less, and the CPU side set the pace (W1 of 64 steps: split at 15-16 GB/s against the GPU
//! alone at 17-22; H100, 2026-11-25).
//!
//! A side works through its queue all the time, but the GPU's parts run side by side and
//! report finishing together, in bursts: counted only as parts finished, the GPU's queue
//! looked a batch or two long just before a burst, and the CPU side took half of the next
//! batch, ten times slower than the GPU would have been (W1 in epochs in a row: split at 11-14
//! GB/s against the GPU alone at 18-25; H200, 2026-11-26). So queued work drains at one second
//! per second, oldest first, and a finished part takes away only what is left of it. Both
//! measurements: docs/benchmarks.md, "Defaults and the measurements behind them".

use std::time::Instant;

/// Queued seconds of work on each side, `[cpu, gpu]`, as of an instant.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub(crate) struct Backlog {
    queued: [f64; 2],
    as_of: Option<Instant>,
}

/// One part's work on a side: where it joined the queue.
#[derive(Clone, Copy, Debug)]
pub(crate) struct QueuedWork {
    /// Seconds of work queued on the side before it.
    pub(crate) ahead: f64,
    /// Its own seconds.
    pub(crate) seconds: f64,
    pub(crate) added: Instant,
}

impl Backlog {
    /// Each side's queued seconds, `[cpu, gpu]`, as of the last [`drain`](Self::drain).
    pub(crate) fn seconds(&self) -> [f64; 2] {
        self.queued
    }

    /// Takes away the work done since the last call: each side, while it has some queued,
    /// works through it at one second per second.
    pub(crate) fn drain(&mut self, now: Instant) {
        if let Some(then) = self.as_of {
            let elapsed = now.saturating_duration_since(then).as_secs_f64();
            for queued in &mut self.queued {
                *queued = (*queued - elapsed).max(0.0);
            }
        }
        self.as_of = Some(self.as_of.map_or(now, |then| then.max(now)));
    }

    /// Queues `seconds` of work on `side` at `now`.
    pub(crate) fn add(&mut self, side: usize, seconds: f64, now: Instant) -> QueuedWork {
        self.drain(now);
        let ahead = self.queued[side];
        self.queued[side] += seconds;
        QueuedWork {
            ahead,
            seconds,
            added: now,
        }
    }

    /// Takes a finished (or abandoned) part's work away at `now`: what the drain has not
    /// taken yet, the work ahead of it going first. Never below zero.
    pub(crate) fn finish(&mut self, side: usize, work: &QueuedWork, now: Instant) {
        self.drain(now);
        let since = now.saturating_duration_since(work.added).as_secs_f64();
        let drained = (since - work.ahead).clamp(0.0, work.seconds);
        self.queued[side] = (self.queued[side] - (work.seconds - drained)).max(0.0);
    }

    /// The bytes of `bytes` the CPU side (at `cpu_rate` bytes/s) takes so that it finishes
    /// them when the GPU side (at `gpu_rate`) finishes the rest, each after its queued work:
    /// `queued_cpu + cpu / cpu_rate = queued_gpu + (bytes - cpu) / gpu_rate`, within
    /// `0..=bytes`. With nothing queued, the balanced share `bytes * cpu_rate / (cpu_rate +
    /// gpu_rate)`.
    pub(crate) fn cpu_bytes(&self, bytes: f64, cpu_rate: f64, gpu_rate: f64) -> f64 {
        // A rate that is not positive (or NaN) leaves that side out.
        match (cpu_rate > 0.0, gpu_rate > 0.0) {
            (false, _) => 0.0,
            (true, false) => bytes,
            (true, true) => {
                let [cpu_queued, gpu_queued] = self.queued;
                let both = cpu_rate * gpu_rate / (cpu_rate + gpu_rate);
                (both * (gpu_queued - cpu_queued + bytes / gpu_rate)).clamp(0.0, bytes)
            }
        }
    }

    /// Seconds from now until both sides have finished their queued work and then `cpu`
    /// bytes on the CPU side and `gpu` bytes on the GPU side, at `(cpu_rate, gpu_rate)`; a
    /// side with no bytes counts its queue alone.
    pub(crate) fn finished_after(
        &self,
        cpu: f64,
        gpu: f64,
        (cpu_rate, gpu_rate): (f64, f64),
    ) -> f64 {
        let side = |queued: f64, bytes: f64, rate: f64| match bytes > 0.0 {
            true => queued + bytes / rate,
            false => queued,
        };
        let [cpu_queued, gpu_queued] = self.queued;
        side(cpu_queued, cpu, cpu_rate).max(side(gpu_queued, gpu, gpu_rate))
    }

    /// A backlog of `[cpu, gpu]` seconds (tests).
    #[cfg(test)]
    pub(crate) fn of(queued: [f64; 2]) -> Self {
        Self {
            queued,
            as_of: None,
        }
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    #[test]
    fn the_cpu_takes_its_balanced_share_when_nothing_is_queued() {
        let idle = Backlog::default();
        assert!((idle.cpu_bytes(100.0, 1.0, 3.0) - 25.0).abs() < 1e-9);
        assert_eq!(idle.cpu_bytes(100.0, 0.0, 3.0), 0.0);
        assert_eq!(idle.cpu_bytes(100.0, 1.0, 0.0), 100.0);
    }

    #[test]
    fn queued_work_moves_bytes_to_the_other_side() {
        // The CPU has 10 s queued at 1 B/s, the GPU nothing at 3 B/s: the GPU finishes 100 B
        // in 33 s; the CPU would finish its balanced 25 B in 35 s, so it takes less.
        let behind = Backlog::of([10.0, 0.0]);
        let cpu = behind.cpu_bytes(100.0, 1.0, 3.0);
        assert!((cpu - 17.5).abs() < 1e-9, "{cpu}");
        assert!((10.0 + cpu / 1.0 - (100.0 - cpu) / 3.0).abs() < 1e-9);
        // Queued past the GPU's whole batch: nothing for the CPU.
        assert_eq!(Backlog::of([40.0, 0.0]).cpu_bytes(100.0, 1.0, 3.0), 0.0);
        // The GPU behind: the CPU takes more, at most everything.
        assert!(Backlog::of([0.0, 10.0]).cpu_bytes(100.0, 1.0, 3.0) > 25.0);
        assert_eq!(Backlog::of([0.0, 1e6]).cpu_bytes(100.0, 1.0, 3.0), 100.0);
    }

    #[test]
    fn queued_work_drains_as_time_passes_and_finished_parts_take_what_is_left() {
        let t0 = Instant::now();
        let at = |ms: u64| t0 + Duration::from_millis(ms);
        let mut backlog = Backlog::default();
        let first = backlog.add(1, 0.1, t0);
        let second = backlog.add(1, 0.1, t0);
        assert_eq!((first.ahead, second.ahead), (0.0, 0.1));
        // 50 ms later: 150 ms left, though no part has finished.
        backlog.drain(at(50));
        assert!((backlog.seconds()[1] - 0.15).abs() < 1e-9);
        // The first part finishes early, at 60 ms: its 40 ms left go at once.
        backlog.finish(1, &first, at(60));
        assert!((backlog.seconds()[1] - 0.1).abs() < 1e-9, "{:?}", backlog);
        // The second finishes late, at 300 ms: the drain took all of it already.
        backlog.finish(1, &second, at(300));
        assert_eq!(backlog.seconds(), [0.0, 0.0]);
        // A side's work does not drain the other's; never below zero.
        let cpu = backlog.add(0, 0.5, at(300));
        backlog.drain(at(400));
        assert!((backlog.seconds()[0] - 0.4).abs() < 1e-9);
        backlog.finish(0, &cpu, at(350));
        assert_eq!(backlog.seconds(), [0.0, 0.0]);
    }
}
