//! Running batch plans on a CUDA device: one pinned staging buffer and one upload per batch,
//! then each round's ops as one nvCOMP call per codec and one launch per kernel kind, all on
//! the decoder's stream; per-op statuses come back at the end.

use std::collections::{BTreeMap, VecDeque};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Instant;

use cudarc::driver::sys::CUstream;
use cudarc::driver::{
    result, CudaContext, CudaEvent, CudaFunction, CudaSlice, CudaStream, DevicePtr, LaunchConfig,
    PinnedHostSlice, PushKernelArg,
};
use rayon::prelude::*;
use zarrpipe_store::{ChunkRequest, EncodedChunk};

use super::kernels::{self, Kernels, MAX_DIMS};
use super::nvcomp::{status_name, Nvcomp};
use super::{BatchTimings, DeviceChunk, GpuOptions};
use crate::batch::{groups, output_bytes, prepare, record_failures, Prepared, PreparedChunk};
use crate::plan::{BatchPlan, Codec, Op, Region, Space};
use crate::{DecodedChunk, Error, Result};

fn cuda_error(what: impl Into<String>) -> impl FnOnce(cudarc::driver::DriverError) -> Error {
    let what = what.into();
    move |error| Error::Cuda {
        what,
        source: Box::new(error),
    }
}

/// Decodes batches of chunks on one GPU with nvCOMP and zarrpipe's kernels.
pub struct GpuDecoder {
    context: Arc<CudaContext>,
    /// Batches decode on these in turn, so consecutive batches overlap on the device (each
    /// nvCOMP call has one chunk per thread block, too few to fill the GPU alone).
    lanes: Vec<Lane>,
    next_lane: AtomicUsize,
    /// Uploads run here, beside the decoding on `stream`.
    copy_stream: Arc<CudaStream>,
    kernels: Kernels,
    nvcomp: Nvcomp,
    options: GpuOptions,
    /// Staging and device buffers of groups not in flight, reused from batch to batch.
    slots: SlotPool,
    /// Set when the device faulted: CUDA errors of that kind stick to the context, so every
    /// later batch is refused with this reason.
    fault: Mutex<Option<String>>,
    /// Pinned staging memory for batches being decoded, in units of [`PINNED_UNIT`] bytes.
    pinned: Arc<tokio::sync::Semaphore>,
}

/// The granularity of the pinned-memory budget.
const PINNED_UNIT: usize = 1 << 16;

/// An event that can be timed against another.
fn timed_event(stream: &Arc<CudaStream>) -> Result<CudaEvent> {
    stream
        .record_event(Some(cudarc::driver::sys::CUevent_flags::CU_EVENT_DEFAULT))
        .map_err(cuda_error("recording an event"))
}

/// The pinned-memory budget in units (a `u32` count, as the semaphore takes them).
fn pinned_units(options: &GpuOptions) -> usize {
    (options.pinned_memory / PINNED_UNIT).clamp(1, u32::MAX as usize)
}

impl std::fmt::Debug for GpuDecoder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("GpuDecoder")
            .field("device", &self.options.device)
            .field("nvcomp", &self.nvcomp.path)
            .finish()
    }
}

/// Whether the CUDA driver and NVRTC can be opened (cudarc loads them at run time).
#[cfg(not(feature = "cuda-linked"))]
fn libraries_present() -> (bool, bool) {
    // SAFETY: only probes whether the libraries can be opened.
    unsafe {
        (
            cudarc::driver::sys::is_culib_present(),
            cudarc::nvrtc::sys::is_culib_present(),
        )
    }
}

/// Linked at build time (candle asks cudarc for that): a running program has them.
#[cfg(feature = "cuda-linked")]
fn libraries_present() -> (bool, bool) {
    (true, true)
}

/// Groups of one batch staged, uploading or decoding at once.
const SLOTS: usize = 3;

/// A decode stream and nvCOMP's temporary memory for it: the decompressions of a stream run
/// in its order, so one buffer serves them all.
struct Lane {
    stream: Arc<CudaStream>,
    temp: Mutex<Option<CudaSlice<u8>>>,
}

/// The buffers of one group in flight; they only grow, and go back to the pool when the
/// group has finished.
#[derive(Default)]
struct Slot {
    staging: Option<PinnedHostSlice<u8>>,
    input: Option<CudaSlice<u8>>,
    scratch: Option<CudaSlice<u8>>,
    results: Option<CudaSlice<u8>>,
    results_host: Option<PinnedHostSlice<u8>>,
}

/// Free slots, shared with the batches in flight that hold the others.
#[derive(Clone, Default)]
struct SlotPool(Arc<Mutex<Vec<Slot>>>);

impl SlotPool {
    fn take(&self) -> Slot {
        self.0
            .lock()
            .unwrap_or_else(|poison| poison.into_inner())
            .pop()
            .unwrap_or_default()
    }

    fn give_back(&self, slot: Slot) {
        self.0
            .lock()
            .unwrap_or_else(|poison| poison.into_inner())
            .push(slot);
    }
}

/// A group whose work is enqueued; `done` completes when its statuses are on the host.
struct InFlight {
    prepared: Prepared,
    tables: Tables,
    done: CudaEvent,
    slot: Slot,
}

/// A decoded batch: the chunks' bytes in one device buffer.
pub struct DeviceBatch {
    pub chunks: Vec<Result<DeviceChunk>>,
    pub timings: BatchTimings,
    buffer: CudaSlice<u8>,
    stream: Arc<CudaStream>,
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
    sources: Vec<EncodedChunk>,
    /// The decode stream the batch runs on.
    stream: Arc<CudaStream>,
    /// Where each chunk will be, as planned (errors found while planning included).
    planned: Vec<Option<(ChunkRequest, usize)>>,
    running: VecDeque<InFlight>,
    finished: Vec<Result<DeviceChunk>>,
    output: CudaSlice<u8>,
    timings: BatchTimings,
    started: Instant,
    pool: SlotPool,
    /// Timed events on the decode stream: after the first group's upload, after the last
    /// group's work (the batch's device time lies between).
    begun: Option<CudaEvent>,
    ended: Option<CudaEvent>,
}

/// A batch planned on the CPU ([`GpuDecoder::plan`]): frames read and checked, CPU
/// fallbacks decoded, tables laid out. Planning needs no GPU, so it can run on another
/// thread while the batch before is staged and uploaded.
pub struct PlannedBatch {
    sources: Vec<EncodedChunk>,
    groups: Vec<Prepared>,
    plan_time: std::time::Duration,
}

impl std::fmt::Debug for PlannedBatch {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PlannedBatch")
            .field("chunks", &self.sources.len())
            .field("groups", &self.groups.len())
            .finish()
    }
}

/// A group to stage: its chunks, or already planned.
enum GroupInput {
    Chunks(Vec<EncodedChunk>),
    Planned(Prepared),
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

impl GpuDecoder {
    /// Opens device `options.device`, loads nvCOMP and compiles the kernels. Fails with
    /// [`Error::CudaUnavailable`] when there is no driver, device or nvCOMP.
    pub fn new(options: GpuOptions) -> Result<Self> {
        match libraries_present() {
            (false, _) => {
                return Err(Error::CudaUnavailable {
                    reason: "no CUDA driver (libcuda.so) on this machine".into(),
                })
            }
            (_, false) => {
                return Err(Error::CudaUnavailable {
                    reason: "NVRTC (libnvrtc.so) was not found: add the CUDA toolkit's lib \
                             directory to LD_LIBRARY_PATH"
                        .into(),
                })
            }
            _ => {}
        }
        let count = CudaContext::device_count().map_err(|error| Error::CudaUnavailable {
            reason: format!("the CUDA driver found no device: {error:?}"),
        })?;
        if options.device >= count.max(0) as usize {
            return Err(Error::CudaUnavailable {
                reason: format!("no CUDA device {} ({count} present)", options.device),
            });
        }
        let nvcomp = Nvcomp::load()?;
        if options.check_zstd_tables {
            crate::frames::enable_zstd_table_checks();
        }
        let context = CudaContext::new(options.device).map_err(cuda_error("opening the device"))?;
        // Work is ordered by streams and events this decoder records itself, so cudarc's
        // per-buffer events are not needed.
        // SAFETY: buffers are only shared between streams through those events.
        unsafe { context.disable_event_tracking() };
        keep_freed_memory_pooled(&context)?;
        let lanes = (0..options.decode_streams.max(1))
            .map(|_| {
                Ok(Lane {
                    stream: context
                        .new_stream()
                        .map_err(cuda_error("creating a stream"))?,
                    temp: Mutex::new(None),
                })
            })
            .collect::<Result<Vec<_>>>()?;
        let copy_stream = context
            .new_stream()
            .map_err(cuda_error("creating a stream"))?;
        let kernels = Kernels::load(&context)?;
        let pinned_units = pinned_units(&options);
        Ok(Self {
            context,
            lanes,
            next_lane: AtomicUsize::new(0),
            copy_stream,
            kernels,
            nvcomp,
            options,
            slots: SlotPool::default(),
            fault: Mutex::new(None),
            pinned: Arc::new(tokio::sync::Semaphore::new(pinned_units)),
        })
    }

    /// The device's name, e.g. "NVIDIA H100 80GB HBM3".
    pub fn device_name(&self) -> String {
        self.context
            .name()
            .unwrap_or_else(|_| "unknown CUDA device".into())
    }

    /// How the decoder runs.
    pub fn options(&self) -> &GpuOptions {
        &self.options
    }

    /// Waits until `stored` bytes of pinned staging memory are free for a batch (at once when
    /// no other batch holds any, however large this one is); dropping the permit frees them.
    pub(crate) async fn reserve_pinned(&self, stored: usize) -> tokio::sync::OwnedSemaphorePermit {
        let units = stored
            .div_ceil(PINNED_UNIT)
            .clamp(1, pinned_units(&self.options)) as u32;
        self.pinned
            .clone()
            .acquire_many_owned(units)
            .await
            .expect("the semaphore is never closed")
    }

    /// Where nvCOMP was loaded from.
    pub fn nvcomp_path(&self) -> &str {
        &self.nvcomp.path
    }

    /// The CUDA context of the decoder's device.
    pub fn context(&self) -> &Arc<CudaContext> {
        &self.context
    }

    /// The decoder's first stream (batches decode on its streams in turn; see
    /// [`PendingBatch::stream`]).
    pub fn stream(&self) -> &Arc<CudaStream> {
        &self.lanes[0].stream
    }

    /// The stream the next [`Self::submit`] decodes on, when no other thread submits between.
    pub fn next_stream(&self) -> &Arc<CudaStream> {
        &self.lanes[self.next_lane.load(Ordering::Relaxed) % self.lanes.len()].stream
    }

    /// Decodes `chunks` into one device buffer. A chunk that fails (corrupt, or needing the
    /// CPU when strict) is an error in its place; the others are still right.
    ///
    /// A stream corrupt in a way the CPU checks cannot see may still make nvCOMP fault (its
    /// zstd decoder writes out of bounds on some corrupt Huffman tables). The batch is then an
    /// error, and so is every later one, since a CUDA fault poisons the context: decode on the
    /// CPU from there on.
    pub fn decode_batch(&self, chunks: Vec<EncodedChunk>) -> Result<DeviceBatch> {
        let pending = self.submit(chunks)?;
        self.complete(pending)
    }

    /// Plans `chunks`, stages and uploads them and enqueues their decoding, returning before
    /// the device is done (large batches wait for their earlier groups). The next batch can be
    /// submitted at once; [`Self::complete`] then checks this one.
    pub fn submit(&self, chunks: Vec<EncodedChunk>) -> Result<PendingBatch> {
        self.check_fault()?;
        let inputs = groups(chunks.clone(), self.options.group_bytes)
            .into_iter()
            .map(GroupInput::Chunks);
        self.submit_groups(chunks, inputs, std::time::Duration::ZERO)
            .inspect_err(|error| self.note_fault(error))
    }

    /// Plans a batch on the CPU, on the calling thread (and rayon's), without touching the
    /// GPU: a pipeline plans batch k+1 here while [`Self::submit_planned`] stages batch k.
    pub fn plan(&self, chunks: Vec<EncodedChunk>) -> PlannedBatch {
        let started = Instant::now();
        let mut output_start = 0;
        let groups = groups(chunks.clone(), self.options.group_bytes)
            .into_iter()
            .map(|group| {
                let prepared = prepare(group, self.options.strict, output_start);
                output_start = prepared.plan.output_len;
                prepared
            })
            .collect();
        PlannedBatch {
            sources: chunks,
            groups,
            plan_time: started.elapsed(),
        }
    }

    /// [`Self::submit`] for a batch planned with [`Self::plan`].
    pub fn submit_planned(&self, planned: PlannedBatch) -> Result<PendingBatch> {
        self.check_fault()?;
        let PlannedBatch {
            sources,
            groups,
            plan_time,
        } = planned;
        let inputs = groups.into_iter().map(GroupInput::Planned);
        self.submit_groups(sources, inputs, plan_time)
            .inspect_err(|error| self.note_fault(error))
    }

    /// Waits for a submitted batch and reads its per-chunk statuses. If a chunk failed on the
    /// device, the others are decoded again without it (nvCOMP's behaviour on a corrupt stream
    /// is undefined and may spill into the other chunks of its call), into a new buffer.
    pub fn complete(&self, mut pending: PendingBatch) -> Result<DeviceBatch> {
        let mut batch = self
            .finish_all(&mut pending)
            .inspect_err(|error| self.note_fault(error))?;
        let failed_on_device =
            |chunk: &Result<DeviceChunk>| matches!(chunk, Err(Error::GpuDecode { .. }));
        if !batch.chunks.iter().any(failed_on_device) {
            return Ok(batch);
        }
        let kept: Vec<usize> = (0..batch.chunks.len())
            .filter(|&index| batch.chunks[index].is_ok())
            .collect();
        let sources = std::mem::take(&mut pending.sources);
        let retry =
            self.decode_batch(kept.iter().map(|&index| sources[index].clone()).collect())?;
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

    fn check_fault(&self) -> Result<()> {
        match self.fault.lock().unwrap_or_else(|p| p.into_inner()).clone() {
            Some(reason) => Err(Error::CudaUnavailable { reason }),
            None => Ok(()),
        }
    }

    fn note_fault(&self, error: &Error) {
        if let Error::Cuda { what, source } = error {
            *self.fault.lock().unwrap_or_else(|p| p.into_inner()) = Some(format!(
                "the GPU faulted earlier ({what}: {source}); decode on the CPU"
            ));
        }
    }

    /// Submits the groups of a batch (`chunks`, split in groups of about
    /// `options.group_bytes`), pipelined: group k+1 is planned (unless it was planned ahead)
    /// and staged on a helper thread and uploaded on the copy stream while group k's
    /// decoding is enqueued (enqueueing nvCOMP's zstd can wait for the stream). At most
    /// `SLOTS` groups of a batch are in flight; older ones are finished first.
    fn submit_groups(
        &self,
        chunks: Vec<EncodedChunk>,
        mut groups: impl Iterator<Item = GroupInput> + Send,
        plan_time: std::time::Duration,
    ) -> Result<PendingBatch> {
        // Planned ahead: the batch's time started then.
        let started = Instant::now()
            .checked_sub(plan_time)
            .unwrap_or_else(Instant::now);
        let count = chunks.len();
        let lane = &self.lanes[self.next_lane.fetch_add(1, Ordering::Relaxed) % self.lanes.len()];
        let stream = &lane.stream;
        let output_len: usize = chunks.iter().map(output_bytes).sum();
        // SAFETY: every byte of the output a chunk owns is written by its ops before use.
        let output = unsafe { stream.alloc::<u8>(output_len.max(1)) }
            .map_err(cuda_error("allocating the batch output"))?;
        let output_base = output.device_ptr(stream).0;
        let mut pending = PendingBatch {
            sources: chunks,
            stream: stream.clone(),
            planned: Vec::with_capacity(count),
            running: VecDeque::new(),
            finished: Vec::with_capacity(count),
            output,
            timings: BatchTimings {
                plan: plan_time,
                ..Default::default()
            },
            started,
            pool: self.slots.clone(),
            begun: None,
            ended: None,
        };
        let mut next = match groups.next() {
            Some(group) => {
                Some(self.stage_group(group, 0, self.slots.take(), output_base, stream)?)
            }
            None => None,
        };
        while let Some(staged) = next.take() {
            pending.timings.plan += staged.plan_time;
            pending.timings.stage += staged.stage_time;
            let Staged {
                prepared,
                upload,
                mut slot,
                ..
            } = staged;
            pending.planned.extend(prepared.chunks.iter().map(|chunk| {
                let (region, _) = chunk.outcome.as_ref().ok()?;
                Some((chunk.request.clone(), region.offset))
            }));
            self.send(&upload, &mut slot, stream)?;
            if pending.begun.is_none() {
                pending.begun = Some(timed_event(stream)?);
            }
            while pending.running.len() >= SLOTS - 1 {
                let oldest = pending.running.pop_front().expect("a running group");
                let chunks = self.finish(oldest)?;
                pending.finished.extend(chunks);
            }
            let output_start = prepared.plan.output_len;
            let following = groups.next();
            let (following, done) = std::thread::scope(|scope| {
                let staging = following.map(|group| {
                    scope.spawn(|| {
                        let slot = self.slots.take();
                        self.stage_group(group, output_start, slot, output_base, stream)
                    })
                });
                let done = self
                    .execute(&upload, lane)
                    .and_then(|()| self.read_results(&upload, &mut slot, stream));
                let following = staging.map(|thread| thread.join().expect("staging thread"));
                (following, done)
            });
            pending.ended = Some(timed_event(stream)?);
            pending.running.push_back(InFlight {
                prepared,
                tables: upload.tables,
                done: done?,
                slot,
            });
            next = following.transpose()?;
        }
        Ok(pending)
    }

    /// Finishes every group of a pending batch.
    fn finish_all(&self, pending: &mut PendingBatch) -> Result<DeviceBatch> {
        while let Some(group) = pending.running.pop_front() {
            let chunks = self.finish(group)?;
            pending.finished.extend(chunks);
        }
        let mut timings = pending.timings;
        timings.device = pending
            .started
            .elapsed()
            .saturating_sub(timings.plan + timings.stage);
        if let (Some(begun), Some(ended)) = (&pending.begun, &pending.ended) {
            let ms = begun
                .elapsed_ms(ended)
                .map_err(cuda_error("timing a batch"))?;
            timings.gpu = std::time::Duration::from_secs_f32(ms.max(0.0) / 1e3);
        }
        // SAFETY: a zero-length placeholder, never read; the real buffer moves out.
        let empty = unsafe { pending.stream.alloc::<u8>(0) }.map_err(cuda_error("allocating"))?;
        Ok(DeviceBatch {
            chunks: std::mem::take(&mut pending.finished),
            timings,
            buffer: std::mem::replace(&mut pending.output, empty),
            stream: pending.stream.clone(),
        })
    }

    /// Waits for a group, turns its statuses into per-chunk results and frees its slot.
    fn finish(&self, group: InFlight) -> Result<Vec<Result<DeviceChunk>>> {
        let InFlight {
            prepared,
            tables,
            done,
            mut slot,
        } = group;
        let waited = done.synchronize().map_err(cuda_error("running the batch"));
        let results_len = tables.results_len();
        let failures = match (&waited, slot.results_host.as_mut()) {
            (Ok(()), Some(host)) => {
                let results = host
                    .as_mut_slice()
                    .map_err(cuda_error("mapping pinned memory"))?;
                tables.failures(&results[..results_len])
            }
            _ => Vec::new(),
        };
        if waited.is_ok() {
            self.slots.give_back(slot);
        }
        waited?;
        let mut chunks = prepared.chunks;
        record_failures(&mut chunks, failures);
        Ok(chunks.into_iter().map(device_chunk).collect())
    }

    /// Plans a group and stages its bytes and tables in the slot's pinned memory.
    fn stage_group(
        &self,
        input: GroupInput,
        output_start: usize,
        mut slot: Slot,
        output_base: u64,
        stream: &Arc<CudaStream>,
    ) -> Result<Staged> {
        let planning = Instant::now();
        let prepared = match input {
            GroupInput::Chunks(chunks) => prepare(chunks, self.options.strict, output_start),
            GroupInput::Planned(prepared) => prepared,
        };
        let staging = Instant::now();
        let upload = self.stage(&prepared.plan, &mut slot, output_base, stream)?;
        Ok(Staged {
            plan_time: staging - planning,
            stage_time: staging.elapsed(),
            prepared,
            upload,
            slot,
        })
    }

    /// Stages a plan's bytes and tables in the slot's pinned memory, growing its buffers.
    fn stage(
        &self,
        plan: &BatchPlan,
        slot: &mut Slot,
        output_base: u64,
        stream: &Arc<CudaStream>,
    ) -> Result<Upload> {
        let tables = Tables::build(plan);
        let table_start = plan.input_len.next_multiple_of(256);
        let staging_len = table_start + tables.len;
        let mut grown = false;
        let bases = Bases {
            input: grow(&mut slot.input, stream, staging_len, &mut grown)?,
            scratch: grow(&mut slot.scratch, stream, plan.scratch_len, &mut grown)?,
            output: output_base,
        };
        let results = grow(&mut slot.results, stream, tables.results_len(), &mut grown)?;
        if grown {
            // New buffers come from the decoder's stream; the copy stream may use them only
            // once they exist.
            stream
                .synchronize()
                .map_err(cuda_error("allocating device buffers"))?;
        }
        let staging = grow_pinned(&self.context, &mut slot.staging, staging_len)?;
        stage(plan, &tables, &bases, staging, table_start);
        Ok(Upload {
            table_base: bases.input + table_start as u64,
            input: bases.input,
            staging_len,
            tables,
            results,
        })
    }

    /// Uploads a staged group on the copy stream; the decode stream waits for it.
    fn send(&self, upload: &Upload, slot: &mut Slot, stream: &Arc<CudaStream>) -> Result<()> {
        let staging = slot
            .staging
            .as_mut()
            .expect("staged")
            .as_mut_slice()
            .map_err(cuda_error("mapping pinned memory"))?;
        // SAFETY: `staging` is pinned and not touched again until this group has finished
        // (`finish` waits on its event before the slot is reused); `upload.input` holds
        // `staging_len` bytes.
        unsafe {
            result::memcpy_htod_async(
                upload.input,
                &staging[..upload.staging_len],
                self.copy_stream.cu_stream(),
            )
        }
        .map_err(cuda_error("uploading the batch"))?;
        let uploaded = self
            .copy_stream
            .record_event(None)
            .map_err(cuda_error("recording an upload event"))?;
        stream
            .wait(&uploaded)
            .map_err(cuda_error("waiting for an upload"))
    }

    /// Enqueues every round's ops on the lane's stream.
    fn execute(&self, upload: &Upload, lane: &Lane) -> Result<()> {
        let mut temp = lane.temp.lock().unwrap_or_else(|p| p.into_inner());
        for round in &upload.tables.rounds {
            for (codec, group) in &round.decompress {
                self.decompress(*codec, group, upload, &mut temp, &lane.stream)?;
            }
            for launch in &round.launches {
                self.launch(launch, upload.table_base, &lane.stream)?;
            }
        }
        Ok(())
    }

    /// Enqueues the copy of the decompressions' sizes and statuses to the slot's pinned
    /// memory; the returned event marks the end of the group's work.
    fn read_results(
        &self,
        upload: &Upload,
        slot: &mut Slot,
        stream: &Arc<CudaStream>,
    ) -> Result<CudaEvent> {
        let results_len = upload.tables.results_len();
        let results_host = grow_pinned(&self.context, &mut slot.results_host, results_len)?;
        if results_len > 0 {
            // SAFETY: `results_host` is pinned, holds `results_len` bytes, and is read only
            // after the returned event completes.
            unsafe {
                result::memcpy_dtoh_async(
                    &mut results_host[..results_len],
                    upload.results,
                    stream.cu_stream(),
                )
            }
            .map_err(cuda_error("reading decompression statuses"))?;
        }
        stream
            .record_event(None)
            .map_err(cuda_error("recording a batch event"))
    }

    /// For benchmarks: the time nvCOMP alone takes to decompress `chunks` already in device
    /// memory (best of `repeats` calls, kernels and uploads excluded), and the bytes it wrote.
    #[doc(hidden)]
    pub fn time_bare_nvcomp(
        &self,
        chunks: Vec<EncodedChunk>,
        repeats: usize,
    ) -> Result<(std::time::Duration, usize)> {
        let prepared = prepare(chunks, self.options.strict, 0);
        let mut slot = self.slots.take();
        let lane = &self.lanes[0];
        let stream = &lane.stream;
        let mut temp = lane.temp.lock().unwrap_or_else(|p| p.into_inner());
        // SAFETY: written by the decompressions below before anything reads it.
        let output = unsafe { stream.alloc::<u8>(prepared.plan.output_len.max(1)) }
            .map_err(cuda_error("allocating the batch output"))?;
        let output_base = output.device_ptr(stream).0;
        let upload = self.stage(&prepared.plan, &mut slot, output_base, stream)?;
        self.send(&upload, &mut slot, stream)?;
        stream.synchronize().map_err(cuda_error("uploading"))?;
        let mut best = std::time::Duration::MAX;
        for _ in 0..repeats.max(1) {
            let started = Instant::now();
            for round in &upload.tables.rounds {
                for (codec, group) in &round.decompress {
                    self.decompress(*codec, group, &upload, &mut temp, stream)?;
                }
            }
            stream.synchronize().map_err(cuda_error("running nvCOMP"))?;
            best = best.min(started.elapsed());
        }
        let bytes = upload
            .tables
            .decompressed
            .iter()
            .map(|&(_, _, len)| len)
            .sum();
        self.slots.give_back(slot);
        Ok((best, bytes))
    }

    fn decompress(
        &self,
        codec: Codec,
        group: &DecompressGroup,
        upload: &Upload,
        temp: &mut Option<CudaSlice<u8>>,
        stream: &Arc<CudaStream>,
    ) -> Result<()> {
        let (table_base, results, tables) = (upload.table_base, upload.results, &upload.tables);
        let cu_stream: CUstream = stream.cu_stream();
        // Split the group until each call's temporary memory fits the budget.
        let mut calls = vec![(0usize, group.count)];
        let mut sized = Vec::new();
        while let Some((first, count)) = calls.pop() {
            let max_chunk = group.max_outputs[first..first + count]
                .iter()
                .copied()
                .max()
                .unwrap_or(0);
            let total: usize = group.max_outputs[first..first + count].iter().sum();
            let temp = self
                .nvcomp
                .temp_bytes(codec, count, max_chunk, total, cu_stream)?;
            if temp > self.options.temp_budget && count > 1 {
                let half = count / 2;
                calls.push((first + half, count - half));
                calls.push((first, half));
            } else {
                sized.push((first, count, temp));
            }
        }
        let temp_len = sized.iter().map(|&(_, _, temp)| temp).max().unwrap_or(0);
        let temp = grow(temp, stream, temp_len, &mut false)?;
        for (first, count, temp_bytes) in sized {
            let at = |table: usize, size: usize| table_base + (table + first * size) as u64;
            let result = |offset: usize, size: usize| {
                results + (offset + (group.result_index + first) * size) as u64
            };
            let enqueue = Instant::now();
            // SAFETY: the four tables of `group` were uploaded with `count` entries from
            // `first` on, pointing into the input, scratch and output buffers at ranges the
            // plan checked; the results buffer has a slot per op; `temp` holds `temp_bytes`.
            unsafe {
                self.nvcomp.decompress(
                    codec,
                    count,
                    at(group.inputs, 8),
                    at(group.input_sizes, 8),
                    at(group.output_sizes, 8),
                    result(0, 8),
                    at(group.outputs, 8),
                    result(tables.status_offset(), 4),
                    temp,
                    temp_bytes,
                    cu_stream,
                )?;
            }
            tracing::debug!(
                target: "zarrpipe::gpu",
                "nvCOMP {codec:?} call of {count} chunks enqueued in {:.2} ms",
                enqueue.elapsed().as_secs_f64() * 1e3
            );
        }
        Ok(())
    }

    fn launch(&self, launch: &Launch, table_base: u64, stream: &Arc<CudaStream>) -> Result<()> {
        let function = match launch.kind {
            KernelKind::Copy => &self.kernels.copy,
            KernelKind::Fill => &self.kernels.fill,
            KernelKind::Unshuffle => &self.kernels.unshuffle,
            KernelKind::BitUnshuffle => &self.kernels.bit_unshuffle,
            KernelKind::Swap => &self.kernels.swap,
            KernelKind::Transpose => &self.kernels.transpose,
            KernelKind::Place => &self.kernels.place,
            KernelKind::ScaleOffset => &self.kernels.scale_offset,
        };
        launch_table(stream, function, launch, table_base)
    }
}

fn launch_table(
    stream: &Arc<CudaStream>,
    function: &CudaFunction,
    launch: &Launch,
    table_base: u64,
) -> Result<()> {
    let table = table_base + launch.table as u64;
    let count = launch.count as u64;
    let grid_x = launch.max_len.div_ceil(256 * 8).clamp(1, 1024) as u32;
    let config = LaunchConfig {
        grid_dim: (grid_x, launch.count.min(65535) as u32, 1),
        block_dim: (256, 1, 1),
        shared_mem_bytes: 0,
    };
    let mut builder = stream.launch_builder(function);
    builder.arg(&table).arg(&count);
    // SAFETY: the kernel reads `count` descriptors of its kind from `table` (uploaded in
    // this batch's staging), whose pointers and lengths the plan bounded to live buffers.
    unsafe { builder.launch(config) }
        .map(|_| ())
        .map_err(cuda_error(format!("launching {:?}", launch.kind)))
}

/// A batch staged and uploaded: where its tables and results are, and its output.
struct Upload {
    tables: Tables,
    table_base: u64,
    /// The device input buffer and how much of the staging buffer goes there.
    input: u64,
    staging_len: usize,
    results: u64,
}

/// A group planned and staged, ready to upload.
struct Staged {
    prepared: Prepared,
    upload: Upload,
    slot: Slot,
    plan_time: std::time::Duration,
    stage_time: std::time::Duration,
}

fn device_chunk(chunk: PreparedChunk) -> Result<DeviceChunk> {
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
    /// Copies the decoded chunks back to host memory (for checks and CPU consumers).
    pub fn into_host(self) -> Result<Vec<Result<DecodedChunk>>> {
        let host = self
            .stream
            .clone_dtoh(&self.buffer)
            .map_err(cuda_error("copying a batch to the host"))?;
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
                })
            })
            .collect())
    }

    /// The device buffer holding every chunk (see [`DeviceChunk::offset`]).
    pub fn buffer(&self) -> &CudaSlice<u8> {
        &self.buffer
    }

    /// The stream that decoded the chunks: work reading them goes there (or waits on it),
    /// and the buffer is freed in its order.
    pub fn stream(&self) -> &Arc<CudaStream> {
        &self.stream
    }

    /// Decoded bytes in the batch's buffer.
    pub fn len(&self) -> usize {
        self.buffer.len()
    }

    pub fn is_empty(&self) -> bool {
        self.buffer.is_empty()
    }
}

impl Drop for GpuDecoder {
    /// Frees the decoder's buffers and returns the device memory its pool kept to the driver,
    /// so a dropped pipeline leaves no device memory behind.
    fn drop(&mut self) {
        for lane in &self.lanes {
            let _ = lane.stream.synchronize();
        }
        self.slots
            .0
            .lock()
            .unwrap_or_else(|poison| poison.into_inner())
            .clear();
        for lane in &self.lanes {
            *lane
                .temp
                .lock()
                .unwrap_or_else(|poison| poison.into_inner()) = None;
            let _ = lane.stream.synchronize();
        }
        trim_memory_pool(&self.context);
    }
}

/// Returns the memory the device's default pool keeps (see [`keep_freed_memory_pooled`]) to
/// the driver. Memory other users of the pool hold is not touched.
pub fn trim_memory_pool(context: &Arc<CudaContext>) {
    use cudarc::driver::sys;
    if context.bind_to_thread().is_err() {
        return;
    }
    let mut pool = std::ptr::null_mut();
    // SAFETY: driver calls on the bound context's own device pool.
    unsafe {
        if sys::cuDeviceGetDefaultMemPool(&mut pool, context.cu_device())
            == sys::CUresult::CUDA_SUCCESS
        {
            let _ = sys::cuMemPoolTrimTo(pool, 0);
        }
    }
}

/// Device memory freed by a batch stays in the pool for the next, instead of going back to
/// the driver at each synchronisation.
fn keep_freed_memory_pooled(context: &Arc<CudaContext>) -> Result<()> {
    use cudarc::driver::sys;
    context
        .bind_to_thread()
        .map_err(cuda_error("binding the context"))?;
    let mut pool = std::ptr::null_mut();
    // SAFETY: plain driver queries on the bound context's device; `threshold` outlives the
    // call that reads it.
    unsafe {
        let status = sys::cuDeviceGetDefaultMemPool(&mut pool, context.cu_device());
        if status != sys::CUresult::CUDA_SUCCESS {
            return Ok(()); // no stream-ordered pools: nothing to keep
        }
        let mut threshold = u64::MAX;
        sys::cuMemPoolSetAttribute(
            pool,
            sys::CUmemPool_attribute::CU_MEMPOOL_ATTR_RELEASE_THRESHOLD,
            (&mut threshold as *mut u64).cast(),
        )
        .result()
        .map_err(cuda_error("setting the memory pool's release threshold"))?;
    }
    Ok(())
}

/// Grows `slot` to at least `len` bytes (setting `grown`); returns its device address.
fn grow(
    slot: &mut Option<CudaSlice<u8>>,
    stream: &Arc<CudaStream>,
    len: usize,
    grown: &mut bool,
) -> Result<u64> {
    if slot.as_ref().is_none_or(|buffer| buffer.len() < len) {
        *grown = true;
        *slot = None; // free before allocating the larger one
        let capacity = (len + len / 4).max(1 << 20);
        // SAFETY: scratch memory; every byte read is written first within a batch.
        let buffer = unsafe { stream.alloc::<u8>(capacity) }.map_err(cuda_error(format!(
            "allocating {capacity} bytes of device memory"
        )))?;
        *slot = Some(buffer);
    }
    let buffer = slot.as_ref().expect("allocated above");
    Ok(buffer.device_ptr(stream).0)
}

fn grow_pinned<'a>(
    context: &Arc<CudaContext>,
    slot: &'a mut Option<PinnedHostSlice<u8>>,
    len: usize,
) -> Result<&'a mut [u8]> {
    if slot.as_ref().is_none_or(|buffer| buffer.len() < len) {
        *slot = None;
        let capacity = (len + len / 4).max(1 << 20);
        // SAFETY: host staging memory; every byte uploaded is written first.
        let buffer = unsafe { context.alloc_pinned::<u8>(capacity) }.map_err(cuda_error(
            format!("allocating {capacity} bytes of pinned memory"),
        ))?;
        *slot = Some(buffer);
    }
    slot.as_mut()
        .expect("allocated above")
        .as_mut_slice()
        .map_err(cuda_error("mapping pinned memory"))
}

/// Device addresses of the plan's spaces.
struct Bases {
    input: u64,
    scratch: u64,
    output: u64,
}

impl Bases {
    fn address(&self, region: Region) -> u64 {
        let base = match region.space {
            Space::Input => self.input,
            Space::Scratch => self.scratch,
            Space::Output => self.output,
        };
        base + region.offset as u64
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
enum KernelKind {
    Copy,
    Fill,
    Unshuffle,
    BitUnshuffle,
    Swap,
    Transpose,
    Place,
    ScaleOffset,
}

impl KernelKind {
    fn descriptor_size(self) -> usize {
        use std::mem::size_of;
        match self {
            KernelKind::Copy => size_of::<kernels::CopyOp>(),
            KernelKind::Fill => size_of::<kernels::FillOp>(),
            KernelKind::Unshuffle | KernelKind::BitUnshuffle => size_of::<kernels::ShuffleOp>(),
            KernelKind::Swap => size_of::<kernels::SwapOp>(),
            KernelKind::Transpose => size_of::<kernels::TransposeOp>(),
            KernelKind::Place => size_of::<kernels::PlaceOp>(),
            KernelKind::ScaleOffset => size_of::<kernels::ScaleOffsetOp>(),
        }
    }
}

/// One nvCOMP call's tables (offsets in the table area) and the ops it covers.
struct DecompressGroup {
    ops: Vec<(usize, Op)>,
    count: usize,
    inputs: usize,
    input_sizes: usize,
    output_sizes: usize,
    outputs: usize,
    max_outputs: Vec<usize>,
    /// Index of the group's first op among all decompressions (its results slot).
    result_index: usize,
}

struct Launch {
    kind: KernelKind,
    ops: Vec<(usize, Op)>,
    count: usize,
    table: usize,
    max_len: usize,
}

#[derive(Default)]
struct RoundTables {
    decompress: BTreeMap<Codec, DecompressGroup>,
    launches: Vec<Launch>,
}

/// Where every descriptor table of a batch goes in the table area after the uploads.
struct Tables {
    rounds: Vec<RoundTables>,
    len: usize,
    decompressions: usize,
    /// (chunk, what) of each decompression, by result slot.
    decompressed: Vec<(usize, Codec, usize)>,
}

impl Tables {
    fn build(plan: &BatchPlan) -> Self {
        let mut len = 0usize;
        let mut take = |bytes: usize| {
            let at = len;
            len = (len + bytes).next_multiple_of(16);
            at
        };
        let mut decompressed = Vec::new();
        let mut rounds = Vec::new();
        for round in &plan.rounds {
            let mut by_codec: BTreeMap<Codec, Vec<(usize, Op)>> = BTreeMap::new();
            let mut by_kind: BTreeMap<KernelKind, Vec<(usize, Op)>> = BTreeMap::new();
            for (chunk, op) in round {
                let kind = match op {
                    Op::Decompress { codec, .. } => {
                        by_codec
                            .entry(*codec)
                            .or_default()
                            .push((*chunk, op.clone()));
                        continue;
                    }
                    Op::Copy { .. } => KernelKind::Copy,
                    Op::Fill { .. } => KernelKind::Fill,
                    Op::Unshuffle { .. } => KernelKind::Unshuffle,
                    Op::BitUnshuffle { .. } => KernelKind::BitUnshuffle,
                    Op::SwapBytes { .. } => KernelKind::Swap,
                    Op::Transpose { .. } => KernelKind::Transpose,
                    Op::PlaceBlock { .. } => KernelKind::Place,
                    Op::ScaleOffset { .. } => KernelKind::ScaleOffset,
                };
                by_kind.entry(kind).or_default().push((*chunk, op.clone()));
            }
            let mut tables = RoundTables::default();
            for (codec, ops) in by_codec {
                let count = ops.len();
                let max_outputs = ops
                    .iter()
                    .map(|(_, op)| match op {
                        Op::Decompress { dst, .. } => dst.len,
                        _ => 0,
                    })
                    .collect();
                let result_index = decompressed.len();
                decompressed.extend(ops.iter().map(|(chunk, op)| (*chunk, codec, op_len(op))));
                tables.decompress.insert(
                    codec,
                    DecompressGroup {
                        count,
                        inputs: take(8 * count),
                        input_sizes: take(8 * count),
                        output_sizes: take(8 * count),
                        outputs: take(8 * count),
                        max_outputs,
                        result_index,
                        ops,
                    },
                );
            }
            for (kind, ops) in by_kind {
                let count = ops.len();
                let max_len = ops.iter().map(|(_, op)| op_len(op)).max().unwrap_or(0);
                tables.launches.push(Launch {
                    kind,
                    count,
                    table: take(kind.descriptor_size() * count),
                    max_len,
                    ops,
                });
            }
            rounds.push(tables);
        }
        Self {
            rounds,
            len,
            decompressions: decompressed.len(),
            decompressed,
        }
    }

    /// Actual sizes (8 bytes each), then statuses (4 bytes each).
    fn results_len(&self) -> usize {
        self.status_offset() + 4 * self.decompressions
    }

    fn status_offset(&self) -> usize {
        8 * self.decompressions
    }

    /// The decompressions that failed or produced the wrong size, by chunk.
    fn failures(&self, results: &[u8]) -> Vec<(usize, String)> {
        let mut failures = Vec::new();
        for (slot, &(chunk, codec, expected)) in self.decompressed.iter().enumerate() {
            let actual =
                u64::from_ne_bytes(results[8 * slot..8 * slot + 8].try_into().expect("8 bytes"));
            let at = self.status_offset() + 4 * slot;
            let status = i32::from_ne_bytes(results[at..at + 4].try_into().expect("4 bytes"));
            if status != 0 {
                failures.push((
                    chunk,
                    format!(
                        "{codec:?} stream: nvCOMP status {status} ({})",
                        status_name(status)
                    ),
                ));
            } else if actual != expected as u64 {
                failures.push((
                    chunk,
                    format!("{codec:?} stream decoded to {actual} bytes, expected {expected}"),
                ));
            }
        }
        failures
    }
}

/// The length that sizes an op's launch (bytes, or elements for element kernels).
fn op_len(op: &Op) -> usize {
    match op {
        Op::Decompress { dst, .. } | Op::Copy { dst, .. } | Op::Fill { dst, .. } => dst.len,
        Op::Unshuffle { dst, .. } | Op::BitUnshuffle { dst, .. } => dst.len,
        Op::SwapBytes { region, .. } => region.len,
        Op::Transpose { dst, .. } | Op::ScaleOffset { dst, .. } => dst.len,
        Op::PlaceBlock { src: block, .. } => block.len,
    }
}

/// Fills the pinned staging buffer: uploads first (in parallel), then every table.
fn stage(plan: &BatchPlan, tables: &Tables, bases: &Bases, staging: &mut [u8], table_start: usize) {
    let (uploads, table_area) = staging.split_at_mut(table_start);
    // Hand each upload its own disjoint slice, then copy them on every core.
    let mut rest = &mut uploads[..plan.input_len];
    let mut consumed = 0;
    let mut pieces = Vec::with_capacity(plan.uploads.len());
    for (bytes, offset) in &plan.uploads {
        let (_, tail) = rest.split_at_mut(offset - consumed);
        let (piece, tail) = tail.split_at_mut(bytes.len());
        pieces.push((piece, bytes));
        consumed = offset + bytes.len();
        rest = tail;
    }
    pieces
        .into_par_iter()
        .with_min_len(4)
        .for_each(|(piece, bytes)| piece.copy_from_slice(bytes));

    let put = |area: &mut [u8], at: usize, bytes: &[u8]| {
        area[at..at + bytes.len()].copy_from_slice(bytes)
    };
    for round in &tables.rounds {
        for group in round.decompress.values() {
            let mut inputs = Vec::with_capacity(group.count);
            let mut input_sizes = Vec::with_capacity(group.count);
            let mut output_sizes = Vec::with_capacity(group.count);
            let mut outputs = Vec::with_capacity(group.count);
            for (_, op) in &group.ops {
                if let Op::Decompress { src, dst, .. } = op {
                    inputs.push(bases.address(*src));
                    input_sizes.push(src.len as u64);
                    output_sizes.push(dst.len as u64);
                    outputs.push(bases.address(*dst));
                }
            }
            put(table_area, group.inputs, kernels::as_bytes(&inputs));
            put(
                table_area,
                group.input_sizes,
                kernels::as_bytes(&input_sizes),
            );
            put(
                table_area,
                group.output_sizes,
                kernels::as_bytes(&output_sizes),
            );
            put(table_area, group.outputs, kernels::as_bytes(&outputs));
        }
        for launch in &round.launches {
            let bytes = descriptors(launch, bases);
            put(table_area, launch.table, &bytes);
        }
    }
}

/// The descriptor table of one launch, as bytes.
fn descriptors(launch: &Launch, bases: &Bases) -> Vec<u8> {
    let address = |region: Region| bases.address(region);
    let dims = |values: &[u64]| {
        let mut out = [0u64; MAX_DIMS];
        out[..values.len()].copy_from_slice(values);
        out
    };
    let mut bytes = Vec::with_capacity(launch.kind.descriptor_size() * launch.count);
    for (_, op) in &launch.ops {
        match op {
            Op::Copy { src, dst } => {
                bytes.extend_from_slice(kernels::as_bytes(&[kernels::CopyOp {
                    src: address(*src),
                    dst: address(*dst),
                    len: dst.len as u64,
                }]))
            }
            Op::Fill { dst, pattern } => {
                let mut fixed = [0u8; 16];
                fixed[..pattern.len()].copy_from_slice(pattern);
                bytes.extend_from_slice(kernels::as_bytes(&[kernels::FillOp {
                    dst: address(*dst),
                    len: dst.len as u64,
                    pattern_len: pattern.len().max(1) as u64,
                    pattern: fixed,
                }]))
            }
            Op::Unshuffle {
                src,
                planes,
                dst,
                type_size,
            }
            | Op::BitUnshuffle {
                src,
                planes,
                dst,
                type_size,
            } => bytes.extend_from_slice(kernels::as_bytes(&[kernels::ShuffleOp {
                src: address(*src),
                dst: address(*dst),
                len: dst.len as u64,
                type_size: *type_size as u64,
                plane_len: planes.plane_len as u64,
                plane_stride: planes.plane_stride as u64,
            }])),
            Op::SwapBytes {
                region,
                element_size,
            } => bytes.extend_from_slice(kernels::as_bytes(&[kernels::SwapOp {
                ptr: address(*region),
                len: region.len as u64,
                element_size: *element_size as u64,
            }])),
            Op::Transpose {
                src,
                dst,
                encoded_shape,
                encoded_order,
                element_size,
            } => {
                let order: Vec<u64> = encoded_order.iter().map(|&a| a as u64).collect();
                bytes.extend_from_slice(kernels::as_bytes(&[kernels::TransposeOp {
                    src: address(*src),
                    dst: address(*dst),
                    elements: (dst.len / element_size) as u64,
                    element_size: *element_size as u64,
                    ndim: encoded_shape.len() as u64,
                    shape: dims(encoded_shape),
                    order: dims(&order),
                }]))
            }
            Op::PlaceBlock {
                src,
                dst,
                block,
                outer,
                start,
                element_size,
            } => bytes.extend_from_slice(kernels::as_bytes(&[kernels::PlaceOp {
                src: address(*src),
                dst: address(*dst),
                elements: (src.len / element_size) as u64,
                element_size: *element_size as u64,
                ndim: block.len() as u64,
                block: dims(block),
                outer: dims(outer),
                start: dims(start),
            }])),
            Op::ScaleOffset { src, dst, spec } => {
                bytes.extend_from_slice(kernels::as_bytes(&[kernels::ScaleOffsetOp {
                    src: address(*src),
                    dst: address(*dst),
                    elements: (dst.len / spec.dtype.size()) as u64,
                    dtype: spec.dtype as u32,
                    astype: spec.astype.unwrap_or(spec.dtype) as u32,
                    cast: spec.astype.is_some() as u32,
                    offset_bits: spec.offset.to_bits(),
                    scale_bits: spec.scale.to_bits(),
                    pad: 0,
                }]))
            }
            Op::Decompress { .. } => unreachable!("decompressions go to nvCOMP, not a kernel"),
        }
    }
    bytes
}
