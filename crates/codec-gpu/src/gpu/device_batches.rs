//! The batches a `GpuDecoder` hands out: planned on the CPU, pending on the device, and
//! decoded in one device buffer.

use std::collections::VecDeque;
use std::sync::Arc;
use std::time::Instant;

use zarrpipe_cuda::cudarc::driver::{CudaEvent, CudaSlice, CudaStream, DevicePtr};
use zarrpipe_cuda::DeviceBuffer;
use zarrpipe_store::{ChunkRequest, EncodedChunk};

use super::admission::AdmittedMemory;
use super::lanes::LaneHold;
use super::slots::{InFlight, SlotPool};
use super::{BatchTimings, DeviceChunk};
use crate::batch::{Prepared, PreparedChunk};
use crate::{DecodedChunk, Error, Result};

/// A decoded batch: the chunks' bytes in one device buffer, laid out as its
/// [`DeviceChunk`]s say. [`GpuDecoder`](super::GpuDecoder) makes them, and so can any other
/// decoder ([`DeviceBatch::new`]): a device collator gathers from either alike.
pub struct DeviceBatch {
    /// Each chunk's place in [`buffer`](Self::buffer), or its error.
    pub chunks: Vec<Result<DeviceChunk>>,
    /// Where the batch's time went.
    pub timings: BatchTimings,
    pub(super) buffer: DeviceBuffer,
    /// The decoder's device-memory budget this batch takes, given back when it goes.
    budget: Option<AdmittedMemory>,
}

impl std::fmt::Debug for DeviceBatch {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DeviceBatch")
            .field("chunks", &self.chunks.len())
            .field("bytes", &self.buffer.len())
            .finish()
    }
}

/// A batch whose decoding is enqueued on the decoder's stream but not yet checked: more work
/// on the decoded bytes (collation) can be enqueued behind it, and the next batch planned,
/// before [`GpuDecoder::complete`] waits for it. Dropping it waits for its groups.
pub struct PendingBatch {
    pub(super) sources: Vec<EncodedChunk>,
    /// The decode stream the batch runs on.
    pub(super) stream: Arc<CudaStream>,
    /// Where each chunk will be, as planned (errors found while planning included).
    pub(super) planned: Vec<Option<(ChunkRequest, usize)>>,
    pub(super) running: VecDeque<InFlight>,
    pub(super) finished: Vec<Result<DeviceChunk>>,
    pub(super) output: CudaSlice<u8>,
    pub(super) timings: BatchTimings,
    pub(super) started: Instant,
    pub(super) pool: SlotPool,
    /// Timed events on the decode stream: after the first group's upload, after the last
    /// group's work (the batch's device time lies between).
    pub(super) begun: Option<CudaEvent>,
    pub(super) ended: Option<CudaEvent>,
    /// The lanes the batch decodes on (its own first, then its later groups'), free again
    /// once the batch is completed or dropped.
    pub(super) lanes: Vec<LaneHold>,
}

/// A batch planned on the CPU ([`GpuDecoder::plan`]): frames read and checked, CPU
/// fallbacks decoded, tables laid out. Planning needs no GPU, so it can run on another
/// thread while the batch before is staged and uploaded.
pub struct PlannedBatch {
    pub(super) sources: Vec<EncodedChunk>,
    pub(super) groups: Vec<Prepared>,
    pub(super) plan_time: std::time::Duration,
}

impl std::fmt::Debug for PlannedBatch {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PlannedBatch")
            .field("chunks", &self.sources.len())
            .field("groups", &self.groups.len())
            .finish()
    }
}

impl std::fmt::Debug for PendingBatch {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PendingBatch")
            .field("chunks", &self.sources.len())
            .field("bytes", &self.output.len())
            .finish()
    }
}

impl PendingBatch {
    /// The buffer the chunks are being decoded into.
    pub fn buffer(&self) -> &CudaSlice<u8> {
        &self.output
    }

    /// The stream the batch decodes on: work on its bytes goes there (or waits on it).
    pub fn stream(&self) -> &Arc<CudaStream> {
        &self.stream
    }

    /// The device address of [`Self::buffer`].
    pub fn buffer_address(&self) -> u64 {
        self.output.device_ptr(self.output.stream()).0
    }

    /// Each chunk's request and byte offset in [`Self::buffer`], in input order; `None` for
    /// chunks already known to fail.
    pub fn planned(&self) -> &[Option<(ChunkRequest, usize)>] {
        &self.planned
    }
}

impl Drop for PendingBatch {
    fn drop(&mut self) {
        // The device may still read the slots' buffers: wait before they are reused.
        for group in self.running.drain(..) {
            let _ = group.done.synchronize();
            self.pool.give_back(group.slot);
        }
    }
}

pub(super) fn device_chunk(chunk: PreparedChunk) -> Result<DeviceChunk> {
    let (region, path) = chunk.outcome?;
    Ok(DeviceChunk {
        request: chunk.request,
        offset: region.offset,
        len: region.len,
        path,
        stored_len: chunk.stored_len,
        fetch_time: chunk.fetch_time,
    })
}

impl DeviceBatch {
    /// A batch whose `chunks` were decoded into `buffer` (C order, native byte order, each
    /// [`DeviceChunk::len`] bytes at [`DeviceChunk::offset`]), readable after the buffer's
    /// [`ready`](DeviceBuffer::ready) event. Fails, naming the chunk, when a chunk does not
    /// lie within the buffer or is shorter than its decoded size, so a collator's kernels
    /// never read outside what the decoder wrote.
    pub fn new(buffer: DeviceBuffer, chunks: Vec<Result<DeviceChunk>>) -> Result<Self> {
        for chunk in chunks.iter().flatten() {
            let request = &chunk.request;
            let expected = request.variable.decoded_chunk_bytes() as usize;
            let fits = chunk
                .offset
                .checked_add(chunk.len)
                .is_some_and(|end| end <= buffer.len());
            if !fits || chunk.len < expected {
                return Err(Error::DeviceChunkOutside {
                    variable: request.variable.name().to_string(),
                    key: request.key(),
                    offset: chunk.offset,
                    len: chunk.len,
                    expected,
                    buffer: buffer.len(),
                });
            }
        }
        Ok(Self {
            chunks,
            timings: BatchTimings::default(),
            buffer,
            budget: None,
        })
    }

    /// Holds `memory` (the decoder's device-memory budget it was admitted to) until the batch
    /// is dropped.
    pub(super) fn hold(&mut self, memory: AdmittedMemory) {
        self.budget = Some(memory);
    }

    /// Copies the decoded chunks back to host memory (for checks and CPU consumers).
    pub fn into_host(self) -> Result<Vec<Result<DecodedChunk>>> {
        let host = self.buffer.to_host()?;
        let decode_time = self.timings.device;
        Ok(self
            .chunks
            .into_iter()
            .map(|chunk| {
                let chunk = chunk?;
                Ok(DecodedChunk {
                    bytes: host[chunk.offset..chunk.offset + chunk.len].to_vec(),
                    stored_len: chunk.stored_len,
                    missing: chunk.path == crate::DecodePath::Fill,
                    request: chunk.request,
                    fetch_time: chunk.fetch_time,
                    decode_time,
                    decode_cpu_time: decode_time,
                })
            })
            .collect())
    }

    /// The device buffer holding every chunk (see [`DeviceChunk::offset`]).
    pub fn buffer(&self) -> &DeviceBuffer {
        &self.buffer
    }

    /// Decoded bytes in the batch's buffer.
    pub fn len(&self) -> usize {
        self.buffer.len()
    }

    /// Whether the batch's buffer is empty.
    pub fn is_empty(&self) -> bool {
        self.buffer.is_empty()
    }
}
