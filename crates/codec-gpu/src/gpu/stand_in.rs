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
    pub chunks: Vec<Result<DeviceChunk>>,
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
        Err(Error::CudaUnavailable {
            reason: "zarrpipe was built without the `cuda` feature".into(),
        })
    }

    pub fn device_name(&self) -> String {
        match self.never {}
    }

    pub fn nvcomp_path(&self) -> &str {
        match self.never {}
    }

    pub fn decode_batch(&self, _chunks: Vec<EncodedChunk>) -> Result<DeviceBatch> {
        match self.never {}
    }

    pub fn submit(&self, _chunks: Vec<EncodedChunk>) -> Result<PendingBatch> {
        match self.never {}
    }

    pub fn plan(&self, _chunks: Vec<EncodedChunk>) -> PlannedBatch {
        match self.never {}
    }

    pub fn submit_planned(&self, planned: PlannedBatch) -> Result<PendingBatch> {
        match planned.never {}
    }

    pub fn complete(&self, pending: PendingBatch) -> Result<DeviceBatch> {
        match pending.never {}
    }

    #[doc(hidden)]
    pub fn time_bare_nvcomp(
        &self,
        _chunks: Vec<EncodedChunk>,
        _repeats: usize,
    ) -> Result<(std::time::Duration, usize)> {
        match self.never {}
    }
}

impl DeviceBatch {
    pub fn into_host(self) -> Result<Vec<Result<DecodedChunk>>> {
        match self.never {}
    }

    pub fn len(&self) -> usize {
        match self.never {}
    }

    pub fn is_empty(&self) -> bool {
        match self.never {}
    }
}
