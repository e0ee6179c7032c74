//! What auto's fetch stage reads chunks into. While auto keeps every batch on the CPU side,
//! local chunk files are handed on unread and read by the thread that decodes each, into
//! memory it reuses, as CPU decoding reads them; while the GPU takes part of each batch, they
//! are read into the GPU side's memory, from which both sides decode. Read into the GPU's
//! memory throughout, auto on the CPU alone stepped in 140-150 ms beside setup B's model on its
//! advised layout, where CPU decoding steps in 117 (H200, 2026-11-29; docs/training-runs.md).
//! A batch read unread whose share then gives the GPU a part has that part read before the
//! GPU side takes it (`SplitDecoder`).
//!
//! The GPU side's pinned memory is set aside ([`ReadMemory::expect_batches`]) only once the
//! GPU first takes a part: each `cudaHostAlloc` holds up the process's other CUDA calls (an
//! upload 30 ms in the median beside them, H200, 2026-11-25; docs/benchmarks.md, "Defaults and
//! the measurements behind them"), setup B's batches want all 16 GiB the GPU side may hold
//! (256 slabs), and while auto keeps every batch on the CPU nothing reads into it. Set aside
//! from the pipeline's build, auto on setup B's advised layout stalled for 1-2 s early in three
//! runs of five; set aside late, in none of two (H200, 2026-12-01;
//! benches/results/2026-12-01_h200_hosts_ad_ae_pinned_later.md). The cost moves to the GPU's
//! first part: the allocations hold up the process's CUDA calls for the 6-8 s they take (on
//! setup B's default layout in the warm-up steps, at no loss over 300 steps).

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, PoisonError};

use zarrpipe_store::{ReadBuffer, ReadMemory};

/// Auto's read memory: the GPU side's, or none while the CPU decodes alone.
#[derive(Debug)]
pub(crate) struct AutoReads {
    gpu: Option<Arc<dyn ReadMemory>>,
    cpu_alone: Arc<AtomicBool>,
    /// The batches a fetch stage said it reads (bytes, how many at once), not yet passed on to
    /// the GPU side's memory: the largest of each.
    expected: Mutex<Option<(u64, usize)>>,
}

impl AutoReads {
    /// Reads into `gpu` (the GPU side's memory, if it has any) unless `cpu_alone` says auto
    /// gives the GPU no part of the batches it shares out now.
    pub(crate) fn new(gpu: Option<Arc<dyn ReadMemory>>, cpu_alone: Arc<AtomicBool>) -> Self {
        Self {
            gpu,
            cpu_alone,
            expected: Mutex::new(None),
        }
    }

    /// Passes what was expected on to the GPU side's memory, once.
    fn pass_on_expected(&self) {
        let expected = self
            .expected
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .take();
        if let (Some((batch_bytes, read_ahead)), Some(gpu)) = (expected, &self.gpu) {
            gpu.clone().expect_batches(batch_bytes, read_ahead);
        }
    }
}

impl ReadMemory for AutoReads {
    fn buffer(&self, len: usize) -> Option<Box<dyn ReadBuffer>> {
        self.gpu.as_ref()?.buffer(len)
    }

    fn expect_batches(self: Arc<Self>, batch_bytes: u64, read_ahead: usize) {
        if self.gpu.is_none() {
            return;
        }
        {
            let mut expected = self.expected.lock().unwrap_or_else(PoisonError::into_inner);
            let (bytes, ahead) = expected.unwrap_or((0, 0));
            *expected = Some((bytes.max(batch_bytes), ahead.max(read_ahead)));
        }
        if !self.cpu_alone.load(Ordering::Relaxed) {
            self.pass_on_expected();
        }
    }

    fn reads_at_decode(&self) -> bool {
        let alone = self.cpu_alone.load(Ordering::Relaxed);
        if !alone {
            self.pass_on_expected();
        }
        alone
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Read memory that records what it was told to expect.
    #[derive(Debug, Default)]
    struct Expecting {
        told: Mutex<Vec<(u64, usize)>>,
    }

    impl ReadMemory for Expecting {
        fn buffer(&self, _len: usize) -> Option<Box<dyn ReadBuffer>> {
            None
        }

        fn expect_batches(self: Arc<Self>, batch_bytes: u64, read_ahead: usize) {
            self.told.lock().unwrap().push((batch_bytes, read_ahead));
        }
    }

    #[test]
    fn the_gpus_memory_is_set_aside_once_the_gpu_first_takes_a_part() {
        let gpu = Arc::new(Expecting::default());
        let cpu_alone = Arc::new(AtomicBool::new(true));
        let reads = Arc::new(AutoReads::new(Some(gpu.clone()), cpu_alone.clone()));
        // The pipeline's builder and its fetch stage each say what they read.
        reads.clone().expect_batches(1 << 30, 2);
        reads.clone().expect_batches(3 << 29, 1);
        assert!(reads.reads_at_decode());
        assert!(gpu.told.lock().unwrap().is_empty(), "nothing set aside yet");
        cpu_alone.store(false, Ordering::Relaxed);
        assert!(!reads.reads_at_decode());
        assert!(!reads.reads_at_decode());
        assert_eq!(
            *gpu.told.lock().unwrap(),
            [(3 << 29, 2)],
            "the largest, once"
        );
        // Told again while the GPU takes part: passed on at once.
        reads.clone().expect_batches(1 << 20, 1);
        assert_eq!(gpu.told.lock().unwrap().len(), 2);
    }
}
