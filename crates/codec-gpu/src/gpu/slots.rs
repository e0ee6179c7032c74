//! Pinned staging and device buffers of the groups in flight, reused from batch to batch.

use std::sync::{Arc, Mutex};

use zarrpipe_cuda::cudarc::driver::{
    CudaContext, CudaEvent, CudaSlice, CudaStream, DevicePtr, PinnedHostSlice,
};
use zarrpipe_cuda::{alloc_pinned_host, During};

use super::tables::Tables;
use crate::batch::Prepared;
use crate::Result;

/// Groups of one batch staged, uploading or decoding at once (4 against 3: W1 in batches of
/// 16, three groups each, 17.2-18.1 GB/s against 14.4-14.6, H200, 2026-11-25; the raw
/// figures in benches/results/2026-11-25_h200_gpu_path.md).
pub(super) const SLOTS: usize = 4;

/// The buffers of one group in flight; they only grow, and go back to the pool when the
/// group has finished.
#[derive(Default)]
pub(super) struct Slot {
    pub(super) staging: Option<PinnedHostSlice<u8>>,
    pub(super) input: Option<CudaSlice<u8>>,
    pub(super) scratch: Option<CudaSlice<u8>>,
    pub(super) results: Option<CudaSlice<u8>>,
    pub(super) results_host: Option<PinnedHostSlice<u8>>,
}

/// A group whose work is enqueued; `done` completes when its statuses are on the host.
pub(super) struct InFlight {
    pub(super) prepared: Prepared,
    pub(super) tables: Tables,
    pub(super) done: CudaEvent,
    pub(super) slot: Slot,
}

/// Free slots, shared with the batches in flight that hold the others.
#[derive(Clone, Default)]
pub(super) struct SlotPool(pub(super) Arc<Mutex<Vec<Slot>>>);

impl SlotPool {
    pub(super) fn take(&self) -> Slot {
        self.0
            .lock()
            .unwrap_or_else(|poison| poison.into_inner())
            .pop()
            .unwrap_or_default()
    }

    pub(super) fn give_back(&self, slot: Slot) {
        self.0
            .lock()
            .unwrap_or_else(|poison| poison.into_inner())
            .push(slot);
    }
}

/// Grows the reused device buffer `slot` (`what`, for traces) to at least `len` bytes,
/// allocated in `stream`'s order; returns its device address.
pub(super) fn grow(
    slot: &mut Option<CudaSlice<u8>>,
    what: &str,
    stream: &Arc<CudaStream>,
    len: usize,
) -> Result<u64> {
    if slot.as_ref().is_none_or(|buffer| buffer.len() < len) {
        *slot = None; // free before allocating the larger one
        let capacity = (len + len / 4).max(1 << 20);
        tracing::debug!(target: "zarrpipe::gpu", "the {what} buffer grows to {capacity} bytes");
        // SAFETY: scratch memory; every byte read is written first within a batch.
        let buffer = unsafe { stream.alloc::<u8>(capacity) }
            .during_with(|| format!("allocating {capacity} bytes of device memory"))?;
        *slot = Some(buffer);
    }
    let buffer = slot.as_ref().expect("allocated above");
    Ok(buffer.device_ptr(stream).0)
}

pub(super) fn grow_pinned<'a>(
    context: &Arc<CudaContext>,
    slot: &'a mut Option<PinnedHostSlice<u8>>,
    len: usize,
) -> Result<&'a mut [u8]> {
    if slot.as_ref().is_none_or(|buffer| buffer.len() < len) {
        *slot = None;
        let capacity = (len + len / 4).max(1 << 20);
        tracing::debug!(target: "zarrpipe::gpu", "a pinned staging buffer grows to {capacity} bytes");
        // SAFETY: host staging memory; every byte uploaded or read is written first.
        let buffer = unsafe { alloc_pinned_host(context, capacity) }
            .during_with(|| format!("allocating {capacity} bytes of pinned memory"))?;
        *slot = Some(buffer);
    }
    slot.as_mut()
        .expect("allocated above")
        .as_mut_slice()
        .during("mapping pinned memory")
        .map_err(Into::into)
}
