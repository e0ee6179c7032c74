//! What auto's fetch stage reads chunks into. While auto keeps every batch on the CPU side,
//! local chunk files are handed on unread and read by the thread that decodes each, into
//! memory it reuses, as CPU decoding reads them; while the GPU takes part of each batch, they
//! are read into the GPU side's memory, from which both sides decode. Read into the GPU's
//! memory throughout, auto on the CPU alone stepped in 140-150 ms beside setup B's model on its
//! advised layout, where CPU decoding steps in 117 (H200, 2026-11-29; docs/training-runs.md).
//! A batch read unread whose share then gives the GPU a part has that part read before the
//! GPU side takes it (`SplitDecoder`).

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use zarrpipe_store::{ReadBuffer, ReadMemory};

/// Auto's read memory: the GPU side's, or none while the CPU decodes alone.
#[derive(Debug)]
pub(crate) struct AutoReads {
    gpu: Option<Arc<dyn ReadMemory>>,
    cpu_alone: Arc<AtomicBool>,
}

impl AutoReads {
    /// Reads into `gpu` (the GPU side's memory, if it has any) unless `cpu_alone` says auto
    /// gives the GPU no part of the batches it shares out now.
    pub(crate) fn new(gpu: Option<Arc<dyn ReadMemory>>, cpu_alone: Arc<AtomicBool>) -> Self {
        Self { gpu, cpu_alone }
    }
}

impl ReadMemory for AutoReads {
    fn buffer(&self, len: usize) -> Option<Box<dyn ReadBuffer>> {
        self.gpu.as_ref()?.buffer(len)
    }

    fn expect_batches(self: Arc<Self>, batch_bytes: u64, read_ahead: usize) {
        if let Some(gpu) = &self.gpu {
            gpu.clone().expect_batches(batch_bytes, read_ahead);
        }
    }

    fn reads_at_decode(&self) -> bool {
        self.cpu_alone.load(Ordering::Relaxed)
    }
}
