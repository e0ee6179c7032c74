//! What decoding a chunk took: on the wall clock, and on the CPU of the thread that ran it.
//! A decode thread waiting for a core (they run niced beside a training loop and the GPU
//! side's feeding) counts the wait on the wall clock only, so the CPU time is what the
//! decoding costs where the thread has its core.

use std::time::{Duration, Instant};

/// Started before a decoding, read after it.
pub(crate) struct DecodeClock {
    wall: Instant,
    cpu: Option<Duration>,
}

impl DecodeClock {
    pub(crate) fn start() -> Self {
        Self {
            wall: Instant::now(),
            cpu: thread_cpu_time(),
        }
    }

    /// The wall-clock and CPU time since the start, at least a nanosecond each (a decoding
    /// counts as done); the CPU time is the wall-clock time where the thread's clock cannot be
    /// read, and never more than it (the clocks tick apart).
    pub(crate) fn read(&self) -> (Duration, Duration) {
        let wall = self.wall.elapsed().max(Duration::from_nanos(1));
        let cpu = match (self.cpu, thread_cpu_time()) {
            (Some(then), Some(now)) => now
                .saturating_sub(then)
                .clamp(Duration::from_nanos(1), wall),
            _ => wall,
        };
        (wall, cpu)
    }
}

/// The CPU time the calling thread has run, where the system tells it.
#[cfg(unix)]
pub fn thread_cpu_time() -> Option<Duration> {
    let mut time = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: `time` is a valid timespec the call writes into; the clock is the calling
    // thread's own.
    let read = unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut time) };
    (read == 0).then(|| Duration::new(time.tv_sec as u64, time.tv_nsec as u32))
}

#[cfg(not(unix))]
pub fn thread_cpu_time() -> Option<Duration> {
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_thread_that_sleeps_counts_the_wall_clock_but_not_its_cpu() {
        let clock = DecodeClock::start();
        std::thread::sleep(Duration::from_millis(50));
        let Some(from) = thread_cpu_time() else {
            let (wall, cpu) = clock.read();
            assert_eq!(cpu, wall);
            return;
        };
        // Busy until the thread's own clock has run 20 ms, however long that takes.
        let mut spin = 0u64;
        while thread_cpu_time().unwrap() - from < Duration::from_millis(20) {
            spin = std::hint::black_box(spin.wrapping_add(1));
        }
        let (wall, cpu) = clock.read();
        assert!(cpu >= Duration::from_millis(20), "{cpu:?}");
        assert!(
            cpu + Duration::from_millis(40) <= wall,
            "{cpu:?} of {wall:?}"
        );
    }
}
