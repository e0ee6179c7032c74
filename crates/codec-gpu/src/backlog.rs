//! The work each side of a split decoder has been given and not yet finished, in seconds at
//! the rates it was shared out by. A batch is shared out so that both sides finish it at the
//! same time counting that queued work, not as if each side were idle: when every batch got
//! the idle-side share, the first batches of an epoch (fetched quickly, shared out at once)
//! queued a quarter of a second of work on the CPU side while the GPU finished its parts in
//! less, and the CPU side set the pace (W1 of 64 steps on the H100 host: split at 15-16 GB/s
//! against the GPU alone at 17-22).

/// Queued seconds of work on each side: `[cpu, gpu]`.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub(crate) struct Backlog(pub(crate) [f64; 2]);

impl Backlog {
    pub(crate) fn add(&mut self, side: usize, seconds: f64) {
        self.0[side] += seconds;
    }

    /// Removes finished (or abandoned) work; never below zero.
    pub(crate) fn remove(&mut self, side: usize, seconds: f64) {
        self.0[side] = (self.0[side] - seconds).max(0.0);
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
                let [cpu_queued, gpu_queued] = self.0;
                let both = cpu_rate * gpu_rate / (cpu_rate + gpu_rate);
                (both * (gpu_queued - cpu_queued + bytes / gpu_rate)).clamp(0.0, bytes)
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::Backlog;

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
        let behind = Backlog([10.0, 0.0]);
        let cpu = behind.cpu_bytes(100.0, 1.0, 3.0);
        assert!((cpu - 17.5).abs() < 1e-9, "{cpu}");
        assert!((10.0 + cpu / 1.0 - (100.0 - cpu) / 3.0).abs() < 1e-9);
        // Queued past the GPU's whole batch: nothing for the CPU.
        assert_eq!(Backlog([40.0, 0.0]).cpu_bytes(100.0, 1.0, 3.0), 0.0);
        // The GPU behind: the CPU takes more, at most everything.
        assert!(Backlog([0.0, 10.0]).cpu_bytes(100.0, 1.0, 3.0) > 25.0);
        assert_eq!(Backlog([0.0, 1e6]).cpu_bytes(100.0, 1.0, 3.0), 100.0);
    }

    #[test]
    fn finished_work_leaves_the_queue_never_below_zero() {
        let mut backlog = Backlog::default();
        backlog.add(0, 2.0);
        backlog.add(1, 1.0);
        backlog.remove(0, 0.5);
        backlog.remove(1, 3.0);
        assert_eq!(backlog, Backlog([1.5, 0.0]));
    }
}
