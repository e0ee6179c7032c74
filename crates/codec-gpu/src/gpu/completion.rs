//! Completing a submitted batch: waiting for its groups, turning their statuses into
//! per-chunk results, and decoding again without the chunks that failed on the device.

use std::sync::Arc;

use zarrpipe_cuda::{DeviceBuffer, DeviceMemory, During};
use zarrpipe_store::EncodedChunk;

use super::device_batches::{device_chunk, DeviceBatch, PendingBatch};
use super::fault::FaultLatch;
use super::slots::{InFlight, SlotPool};
use super::DeviceChunk;
use crate::batch::record_failures;
use crate::{Error, Result};

/// What completing a batch needs of its decoder.
pub(super) struct Completion<'a> {
    /// Where finished groups' slots go back.
    pub(super) slots: &'a SlotPool,
    /// The device's pooled memory, held by each decoded batch's buffer.
    pub(super) memory: &'a Arc<DeviceMemory>,
    /// Noted when waiting for the batch fails.
    pub(super) fault: &'a FaultLatch,
}

impl Completion<'_> {
    /// Waits for a submitted batch and reads its per-chunk statuses. If a chunk failed on the
    /// device, the others are decoded again without it by `decode` (nvCOMP's behaviour on a
    /// corrupt stream is undefined and may spill into the other chunks of its call), into a
    /// new buffer.
    pub(super) fn complete(
        &self,
        mut pending: PendingBatch,
        decode: impl FnOnce(Vec<EncodedChunk>) -> Result<DeviceBatch>,
    ) -> Result<DeviceBatch> {
        let mut batch = self
            .finish_all(&mut pending)
            .inspect_err(|error| self.fault.note(error))?;
        let failed_on_device =
            |chunk: &Result<DeviceChunk>| matches!(chunk, Err(Error::GpuDecode { .. }));
        if !batch.chunks.iter().any(failed_on_device) {
            return Ok(batch);
        }
        let kept: Vec<usize> = (0..batch.chunks.len())
            .filter(|&index| batch.chunks[index].is_ok())
            .collect();
        let sources = std::mem::take(&mut pending.sources);
        let retry = decode(kept.iter().map(|&index| sources[index].clone()).collect())?;
        for (&index, chunk) in kept.iter().zip(retry.chunks) {
            batch.chunks[index] = chunk;
        }
        batch.buffer = retry.buffer;
        batch.timings.plan += retry.timings.plan;
        batch.timings.stage += retry.timings.stage;
        batch.timings.device += retry.timings.device;
        batch.timings.gpu += retry.timings.gpu;
        Ok(batch)
    }

    /// Finishes every group of a pending batch.
    fn finish_all(&self, pending: &mut PendingBatch) -> Result<DeviceBatch> {
        while let Some(group) = pending.running.pop_front() {
            let chunks = finish(group, self.slots)?;
            pending.finished.extend(chunks);
        }
        let mut timings = pending.timings;
        timings.device = pending
            .started
            .elapsed()
            .saturating_sub(timings.plan + timings.stage);
        if let (Some(begun), Some(ended)) = (&pending.begun, &pending.ended) {
            let ms = begun.elapsed_ms(ended).during("timing a batch")?;
            timings.gpu = std::time::Duration::from_secs_f32(ms.max(0.0) / 1e3);
        }
        // SAFETY: a zero-length placeholder, never read; the real buffer moves out.
        let empty = unsafe { pending.stream.alloc::<u8>(0) }.during("allocating")?;
        let output = std::mem::replace(&mut pending.output, empty);
        let buffer =
            DeviceBuffer::written_on(output, &pending.stream)?.holding(self.memory.clone());
        let mut batch = DeviceBatch::new(buffer, std::mem::take(&mut pending.finished))?;
        batch.timings = timings;
        Ok(batch)
    }
}

/// Waits for a group, turns its statuses into per-chunk results and gives its slot back to
/// `slots`.
pub(super) fn finish(group: InFlight, slots: &SlotPool) -> Result<Vec<Result<DeviceChunk>>> {
    let InFlight {
        prepared,
        tables,
        done,
        mut slot,
    } = group;
    let waited = done.synchronize().during("running the batch");
    let results_len = tables.results_len();
    let failures = match (&waited, slot.results_host.as_mut()) {
        (Ok(()), Some(host)) => {
            let results = host.as_mut_slice().during("mapping pinned memory")?;
            tables.failures(&results[..results_len])
        }
        _ => Vec::new(),
    };
    if waited.is_ok() {
        slots.give_back(slot);
    }
    waited?;
    let mut chunks = prepared.chunks;
    record_failures(&mut chunks, failures);
    Ok(chunks.into_iter().map(device_chunk).collect())
}
