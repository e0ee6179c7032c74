//! Staging a group: planning it (unless it was planned ahead), laying its bytes and tables
//! out in its slot's pinned memory (chunks already read into pinned memory are not copied)
//! and uploading them as a few copies on the copy stream.

use std::sync::Arc;
use std::time::Instant;

use zarrpipe_cuda::cudarc::driver::{result, CudaContext, CudaStream};
use zarrpipe_cuda::During;
use zarrpipe_store::EncodedChunk;

use super::read_memory::PinnedReadMemory;
use super::slots::{grow, grow_pinned, Slot};
use super::staging_layout::StagingLayout;
use super::tables::{stage, table_start, Bases, Tables};
use super::upload_runs::UploadRuns;
use crate::batch::{prepare, Prepared};
use crate::plan::BatchPlan;
use crate::Result;

/// A group to stage: its chunks, or already planned.
pub(super) enum GroupInput {
    Chunks(Vec<EncodedChunk>),
    Planned(Prepared),
}

/// A batch staged and uploaded: where its tables and results are, and its output.
pub(super) struct Upload {
    pub(super) tables: Tables,
    pub(super) table_base: u64,
    /// The device input buffer and the copies that fill it.
    input: u64,
    runs: UploadRuns,
    pub(super) results: u64,
}

/// A group planned and staged, ready to upload.
pub(super) struct Staged {
    pub(super) prepared: Prepared,
    pub(super) upload: Upload,
    pub(super) slot: Slot,
    pub(super) plan_time: std::time::Duration,
    pub(super) stage_time: std::time::Duration,
}

/// Stages groups in pinned memory and uploads them on a stream of its own.
pub(super) struct Stager {
    /// Uploads run here, beside the decoding on the decode streams.
    copy_stream: Arc<CudaStream>,
    context: Arc<CudaContext>,
    /// Pinned memory that a pipeline's reads land in, so chunks upload without staging.
    read_memory: Arc<PinnedReadMemory>,
    /// Chunks the GPU cannot decode are refused instead of decoded on the CPU.
    strict: bool,
}

impl Stager {
    pub(super) fn new(
        copy_stream: Arc<CudaStream>,
        context: Arc<CudaContext>,
        read_memory: Arc<PinnedReadMemory>,
        strict: bool,
    ) -> Self {
        Self {
            copy_stream,
            context,
            read_memory,
            strict,
        }
    }

    /// Plans a group and stages its bytes and tables in the slot's pinned memory.
    pub(super) fn stage_group(
        &self,
        input: GroupInput,
        output_start: usize,
        mut slot: Slot,
        output_base: u64,
    ) -> Result<Staged> {
        let planning = Instant::now();
        let prepared = match input {
            GroupInput::Chunks(chunks) => prepare(chunks, self.strict, output_start),
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
    pub(super) fn stage(
        &self,
        plan: &BatchPlan,
        slot: &mut Slot,
        output_base: u64,
    ) -> Result<Upload> {
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
    pub(super) fn send(&self, upload: &Upload, stream: &Arc<CudaStream>) -> Result<()> {
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
}
