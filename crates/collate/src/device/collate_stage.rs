//! [`DeviceCollator`] as the collate stage: on a blocking thread of Tokio's pool (taking a
//! tensor can wait for the consumer to drop older ones), a batch's chunks are gathered where
//! they are (decoded on the GPU) or uploaded first (decoded on the CPU), on the collator's
//! stream, and the batch is handed on once its kernels have run, with the device time they
//! took.

use std::sync::Arc;
use std::time::{Duration, Instant};

use futures::future::BoxFuture;
use futures::FutureExt;
use zarrpipe_codec_gpu::{ChunkRuns, DecodedChunk, DecodedChunks, DeviceBatch, PendingChunks};
use zarrpipe_core::{BatchStats, Staged};
use zarrpipe_cuda::cudarc::driver::{CudaSlice, DevicePtr};
use zarrpipe_cuda::{CudaError, During};
use zarrpipe_store::ChunkRequest;

use super::turns::Ticket;
use super::{timed_event, DeviceCollator, Gpu};
use crate::{Batch, BatchCollator, DecodedBatch, Result};

/// Batches collated at once (each on a blocking thread that waits for its kernels).
const COLLATES_IN_FLIGHT: usize = 4;

/// The device memory a batch's chunks are in, held (never read) until its kernels have read
/// them.
enum ChunkMemory {
    /// Decoded on the GPU: the decoder's buffer.
    Decoded { _batch: DeviceBatch },
    /// Decoded on the CPU and uploaded.
    Uploaded { _buffer: CudaSlice<u8> },
}

impl BatchCollator for DeviceCollator {
    type Place = Gpu;

    fn collate_batch(
        self: Arc<Self>,
        batch: DecodedBatch,
    ) -> BoxFuture<'static, Result<Batch<Gpu>>> {
        // Taken as the batch comes, before anything waits (`turns.rs`).
        let ticket = self.turns.ticket();
        async move {
            tokio::task::spawn_blocking(move || self.collate_now(batch, ticket))
                .await
                .map_err(|error| {
                    CudaError::call(
                        "the collate task of a batch panicked or was cancelled",
                        error,
                    )
                })?
        }
        .boxed()
    }

    /// Batches enqueued at once. A gather waits for room on the GPU: beside W1's decoding,
    /// whose thread blocks each decode a 3.3 MB chunk, up to 40 ms however short it is, and
    /// with two in flight collation set the pace.
    fn batches_in_flight(&self) -> usize {
        COLLATES_IN_FLIGHT
    }
}

impl DeviceCollator {
    fn collate_now(&self, batch: DecodedBatch, ticket: Ticket) -> Result<Batch<Gpu>> {
        let started = Instant::now();
        let Staged {
            index,
            epoch,
            samples,
            payload,
            mut stats,
            pace,
        } = batch;
        let (mut decoded, mut host, mut pending) = (Vec::new(), Vec::new(), Vec::new());
        sort_parts(payload, &mut decoded, &mut host, &mut pending);
        // Chunks decoded on the GPU are complete (the decode stage waited for them). The
        // batch's work goes on the collator's own stream, of the highest priority: on the
        // stream that decoded them it queued behind the next batch's decoding, which takes the
        // stream once this one is done (W1 in batches of 4: gathers of 1-2 ms waited up to
        // 48 ms, and collation ran a batch every 22 ms).
        let stream = self.stream.clone();
        let mut requests: Vec<ChunkRequest> = Vec::with_capacity(host.len());
        let mut addresses: Vec<u64> = Vec::with_capacity(host.len());
        let mut memory = Vec::with_capacity(decoded.len() + 1);
        for mut part in decoded.drain(..) {
            let base = part.buffer().read_on(&stream)?;
            for chunk in std::mem::take(&mut part.chunks) {
                let chunk = chunk?;
                addresses.push(base + chunk.offset as u64);
                requests.push(chunk.request);
            }
            memory.push(ChunkMemory::Decoded { _batch: part });
        }
        if !host.is_empty() {
            let parts: Vec<&[u8]> = host.iter().map(|chunk| chunk.bytes.as_slice()).collect();
            let (buffer, offsets) = self.staging().upload_parts(&parts, &stream)?;
            let base = buffer.device_ptr(&stream).0;
            addresses.extend(offsets.iter().map(|&offset| base + offset as u64));
            requests.extend(host.drain(..).map(|chunk| chunk.request));
            memory.push(ChunkMemory::Uploaded { _buffer: buffer });
        }
        // This batch's turn: its pending chunks decode and its tensors' room is reserved only
        // after the batches before it have done both.
        let turn = ticket.wait();
        tracing::debug!(target: "zarrpipe::timeline", "batch {index}: collator's turn");
        for part in pending {
            // Decoded on the CPU straight into the pinned buffer they upload from.
            let lens: Vec<usize> = (0..part.chunks().len())
                .map(|i| part.decoded_len(i))
                .collect();
            let part_requests: Vec<ChunkRequest> = part.requests().into_iter().cloned().collect();
            let mut decoding = BatchStats::default();
            let (buffer, offsets) = self.staging().upload_written(&lens, &stream, |runs| {
                decoding = part.decode_into(&ChunkRuns::new(runs))?;
                Ok(())
            })?;
            stats += decoding;
            let base = buffer.device_ptr(&stream).0;
            addresses.extend(offsets.iter().map(|&offset| base + offset as u64));
            requests.extend(part_requests);
            memory.push(ChunkMemory::Uploaded { _buffer: buffer });
        }
        let chunks: Vec<(&ChunkRequest, u64)> = requests.iter().zip(addresses).collect();
        // The GPU's work for this batch runs from `tensors.begun` (the upload above is the
        // copy engine's) to `ready`.
        let tensors = self.enqueue(&samples, &chunks, &stream)?;
        drop(turn);
        tracing::debug!(target: "zarrpipe::timeline", "batch {index}: kernels queued");
        let ready = timed_event(&stream)?;
        // The batch is handed on finished: its device time is known, and the chunks' memory
        // can go (in the stream's order, after the kernels that read it).
        ready.synchronize().during("collating a batch")?;
        let device_ms = tensors.begun.elapsed_ms(&ready).during("timing a batch")?;
        drop(memory);
        drop(tensors.scratch);
        stats.gpu_busy += Duration::from_secs_f32(device_ms.max(0.0) / 1e3);
        stats.collate_busy += started.elapsed();
        Ok(Batch {
            index,
            epoch,
            inputs: tensors.inputs,
            targets: tensors.targets,
            mask: tensors.mask,
            nan_mask: tensors.nan_mask,
            latitude_weights: tensors.latitude_weights,
            samples,
            ready,
            stats,
            pace,
        })
    }
}

/// Sorts a batch's parts into those decoded on the GPU, the chunks decoded on the CPU and
/// those left for the collator to have decoded.
fn sort_parts(
    payload: DecodedChunks,
    decoded: &mut Vec<DeviceBatch>,
    host: &mut Vec<DecodedChunk>,
    pending: &mut Vec<PendingChunks>,
) {
    match payload {
        DecodedChunks::Host(chunks) => host.extend(chunks),
        DecodedChunks::Pending(chunks) => pending.push(chunks),
        DecodedChunks::Device(batch) => decoded.push(batch),
        DecodedChunks::Split(parts) => {
            for part in parts {
                sort_parts(part, decoded, host, pending);
            }
        }
    }
}
