//! [`DeviceCollator`] as the collate stage: on a blocking thread of Tokio's pool (taking a
//! tensor can wait for the consumer to drop older ones), a batch's chunks are gathered where
//! they are (decoded on the GPU) or uploaded first (decoded on the CPU), and the batch is
//! handed on once its kernels have run, with the device time they took.

use std::sync::Arc;
use std::time::{Duration, Instant};

use futures::future::BoxFuture;
use futures::FutureExt;
use zarrpipe_codec_gpu::cudarc::driver::sys::CUevent_flags;
use zarrpipe_codec_gpu::cudarc::driver::{CudaEvent, CudaSlice, CudaStream, DevicePtr};
use zarrpipe_codec_gpu::{DecodedChunks, DeviceBatch};
use zarrpipe_core::Staged;
use zarrpipe_store::ChunkRequest;

use super::{cuda_error, DeviceCollator, Gpu};
use crate::{Batch, BatchCollator, DecodedBatch, Error, Result};

/// The device memory a batch's chunks are in, kept until its kernels have read them.
#[allow(dead_code)] // held, never read
enum ChunkMemory {
    /// Decoded on the GPU: the decoder's buffer.
    Decoded(DeviceBatch),
    /// Decoded on the CPU and uploaded.
    Uploaded(CudaSlice<u8>),
}

impl BatchCollator for DeviceCollator {
    type Place = Gpu;

    fn collate_batch(
        self: Arc<Self>,
        batch: DecodedBatch,
    ) -> BoxFuture<'static, Result<Batch<Gpu>>> {
        async move {
            tokio::task::spawn_blocking(move || self.collate_now(batch))
                .await
                .map_err(|error| Error::Cuda {
                    what: "the collate task of a batch panicked or was cancelled".into(),
                    source: Box::new(error),
                })?
        }
        .boxed()
    }

    /// One batch is enqueued while the one before runs.
    fn batches_in_flight(&self) -> usize {
        2
    }
}

impl DeviceCollator {
    fn collate_now(&self, batch: DecodedBatch) -> Result<Batch<Gpu>> {
        let started = Instant::now();
        let Staged {
            index,
            samples,
            payload,
            mut stats,
        } = batch;
        let mut requests: Vec<ChunkRequest> = Vec::with_capacity(payload.len());
        let mut offsets: Vec<usize> = Vec::with_capacity(payload.len());
        let (memory, stream, begun) = match payload {
            DecodedChunks::Device(mut decoded) => {
                let stream = decoded.stream().clone();
                let begun = timed_event(&stream)?;
                for chunk in std::mem::take(&mut decoded.chunks) {
                    let chunk = chunk?;
                    offsets.push(chunk.offset);
                    requests.push(chunk.request);
                }
                (ChunkMemory::Decoded(decoded), stream, begun)
            }
            DecodedChunks::Host(chunks) => {
                let stream = self.stream.clone();
                let begun = timed_event(&stream)?;
                let parts: Vec<&[u8]> = chunks.iter().map(|chunk| chunk.bytes.as_slice()).collect();
                let (buffer, uploaded) = self.staging.upload_parts(&parts, &stream)?;
                offsets = uploaded;
                requests.extend(chunks.into_iter().map(|chunk| chunk.request));
                (ChunkMemory::Uploaded(buffer), stream, begun)
            }
        };
        let base = match &memory {
            ChunkMemory::Decoded(decoded) => decoded.buffer().device_ptr(&stream).0,
            ChunkMemory::Uploaded(buffer) => buffer.device_ptr(&stream).0,
        };
        let chunks: Vec<(&ChunkRequest, u64)> = requests
            .iter()
            .zip(&offsets)
            .map(|(request, &offset)| (request, base + offset as u64))
            .collect();
        let tensors = self.enqueue(&samples, &chunks, &stream)?;
        let ready = timed_event(&stream)?;
        // The batch is handed on finished: its device time is known, and the chunks' memory
        // can go (in the stream's order, after the kernels that read it).
        ready
            .synchronize()
            .map_err(cuda_error("collating a batch"))?;
        let device_ms = begun
            .elapsed_ms(&ready)
            .map_err(cuda_error("timing a batch"))?;
        drop(memory);
        stats.gpu_busy += Duration::from_secs_f32(device_ms.max(0.0) / 1e3);
        stats.collate_busy += started.elapsed();
        Ok(Batch {
            index,
            inputs: tensors.inputs,
            targets: tensors.targets,
            mask: tensors.mask,
            nan_mask: tensors.nan_mask,
            latitude_weights: tensors.latitude_weights,
            samples,
            ready,
            stats,
        })
    }
}

/// An event that can be timed against another.
fn timed_event(stream: &Arc<CudaStream>) -> Result<CudaEvent> {
    stream
        .record_event(Some(CUevent_flags::CU_EVENT_DEFAULT))
        .map_err(cuda_error("recording an event"))
}
