//! Collation on the GPU: the [`GatherPlan`] of a batch becomes one `gather` launch from the
//! decoded chunks (and the static fields, uploaded once per collator) into a float32 tensor,
//! then one `derived` launch for derived channels, from the tables of their [`DerivedPlan`],
//! then one `finish` launch when values are normalised, NaN-filled, masked or cast. Tensors
//! come from a [`TensorPool`] and go back to it when dropped.

#[cfg(feature = "candle")]
mod candle;
mod collate_stage;
mod consumer_stream;
mod gpu_place;
mod handover_clock;
mod pool;
mod staging;
mod turns;

use std::sync::Arc;

use zarrpipe_batcher::{Sample, SampleLayout};
use zarrpipe_core::{CfDecoding, DType};
use zarrpipe_cuda::cudarc::driver::{
    CudaEvent, CudaFunction, CudaSlice, CudaStream, DevicePtr, LaunchConfig, PushKernelArg,
};
use zarrpipe_cuda::{kernel, load_module, During, HOST_WAITED_EVENT};
use zarrpipe_store::ChunkRequest;

#[cfg(feature = "candle")]
pub use candle::Candle;
pub use consumer_stream::ConsumerStream;
pub use gpu_place::Gpu;
pub use handover_clock::HandoverClock;
pub use pool::{DeviceTensor, TensorPool, TensorRoom};
use staging::Staging;

use crate::gather::{GatherPlan, Piece, MAX_AXES};
use crate::TensorDType;
use crate::{CollateOptions, DerivedPlan, Error, HostCollator, Result};

const SOURCE: &str = include_str!("collate.cu");

/// Collates batches into device tensors on the collator's own stream: chunks decoded on the
/// GPU are gathered where they are; chunks decoded on the CPU are first uploaded, through
/// reused pinned buffers.
pub struct DeviceCollator {
    /// For the padding mask, computed on the host.
    host: HostCollator,
    options: CollateOptions,
    gather: CudaFunction,
    finish: CudaFunction,
    fill: CudaFunction,
    derived: CudaFunction,
    /// Per-channel means then standard deviations, when normalising.
    statistics: Option<CudaSlice<f32>>,
    /// The static fields, uploaded once, in the layout's order of static variables.
    statics: Vec<CudaSlice<u8>>,
    pool: TensorPool,
    /// Every batch's uploads and kernels (give it a high priority: the GPU's decoding fills
    /// every SM, and a batch's kernels are what the consumer waits for).
    stream: Arc<CudaStream>,
    /// Batches queue their pending chunks to decode on the CPU, one batch after another in
    /// the order they came (`turns.rs`), each chunk a task behind the earlier batches' chunks.
    /// The threads finish one batch before the next, so its upload and kernels overlap the
    /// next one's decoding, and the threads its last chunks leave idle begin the next: with a
    /// batch's chunks decoded by one parallel iterator at a time, those threads waited, 5-8%
    /// of their time on W1 (H200, 2026-11-30; docs/benchmarks.md, "The CPU path against the
    /// cores' bound"). Four batches decoding side by side finish together and leave the
    /// threads idle while they upload (W1, H100, 2026-11-26: 4.8-5.5 GB/s where the CPU's bound
    /// was 6.5-7.1).
    decode_turns: Arc<turns::Turns>,
    /// Batches reserve their tensors' room one at a time, in the same order.
    plan_turns: Arc<turns::Turns>,
}

impl std::fmt::Debug for DeviceCollator {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DeviceCollator")
            .field("options", self.options())
            .finish_non_exhaustive()
    }
}

impl DeviceCollator {
    /// Collates into tensors from `pool`; `stream` uploads the normalisation statistics and
    /// the chunks decoded on the CPU.
    pub fn new(
        layout: Arc<SampleLayout>,
        options: CollateOptions,
        stream: Arc<CudaStream>,
        pool: TensorPool,
    ) -> Result<Self> {
        options.check(&layout)?;
        let module =
            pool.kernels(|| load_module(stream.context(), "zarrpipe_collate.cu", SOURCE))?;
        let fields = options.static_fields.as_ref();
        let statics = fields
            .map_or(&[][..], |fields| fields.fields())
            .iter()
            .map(|field| {
                stream
                    .clone_htod(&field.bytes)
                    .during_with(|| format!("uploading static field `{}`", field.variable))
            })
            .collect::<zarrpipe_cuda::Result<Vec<_>>>()?;
        if !statics.is_empty() {
            // Batches read them from other streams.
            stream.synchronize().during("uploading static fields")?;
        }
        let statistics = match &options.normalize {
            Some(n) => {
                let values: Vec<f32> = n.mean.iter().chain(&n.std).copied().collect();
                let statistics = stream.clone_htod(&values).during("uploading statistics")?;
                // Batches read them from other streams.
                stream.synchronize().during("uploading statistics")?;
                Some(statistics)
            }
            None => None,
        };
        Ok(Self {
            host: HostCollator::new(layout),
            options,
            gather: kernel(&module, "gather")?,
            finish: kernel(&module, "finish")?,
            fill: kernel(&module, "fill_f32")?,
            derived: kernel(&module, "derived")?,
            statistics,
            statics,
            pool,
            stream,
            decode_turns: Arc::default(),
            plan_turns: Arc::default(),
        })
    }

    /// The pinned upload buffers, shared with the other collators of this device's pool.
    fn staging(&self) -> &Staging {
        self.pool.staging(self.stream.context())
    }

    /// What the collator does beyond gathering.
    pub fn options(&self) -> &CollateOptions {
        &self.options
    }

    /// How samples are cut.
    pub fn layout(&self) -> &Arc<SampleLayout> {
        self.host.layout()
    }

    /// Plans the collation of `samples` from the batch's chunks (`requests`, in the order
    /// their addresses will come) and reserves its tensors' room, which can wait for the
    /// consumer to let older tensors go: batches plan in order, in the collator's turns.
    fn plan(&self, samples: &[Sample], requests: &[&ChunkRequest]) -> Result<PlannedBatch> {
        let plan = GatherPlan::new(self.layout(), samples, requests)?;
        let mask = match self.layout().padded() {
            true => Some(self.host.mask(samples)),
            false => None,
        };
        let weights = match &self.options.latitude_weights {
            Some(weights) => Some(weights.batch(self.layout(), samples)?),
            None => None,
        };
        // The batch's room is taken at once: with several tensors a batch, taking them one by
        // one under a tight cap could leave a batch waiting for room its own tensors hold.
        let bytes =
            |shape: &[usize], dtype: TensorDType| shape.iter().product::<usize>() * dtype.size();
        let mut room_needed = self.buffers_bytes(&plan.input_shape, true);
        if let Some((_, shape)) = &plan.targets {
            room_needed += self.buffers_bytes(shape, false);
        }
        room_needed += mask
            .as_ref()
            .map_or(0, |m| bytes(m.shape(), TensorDType::U8));
        room_needed += weights
            .as_ref()
            .map_or(0, |w| bytes(w.shape(), TensorDType::F32));
        let room = self.pool.reserve(room_needed);
        Ok(PlannedBatch {
            plan,
            mask,
            weights,
            room,
        })
    }

    /// Enqueues a planned collation of `samples` from its chunks at device addresses (in the
    /// order of the plan's requests), on `stream`, which orders the chunks' writes before (the
    /// caller keeps their buffers alive until the returned batch's `ready`).
    fn enqueue(
        &self,
        samples: &[Sample],
        planned: PlannedBatch,
        mut addresses: Vec<u64>,
        stream: &Arc<CudaStream>,
    ) -> Result<Tensors> {
        let PlannedBatch {
            plan,
            mask,
            weights,
            mut room,
        } = planned;
        // Static fields count as chunks after the batch's (see `GatherPlan::new`).
        addresses.extend(self.statics.iter().map(|field| field.device_ptr(stream).0));
        let derived = |offsets: &[i64]| {
            let derived = self.options.derived.as_ref();
            derived.map(|derived| derived.plan(self.layout(), samples, offsets))
        };
        // Every tensor is taken before the first kernel is queued: a take can wait, on the
        // host, for a consumer still reading an older tensor, and that wait is not this
        // batch's GPU time (`begun` marks where it starts).
        let input_buffers = self.take_buffers(&mut room, &plan.input_shape, true, stream)?;
        let target_buffers = match &plan.targets {
            Some((_, shape)) => Some(self.take_buffers(&mut room, shape, false, stream)?),
            None => None,
        };
        let mut take =
            |shape: &[usize], dtype| self.pool.take_reserved(&mut room, shape, dtype, stream);
        let mask_tensor = mask
            .as_ref()
            .map(|m| take(m.shape(), TensorDType::U8))
            .transpose()?;
        let weights_tensor = weights
            .as_ref()
            .map(|w| take(w.shape(), TensorDType::F32))
            .transpose()?;
        drop(room);
        let begun = timed_event(stream)?;

        let mut scratch = Vec::new();
        let (inputs, nan_mask) = self.tensor(
            input_buffers,
            &plan.inputs,
            &plan.decodings,
            &plan.input_shape,
            &addresses,
            derived(self.layout().input_offsets()).as_ref(),
            stream,
            &mut scratch,
        )?;
        let targets = match (&plan.targets, target_buffers) {
            (Some((pieces, shape)), Some(buffers)) => {
                let tables = derived(self.layout().target_offsets());
                let (targets, _) = self.tensor(
                    buffers,
                    pieces,
                    &plan.decodings,
                    shape,
                    &addresses,
                    tables.as_ref(),
                    stream,
                    &mut scratch,
                )?;
                Some(targets)
            }
            _ => None,
        };
        if let (Some(mask), Some(tensor)) = (&mask, &mask_tensor) {
            let bytes = mask.as_slice().expect("a new mask is contiguous");
            self.staging()
                .upload_to(tensor.device_ptr(), bytes, stream)?;
        }
        if let (Some(weights), Some(tensor)) = (&weights, &weights_tensor) {
            let bytes: Vec<u8> = weights.iter().flat_map(|w| w.to_ne_bytes()).collect();
            self.staging()
                .upload_to(tensor.device_ptr(), &bytes, stream)?;
        }
        Ok(Tensors {
            inputs,
            targets,
            mask: mask_tensor,
            nan_mask,
            latitude_weights: weights_tensor,
            scratch,
            begun,
        })
    }

    /// The pool's tensors one collated tensor needs: its own, a float32 work tensor when it
    /// is cast, a NaN mask when asked for.
    fn take_buffers(
        &self,
        room: &mut TensorRoom,
        shape: &[usize],
        with_nan_mask: bool,
        stream: &Arc<CudaStream>,
    ) -> Result<TensorBuffers> {
        let (out, work, nan_mask) = self.buffer_types(with_nan_mask);
        let mut take = |dtype| self.pool.take_reserved(room, shape, dtype, stream);
        Ok(TensorBuffers {
            out: take(out)?,
            work: work.map(&mut take).transpose()?,
            nan_mask: nan_mask.map(&mut take).transpose()?,
        })
    }

    /// The bytes [`take_buffers`](Self::take_buffers) takes for a tensor of `shape`.
    fn buffers_bytes(&self, shape: &[usize], with_nan_mask: bool) -> usize {
        let (out, work, nan_mask) = self.buffer_types(with_nan_mask);
        let element: usize = [Some(out), work, nan_mask]
            .iter()
            .flatten()
            .map(|t| t.size())
            .sum();
        shape.iter().product::<usize>() * element
    }

    /// The element types of a tensor's buffers: the tensor, float32 values to finish from
    /// when the tensor is cast, a NaN mask when asked for.
    fn buffer_types(
        &self,
        with_nan_mask: bool,
    ) -> (TensorDType, Option<TensorDType>, Option<TensorDType>) {
        let options = self.options();
        (
            options.dtype,
            (options.dtype != TensorDType::F32).then_some(TensorDType::F32),
            (with_nan_mask && options.nan_mask).then_some(TensorDType::U8),
        )
    }

    #[allow(clippy::too_many_arguments)]
    fn tensor(
        &self,
        buffers: TensorBuffers,
        pieces: &[Piece],
        decodings: &[Option<CfDecoding>],
        shape: &[usize],
        addresses: &[u64],
        derived: Option<&DerivedPlan>,
        stream: &Arc<CudaStream>,
        scratch: &mut Vec<DeviceTensor>,
    ) -> Result<(DeviceTensor, Option<DeviceTensor>)> {
        let options = self.options();
        let len: usize = shape.iter().product();
        let TensorBuffers {
            out,
            work,
            nan_mask,
        } = buffers;
        let needs_finish = options.transforms_values() || options.dtype != TensorDType::F32;
        let values = work.as_ref().unwrap_or(&out).device_ptr();
        if self.layout().prefilled() {
            self.launch_fill(values, len, stream)?;
        }
        self.launch_gather(pieces, decodings, addresses, values, stream)?;
        if let Some(derived) = derived {
            self.launch_derived(derived, values, stream)?;
        }
        if needs_finish {
            self.launch_finish(values, len, &out, nan_mask.as_ref(), stream)?;
        }
        // The float32 work tensor goes back to the pool only once the kernels reading it
        // have run: another batch's collation, on another stream, may take it next.
        scratch.extend(work);
        Ok((out, nan_mask))
    }

    fn launch_gather(
        &self,
        pieces: &[Piece],
        decodings: &[Option<CfDecoding>],
        addresses: &[u64],
        out: u64,
        stream: &Arc<CudaStream>,
    ) -> Result<()> {
        if pieces.is_empty() {
            return Ok(());
        }
        let words = descriptors(pieces, decodings, addresses)?;
        let bytes: Vec<u8> = words.iter().flat_map(|word| word.to_ne_bytes()).collect();
        let table = self.staging().upload(&bytes, stream)?;
        let table = table.device_ptr(stream).0;
        let config = LaunchConfig {
            grid_dim: (
                gather_blocks(pieces).clamp(1, 1024) as u32,
                pieces.len().min(65535) as u32,
                1,
            ),
            block_dim: (256, 1, 1),
            shared_mem_bytes: 0,
        };
        let count = pieces.len() as u64;
        let mut launch = stream.launch_builder(&self.gather);
        launch.arg(&table).arg(&count).arg(&out);
        // SAFETY: every piece's box lies inside its decoded chunk (the plan clips it to the
        // chunk's shape) and inside the tensor of `out`, which holds the plan's shape.
        unsafe { launch.launch(config) }.during("launching gather")?;
        Ok(())
    }

    /// Derived channels from their tables: one upload (axes, jobs, values), one launch.
    fn launch_derived(&self, plan: &DerivedPlan, out: u64, stream: &Arc<CudaStream>) -> Result<()> {
        if plan.jobs.is_empty() {
            return Ok(());
        }
        let (bytes, jobs_at, values_at) = derived_tables(plan);
        let table = self.staging().upload(&bytes, stream)?;
        let base = table.device_ptr(stream).0;
        let (axes, jobs, values) = (base, base + jobs_at as u64, base + values_at as u64);
        let count = plan.jobs.len() as u64;
        let axis = |axis: Option<usize>| axis.map_or(u32::MAX, |axis| axis as u32);
        let (rank, t_axis, lat_axis, lon_axis) = (
            plan.axes.len() as u32,
            axis(plan.time_axis),
            axis(plan.latitude_axis),
            axis(plan.longitude_axis),
        );
        let config = LaunchConfig {
            grid_dim: (
                plan.plane_len.div_ceil(256 * 4).clamp(1, 1024) as u32,
                plan.jobs.len().min(65535) as u32,
                1,
            ),
            block_dim: (256, 1, 1),
            shared_mem_bytes: 0,
        };
        let mut launch = stream.launch_builder(&self.derived);
        launch
            .arg(&axes)
            .arg(&jobs)
            .arg(&count)
            .arg(&values)
            .arg(&out)
            .arg(&plan.plane_len)
            .arg(&rank)
            .arg(&t_axis)
            .arg(&lat_axis)
            .arg(&lon_axis);
        // SAFETY: the table holds `MAX_AXES` axis sizes, `count` jobs and the values they
        // index (the plan made them together); every job's plane lies inside the tensor of
        // `out`, which holds the plan's samples, steps and channels.
        unsafe { launch.launch(config) }.during("launching derived")?;
        Ok(())
    }

    fn launch_fill(&self, out: u64, len: usize, stream: &Arc<CudaStream>) -> Result<()> {
        let value = self.layout().pad_value();
        let len = len as u64;
        let mut launch = stream.launch_builder(&self.fill);
        launch.arg(&out).arg(&len).arg(&value);
        // SAFETY: `out` holds `len` float32 values.
        unsafe { launch.launch(elementwise(len)) }.during("launching fill")?;
        Ok(())
    }

    fn launch_finish(
        &self,
        values: u64,
        len: usize,
        out: &DeviceTensor,
        nan_mask: Option<&DeviceTensor>,
        stream: &Arc<CudaStream>,
    ) -> Result<()> {
        let options = self.options();
        let plane = (self.layout().sample_shape()[1..].iter().product::<usize>() as u64).max(1);
        let channels = (self.layout().channels().len() as u64).max(1);
        let flags = options.normalize.is_some() as u32
            | (options.nan_fill.is_some() as u32) << 1
            | (nan_mask.is_some() as u32) << 2;
        let out_dtype: u32 = match options.dtype {
            TensorDType::F32 => 0,
            TensorDType::BF16 => 1,
            _ => 2,
        };
        let (mean, std) = match &self.statistics {
            Some(statistics) => {
                let base = statistics.device_ptr(stream).0;
                (base, base + 4 * channels)
            }
            None => (0, 0),
        };
        let mask = nan_mask.map_or(0, DeviceTensor::device_ptr);
        let (len, fill, out) = (
            len as u64,
            options.nan_fill.unwrap_or(0.0),
            out.device_ptr(),
        );
        let mut launch = stream.launch_builder(&self.finish);
        launch
            .arg(&values)
            .arg(&len)
            .arg(&out)
            .arg(&out_dtype)
            .arg(&mask)
            .arg(&mean)
            .arg(&std)
            .arg(&plane)
            .arg(&channels)
            .arg(&flags)
            .arg(&fill);
        // SAFETY: `values` holds `len` float32, `out` `len` elements of its type, the mask
        // `len` bytes when flagged, the statistics one value per channel.
        unsafe { launch.launch(elementwise(len)) }.during("launching finish")?;
        Ok(())
    }
}

/// A batch's collation planned, with its tensors' room reserved ([`DeviceCollator::plan`]).
struct PlannedBatch {
    plan: GatherPlan,
    mask: Option<ndarray::ArrayD<u8>>,
    weights: Option<ndarray::ArrayD<f32>>,
    room: TensorRoom,
}

/// A batch's tensors, enqueued.
struct Tensors {
    inputs: DeviceTensor,
    targets: Option<DeviceTensor>,
    mask: Option<DeviceTensor>,
    nan_mask: Option<DeviceTensor>,
    latitude_weights: Option<DeviceTensor>,
    /// Work tensors the kernels still read: dropped once the batch is complete.
    scratch: Vec<DeviceTensor>,
    /// Recorded after every tensor was taken, before the first kernel.
    begun: CudaEvent,
}

/// The pool's tensors for one collated tensor, taken before its kernels are queued.
struct TensorBuffers {
    out: DeviceTensor,
    work: Option<DeviceTensor>,
    nan_mask: Option<DeviceTensor>,
}

/// An event whose time can be read: where a batch's GPU work starts or ends. The collator
/// and the consumer wait for the end on the host, asleep.
fn timed_event(stream: &Arc<CudaStream>) -> Result<CudaEvent> {
    stream
        .record_event(Some(HOST_WAITED_EVENT))
        .during("recording an event")
        .map_err(Into::into)
}

fn elementwise(len: u64) -> LaunchConfig {
    LaunchConfig {
        grid_dim: (len.div_ceil(256 * 4).clamp(1, 65535) as u32, 1, 1),
        block_dim: (256, 1, 1),
        shared_mem_bytes: 0,
    }
}

/// A derived plan as the `derived` kernel reads it (see `collate.cu`): `MAX_AXES` axis sizes
/// (1 past the rank), the `DerivedJob` structs, then the float32 values; with the byte
/// offsets of the jobs and the values.
fn derived_tables(plan: &DerivedPlan) -> (Vec<u8>, usize, usize) {
    let mut words: Vec<u64> = plan.axes.clone();
    words.resize(MAX_AXES, 1);
    let jobs_at = words.len() * 8;
    for job in &plan.jobs {
        words.extend([job.plane, job.ab, job.c, job.clip as u64]);
        words.extend(job.valid.iter().copied());
        words.extend(std::iter::repeat_n(0, MAX_AXES - job.valid.len()));
    }
    let values_at = words.len() * 8;
    let mut bytes: Vec<u8> = words.iter().flat_map(|word| word.to_ne_bytes()).collect();
    bytes.extend(plan.values.iter().flat_map(|value| value.to_ne_bytes()));
    (bytes, jobs_at, values_at)
}

/// Most missing values of one variable the `gather` kernel compares (`MAX_MISSING` in
/// `collate.cu`).
const MAX_MISSING: usize = 4;

/// The pieces as the kernel's `Piece` structs (see `collate.cu`), 8-byte words; a piece's
/// CF decoding is its variable's in `decodings`.
fn descriptors(
    pieces: &[Piece],
    decodings: &[Option<CfDecoding>],
    addresses: &[u64],
) -> Result<Vec<u64>> {
    let mut words = Vec::with_capacity(pieces.len() * (7 + 3 * MAX_AXES + MAX_MISSING));
    for piece in pieces {
        let rank = piece.extent.len();
        let cf = decodings.get(piece.variable).and_then(Option::as_ref);
        let src = addresses[piece.chunk] + piece.src_start * piece.dtype.size() as u64;
        let read_as = cf.map_or(piece.dtype, |cf| cf.element_type(piece.dtype));
        words.extend([src, piece.dst_start, piece.len()]);
        words.push(dtype_code(read_as) as u64 | (rank as u64) << 32);
        for axes in [&piece.extent, &piece.src_strides, &piece.dst_strides] {
            words.extend(axes.iter().copied());
            words.extend(std::iter::repeat_n(0, MAX_AXES - rank));
        }
        words.extend(cf_words(cf)?);
    }
    Ok(words)
}

/// A CF decoding as the kernel's `Piece` holds it: flags and count, scale, offset, missing.
fn cf_words(cf: Option<&CfDecoding>) -> Result<[u64; 3 + MAX_MISSING]> {
    let mut words = [0u64; 3 + MAX_MISSING];
    let Some(cf) = cf else {
        return Ok(words);
    };
    if cf.missing.len() > MAX_MISSING {
        return Err(Error::BadOptions {
            reason: format!(
                "a variable has {} missing values; the GPU collator compares at most {MAX_MISSING} (collate on the host)",
                cf.missing.len()
            ),
        });
    }
    let flags = 1 | (cf.scale_factor.is_some() as u64) << 1 | (cf.add_offset.is_some() as u64) << 2;
    words[0] = flags | (cf.missing.len() as u64) << 32;
    words[1] = cf.scale_factor.unwrap_or(1.0).to_bits();
    words[2] = cf.add_offset.unwrap_or(0.0).to_bits();
    for (word, value) in words[3..].iter_mut().zip(&cf.missing) {
        *word = value.to_bits();
    }
    Ok(words)
}

/// Thread blocks the largest piece keeps busy: `gather` gives each warp (8 to a block) a
/// segment of up to 1024 elements of one row (the innermost axis).
fn gather_blocks(pieces: &[Piece]) -> usize {
    const GATHER_SEGMENT: u64 = 1024; // as in collate.cu
    let units = |piece: &Piece| {
        let row = piece.extent.last().copied().unwrap_or(1).max(1);
        piece.len() / row * row.div_ceil(GATHER_SEGMENT)
    };
    pieces.iter().map(units).max().unwrap_or(1).div_ceil(8) as usize
}

/// The kernel's dtype numbering (the enum in `collate.cu`).
fn dtype_code(dtype: DType) -> u32 {
    match dtype {
        DType::Bool => 0,
        DType::Int8 => 1,
        DType::Int16 => 2,
        DType::Int32 => 3,
        DType::Int64 => 4,
        DType::UInt8 => 5,
        DType::UInt16 => 6,
        DType::UInt32 => 7,
        DType::UInt64 => 8,
        DType::Float16 => 9,
        DType::BFloat16 => 10,
        DType::Float32 => 11,
        DType::Float64 => 12,
    }
}
