//! The GPU decoder's API when the crate is built without the `cuda` feature: every
//! constructor reports that CUDA is unavailable, so callers take the CPU path.

use zarrpipe_store::EncodedChunk;

use super::{BatchTimings, DeviceChunk, GpuOptions};
use crate::{DecodedChunk, Error, Result};

/// Decodes batches of chunks on a GPU (needs the `cuda` feature).
#[derive(Debug)]
pub struct GpuDecoder {
    never: std::convert::Infallible,
}

/// A decoded batch in device memory (needs the `cuda` feature).
#[derive(Debug)]
pub struct DeviceBatch {
    /// Each chunk's place in the buffer, or its error.
    pub chunks: Vec<Result<DeviceChunk>>,
    /// Where the batch's time went.
    pub timings: BatchTimings,
    never: std::convert::Infallible,
}

/// A batch submitted and not yet completed (needs the `cuda` feature).
#[derive(Debug)]
pub struct PendingBatch {
    never: std::convert::Infallible,
}

/// A batch planned for the GPU (needs the `cuda` feature).
#[derive(Debug)]
pub struct PlannedBatch {
    never: std::convert::Infallible,
}

impl GpuDecoder {
    /// Always fails: this build has no CUDA support.
    pub fn new(_options: GpuOptions) -> Result<Self> {
        Err(Error::unavailable(
            "zarrpipe was built without the `cuda` feature",
        ))
    }

    /// The device's name.
    pub fn device_name(&self) -> String {
        match self.never {}
    }

    /// Pinned memory for a pipeline's chunk reads.
    pub fn read_memory(&self) -> Option<std::sync::Arc<dyn zarrpipe_store::ReadMemory>> {
        match self.never {}
    }

    /// Waits for the pinned read memory asked for ahead; returns its bytes.
    pub fn wait_for_read_memory(&self) -> usize {
        match self.never {}
    }

    /// Where nvCOMP was loaded from.
    pub fn nvcomp_path(&self) -> &str {
        match self.never {}
    }

    /// Decodes `chunks` into one device buffer.
    pub fn decode_batch(&self, _chunks: Vec<EncodedChunk>) -> Result<DeviceBatch> {
        match self.never {}
    }

    /// Plans, uploads and enqueues a batch, returning before the device is done.
    pub fn submit(&self, _chunks: Vec<EncodedChunk>) -> Result<PendingBatch> {
        match self.never {}
    }

    /// Plans a batch on the CPU, without touching the GPU.
    pub fn plan(&self, _chunks: Vec<EncodedChunk>) -> PlannedBatch {
        match self.never {}
    }

    /// [`Self::submit`] for a batch planned with [`Self::plan`].
    pub fn submit_planned(&self, planned: PlannedBatch) -> Result<PendingBatch> {
        match planned.never {}
    }

    /// Waits for a submitted batch and reads its per-chunk statuses.
    pub fn complete(&self, pending: PendingBatch) -> Result<DeviceBatch> {
        match pending.never {}
    }

    /// For benchmarks: nvCOMP's own decompression time (never reached: no decoder exists
    /// without `cuda`).
    pub fn time_bare_nvcomp(
        &self,
        _chunks: Vec<EncodedChunk>,
        _repeats: usize,
    ) -> Result<(std::time::Duration, usize)> {
        match self.never {}
    }
}

impl DeviceBatch {
    /// Copies the decoded chunks back to host memory.
    pub fn into_host(self) -> Result<Vec<Result<DecodedChunk>>> {
        match self.never {}
    }

    /// Decoded bytes in the batch's buffer.
    pub fn len(&self) -> usize {
        match self.never {}
    }

    /// Whether the batch's buffer is empty.
    pub fn is_empty(&self) -> bool {
        match self.never {}
    }
}
