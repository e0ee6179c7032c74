//! Running batch plans on a CUDA device: a group's bytes and tables staged in pinned memory
//! (chunks already read into pinned memory are not) and uploaded as a few copies, then each
//! round's ops as one nvCOMP call per codec and one launch per kernel kind, all on
//! the decoder's stream; per-op statuses come back at the end.

use std::collections::VecDeque;
use std::sync::{Arc, Mutex};
use std::time::Instant;

use zarrpipe_cuda::cudarc::driver::sys::CUstream;
use zarrpipe_cuda::cudarc::driver::{
    result, CudaContext, CudaEvent, CudaFunction, CudaSlice, CudaStream, DevicePtr, LaunchConfig,
    PushKernelArg,
};
use zarrpipe_cuda::{open_device, CudaError, DeviceBuffer, DeviceMemory, During};
use zarrpipe_store::{EncodedChunk, ReadMemory};

use super::admission::{Admission, Ticket};
use super::device_batches::{device_chunk, DeviceBatch, PendingBatch, PlannedBatch};
use super::kernels::Kernels;
use super::lanes::{Lane, Lanes};
use super::nvcomp::Nvcomp;
use super::read_memory::{PinnedReadMemory, SLAB_BYTES};
use super::slots::{grow, grow_pinned, InFlight, Slot, SlotPool, SLOTS};
use super::staging_layout::StagingLayout;
use super::tables::{stage, table_start, Bases, DecompressGroup, KernelKind, Launch, Tables};
use super::upload_runs::UploadRuns;
use super::{BatchTimings, DeviceChunk, GpuOptions};
use crate::batch::{
    check_tables, groups, output_bytes, prepare, prepare_checked, record_failures, Prepared,
    TableChecks,
};
use crate::plan::{BatchPlan, Codec};
use crate::{Error, Result};

/// Decodes batches of chunks on one GPU with nvCOMP and zarrpipe's kernels.
pub struct GpuDecoder {
    context: Arc<CudaContext>,
    /// Batches decode on these in turn, so consecutive batches overlap on the device (each
    /// nvCOMP call has one chunk per thread block, too few to fill the GPU alone).
    lanes: Lanes,
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
    /// Device memory of the batches decoding or decoded and not yet collated
    /// ([`GpuOptions::device_memory`]), admitted in the order the batches came.
    admission: Arc<Admission>,
    /// Batches being decoded or planned, in shares of [`DECODING_UNITS`]: a batch of few
    /// chunks takes a smaller share, so more of them decode at once.
    decoding: Arc<tokio::sync::Semaphore>,
    /// One batch at a time is planned and staged (on every core), in the order batches came:
    /// batches prepared side by side all finished late, and the GPU waited for the first of
    /// them (W1 of 64 steps, H100, 2026-11-25: the first batch's staging took 108 ms beside
    /// six others, against 13-18 ms alone).
    preparing: Arc<tokio::sync::Semaphore>,
    /// One batch at a time has its zstd tables checked (on every core), in order, while the
    /// batch before it is planned and staged: the checks are most of planning's time.
    checking: Arc<tokio::sync::Semaphore>,
    /// Pinned memory that a pipeline's reads land in, so chunks upload without staging.
    read_memory: Arc<PinnedReadMemory>,
    /// Last: the device's pooled memory goes back to the driver once this decoder's buffers
    /// and every other holder are gone.
    memory: Arc<DeviceMemory>,
}

/// The granularity of the pinned-memory budget.
const PINNED_UNIT: usize = 1 << 16;

/// The whole of the decoding budget: divisible by every count of batches up to 10, so that
/// each of `n` batches taking `DECODING_UNITS / n` lets exactly `n` in.
const DECODING_UNITS: usize = 5040;

/// An event that can be timed against another.
fn timed_event(stream: &Arc<CudaStream>) -> Result<CudaEvent> {
    stream
        .record_event(Some(
            zarrpipe_cuda::cudarc::driver::sys::CUevent_flags::CU_EVENT_DEFAULT,
        ))
        .during("recording an event")
        .map_err(Into::into)
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

/// A group to stage: its chunks, or already planned.
enum GroupInput {
    Chunks(Vec<EncodedChunk>),
    Planned(Prepared),
}

impl GpuDecoder {
    /// Opens device `options.device`, loads nvCOMP and compiles the kernels. Fails with
    /// [`zarrpipe_cuda::CudaError::Unavailable`] when there is no driver, device or nvCOMP.
    pub fn new(options: GpuOptions) -> Result<Self> {
        let context = open_device(options.device)?;
        let nvcomp = Nvcomp::load()?;
        if options.check_zstd_tables {
            crate::frames::enable_zstd_table_checks();
        }
        let memory = DeviceMemory::pooled(context.clone(), options.device_memory)?;
        let lanes = Lanes::new(&context, options.decode_streams)?;
        let copy_stream = context.new_stream().during("creating a stream")?;
        let kernels = Kernels::load(&context)?;
        let pinned_units = pinned_units(&options);
        let admission = Admission::new(options.device_memory);
        let read_memory = Arc::new(PinnedReadMemory::new(context.clone(), options.read_memory));
        Ok(Self {
            context: context.clone(),
            lanes,
            copy_stream,
            kernels,
            nvcomp,
            options,
            slots: SlotPool::default(),
            fault: Mutex::new(None),
            pinned: Arc::new(tokio::sync::Semaphore::new(pinned_units)),
            admission,
            decoding: Arc::new(tokio::sync::Semaphore::new(DECODING_UNITS)),
            preparing: Arc::new(tokio::sync::Semaphore::new(1)),
            checking: Arc::new(tokio::sync::Semaphore::new(1)),
            read_memory,
            memory,
        })
    }

    /// Pinned memory for a pipeline's chunk reads ([`GpuOptions::read_memory`]; `None` when
    /// that is under a slab): chunks read into it upload without a staging copy.
    pub fn read_memory(&self) -> Option<Arc<dyn ReadMemory>> {
        (!self.read_memory.is_empty()).then(|| self.read_memory.clone() as Arc<dyn ReadMemory>)
    }

    /// Waits until the pinned read memory that pipelines asked for ahead
    /// ([`ReadMemory::expect_held`]) is allocated, or no more can be; returns the bytes
    /// allocated. For benchmarks, which time passes once the setup is done.
    pub fn wait_for_read_memory(&self) -> usize {
        self.read_memory.wait_prepared();
        self.read_memory.slabs() * SLAB_BYTES
    }

    /// The device's name, e.g. "NVIDIA H100 80GB HBM3".
    pub fn device_name(&self) -> String {
        self.context
            .name()
            .unwrap_or_else(|_| "unknown CUDA device".into())
    }

    /// The device's pooled memory: hold it to keep the pool from being trimmed while device
    /// buffers of yours come and go (see [`DeviceMemory`]).
    pub fn memory(&self) -> Arc<DeviceMemory> {
        self.memory.clone()
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

    /// A batch's place in the order device memory is admitted in: taken when the batch comes,
    /// before anything awaits.
    pub(super) fn admission_ticket(&self) -> Ticket {
        self.admission.ticket()
    }

    /// The device memory a batch of `chunks` takes until collated: its decoded chunks and its
    /// stored bytes.
    pub(super) fn device_bytes(chunks: &[EncodedChunk]) -> usize {
        chunks
            .iter()
            .map(|chunk| output_bytes(chunk) + chunk.stored_len())
            .sum()
    }

    /// Waits until a batch of `chunks` may be planned and decoded: with fewer pieces a batch
    /// (chunks, or shards' inner chunks), more batches decode at once
    /// ([`GpuOptions::chunks_in_flight`]), one more being planned. Dropping the permit lets the
    /// next in.
    pub(crate) async fn reserve_decoding(
        &self,
        chunks: &[EncodedChunk],
    ) -> tokio::sync::OwnedSemaphorePermit {
        let batches = self.options.batches_decoding(super::pieces(chunks)) + 1;
        let units = (DECODING_UNITS / batches).max(1) as u32;
        self.decoding
            .clone()
            .acquire_many_owned(units)
            .await
            .expect("the semaphore is never closed")
    }

    /// Waits for the batches that came earlier to have their tables checked: dropping the
    /// permit lets the next one in (tokio's semaphore serves waiters in order).
    pub(crate) async fn reserve_checking(&self) -> tokio::sync::OwnedSemaphorePermit {
        self.checking
            .clone()
            .acquire_owned()
            .await
            .expect("the semaphore is never closed")
    }

    /// Waits for the batches that came earlier to be planned and staged: dropping the permit
    /// lets the next one in (tokio's semaphore serves waiters in order).
    pub(crate) async fn reserve_preparing(&self) -> tokio::sync::OwnedSemaphorePermit {
        self.preparing
            .clone()
            .acquire_owned()
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
        &self.lanes.first().stream
    }

    /// The stream the next [`Self::submit`] decodes on, when no other thread submits between.
    pub fn next_stream(&self) -> &Arc<CudaStream> {
        self.lanes.next_stream()
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
        let checks = check_tables(&chunks);
        self.plan_checked(chunks, checks)
    }

    /// [`Self::plan`] for chunks whose zstd tables [`check_tables`] checked; the planning
    /// time counts the checks' too.
    pub(crate) fn plan_checked(
        &self,
        chunks: Vec<EncodedChunk>,
        mut checks: TableChecks,
    ) -> PlannedBatch {
        let started = Instant::now();
        let checked_in = checks.took;
        let mut output_start = 0;
        let groups = groups(chunks.clone(), self.options.group_bytes)
            .into_iter()
            .map(|group| {
                let rest = checks.split_off(group.len());
                let group_checks = std::mem::replace(&mut checks, rest);
                let prepared =
                    prepare_checked(group, group_checks, self.options.strict, output_start);
                output_start = prepared.plan.output_len;
                prepared
            })
            .collect();
        PlannedBatch {
            sources: chunks,
            groups,
            plan_time: checked_in + started.elapsed(),
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
            Some(reason) => Err(Error::unavailable(reason)),
            None => Ok(()),
        }
    }

    /// Refuses every later batch after a failed CUDA call: most such errors stick to the
    /// context. Running out of device memory does not: the next batch may find enough.
    fn note_fault(&self, error: &Error) {
        if let Error::Cuda(error @ CudaError::Call { what, source }) = error {
            if error.is_out_of_memory() {
                return;
            }
            *self.fault.lock().unwrap_or_else(|p| p.into_inner()) = Some(format!(
                "the GPU faulted earlier ({what}: {source}); decode on the CPU"
            ));
        }
    }

    /// Submits the groups of a batch (`chunks`, split in groups of about
    /// `options.group_bytes`), pipelined: group k+1 is planned (unless it was planned ahead)
    /// and staged on a helper thread and uploaded on the copy stream while group k's
    /// decoding is enqueued (enqueueing nvCOMP's zstd can wait for the stream). The first
    /// group decodes on the batch's lane, later ones on free lanes when there are (the
    /// batch's lane waits for them): nvCOMP gives each chunk one thread block, so groups
    /// decoding one after the other left the GPU mostly idle (W1 in batches of 16, three
    /// groups each: 10.8 GB/s, 17.2-18.1 side by side). At most `SLOTS` groups of a batch are
    /// in flight; older ones are finished first.
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
        let (lane, hold) = self.lanes.take();
        let stream = &lane.stream;
        let output_len: usize = chunks.iter().map(output_bytes).sum();
        // SAFETY: every byte of the output a chunk owns is written by its ops before use.
        let output = unsafe { stream.alloc::<u8>(output_len.max(1)) }
            .during("allocating the batch output")?;
        let output_base = output.device_ptr(stream).0;
        // Groups on other lanes write the output once its allocation is done.
        let output_allocated = stream
            .record_event(None)
            .during("recording an allocation event")?;
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
            lanes: vec![hold],
        };
        let mut next = match groups.next() {
            Some(group) => Some(self.stage_group(group, 0, self.slots.take(), output_base)?),
            None => None,
        };
        let mut group_lane = lane;
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
            let group_stream = &group_lane.stream;
            self.send(&upload, group_stream)?;
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
            // The next group's lane.
            let free_lane = following.as_ref().and_then(|_| self.lanes.take_free());
            let following_lane = match free_lane {
                Some((free, hold)) => {
                    free.stream
                        .wait(&output_allocated)
                        .during("waiting for the batch's output")?;
                    pending.lanes.push(hold);
                    free
                }
                None => lane,
            };
            let (following, done) = std::thread::scope(|scope| {
                let staging = following.map(|group| {
                    scope.spawn(|| {
                        let slot = self.slots.take();
                        self.stage_group(group, output_start, slot, output_base)
                    })
                });
                let done = self
                    .execute(&upload, group_lane)
                    .and_then(|()| self.read_results(&upload, &mut slot, group_stream));
                let following = staging.map(|thread| thread.join().expect("staging thread"));
                (following, done)
            });
            let done = done?;
            if !Arc::ptr_eq(group_stream, stream) {
                stream.wait(&done).during("waiting for a group")?;
            }
            pending.ended = Some(timed_event(stream)?);
            pending.running.push_back(InFlight {
                prepared,
                tables: upload.tables,
                done,
                slot,
            });
            group_lane = following_lane;
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

    /// Waits for a group, turns its statuses into per-chunk results and frees its slot.
    fn finish(&self, group: InFlight) -> Result<Vec<Result<DeviceChunk>>> {
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
    ) -> Result<Staged> {
        let planning = Instant::now();
        let prepared = match input {
            GroupInput::Chunks(chunks) => prepare(chunks, self.options.strict, output_start),
            GroupInput::Planned(prepared) => prepared,
        };
        let staging = Instant::now();
        let upload = self.stage(&prepared.plan, &mut slot, output_base)?;
        Ok(Staged {
            plan_time: staging - planning,
            stage_time: staging.elapsed(),
            prepared,
            upload,
            slot,
        })
    }

    /// Stages a plan's bytes and tables in the slot's pinned memory, growing its buffers.
    fn stage(&self, plan: &BatchPlan, slot: &mut Slot, output_base: u64) -> Result<Upload> {
        let tables = Tables::build(plan);
        let table_start = table_start(plan);
        // New buffers come from the copy stream, in order before this group's upload, which
        // the decode stream waits for. (Allocated on the decode stream, they had the host
        // wait for that stream, which may be decoding another batch.)
        let copy = &self.copy_stream;
        let bases = Bases {
            input: grow(&mut slot.input, "input", copy, table_start + tables.len)?,
            scratch: grow(&mut slot.scratch, "scratch", copy, plan.scratch_len)?,
            output: output_base,
        };
        let results = grow(&mut slot.results, "results", copy, tables.results_len())?;
        let slabs = self.read_memory.ranges();
        let uploads = plan
            .uploads
            .iter()
            .map(|(bytes, offset)| (&bytes[..], *offset));
        let layout = StagingLayout::new(uploads, tables.len, |bytes| slabs.slab_of(bytes));
        let staging = grow_pinned(&self.context, &mut slot.staging, layout.len)?;
        let runs = stage(plan, &tables, &bases, staging, &layout);
        Ok(Upload {
            table_base: bases.input + table_start as u64,
            input: bases.input,
            runs,
            tables,
            results,
        })
    }

    /// Uploads a staged group on the copy stream; the decode stream waits for it.
    fn send(&self, upload: &Upload, stream: &Arc<CudaStream>) -> Result<()> {
        let sending = Instant::now();
        for run in upload.runs.runs() {
            // SAFETY: a run reads the slot's pinned staging buffer, not touched again until
            // this group has finished (`finish` waits on its event before the slot is
            // reused), or a slab of pinned read memory held by the group's chunks, which are
            // kept until then too (dropping a pending batch waits for its groups); it writes
            // inside `upload.input`, which holds the group's whole input and tables.
            unsafe {
                let source = std::slice::from_raw_parts(run.src as *const u8, run.len);
                result::memcpy_htod_async(
                    upload.input + run.dst as u64,
                    source,
                    self.copy_stream.cu_stream(),
                )
            }
            .during("uploading the batch")?;
        }
        tracing::debug!(
            target: "zarrpipe::gpu",
            "upload of {} copies ({} bytes staged) enqueued in {:.2} ms",
            upload.runs.runs().len(),
            upload.runs.staged_bytes(),
            sending.elapsed().as_secs_f64() * 1e3
        );
        let uploaded = self
            .copy_stream
            .record_event(None)
            .during("recording an upload event")?;
        stream
            .wait(&uploaded)
            .during("waiting for an upload")
            .map_err(Into::into)
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
            .during("reading decompression statuses")?;
        }
        stream
            .record_event(None)
            .during("recording a batch event")
            .map_err(Into::into)
    }

    /// For benchmarks: the time nvCOMP alone takes to decompress `chunks` already in device
    /// memory (best of `repeats` calls, kernels and uploads excluded), and the bytes it wrote:
    /// the bound the decoder's own time is judged against (`examples/03_decode_on_gpu.rs`).
    pub fn time_bare_nvcomp(
        &self,
        chunks: Vec<EncodedChunk>,
        repeats: usize,
    ) -> Result<(std::time::Duration, usize)> {
        let prepared = prepare(chunks, self.options.strict, 0);
        let mut slot = self.slots.take();
        let lane = self.lanes.first();
        let stream = &lane.stream;
        let mut temp = lane.temp.lock().unwrap_or_else(|p| p.into_inner());
        // SAFETY: written by the decompressions below before anything reads it.
        let output = unsafe { stream.alloc::<u8>(prepared.plan.output_len.max(1)) }
            .during("allocating the batch output")?;
        let output_base = output.device_ptr(stream).0;
        let upload = self.stage(&prepared.plan, &mut slot, output_base)?;
        self.send(&upload, stream)?;
        stream.synchronize().during("uploading")?;
        let mut best = std::time::Duration::MAX;
        for _ in 0..repeats.max(1) {
            let started = Instant::now();
            for round in &upload.tables.rounds {
                for (codec, group) in &round.decompress {
                    self.decompress(*codec, group, &upload, &mut temp, stream)?;
                }
            }
            stream.synchronize().during("running nvCOMP")?;
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
            if temp > self.options.temp_memory() && count > 1 {
                let half = count / 2;
                calls.push((first + half, count - half));
                calls.push((first, half));
            } else {
                sized.push((first, count, temp));
            }
        }
        let temp_len = sized.iter().map(|&(_, _, temp)| temp).max().unwrap_or(0);
        let temp = grow(temp, "nvCOMP temporary", stream, temp_len)?;
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
    let grid_x = launch.blocks.clamp(1, 1024) as u32;
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
        .during_with(|| format!("launching {:?}", launch.kind))
        .map_err(Into::into)
}

/// A batch staged and uploaded: where its tables and results are, and its output.
struct Upload {
    tables: Tables,
    table_base: u64,
    /// The device input buffer and the copies that fill it.
    input: u64,
    runs: UploadRuns,
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

impl Drop for GpuDecoder {
    /// Frees the decoder's buffers and returns the device memory its pool kept to the driver,
    /// so a dropped pipeline leaves no device memory behind.
    fn drop(&mut self) {
        for lane in self.lanes.iter() {
            let _ = lane.stream.synchronize();
        }
        self.slots
            .0
            .lock()
            .unwrap_or_else(|poison| poison.into_inner())
            .clear();
        for lane in self.lanes.iter() {
            *lane
                .temp
                .lock()
                .unwrap_or_else(|poison| poison.into_inner()) = None;
            let _ = lane.stream.synchronize();
        }
        // The pool is trimmed when `memory`, dropped after this, was the last holder.
    }
}
