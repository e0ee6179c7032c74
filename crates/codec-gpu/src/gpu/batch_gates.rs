//! What a batch waits for before it decodes: pinned staging memory, a share of the batches
//! decoding at once, its turn to have its tables checked and to be planned, and device memory
//! (admitted in order, see [`Admission`]).

use std::sync::Arc;

use tokio::sync::{OwnedSemaphorePermit, Semaphore};
use zarrpipe_store::EncodedChunk;

use super::admission::{Admission, Ticket};
use super::GpuOptions;
use crate::batch::output_bytes;

/// The granularity of the pinned-memory budget.
const PINNED_UNIT: usize = 1 << 16;

/// The whole of the decoding budget: divisible by every count of batches up to 10, so that
/// each of `n` batches taking `DECODING_UNITS / n` lets exactly `n` in.
const DECODING_UNITS: usize = 5040;

/// The pinned-memory budget in units (a `u32` count, as the semaphore takes them).
fn pinned_units(options: &GpuOptions) -> usize {
    (options.pinned_memory / PINNED_UNIT).clamp(1, u32::MAX as usize)
}

/// The device memory a batch of `chunks` takes until collated: its decoded chunks and its
/// stored bytes.
pub(super) fn device_bytes(chunks: &[EncodedChunk]) -> usize {
    chunks
        .iter()
        .map(|chunk| output_bytes(chunk) + chunk.stored_len())
        .sum()
}

/// The budgets and turns batches wait for; each permit lets the next batch in when dropped.
pub(super) struct BatchGates {
    /// Pinned staging memory for batches being decoded, in units of [`PINNED_UNIT`] bytes.
    pinned: Arc<Semaphore>,
    /// The whole of `pinned`: one batch always goes through, however large.
    pinned_units: usize,
    /// Device memory of the batches decoding or decoded and not yet collated
    /// ([`GpuOptions::device_memory`]), admitted in the order the batches came.
    admission: Arc<Admission>,
    /// Batches being decoded or planned, in shares of [`DECODING_UNITS`]: a batch of few
    /// chunks takes a smaller share, so more of them decode at once.
    decoding: Arc<Semaphore>,
    /// One batch at a time is planned and staged (on every core), in the order batches came:
    /// batches prepared side by side all finished late, and the GPU waited for the first of
    /// them (W1 of 64 steps, H100, 2026-11-25: the first batch's staging took 108 ms beside
    /// six others, against 13-18 ms alone).
    preparing: Arc<Semaphore>,
    /// One batch at a time has its zstd tables checked (on every core), in order, while the
    /// batch before it is planned and staged: the checks are most of planning's time.
    checking: Arc<Semaphore>,
}

impl BatchGates {
    /// The gates of a decoder running with `options`.
    pub(super) fn new(options: &GpuOptions) -> Self {
        let pinned_units = pinned_units(options);
        Self {
            pinned: Arc::new(Semaphore::new(pinned_units)),
            pinned_units,
            admission: Admission::new(options.device_memory),
            decoding: Arc::new(Semaphore::new(DECODING_UNITS)),
            preparing: Arc::new(Semaphore::new(1)),
            checking: Arc::new(Semaphore::new(1)),
        }
    }

    /// Waits until `stored` bytes of pinned staging memory are free for a batch (at once when
    /// no other batch holds any, however large this one is).
    pub(super) async fn reserve_pinned(&self, stored: usize) -> OwnedSemaphorePermit {
        let units = stored.div_ceil(PINNED_UNIT).clamp(1, self.pinned_units) as u32;
        acquire(&self.pinned, units).await
    }

    /// A batch's place in the order device memory is admitted in.
    pub(super) fn admission_ticket(&self) -> Ticket {
        self.admission.ticket()
    }

    /// Waits for a share of the decoding budget that lets `batches` batches in at once.
    pub(super) async fn reserve_decoding(&self, batches: usize) -> OwnedSemaphorePermit {
        let units = (DECODING_UNITS / batches).max(1) as u32;
        acquire(&self.decoding, units).await
    }

    /// Waits for the batches that came earlier to have their tables checked.
    pub(super) async fn reserve_checking(&self) -> OwnedSemaphorePermit {
        acquire_one(&self.checking).await
    }

    /// Waits for the batches that came earlier to be planned and staged.
    pub(super) async fn reserve_preparing(&self) -> OwnedSemaphorePermit {
        acquire_one(&self.preparing).await
    }
}

/// Waits for `units` of `semaphore`, which is never closed.
async fn acquire(semaphore: &Arc<Semaphore>, units: u32) -> OwnedSemaphorePermit {
    semaphore
        .clone()
        .acquire_many_owned(units)
        .await
        .expect("the semaphore is never closed")
}

/// Waits for the one permit of `semaphore`, which is never closed (tokio's semaphore serves
/// waiters in order).
async fn acquire_one(semaphore: &Arc<Semaphore>) -> OwnedSemaphorePermit {
    semaphore
        .clone()
        .acquire_owned()
        .await
        .expect("the semaphore is never closed")
}
