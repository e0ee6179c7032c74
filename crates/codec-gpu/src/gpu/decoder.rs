//! [`GpuDecoder`]: running batch plans on a CUDA device, composed of the gates a batch waits
//! at ([`BatchGates`]), staging ([`Stager`]), submission ([`Submission`], enqueueing through
//! [`Launcher`]) and completion ([`Completion`]), with a fault latch that refuses batches
//! once the device faulted.

use std::sync::Arc;
use std::time::Instant;

use zarrpipe_cuda::cudarc::driver::{CudaContext, CudaStream, DevicePtr};
use zarrpipe_cuda::{open_device, DeviceMemory, During};
use zarrpipe_store::{EncodedChunk, ReadMemory};

use super::admission::Ticket;
use super::batch_gates::{self, BatchGates};
use super::completion::Completion;
use super::device_batches::{DeviceBatch, PendingBatch, PlannedBatch};
use super::fault::FaultLatch;
use super::kernels::Kernels;
use super::lanes::Lanes;
use super::launcher::Launcher;
use super::nvcomp::Nvcomp;
use super::read_memory::{PinnedReadMemory, SLAB_BYTES};
use super::slots::SlotPool;
use super::staging::{GroupInput, Stager};
use super::submission::Submission;
use super::GpuOptions;
use crate::batch::{check_tables, groups, prepare, prepare_checked, TableChecks};
use crate::Result;

/// Decodes batches of chunks on one GPU with nvCOMP and zarrpipe's kernels.
pub struct GpuDecoder {
    context: Arc<CudaContext>,
    /// Batches decode on these in turn, so consecutive batches overlap on the device (each
    /// nvCOMP call has one chunk per thread block, too few to fill the GPU alone).
    lanes: Lanes,
    /// Stages groups and uploads them on a copy stream, beside the decoding on the lanes.
    stager: Stager,
    /// Enqueues staged groups' decoding: nvCOMP and zarrpipe's kernels.
    launcher: Launcher,
    options: GpuOptions,
    /// Staging and device buffers of groups not in flight, reused from batch to batch.
    slots: SlotPool,
    /// Set when the device faulted: every later batch is refused.
    fault: FaultLatch,
    /// Pinned memory, decoding shares, turns to be checked and planned, and device memory:
    /// what a batch waits for before it decodes.
    gates: BatchGates,
    /// Pinned memory that a pipeline's reads land in, so chunks upload without staging.
    read_memory: Arc<PinnedReadMemory>,
    /// Last: the device's pooled memory goes back to the driver once this decoder's buffers
    /// and every other holder are gone.
    memory: Arc<DeviceMemory>,
}

impl std::fmt::Debug for GpuDecoder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("GpuDecoder")
            .field("device", &self.options.device)
            .field("nvcomp", &self.launcher.nvcomp_path())
            .finish()
    }
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
        let gates = BatchGates::new(&options);
        // Past the fetch stage, reads are held by the batches decoding (one a stream, one
        // planning) and the one being collated.
        let batches_held = options.decode_streams.max(1) + 2;
        let read_memory = Arc::new(PinnedReadMemory::new(
            context.clone(),
            options.read_memory,
            batches_held,
        ));
        let stager = Stager::new(
            copy_stream,
            context.clone(),
            read_memory.clone(),
            options.strict,
        );
        let launcher = Launcher::new(kernels, nvcomp, context.clone(), options.temp_memory());
        Ok(Self {
            context,
            lanes,
            stager,
            launcher,
            options,
            slots: SlotPool::default(),
            fault: FaultLatch::default(),
            gates,
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
    /// ([`ReadMemory::expect_batches`]) is allocated, or no more can be; returns the bytes
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
        self.gates.reserve_pinned(stored).await
    }

    /// A batch's place in the order device memory is admitted in: taken when the batch comes,
    /// before anything awaits.
    pub(super) fn admission_ticket(&self) -> Ticket {
        self.gates.admission_ticket()
    }

    /// The device memory a batch of `chunks` takes until collated: its decoded chunks and its
    /// stored bytes.
    pub(super) fn device_bytes(chunks: &[EncodedChunk]) -> usize {
        batch_gates::device_bytes(chunks)
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
        self.gates.reserve_decoding(batches).await
    }

    /// Waits for the batches that came earlier to have their tables checked: dropping the
    /// permit lets the next one in (tokio's semaphore serves waiters in order).
    pub(crate) async fn reserve_checking(&self) -> tokio::sync::OwnedSemaphorePermit {
        self.gates.reserve_checking().await
    }

    /// Waits for the batches that came earlier to be planned and staged: dropping the permit
    /// lets the next one in (tokio's semaphore serves waiters in order).
    pub(crate) async fn reserve_preparing(&self) -> tokio::sync::OwnedSemaphorePermit {
        self.gates.reserve_preparing().await
    }

    /// Where nvCOMP was loaded from.
    pub fn nvcomp_path(&self) -> &str {
        self.launcher.nvcomp_path()
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
        self.fault.check()?;
        let inputs = groups(chunks.clone(), self.options.group_bytes)
            .into_iter()
            .map(GroupInput::Chunks);
        self.submission()
            .submit(chunks, inputs, std::time::Duration::ZERO)
            .inspect_err(|error| self.fault.note(error))
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
        self.fault.check()?;
        let PlannedBatch {
            sources,
            groups,
            plan_time,
        } = planned;
        let inputs = groups.into_iter().map(GroupInput::Planned);
        self.submission()
            .submit(sources, inputs, plan_time)
            .inspect_err(|error| self.fault.note(error))
    }

    /// Waits for a submitted batch and reads its per-chunk statuses. If a chunk failed on the
    /// device, the others are decoded again without it (nvCOMP's behaviour on a corrupt stream
    /// is undefined and may spill into the other chunks of its call), into a new buffer.
    pub fn complete(&self, pending: PendingBatch) -> Result<DeviceBatch> {
        let completion = Completion {
            slots: &self.slots,
            memory: &self.memory,
            fault: &self.fault,
        };
        completion.complete(pending, |chunks| self.decode_batch(chunks))
    }

    /// The parts a batch is submitted with.
    fn submission(&self) -> Submission<'_> {
        Submission {
            lanes: &self.lanes,
            slots: &self.slots,
            stager: &self.stager,
            launcher: &self.launcher,
        }
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
        let upload = self.stager.stage(&prepared.plan, &mut slot, output_base)?;
        self.stager.send(&upload, stream)?;
        stream.synchronize().during("uploading")?;
        let mut best = std::time::Duration::MAX;
        for _ in 0..repeats.max(1) {
            let started = Instant::now();
            for round in &upload.tables.rounds {
                for (codec, group) in &round.decompress {
                    self.launcher
                        .decompress(*codec, group, &upload, &mut temp, stream)?;
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
