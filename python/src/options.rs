//! The Python `Pipeline(...)` keyword arguments, as the Rust builder's options of the same
//! names (`zarrpipe_pipeline::PipelineBuilder`). The Python side has already turned torch
//! dtypes, dicts and booleans into the plain values read here.

use std::sync::Arc;
use std::time::Duration;

use pyo3::exceptions::{PyTypeError, PyValueError};
use pyo3::prelude::*;
use pyo3::types::PyDict;
use zarrpipe::batcher::{
    Edge, EpochOptions, Missing, Ranks, SamplerState, Shuffle, Uneven, WindowSpec,
};
use zarrpipe::codec::GpuOptions;
use zarrpipe::collate::{CollateOptions, DerivedChannels, StaticFields, TensorDType};
use zarrpipe::core::Device;
use zarrpipe::pipeline::{DecodeOn, Pipeline, PipelineBuilder};
use zarrpipe::store::{Dataset, StoreOptions};

use crate::errors;

/// Everything a pipeline is built from, but the epoch and the resume state.
#[derive(Clone, Debug)]
pub(crate) struct Config {
    pub variables: Vec<String>,
    pub input_dims: Vec<(String, u64)>,
    pub input_overlap: Vec<(String, u64)>,
    pub batch_dims: Vec<(String, u64)>,
    pub concat_input_dims: bool,
    pub batch_size: usize,
    pub shuffle: Shuffle,
    pub seed: u64,
    pub history: Option<u64>,
    pub leads: Vec<u64>,
    pub edge: Edge,
    pub missing: Missing,
    pub select: Vec<(String, String, String)>,
    /// Channels of stacked dimensions by coordinate value: (dim, values).
    pub select_channels: Vec<(String, Vec<String>)>,
    pub normalize: Option<String>,
    pub nan_fill: Option<f32>,
    pub nan_mask: bool,
    pub latitude_weights: Option<String>,
    pub dtype: TensorDType,
    pub device: Device,
    pub prefetch: usize,
    /// Batches whose chunks are read ahead of decoding.
    pub read_ahead: usize,
    /// One stream for the epochs iterated one after the other: the next epoch's first
    /// batches load while this one's last are used.
    pub epochs_in_a_row: bool,
    pub drop_last: bool,
    pub ranks: Ranks,
    pub uneven: Uneven,
    pub store: StoreOptions,
    pub fetch_concurrency: Option<usize>,
    /// GPU pipelines: threads decoding on the CPU (`cpu`, `split`, `auto`).
    pub cpu_decode_threads: Option<usize>,
    /// Processes on this host running pipelines (torchrun's `LOCAL_WORLD_SIZE`): the default
    /// CPU decode threads take this one's share of the cores.
    pub processes_on_host: Option<usize>,
    /// This process's place among them (torchrun's `LOCAL_RANK`): its CPU decoding keeps to
    /// its share of the cores.
    pub rank_on_host: Option<usize>,
    /// The run of a data-parallel job whose ranks on this host share their waits for
    /// `auto` (under torchrun: its launcher's process id).
    pub waits_shared_by: Option<String>,
    /// GPU pipelines' settings (`gpu.rs`).
    #[cfg(feature = "cuda")]
    pub gpu: GpuConfig,
    /// Static fields and derived channels' coordinates, read once when the `Pipeline` is made
    /// and given to every epoch's builder.
    pub channel_inputs: (Option<Arc<StaticFields>>, Option<Arc<DerivedChannels>>),
}

/// What only a GPU pipeline reads.
#[cfg(feature = "cuda")]
#[derive(Clone, Debug)]
pub(crate) struct GpuConfig {
    /// The decoder's options but its device (the pipeline's): `gpu_pinned_memory`,
    /// `gpu_read_memory` (pinned memory chunk reads land in; 0: none) and `gpu_decode_streams`
    /// (most batches decoding on the GPU at once) over the defaults.
    pub decoder: GpuOptions,
    /// Most device memory the loader takes (`PipelineBuilder::gpu_memory`).
    pub memory: Option<usize>,
    /// Of it, most in batch tensors (`PipelineBuilder::gpu_tensor_memory`).
    pub tensor_memory: Option<usize>,
    /// Where chunks are decoded (default: the GPU; also the CPU, split between both by their
    /// rates, or `auto` with an optional `gpu_share`).
    pub decode_on: DecodeOn,
}

#[cfg(feature = "cuda")]
impl GpuConfig {
    fn from_dict(options: &Bound<'_, PyDict>) -> PyResult<Self> {
        let (decoder, memory, tensor_memory, decode_on) = gpu_settings(options)?;
        Ok(Self {
            decoder,
            memory,
            tensor_memory,
            decode_on,
        })
    }
}

/// Reads the settings only a GPU pipeline uses, as [`GpuConfig`] keeps them. Every build reads
/// them, so that a bad one fails alike with or without `cuda`.
fn gpu_settings(
    options: &Bound<'_, PyDict>,
) -> PyResult<(GpuOptions, Option<usize>, Option<usize>, DecodeOn)> {
    let decode_streams = get(options, "gpu_decode_streams")?;
    if decode_streams == Some(0) {
        return Err(PyValueError::new_err(
            "`gpu_decode_streams` must be at least 1 (batches decoding on the GPU at once)",
        ));
    }
    let defaults = GpuOptions::default();
    let decoder = GpuOptions {
        pinned_memory: get(options, "gpu_pinned_memory")?.unwrap_or(defaults.pinned_memory),
        read_memory: get(options, "gpu_read_memory")?.unwrap_or(defaults.read_memory),
        decode_streams: decode_streams.unwrap_or(defaults.decode_streams),
        ..defaults
    };
    let decode_on: String = get(options, "decode_on")?.unwrap_or_else(|| "gpu".into());
    let gpu_share: Option<f64> = get(options, "gpu_share")?;
    let gpu_chunks: Option<f64> = get(options, "gpu_chunks")?;
    let split = match gpu_chunks {
        Some(gpu_chunks) => DecodeOn::SplitFixed { gpu_chunks },
        None => DecodeOn::Split,
    };
    let decode_on = choice(
        "decode_on",
        &decode_on,
        &[
            ("gpu", DecodeOn::Gpu),
            ("cpu", DecodeOn::Cpu),
            ("split", split),
            ("auto", DecodeOn::Auto { gpu_share }),
        ],
    )?;
    if gpu_chunks.is_some() && !matches!(decode_on, DecodeOn::SplitFixed { .. }) {
        return Err(PyValueError::new_err(
            "`gpu_chunks` is a share of split decoding: give it with decode_on=\"split\"",
        ));
    }
    // Refused when the pipeline is made, not when its first batch is asked for.
    decode_on
        .check()
        .map_err(|error| PyValueError::new_err(error.to_string()))?;
    let memory = get(options, "gpu_memory")?;
    let tensor_memory = get(options, "gpu_tensor_memory")?;
    Ok((decoder, memory, tensor_memory, decode_on))
}

const KEYS: &[&str] = &[
    "variables",
    "input_dims",
    "input_overlap",
    "batch_dims",
    "concat_input_dims",
    "batch_size",
    "shuffle",
    "seed",
    "history",
    "leads",
    "edge",
    "missing",
    "select",
    "select_channels",
    "normalize",
    "nan_fill",
    "nan_mask",
    "latitude_weights",
    "dtype",
    "device",
    "prefetch",
    "read_ahead",
    "epochs_in_a_row",
    "drop_last",
    "rank",
    "world_size",
    "uneven",
    "store_options",
    "cache_dir",
    "cache_size",
    "max_requests",
    "timeout",
    "retries",
    "fetch_concurrency",
    "cpu_decode_threads",
    "processes_on_host",
    "rank_on_host",
    "waits_shared_by",
    "gpu_memory",
    "gpu_tensor_memory",
    "gpu_pinned_memory",
    "gpu_read_memory",
    "gpu_decode_streams",
    "decode_on",
    "gpu_share",
    "gpu_chunks",
    "mask_and_scale",
    "time_dim",
];

fn get<'py, T: for<'a> FromPyObject<'a, 'py>>(
    options: &Bound<'py, PyDict>,
    key: &str,
) -> PyResult<Option<T>> {
    match options.get_item(key)? {
        Some(value) if !value.is_none() => value.extract::<T>().map(Some).map_err(|error| {
            PyTypeError::new_err(format!("`{key}`: {}", Into::<PyErr>::into(error)))
        }),
        _ => Ok(None),
    }
}

fn choice<T: Copy>(key: &str, value: &str, choices: &[(&str, T)]) -> PyResult<T> {
    choices
        .iter()
        .find(|(name, _)| *name == value)
        .map(|(_, choice)| *choice)
        .ok_or_else(|| {
            let names: Vec<&str> = choices.iter().map(|(name, _)| *name).collect();
            PyValueError::new_err(format!("`{key}` must be one of {names:?}, not {value:?}"))
        })
}

/// Store options from `key=value` pairs, a cache directory and its bound in bytes.
pub(crate) fn store_options(
    pairs: Vec<(String, String)>,
    cache_dir: Option<String>,
    cache_size: Option<u64>,
) -> StoreOptions {
    let mut options = StoreOptions::new();
    for (key, value) in pairs {
        options = options.option(key, value);
    }
    if let Some(dir) = cache_dir {
        options = options.cache(dir, cache_size.unwrap_or(10 << 30));
    }
    options
}

/// `options` reading values as asked: CF-decoded or stored (`mask_and_scale`), with the
/// iterated time dimension named or found.
pub(crate) fn reading(
    options: StoreOptions,
    mask_and_scale: bool,
    time_dim: Option<String>,
) -> StoreOptions {
    let options = options.mask_and_scale(mask_and_scale);
    match time_dim {
        Some(dim) => options.time_dim(dim),
        None => options,
    }
}

impl Config {
    pub fn from_dict(options: &Bound<'_, PyDict>) -> PyResult<Self> {
        for key in options.keys() {
            let key: String = key.extract()?;
            if !KEYS.contains(&key.as_str()) {
                return Err(PyTypeError::new_err(format!(
                    "Pipeline() got an unexpected keyword argument `{key}`"
                )));
            }
        }
        let shuffle: String = get(options, "shuffle")?.unwrap_or_else(|| "none".into());
        let shuffle = choice(
            "shuffle",
            &shuffle,
            &[
                ("none", Shuffle::None),
                ("full", Shuffle::Full),
                ("blocks", Shuffle::Blocks),
            ],
        )?;
        let edge: String = get(options, "edge")?.unwrap_or_else(|| "drop".into());
        let edge = choice(
            "edge",
            &edge,
            &[
                ("drop", Edge::Drop),
                ("pad", Edge::Pad),
                ("shift", Edge::Shift),
            ],
        )?;
        let missing: String = get(options, "missing")?.unwrap_or_else(|| "skip".into());
        let missing = choice(
            "missing",
            &missing,
            &[
                ("skip", Missing::Skip),
                ("fill", Missing::Fill),
                ("error", Missing::Error),
                ("ignore", Missing::Ignore),
            ],
        )?;
        let uneven: String = get(options, "uneven")?.unwrap_or_else(|| "pad".into());
        let uneven = choice(
            "uneven",
            &uneven,
            &[("pad", Uneven::Pad), ("drop", Uneven::Drop)],
        )?;
        let dtype: String = get(options, "dtype")?.unwrap_or_else(|| "float32".into());
        let dtype = choice(
            "dtype",
            &dtype,
            &[
                ("float32", TensorDType::F32),
                ("bfloat16", TensorDType::BF16),
                ("float16", TensorDType::F16),
            ],
        )?;
        let device: String = get(options, "device")?.unwrap_or_else(|| "cpu".into());
        let device: Device = device
            .parse()
            .map_err(|error| PyValueError::new_err(format!("`device`: {error}")))?;
        let ranks = match (
            get::<usize>(options, "rank")?,
            get::<usize>(options, "world_size")?,
        ) {
            (Some(rank), Some(world_size)) => Ranks::new(rank, world_size),
            (None, None) => Ranks::from_env(),
            _ => {
                return Err(PyValueError::new_err(
                    "give both `rank` and `world_size`, or neither",
                ))
            }
        }
        .map_err(|error| errors::to_py(&error))?;
        let mut store = store_options(
            get(options, "store_options")?.unwrap_or_default(),
            get(options, "cache_dir")?,
            get(options, "cache_size")?,
        );
        if let Some(requests) = get::<usize>(options, "max_requests")? {
            store = store.max_requests(requests);
        }
        if let Some(seconds) = get::<f64>(options, "timeout")? {
            if seconds.is_nan() || seconds < 0.0 {
                return Err(PyValueError::new_err(format!(
                    "`timeout`: {seconds} is not a number of seconds, 0 or more"
                )));
            }
            let timeout = Duration::try_from_secs_f64(seconds).unwrap_or(Duration::MAX);
            store = store.timeout(timeout.max(Duration::from_millis(1)));
        }
        if let Some(retries) = get::<usize>(options, "retries")? {
            store = store.retries(retries);
        }
        let store = reading(
            store,
            get(options, "mask_and_scale")?.unwrap_or(true),
            get(options, "time_dim")?,
        );
        let config = Self {
            variables: get(options, "variables")?.unwrap_or_default(),
            input_dims: get(options, "input_dims")?.unwrap_or_default(),
            input_overlap: get(options, "input_overlap")?.unwrap_or_default(),
            batch_dims: get(options, "batch_dims")?.unwrap_or_default(),
            concat_input_dims: get(options, "concat_input_dims")?.unwrap_or(false),
            batch_size: get(options, "batch_size")?.unwrap_or(4),
            shuffle,
            seed: get(options, "seed")?.unwrap_or(0),
            history: get(options, "history")?,
            leads: get(options, "leads")?.unwrap_or_default(),
            edge,
            missing,
            select: get(options, "select")?.unwrap_or_default(),
            select_channels: get(options, "select_channels")?.unwrap_or_default(),
            normalize: get(options, "normalize")?,
            nan_fill: get(options, "nan_fill")?,
            nan_mask: get(options, "nan_mask")?.unwrap_or(false),
            latitude_weights: get(options, "latitude_weights")?,
            dtype,
            device,
            prefetch: get(options, "prefetch")?.unwrap_or(4),
            read_ahead: get(options, "read_ahead")?.unwrap_or(2),
            epochs_in_a_row: get(options, "epochs_in_a_row")?.unwrap_or(true),
            drop_last: get(options, "drop_last")?.unwrap_or(false),
            ranks,
            uneven,
            store,
            fetch_concurrency: get(options, "fetch_concurrency")?,
            cpu_decode_threads: get(options, "cpu_decode_threads")?,
            processes_on_host: get(options, "processes_on_host")?,
            rank_on_host: get(options, "rank_on_host")?,
            waits_shared_by: get(options, "waits_shared_by")?,
            #[cfg(feature = "cuda")]
            gpu: GpuConfig::from_dict(options)?,
            channel_inputs: (None, None),
        };
        // Without `cuda` no pipeline reads the GPU settings; a bad one fails as with it.
        #[cfg(not(feature = "cuda"))]
        gpu_settings(options)?;
        if config.history.is_some() && config.leads.is_empty() {
            return Err(PyValueError::new_err(
                "`history` needs `leads` (the target steps ahead)",
            ));
        }
        if config.device == Device::Cpu && config.dtype != TensorDType::F32 {
            return Err(PyValueError::new_err(
                "CPU batches are float32; bfloat16 and float16 come from device=\"cuda:N\"",
            ));
        }
        Ok(config)
    }

    /// The window specification: windows in xbatcher's terms, as the command line makes it
    /// (`WindowSpec::input_dims`).
    fn spec(&self) -> PyResult<WindowSpec> {
        let mut spec = WindowSpec::new().edge(self.edge);
        if !self.leads.is_empty() {
            spec = spec.forecast(self.history.unwrap_or(1), self.leads.iter().copied());
        }
        let mut spec = spec
            .input_dims(&self.input_dims, &self.input_overlap)
            .map_err(|error| errors::to_py(&error))?;
        for (dim, size) in &self.batch_dims {
            spec = spec.batch_dim(dim.clone(), *size);
        }
        Ok(spec.concat_input_dims(self.concat_input_dims))
    }

    /// The builder for one epoch over `dataset` (opened once per Python `Pipeline`): decoding
    /// and collating on the CPU whatever `device` says (`gpu.rs` moves the stages to the GPU).
    pub fn builder(
        &self,
        dataset: &Arc<Dataset>,
        epoch: u64,
        resume: Option<SamplerState>,
    ) -> PyResult<PipelineBuilder> {
        let mut builder = Pipeline::from_dataset(dataset.clone())
            .variables(self.variables.clone())
            .window_spec(self.spec()?)
            .batch_size(self.batch_size)
            .missing(self.missing)
            .epoch_options(EpochOptions {
                epoch,
                seed: self.seed,
                shuffle: self.shuffle,
                ranks: self.ranks,
                uneven: self.uneven,
                drop_last: self.drop_last,
            })
            .prefetch(self.prefetch)
            .read_ahead(self.read_ahead)
            .collate_options(CollateOptions {
                dtype: self.dtype,
                normalize: None,
                nan_fill: self.nan_fill,
                nan_mask: self.nan_mask,
                latitude_weights: None,
                static_fields: self.channel_inputs.0.clone(),
                derived: self.channel_inputs.1.clone(),
            });
        for (dim, values) in &self.select_channels {
            builder = builder.select_channels(dim.clone(), values.iter().map(String::as_str));
        }
        for (dim, from, to) in &self.select {
            builder = builder.select(dim.clone(), from.as_str(), to.as_str());
        }
        if let Some(stats) = &self.normalize {
            builder = builder.normalize_with_stats(stats.clone());
        }
        if let Some(dim) = &self.latitude_weights {
            builder = builder.latitude_weights(dim.clone());
        }
        if let Some(reads) = self.fetch_concurrency {
            builder = builder.fetch_concurrency(reads);
        }
        if let Some(threads) = self.cpu_decode_threads {
            builder = builder.cpu_decode_threads(threads);
        }
        if let Some(processes) = self.processes_on_host {
            builder = builder.processes_on_host(processes);
        }
        if let Some(rank) = self.rank_on_host {
            builder = builder.rank_on_host(rank);
        }
        if let Some(job) = &self.waits_shared_by {
            builder = builder.share_waits_on_host(job.clone());
        }
        if let Some(state) = resume {
            builder = builder.resume(state);
        }
        Ok(builder)
    }
}
