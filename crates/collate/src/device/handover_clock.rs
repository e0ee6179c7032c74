//! The consumer's waits for its batches on the GPU's timeline. A training loop queues its
//! kernels ahead of the device, so its thread waits in the hand-over while its own kernels
//! run, and a wait on the thread says little of whether its GPU waited for data: beside setup
//! B's model the thread waited 43% of its time for batches that were always there before the
//! GPU needed them (CPU decoding, the GPU's wait 0.0%; H200, 2026-11-29, docs/training.md).
//! So at each hand-over an event marks where the consumer's stream stands, and once it and the
//! batch's `ready` event have completed, the time from the first to the second (nought where
//! the batch came first) is the consumer's wait, recorded in the batch's [`Pace`].

use std::collections::VecDeque;
use std::sync::{Arc, Mutex};

use zarrpipe_core::Pace;
use zarrpipe_cuda::cudarc::driver::sys::{CUevent_flags, CUstream};
use zarrpipe_cuda::cudarc::driver::{result, CudaEvent, DriverError};

/// Hand-overs kept waiting for their events: a consumer whose stream stops (or a batch never
/// completed) drops its oldest instead of holding events without end.
const MOST_PENDING: usize = 32;

/// A hand-over whose wait is not known yet.
struct Pending {
    /// Recorded on the consumer's stream at the hand-over.
    reached: CudaEvent,
    /// The batch's, recorded after its last kernel.
    ready: Arc<CudaEvent>,
    pace: Arc<Pace>,
}

/// Hand-overs of one consumer's batches, timed on the GPU; see the module's documentation.
#[derive(Default)]
pub struct HandoverClock {
    pending: Mutex<VecDeque<Pending>>,
}

impl std::fmt::Debug for HandoverClock {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let pending = self.pending.lock().map_or(0, |pending| pending.len());
        f.debug_struct("HandoverClock")
            .field("pending", &pending)
            .finish()
    }
}

impl HandoverClock {
    /// The consumer's `stream` is about to wait for a batch complete at `ready` (a timed
    /// event), whose consumer's pace is `pace`: marks where the stream stands, and records the
    /// waits of earlier hand-overs whose events have completed since.
    ///
    /// # Safety
    /// `stream` is a live stream of `ready`'s context, or a default-stream sentinel, for the
    /// call.
    pub unsafe fn handed_over(
        &self,
        stream: CUstream,
        ready: &Arc<CudaEvent>,
        pace: &Arc<Pace>,
    ) -> Result<(), DriverError> {
        let reached = ready
            .context()
            .new_event(Some(CUevent_flags::CU_EVENT_DEFAULT))?;
        // SAFETY: the caller's contract for `stream`; the event is alive for the call.
        unsafe { result::event::record(reached.cu_event(), stream) }?;
        let mut pending = self.pending.lock().unwrap_or_else(|p| p.into_inner());
        record_resolved(&mut pending)?;
        if pending.len() >= MOST_PENDING {
            pending.pop_front();
        }
        pending.push_back(Pending {
            reached,
            ready: ready.clone(),
            pace: pace.clone(),
        });
        Ok(())
    }

    /// Records the waits of the hand-overs whose events have completed, oldest first.
    pub fn record_resolved(&self) -> Result<(), DriverError> {
        record_resolved(&mut self.pending.lock().unwrap_or_else(|p| p.into_inner()))
    }
}

/// Records, in order, the waits of `pending`'s first hand-overs whose events have completed.
fn record_resolved(pending: &mut VecDeque<Pending>) -> Result<(), DriverError> {
    while let Some(first) = pending.front() {
        if !first.reached.try_is_complete()? || !first.ready.try_is_complete()? {
            break;
        }
        // Both complete: no wait for either.
        let ms = first.reached.elapsed_ms(&first.ready)?;
        let wait = std::time::Duration::from_secs_f64(f64::from(ms.max(0.0)) / 1e3);
        first.pace.record_device_wait(wait);
        pending.pop_front();
    }
    Ok(())
}
