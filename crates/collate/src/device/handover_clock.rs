//! The consumer's waits for its batches on the GPU's timeline. A training loop queues its
//! kernels ahead of the device, so its thread waits in the hand-over while its own kernels
//! run, and a wait on the thread says little of whether its GPU waited for data: beside setup
//! B's model the thread waited 43% of its time for batches that were always there before the
//! GPU needed them (CPU decoding, the GPU's wait 0.0%; H200, 2026-11-29, docs/training-runs.md).
//!
//! So events on the consumer's stream mark when it asked for a batch (`asked`: complete once
//! the kernels it had queued by then have run, or at once where they had) and when it was
//! handed the batch (`handed`). The GPU waited for data from the first until both the second
//! and the batch's `ready` event had completed: nought where the batch and the hand-over came
//! while the consumer's kernels still ran. An event recorded only at the hand-over would miss
//! the time the stream stood idle before it. The wait is recorded in the batch's [`Pace`] once
//! the events have completed, a batch or two later.
//!
//! The consumer's step is timed there too, from one `asked` to the next on the same stream:
//! its wait for a batch and its kernels for it, as its GPU ran them. Its
//! thread hands batches over in bursts where the loop runs ahead of the GPU between syncs
//! (steps of 47-61 ms where the model computed 82 a batch, setup A bf16, H200, 2026-11-30), and
//! `auto` reads the consumer's compute from its steps less its waits.

use std::collections::VecDeque;
use std::sync::{Arc, Mutex};

use zarrpipe_core::Pace;
use zarrpipe_cuda::cudarc::driver::sys::{CUevent_flags, CUstream};
use zarrpipe_cuda::cudarc::driver::{result, CudaContext, CudaEvent, DriverError};

/// Hand-overs kept waiting for their events: a consumer whose stream stops (or a batch never
/// completed) drops its oldest instead of holding events without end.
const MOST_PENDING: usize = 32;

/// A hand-over whose wait is not known yet.
struct Pending {
    /// Recorded on the consumer's stream when it asked for the batch, and when it was handed
    /// it.
    asked: CudaEvent,
    handed: CudaEvent,
    /// The batch's, recorded after its last kernel.
    ready: Arc<CudaEvent>,
    pace: Arc<Pace>,
    /// The consumer's stream (an address), and the hand-over's place among all of them.
    stream: usize,
    handover: u64,
}

/// The last hand-over whose wait was recorded: its `asked` starts the next step.
struct Resolved {
    asked: CudaEvent,
    stream: usize,
    handover: u64,
}

/// Hand-overs of one consumer's batches, timed on the GPU; see the module's documentation.
#[derive(Default)]
pub struct HandoverClock {
    state: Mutex<ClockState>,
}

#[derive(Default)]
struct ClockState {
    pending: VecDeque<Pending>,
    /// The consumer's stream at its last hand-over (an address), and its context.
    stream: Option<(Arc<CudaContext>, usize)>,
    /// Recorded on that stream when the consumer asked for its next batch.
    asked: Option<CudaEvent>,
    /// Hand-overs so far, timed or not: a step is timed only between two in a row.
    handovers: u64,
    last: Option<Resolved>,
}

impl std::fmt::Debug for HandoverClock {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let pending = self.state.lock().map_or(0, |state| state.pending.len());
        f.debug_struct("HandoverClock")
            .field("pending", &pending)
            .finish()
    }
}

impl HandoverClock {
    /// The consumer asks for its next batch: marks where its stream (the one of its last
    /// hand-over) stands. Before its first hand-over, nothing is known to mark.
    ///
    /// # Safety
    /// The stream of the last [`handed_over`](Self::handed_over) is still alive.
    pub unsafe fn asked(&self) -> Result<(), DriverError> {
        let mut state = self.state.lock().unwrap_or_else(|p| p.into_inner());
        let Some((context, stream)) = state.stream.clone() else {
            return Ok(());
        };
        // SAFETY: the caller's contract for the stream.
        let asked = unsafe { marked(&context, stream as CUstream) }?;
        state.asked = Some(asked);
        Ok(())
    }

    /// The consumer's `stream` is about to wait for a batch complete at `ready` (a timed
    /// event), whose consumer's pace is `pace`: marks where the stream stands, and records the
    /// waits of earlier hand-overs whose events have completed since. A hand-over the
    /// consumer did not ask for first ([`asked`](Self::asked)) is not timed.
    ///
    /// # Safety
    /// `stream` is a live stream of `ready`'s context, or a default-stream sentinel, for the
    /// call, and until the next hand-over's [`asked`](Self::asked).
    pub unsafe fn handed_over(
        &self,
        stream: CUstream,
        ready: &Arc<CudaEvent>,
        pace: &Arc<Pace>,
    ) -> Result<(), DriverError> {
        let context = ready.context();
        // SAFETY: the caller's contract for `stream`.
        let handed = unsafe { marked(context, stream) }?;
        let mut state = self.state.lock().unwrap_or_else(|p| p.into_inner());
        state.stream = Some((context.clone(), stream as usize));
        state.handovers += 1;
        state.record_resolved()?;
        let Some(asked) = state.asked.take() else {
            return Ok(());
        };
        if state.pending.len() >= MOST_PENDING {
            state.pending.pop_front();
        }
        let handover = state.handovers;
        state.pending.push_back(Pending {
            asked,
            handed,
            ready: ready.clone(),
            pace: pace.clone(),
            stream: stream as usize,
            handover,
        });
        Ok(())
    }

    /// Records the waits and steps of the hand-overs whose events have completed, oldest
    /// first.
    pub fn record_resolved(&self) -> Result<(), DriverError> {
        let mut state = self.state.lock().unwrap_or_else(|p| p.into_inner());
        state.record_resolved()
    }
}

/// A timed event recorded on `stream` of `context`.
///
/// # Safety
/// `stream` is a live stream of `context`, or a default-stream sentinel.
unsafe fn marked(context: &Arc<CudaContext>, stream: CUstream) -> Result<CudaEvent, DriverError> {
    let event = context.new_event(Some(CUevent_flags::CU_EVENT_DEFAULT))?;
    // SAFETY: the caller's contract for `stream`; the event is alive for the call.
    unsafe { result::event::record(event.cu_event(), stream) }?;
    Ok(event)
}

impl ClockState {
    /// Records, in order, the waits of the first pending hand-overs whose events have
    /// completed, and the steps that end at them.
    fn record_resolved(&mut self) -> Result<(), DriverError> {
        while let Some(first) = self.pending.front() {
            let events = [&first.asked, &first.handed, &*first.ready];
            for event in events {
                if !event.try_is_complete()? {
                    return Ok(());
                }
            }
            let Some(first) = self.pending.pop_front() else {
                break;
            };
            // Complete, all of them: none of these waits.
            let wait = first
                .asked
                .elapsed_ms(&first.ready)?
                .max(first.asked.elapsed_ms(&first.handed)?);
            first.pace.record_device_wait(span(wait));
            if let Some(last) = self.last.take() {
                if last.stream == first.stream && last.handover + 1 == first.handover {
                    let step = last.asked.elapsed_ms(&first.asked)?;
                    first.pace.record_device_step(span(step));
                }
            }
            self.last = Some(Resolved {
                asked: first.asked,
                stream: first.stream,
                handover: first.handover,
            });
        }
        Ok(())
    }
}

/// A span read off two events, in milliseconds (negative where they completed out of order).
fn span(ms: f32) -> std::time::Duration {
    std::time::Duration::from_secs_f64(f64::from(ms.max(0.0)) / 1e3)
}
