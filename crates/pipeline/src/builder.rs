use std::sync::Arc;

use zarrpipe_batcher::{
    Batcher, EpochOptions, Ranks, SampleLayout, SamplerState, Shuffle, Uneven, WindowSpec,
};
use zarrpipe_codec_gpu::{ChunkDecoder, CpuDecoder};
use zarrpipe_core::Device;
use zarrpipe_store::{Dataset, StoreOptions};

use crate::select::{coordinate_values, resolve_selections, CoordValue, Selection};
use crate::stream::{BatchStream, StageConfig};
use crate::{Error, Result};
use zarrpipe_collate::{CollateOptions, LatitudeWeights, Normalization};

/// Where a pipeline reads from: a URL to open, or a dataset already open.
#[derive(Debug)]
enum Source {
    Url(String),
    Dataset(Arc<Dataset>),
}

/// Configures a pipeline; [`build`](PipelineBuilder::build) opens the dataset and returns the
/// stream of batches.
#[derive(Debug)]
#[must_use = "a builder does nothing until built"]
pub struct PipelineBuilder {
    source: Source,
    variables: Vec<String>,
    spec: WindowSpec,
    batch_size: usize,
    epoch: EpochOptions,
    resume: Option<SamplerState>,
    prefetch: usize,
    fetch_concurrency: usize,
    decode_concurrency: usize,
    device: Device,
    decoder: Option<Arc<dyn ChunkDecoder>>,
    selections: Vec<Selection>,
    store_options: StoreOptions,
    collate: CollateOptions,
    stats_json: Option<String>,
    latitude_dim: Option<String>,
    gpu_tensor_memory: usize,
    gpu_in_flight: usize,
    gpu_pinned_memory: usize,
    #[cfg(feature = "cuda")]
    gpu: Option<Arc<crate::GpuDevice>>,
}

/// Entry point: `Pipeline::builder(url)...build().await?` gives a [`BatchStream`].
pub struct Pipeline;

impl Pipeline {
    /// A pipeline over the dataset at `url` (a path, `file://`, `memory://`, `http(s)://`,
    /// `s3://`, `gs://` or `az://`).
    pub fn builder(url: impl Into<String>) -> PipelineBuilder {
        PipelineBuilder::new(Source::Url(url.into()))
    }

    /// A pipeline over a dataset already open.
    pub fn from_dataset(dataset: Arc<Dataset>) -> PipelineBuilder {
        PipelineBuilder::new(Source::Dataset(dataset))
    }
}

impl PipelineBuilder {
    fn new(source: Source) -> Self {
        let threads = rayon::current_num_threads();
        Self {
            source,
            variables: Vec::new(),
            spec: WindowSpec::new(),
            batch_size: 4,
            epoch: EpochOptions::default(),
            resume: None,
            prefetch: 4,
            fetch_concurrency: 64,
            decode_concurrency: 2 * threads,
            device: Device::Cpu,
            decoder: None,
            selections: Vec::new(),
            store_options: StoreOptions::default(),
            collate: CollateOptions::default(),
            stats_json: None,
            latitude_dim: None,
            gpu_tensor_memory: 16 << 30,
            gpu_in_flight: 4,
            gpu_pinned_memory: 8 << 30,
            #[cfg(feature = "cuda")]
            gpu: None,
        }
    }

    /// The variables stacked as channels, in this order (default: every data variable).
    pub fn variables<I: IntoIterator<Item = S>, S: Into<String>>(mut self, names: I) -> Self {
        self.variables = names.into_iter().map(Into::into).collect();
        self
    }

    /// A window of `size` along `dim`, moved by `stride`.
    pub fn window(mut self, dim: impl Into<String>, size: u64, stride: u64) -> Self {
        self.spec = self.spec.window(dim, size, stride);
        self
    }

    /// The whole window specification at once.
    pub fn window_spec(mut self, spec: WindowSpec) -> Self {
        self.spec = spec;
        self
    }

    /// Forecasting pairs: inputs of `history` steps ending at each sample's step, targets at
    /// each of `leads` steps ahead (see [`zarrpipe_batcher::Forecast`]).
    pub fn forecast(mut self, history: u64, leads: impl IntoIterator<Item = u64>) -> Self {
        self.spec = self.spec.forecast(history, leads);
        self
    }

    /// Batches span blocks of `size` elements along `dim` (xbatcher's `batch_dims`): an
    /// iterated dim gives each batch a block of `size` steps; a windowed one, with
    /// [`concat_input_dims`](Self::concat_input_dims), the windows inside a block. The layout
    /// then fixes the batches and [`batch_size`](Self::batch_size) is not used.
    pub fn batch_dim(mut self, dim: impl Into<String>, size: u64) -> Self {
        self.spec = self.spec.batch_dim(dim, size);
        self
    }

    /// Every window position of a batch's block in that batch (xbatcher's
    /// `concat_input_dims`); without batch dims, one batch of the whole epoch.
    pub fn concat_input_dims(mut self, concat: bool) -> Self {
        self.spec = self.spec.concat_input_dims(concat);
        self
    }

    /// Keeps samples whose windows, history and targets all lie between two coordinate values
    /// of `dim` (ends included, either order): a time range by dates (`"2020-01-01"`) or
    /// numbers, a latitude or longitude band. Disjoint selections (train / validation / test
    /// splits) never share a time step; leave steps between them for a gap.
    pub fn select(
        mut self,
        dim: impl Into<String>,
        from: impl Into<CoordValue>,
        to: impl Into<CoordValue>,
    ) -> Self {
        self.selections.push(Selection {
            dim: dim.into(),
            from: from.into(),
            to: to.into(),
        });
        self
    }

    /// Samples per batch (default 4); not used when batch dims or `concat_input_dims` fix the
    /// batches.
    pub fn batch_size(mut self, batch_size: usize) -> Self {
        self.batch_size = batch_size;
        self
    }

    /// Drops a last, short batch (default: keep it).
    pub fn drop_last(mut self, drop_last: bool) -> Self {
        self.epoch.drop_last = drop_last;
        self
    }

    /// Sample order: natural (default), a full seeded permutation, or chunk-aware blocks.
    pub fn shuffle(mut self, shuffle: Shuffle) -> Self {
        self.epoch.shuffle = shuffle;
        self
    }

    /// The shuffling seed; each epoch shuffles with `seed + epoch` (default 0).
    pub fn seed(mut self, seed: u64) -> Self {
        self.epoch.seed = seed;
        self
    }

    /// The epoch number (default 0).
    pub fn epoch(mut self, epoch: u64) -> Self {
        self.epoch.epoch = epoch;
        self
    }

    /// This process's share of each epoch (default: the only rank; see
    /// [`Ranks::from_env`] for torchrun's variables).
    pub fn ranks(mut self, ranks: Ranks) -> Self {
        self.epoch.ranks = ranks;
        self
    }

    /// When samples don't divide evenly across ranks: pad by repeating samples (default) or drop.
    pub fn uneven(mut self, uneven: Uneven) -> Self {
        self.epoch.uneven = uneven;
        self
    }

    /// Every epoch option at once (order, seed, epoch, ranks, uneven, drop_last).
    pub fn epoch_options(mut self, options: EpochOptions) -> Self {
        self.epoch = options;
        self
    }

    /// Continues an epoch from a saved [`BatchStream::state`] with exactly the batches not yet
    /// delivered. The other options must be those of the saved run (checked).
    pub fn resume(mut self, state: SamplerState) -> Self {
        self.resume = Some(state);
        self
    }

    /// Batches loaded ahead of the consumer (default 4). Memory is bounded by this many
    /// batches' chunks and tensors.
    pub fn prefetch(mut self, batches: usize) -> Self {
        self.prefetch = batches.max(1);
        self
    }

    /// Chunk reads in flight per batch (default 64).
    pub fn fetch_concurrency(mut self, reads: usize) -> Self {
        self.fetch_concurrency = reads.max(1);
        self
    }

    /// Chunk decodes in flight per batch (default: twice the rayon threads).
    pub fn decode_concurrency(mut self, decodes: usize) -> Self {
        self.decode_concurrency = decodes.max(1);
        self
    }

    /// How the store is reached: object_store options (`endpoint`, `region`, `anonymous`,
    /// ...), retries, timeouts, the request limit, the chunk cache (see [`StoreOptions`]).
    /// Used when the pipeline opens the dataset from a URL.
    pub fn store_options(mut self, options: StoreOptions) -> Self {
        self.store_options = options;
        self
    }

    /// Keeps fetched chunks in `dir` on local disk, at most `max_bytes` (least recently used
    /// first out), so later epochs over a remote store read locally.
    pub fn cache_dir(mut self, dir: impl Into<std::path::PathBuf>, max_bytes: u64) -> Self {
        self.store_options = self.store_options.cache(dir, max_bytes);
        self
    }

    /// Where batches are delivered (default: the CPU).
    pub fn device(mut self, device: Device) -> Self {
        self.device = device;
        self
    }

    /// Replaces the chunk decoder (default: [`CpuDecoder`] on rayon's global pool).
    pub fn decoder(mut self, decoder: Arc<dyn ChunkDecoder>) -> Self {
        self.decoder = Some(decoder);
        self
    }

    /// Normalisation, NaN handling and (on the GPU) the tensor type; see [`CollateOptions`].
    pub fn collate_options(mut self, options: CollateOptions) -> Self {
        self.collate = options;
        self
    }

    /// Also deliver latitude weights (cos(latitude) over its mean, from the 1-D coordinate of
    /// `dim`, in degrees) per batch as `[batch, latitude window]`.
    pub fn latitude_weights(mut self, dim: impl Into<String>) -> Self {
        self.latitude_dim = Some(dim.into());
        self
    }

    /// The collate options set so far.
    pub fn collate_options_ref(&self) -> &CollateOptions {
        &self.collate
    }

    /// Normalises each channel with its variable's `mean` and `std` from `zarrpipe stats
    /// --json` output (resolved against the layout when the pipeline is built).
    pub fn normalize_with_stats(mut self, stats_json: impl Into<String>) -> Self {
        self.stats_json = Some(stats_json.into());
        self
    }

    /// GPU pipeline: run on this device's decoder and tensor pool (see
    /// [`GpuDevice`](crate::GpuDevice)), kept across epochs, instead of opening the device
    /// anew at `build_gpu`. Its ordinal overrides [`device`](Self::device).
    #[cfg(feature = "cuda")]
    pub fn gpu(mut self, device: Arc<crate::GpuDevice>) -> Self {
        self.gpu = Some(device);
        self
    }

    /// GPU pipeline: most device bytes in batch tensors at once (default 16 GiB). Tensors the
    /// consumer still holds count, so the pipeline waits for dropped batches once there.
    pub fn gpu_tensor_memory(mut self, bytes: usize) -> Self {
        self.gpu_tensor_memory = bytes;
        self
    }

    /// GPU pipeline: batches submitted to the device and not yet finished (default 4, at
    /// least 1): one more than the decoder's streams (`GpuOptions::decode_streams`, 3), so
    /// the next batch plans and uploads while every stream decodes. With fewer, host and
    /// device work alternate more than they overlap.
    pub fn gpu_in_flight(mut self, batches: usize) -> Self {
        self.gpu_in_flight = batches.max(1);
        self
    }

    /// GPU pipeline: most stored bytes of the batches on the device at once (default 8 GiB),
    /// which sit in pinned host memory until their batch finishes; past it the worker finishes
    /// older batches before it submits the next (one batch always goes through).
    pub fn gpu_pinned_memory(mut self, bytes: usize) -> Self {
        self.gpu_pinned_memory = bytes;
        self
    }

    /// Opens the dataset, checks the layout, and returns the stream of batches in host
    /// memory. Must be called inside a Tokio runtime. For [`Device::Cuda`], use
    /// `build_gpu` (feature `cuda`).
    pub async fn build(self) -> Result<BatchStream> {
        if let Device::Cuda(_) = self.device {
            return Err(Error::UnsupportedDevice {
                device: self.device,
                reason:
                    "host batches come from `build`; GPU batches from `build_gpu` (feature `cuda`)",
            });
        }
        let (runtime, dataset, batcher, stages) = self.prepare().await?;
        BatchStream::start(runtime, dataset, batcher, stages)
    }

    /// Opens the dataset and returns the stream of batches decoded and collated on the GPU
    /// chosen with [`device`](Self::device) (default `cuda:0`), in device memory.
    #[cfg(feature = "cuda")]
    pub async fn build_gpu(mut self) -> Result<BatchStream<crate::GpuBatch>> {
        let ordinal = match self.device {
            Device::Cuda(ordinal) => ordinal,
            Device::Cpu => 0,
        };
        let gpu = match self.gpu.take() {
            Some(gpu) => gpu,
            None => {
                let options = zarrpipe_codec_gpu::GpuOptions {
                    device: ordinal,
                    ..Default::default()
                };
                crate::GpuDevice::open(options, self.gpu_tensor_memory)?
            }
        };
        self.device = Device::Cuda(gpu.decoder().stream().context().ordinal());
        let limits = crate::gpu::InFlightLimits {
            batches: self.gpu_in_flight,
            pinned_bytes: self.gpu_pinned_memory,
        };
        let (runtime, dataset, batcher, stages) = self.prepare().await?;
        crate::gpu::start(runtime, dataset, batcher, stages, gpu, limits)
    }

    async fn prepare(self) -> Result<(tokio::runtime::Handle, Arc<Dataset>, Batcher, StageConfig)> {
        let runtime = tokio::runtime::Handle::try_current().map_err(|_| Error::NoRuntime)?;
        let dataset = match self.source {
            Source::Url(url) => Arc::new(Dataset::open_with(&url, &self.store_options).await?),
            Source::Dataset(dataset) => dataset,
        };
        let variables = if self.variables.is_empty() {
            dataset.data_variable_names()
        } else {
            self.variables
        };
        let spec = resolve_selections(&dataset, self.spec, &self.selections).await?;
        let layout = Arc::new(SampleLayout::new(&dataset, &variables, &spec)?);
        let batcher = match &self.resume {
            Some(state) => Batcher::resume(layout, self.batch_size, &self.epoch, state)?,
            None => Batcher::with_options(layout, self.batch_size, &self.epoch)?,
        };
        let mut collate = self.collate;
        if let Some(json) = &self.stats_json {
            collate.normalize = Some(Normalization::from_stats_json(batcher.layout(), json)?);
        }
        if let Some(dim) = &self.latitude_dim {
            let latitudes = coordinate_values(&dataset, dim).await?;
            collate.latitude_weights = Some(LatitudeWeights::from_degrees(dim, &latitudes));
        }
        let stages = StageConfig {
            decoder: self.decoder.unwrap_or_else(|| Arc::new(CpuDecoder::new())),
            fetch_concurrency: self.fetch_concurrency,
            decode_concurrency: self.decode_concurrency,
            prefetch: self.prefetch,
            device: self.device,
            collate,
        };
        Ok((runtime, dataset, batcher, stages))
    }
}
