//! Enqueueing a staged group's decoding on a decode stream: each round's ops as one nvCOMP
//! call per codec (split while its temporary memory is over budget) and one launch per kernel
//! kind, then the copy of the per-op statuses back to pinned memory.

use std::sync::Arc;
use std::time::Instant;

use zarrpipe_cuda::cudarc::driver::sys::CUstream;
use zarrpipe_cuda::cudarc::driver::{
    result, CudaContext, CudaEvent, CudaFunction, CudaSlice, CudaStream, LaunchConfig,
    PushKernelArg,
};
use zarrpipe_cuda::{During, HOST_WAITED_EVENT};

use super::kernels::Kernels;
use super::lanes::Lane;
use super::nvcomp::Nvcomp;
use super::slots::{grow, grow_pinned, Slot};
use super::staging::Upload;
use super::tables::{DecompressGroup, KernelKind, Launch};
use crate::plan::Codec;
use crate::Result;

/// Runs staged groups' ops with nvCOMP and zarrpipe's kernels.
pub(super) struct Launcher {
    kernels: Kernels,
    nvcomp: Nvcomp,
    context: Arc<CudaContext>,
    /// nvCOMP's temporary memory per decode stream ([`super::GpuOptions::temp_memory`]).
    temp_memory: usize,
}

impl Launcher {
    pub(super) fn new(
        kernels: Kernels,
        nvcomp: Nvcomp,
        context: Arc<CudaContext>,
        temp_memory: usize,
    ) -> Self {
        Self {
            kernels,
            nvcomp,
            context,
            temp_memory,
        }
    }

    /// Where nvCOMP was loaded from.
    pub(super) fn nvcomp_path(&self) -> &str {
        &self.nvcomp.path
    }

    /// Enqueues every round's ops on the lane's stream.
    pub(super) fn execute(&self, upload: &Upload, lane: &Lane) -> Result<()> {
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
    /// memory; the returned event marks the end of the group's work (a thread waits for it
    /// asleep).
    pub(super) fn read_results(
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
            .record_event(Some(HOST_WAITED_EVENT))
            .during("recording a batch event")
            .map_err(Into::into)
    }

    /// Enqueues a group's decompressions of one codec, in as many calls as their temporary
    /// memory needs.
    pub(super) fn decompress(
        &self,
        codec: Codec,
        group: &DecompressGroup,
        upload: &Upload,
        temp: &mut Option<CudaSlice<u8>>,
        stream: &Arc<CudaStream>,
    ) -> Result<()> {
        let (table_base, results, tables) = (upload.table_base, upload.results, &upload.tables);
        let cu_stream: CUstream = stream.cu_stream();
        let sized = self.size_calls(codec, group, cu_stream)?;
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

    /// Splits a group's decompressions until each call's temporary memory fits the budget:
    /// `(first, count, temporary bytes)` per call.
    fn size_calls(
        &self,
        codec: Codec,
        group: &DecompressGroup,
        cu_stream: CUstream,
    ) -> Result<Vec<(usize, usize, usize)>> {
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
            if temp > self.temp_memory && count > 1 {
                let half = count / 2;
                calls.push((first + half, count - half));
                calls.push((first, half));
            } else {
                sized.push((first, count, temp));
            }
        }
        Ok(sized)
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
