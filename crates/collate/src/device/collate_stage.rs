//! [`DeviceCollator`] as the collate stage: on a blocking thread of Tokio's pool (taking a
//! tensor can wait for the consumer to drop older ones), a batch's chunks are gathered where
//! they are (decoded on the GPU) or uploaded first (decoded on the CPU), on the collator's
//! stream, and the batch is handed on once its kernels have run, with the device time they
//! took.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use futures::future::BoxFuture;
use futures::FutureExt;
use zarrpipe_codec_gpu::{
    ChunkPlacement, ChunkRuns, DecodedChunk, DecodedChunks, DecodingPart, DeviceBatch,
    PendingChunks,
};
use zarrpipe_core::{BatchStats, Staged};
use zarrpipe_cuda::cudarc::driver::{CudaSlice, CudaStream, DevicePtr};
use zarrpipe_cuda::{CudaError, During};
use zarrpipe_store::ChunkRequest;

use super::turns::{Ticket, Turn};
use super::{timed_event, DeviceCollator, Gpu};
use crate::{Batch, BatchCollator, DecodedBatch, Error, Result};

/// Batches collated at once (each on a blocking thread that waits for its kernels).
const COLLATES_IN_FLIGHT: usize = 4;

/// A batch's places in its turns, taken as it comes.
struct Tickets {
    /// To begin decoding its pending chunks.
    decode: Ticket,
    /// To plan and reserve its tensors' room.
    plan: Ticket,
}

/// An upload buffer's chunk runs that pass the decoding turn on once every chunk is queued.
struct RunsPassingTurn<'a> {
    runs: ChunkRuns<'a>,
    turn: Option<&'a Mutex<Option<Turn>>>,
}

impl ChunkPlacement for RunsPassingTurn<'_> {
    fn whole(&self, index: usize, len: usize) -> Option<&mut [u8]> {
        self.runs.whole(index, len)
    }

    fn put(&self, index: usize, decoded: &[u8]) {
        self.runs.put(index, decoded)
    }

    fn all_queued(&self) {
        if let Some(turn) = self.turn {
            drop(turn.lock().unwrap_or_else(|p| p.into_inner()).take());
        }
    }
}

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
        let tickets = Tickets {
            decode: self.decode_turns.ticket(),
            plan: self.plan_turns.ticket(),
        };
        async move {
            tokio::task::spawn_blocking(move || self.collate_now(batch, tickets))
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
    fn collate_now(&self, batch: DecodedBatch, tickets: Tickets) -> Result<Batch<Gpu>> {
        let started = Instant::now();
        let Staged {
            index,
            epoch,
            samples,
            payload,
            mut stats,
            pace,
        } = batch;
        let mut parts = Parts::default();
        parts.sort(payload);
        // Chunks decoded on the GPU are complete (the decode stage waited for them). The
        // batch's work goes on the collator's own stream, of the highest priority: on the
        // stream that decoded them it queued behind the next batch's decoding, which takes the
        // stream once this one is done (W1 in batches of 4: gathers of 1-2 ms waited up to
        // 48 ms, and collation ran a batch every 22 ms).
        let stream = self.stream.clone();
        let mut placed = Placed::default();
        self.place_decoded(&mut parts, &mut placed, &stream)?;
        // This batch's turns: its pending chunks are queued to decode once every chunk of the
        // batch before is, and its tensors' room is reserved once the batch before has
        // reserved its own.
        let decode_turn = Mutex::new(Some(tickets.decode.wait()));
        tracing::debug!(target: "zarrpipe::timeline", "batch {index}: collator's turn");
        let pending = std::mem::take(&mut parts.pending);
        let last = pending.len();
        for (i, part) in pending.into_iter().enumerate() {
            let passes_on = (i + 1 == last).then_some(&decode_turn);
            stats += self.decode_in_place(part, passes_on, &mut placed, &stream)?;
        }
        drop(decode_turn);
        let turn = tickets.plan.wait();
        // The parts still decoding (a split's GPU part): planned by their requests now, their
        // chunks' addresses taken once they are done, out of the turn, so that the next batch's
        // CPU part decodes meanwhile.
        let decoding = std::mem::take(&mut parts.decoding);
        let later: Vec<ChunkRequest> = decoding
            .iter()
            .flat_map(|part| part.requests().iter().cloned())
            .collect();
        let requests: Vec<&ChunkRequest> = placed.requests.iter().chain(&later).collect();
        let planned = self.plan(&samples, &requests)?;
        drop(turn);
        let mut addresses = std::mem::take(&mut placed.addresses);
        if !decoding.is_empty() {
            let done = self.wait_for(decoding, &mut stats, &stream)?;
            addresses.extend(done.addresses_of(&later)?);
            placed.memory.extend(done.memory);
        }
        // The GPU's work for this batch runs from `tensors.begun` (the upload above is the
        // copy engine's) to `ready`.
        let tensors = self.enqueue(&samples, planned, addresses, &stream)?;
        tracing::debug!(target: "zarrpipe::timeline", "batch {index}: kernels queued");
        let ready = timed_event(&stream)?;
        // The batch is handed on finished: its device time is known, and the chunks' memory
        // can go (in the stream's order, after the kernels that read it).
        ready.synchronize().during("collating a batch")?;
        let device_ms = tensors.begun.elapsed_ms(&ready).during("timing a batch")?;
        drop(placed);
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

    /// Has a pending part's chunks decoded on the CPU straight into the pinned buffer they
    /// upload from, passing the decoding turn in `passes_on` on once they are all queued;
    /// returns what decoding cost.
    fn decode_in_place(
        &self,
        part: PendingChunks,
        passes_on: Option<&Mutex<Option<Turn>>>,
        placed: &mut Placed,
        stream: &Arc<CudaStream>,
    ) -> Result<BatchStats> {
        let lens: Vec<usize> = (0..part.chunks().len())
            .map(|i| part.decoded_len(i))
            .collect();
        let requests: Vec<ChunkRequest> = part.requests().into_iter().cloned().collect();
        let mut decoding = BatchStats::default();
        let (buffer, offsets) = self.staging().upload_written(&lens, stream, |runs| {
            let runs = RunsPassingTurn {
                runs: ChunkRuns::new(runs),
                turn: passes_on,
            };
            decoding = part.decode_into(&runs)?;
            Ok(())
        })?;
        placed.add_uploaded(requests, buffer, &offsets, stream);
        Ok(decoding)
    }

    /// Waits for the parts still decoding and places their chunks, decoded by then (on the
    /// GPU, or on the CPU into memory of their own); adds what they cost to `stats`.
    fn wait_for(
        &self,
        decoding: Vec<DecodingPart>,
        stats: &mut BatchStats,
        stream: &Arc<CudaStream>,
    ) -> Result<Placed> {
        let mut done = Placed::default();
        for part in decoding {
            let decoded = part.wait()?;
            *stats += decoded.stats();
            let mut parts = Parts::default();
            parts.sort(decoded);
            self.place_decoded(&mut parts, &mut done, stream)?;
        }
        Ok(done)
    }

    /// Places the chunks decoded on the GPU where they are, in `stream`'s order after their
    /// decoding, and uploads those decoded on the CPU into memory of their own.
    fn place_decoded(
        &self,
        parts: &mut Parts,
        placed: &mut Placed,
        stream: &Arc<CudaStream>,
    ) -> Result<()> {
        for mut part in parts.decoded.drain(..) {
            let base = part.buffer().read_on(stream)?;
            let mut requests = Vec::with_capacity(part.chunks.len());
            let mut addresses = Vec::with_capacity(part.chunks.len());
            for chunk in std::mem::take(&mut part.chunks) {
                let chunk = chunk?;
                addresses.push(base + chunk.offset as u64);
                requests.push(chunk.request);
            }
            placed.add(requests, addresses);
            placed.memory.push(ChunkMemory::Decoded { _batch: part });
        }
        let host = std::mem::take(&mut parts.host);
        if !host.is_empty() {
            self.upload(host, placed, stream)?;
        }
        Ok(())
    }

    /// Uploads chunks decoded on the CPU into memory of their own (one pinned copy).
    fn upload(
        &self,
        chunks: Vec<DecodedChunk>,
        placed: &mut Placed,
        stream: &Arc<CudaStream>,
    ) -> Result<()> {
        let bytes: Vec<&[u8]> = chunks.iter().map(|chunk| chunk.bytes.as_slice()).collect();
        let (buffer, offsets) = self.staging().upload_parts(&bytes, stream)?;
        let requests = chunks.into_iter().map(|chunk| chunk.request);
        placed.add_uploaded(requests, buffer, &offsets, stream);
        Ok(())
    }
}

/// A batch's parts by where they are: decoded on the GPU, decoded on the CPU, left for the
/// collator to have decoded, and still decoding.
#[derive(Default)]
struct Parts {
    decoded: Vec<DeviceBatch>,
    host: Vec<DecodedChunk>,
    pending: Vec<PendingChunks>,
    decoding: Vec<DecodingPart>,
}

impl Parts {
    fn sort(&mut self, payload: DecodedChunks) {
        match payload {
            DecodedChunks::Host(chunks) => self.host.extend(chunks),
            DecodedChunks::Pending(chunks) => self.pending.push(chunks),
            DecodedChunks::Device(batch) => self.decoded.push(batch),
            DecodedChunks::Decoding(part) => self.decoding.push(part),
            DecodedChunks::Split(parts) => {
                for part in parts {
                    self.sort(part);
                }
            }
        }
    }
}

/// Chunks placed on the device: their requests and addresses, in one order, and the memory
/// they are in, held (never read) until the batch's kernels have read them.
#[derive(Default)]
struct Placed {
    requests: Vec<ChunkRequest>,
    addresses: Vec<u64>,
    memory: Vec<ChunkMemory>,
}

impl Placed {
    fn add(
        &mut self,
        requests: impl IntoIterator<Item = ChunkRequest>,
        addresses: impl IntoIterator<Item = u64>,
    ) {
        self.requests.extend(requests);
        self.addresses.extend(addresses);
    }

    /// Adds chunks uploaded into `buffer` at `offsets` (in the order of `requests`), holding
    /// the buffer until the batch's kernels have read it.
    fn add_uploaded(
        &mut self,
        requests: impl IntoIterator<Item = ChunkRequest>,
        buffer: CudaSlice<u8>,
        offsets: &[usize],
        stream: &Arc<CudaStream>,
    ) {
        let base = buffer.device_ptr(stream).0;
        self.add(requests, offsets.iter().map(|&offset| base + offset as u64));
        self.memory.push(ChunkMemory::Uploaded { _buffer: buffer });
    }

    /// The addresses of the chunks of `requests`, in their order, wherever they were placed.
    fn addresses_of(&self, requests: &[ChunkRequest]) -> Result<Vec<u64>> {
        let at: HashMap<(&str, &[u64]), u64> = (self.requests.iter())
            .zip(&self.addresses)
            .map(|(request, &address)| ((request.variable.name(), &request.indices[..]), address))
            .collect();
        requests
            .iter()
            .map(|request| {
                let key = (request.variable.name(), &request.indices[..]);
                at.get(&key)
                    .copied()
                    .ok_or_else(|| Error::ChunkNotReturned {
                        variable: request.variable.name().to_string(),
                        indices: request.indices.clone(),
                    })
            })
            .collect()
    }
}
