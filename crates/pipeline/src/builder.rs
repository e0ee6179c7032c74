use std::marker::PhantomData;
use std::sync::Arc;

use futures::stream;
use zarrpipe_batcher::{
    Batcher, EpochOptions, Missing, Ranks, SampleLayout, SamplerState, Shuffle, Uneven, WindowSpec,
};
#[cfg(feature = "cuda")]
use zarrpipe_codec_gpu::SplitPolicy;
use zarrpipe_codec_gpu::{BatchDecoder, CpuDecoder, DecodeBatchesExt};
use zarrpipe_collate::{
    BatchCollator, CollateBatchesExt, CollateOptions, Host, HostCollator, LatitudeWeights,
    Normalization, Place,
};
use zarrpipe_core::Device;
use zarrpipe_store::{Dataset, FetchBatchesExt, StoreOptions};

use crate::channels::read_channel_inputs;
use crate::missing::apply_missing_steps;
use crate::select::{
    coordinate_values, label_channels, resolve_selections, ChannelSelection, CoordValue, Selection,
};
use crate::stage_gpu::StageGpu;
use crate::stream::BatchStream;
use crate::{DecodeThreads, Error, PipelineExt, Result};

/// Where a pipeline reads from: a URL to open, or a dataset already open.
#[derive(Debug)]
enum Source {
    Url(String),
    Dataset(Arc<Dataset>),
}

/// Where chunks are decoded.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub enum DecodeOn {
    /// On every CPU core, with zarrs' codecs (the default).
    #[default]
    Cpu,
    /// On the GPU, in batches (nvCOMP and zarrpipe's kernels; feature `cuda`).
    Gpu,
    /// Each batch on both at once, shared out by their measured rates so both finish
    /// together: the most this host decodes ([`SplitPolicy::Balanced`]; feature `cuda`).
    Split,
    /// The CPU first; the GPU takes a share of each batch only while the consumer waits, and,
    /// with `gpu_share`, only while the GPU time spent decoding stays under that fraction of
    /// the wall-clock time ([`SplitPolicy::Auto`]; feature `cuda`).
    Auto {
        /// Most of the GPU's time decoding may take (e.g. `Some(0.05)`); `None`: as much as
        /// the consumer's pace asks for.
        gpu_share: Option<f64>,
    },
    /// Each batch on both at once, a fixed fraction of its chunks (of each kind) on the GPU
    /// and the rest on the CPU, measured by nothing: a mix found by hand, or a way to measure
    /// what a mix gives ([`SplitPolicy::Fixed`]; feature `cuda`).
    SplitFixed {
        /// The fraction of the chunks decoded on the GPU, from 0 to 1.
        gpu_chunks: f64,
    },
}

impl DecodeOn {
    /// Refuses a setting that cannot be: a fixed split's share of the chunks outside 0..1.
    /// [`PipelineBuilder::build`] checks it; a front end may check it sooner.
    pub fn check(&self) -> Result<()> {
        match *self {
            DecodeOn::SplitFixed { gpu_chunks } if !(0.0..=1.0).contains(&gpu_chunks) => {
                Err(Error::GpuChunks { gpu_chunks })
            }
            _ => Ok(()),
        }
    }
}

/// Configures a pipeline; [`build`](PipelineBuilder::build) opens the dataset and returns the
/// stream of batches. `P` is where the batches' tensors are made: [`Host`] by default,
/// [`Gpu`](zarrpipe_collate::Gpu) after [`collate_on_gpu`](PipelineBuilder::collate_on_gpu).
#[derive(Debug)]
#[must_use = "a builder does nothing until built"]
pub struct PipelineBuilder<P: CollateOn = Host> {
    config: Config,
    place: PhantomData<P>,
}

/// Everything a builder holds but the place of the tensors.
#[derive(Debug)]
struct Config {
    source: Source,
    variables: Vec<String>,
    spec: WindowSpec,
    batch_size: usize,
    epoch: EpochOptions,
    /// Epochs delivered in a row by one stream.
    epochs: u64,
    resume: Option<SamplerState>,
    prefetch: usize,
    read_ahead: usize,
    fetch_concurrency: usize,
    device: Device,
    decode_on: DecodeOn,
    decoder: Option<Arc<dyn BatchDecoder>>,
    selections: Vec<Selection>,
    channel_selections: Vec<ChannelSelection>,
    missing: Missing,
    /// A layout resolved before (see [`PipelineBuilder::layout`]).
    layout: Option<Arc<SampleLayout>>,
    store_options: StoreOptions,
    collate: CollateOptions,
    stats_json: Option<String>,
    latitude_dim: Option<String>,
    gpu_memory: Option<usize>,
    gpu_tensor_memory: Option<usize>,
    gpu_pinned_memory: usize,
    /// Threads of CPU decoding in a GPU pipeline; `None`: [`default_cpu_decode_threads`].
    cpu_decode_threads: Option<usize>,
    /// Processes on this host running pipelines, this one included (their CPU decoding
    /// shares the cores).
    processes_on_host: usize,
    /// This process's place among them, when its CPU decoding keeps to its share of the
    /// cores.
    rank_on_host: Option<usize>,
    /// The data-parallel job whose ranks on this host share their consumers' waits.
    waits_shared_by: Option<String>,
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
        let config = Config {
            source,
            variables: Vec::new(),
            spec: WindowSpec::new(),
            batch_size: 4,
            epoch: EpochOptions::default(),
            epochs: 1,
            resume: None,
            prefetch: 4,
            read_ahead: 2,
            fetch_concurrency: 64,
            device: Device::Cpu,
            decode_on: DecodeOn::Cpu,
            decoder: None,
            selections: Vec::new(),
            channel_selections: Vec::new(),
            missing: Missing::Skip,
            layout: None,
            store_options: StoreOptions::default(),
            collate: CollateOptions::default(),
            stats_json: None,
            latitude_dim: None,
            gpu_memory: None,
            gpu_tensor_memory: None,
            gpu_pinned_memory: 8 << 30,
            cpu_decode_threads: None,
            processes_on_host: 1,
            rank_on_host: None,
            waits_shared_by: None,
            #[cfg(feature = "cuda")]
            gpu: None,
        };
        Self {
            config,
            place: PhantomData,
        }
    }
}

impl<P: CollateOn> PipelineBuilder<P> {
    /// The variables stacked as channels, in this order (default: every data variable).
    /// Static variables (none of the iterated dimensions) are read once, at `build`; names
    /// of [`Derived`](zarrpipe_batcher::Derived) channels that are not variables of the
    /// dataset (`cos_lat`, `cos_zenith`, ...) are computed on each sample's grid and time.
    pub fn variables<I: IntoIterator<Item = S>, S: Into<String>>(mut self, names: I) -> Self {
        self.config.variables = names.into_iter().map(Into::into).collect();
        self
    }

    /// A window of `size` along `dim`, moved by `stride`.
    pub fn window(mut self, dim: impl Into<String>, size: u64, stride: u64) -> Self {
        self.config.spec = self.config.spec.window(dim, size, stride);
        self
    }

    /// The whole window specification at once.
    pub fn window_spec(mut self, spec: WindowSpec) -> Self {
        self.config.spec = spec;
        self
    }

    /// Forecasting pairs: inputs of `history` steps ending at each sample's step, targets at
    /// each of `leads` steps ahead (see [`zarrpipe_batcher::Forecast`]).
    pub fn forecast(mut self, history: u64, leads: impl IntoIterator<Item = u64>) -> Self {
        self.config.spec = self.config.spec.forecast(history, leads);
        self
    }

    /// Batches span blocks of `size` elements along `dim` (xbatcher's `batch_dims`): an
    /// iterated dim gives each batch a block of `size` steps; a windowed one, with
    /// [`concat_input_dims`](Self::concat_input_dims), the windows inside a block. The layout
    /// then fixes the batches and [`batch_size`](Self::batch_size) is not used.
    pub fn batch_dim(mut self, dim: impl Into<String>, size: u64) -> Self {
        self.config.spec = self.config.spec.batch_dim(dim, size);
        self
    }

    /// Every window position of a batch's block in that batch (xbatcher's
    /// `concat_input_dims`); without batch dims, one batch of the whole epoch.
    pub fn concat_input_dims(mut self, concat: bool) -> Self {
        self.config.spec = self.config.spec.concat_input_dims(concat);
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
        self.config.selections.push(Selection {
            dim: dim.into(),
            from: from.into(),
            to: to.into(),
        });
        self
    }

    /// Keeps the channels of `dim`, a dimension stacked as channels, whose coordinate values
    /// are `values`, in that order (`--select level=500,850`; a range of a stacked dimension
    /// through [`select`](Self::select) keeps the channels inside it). Variables without
    /// `dim` are not affected, so surface and level variables mix. One value of a sample
    /// dimension selects that step.
    pub fn select_channels<V: Into<CoordValue>>(
        mut self,
        dim: impl Into<String>,
        values: impl IntoIterator<Item = V>,
    ) -> Self {
        self.config.channel_selections.push(ChannelSelection {
            dim: dim.into(),
            values: values.into_iter().map(Into::into).collect(),
        });
        self
    }

    /// What becomes of samples whose inputs or targets touch a missing time step (a step the
    /// time coordinate leaves out of its regular frequency, or one whose data is absent):
    /// left out (default), kept with NaN and the fill value, or an error naming the dates.
    /// See [`Missing`] and [`find_missing_steps`](crate::find_missing_steps).
    pub fn missing(mut self, missing: Missing) -> Self {
        self.config.missing = missing;
        self
    }

    /// The sample layout an earlier epoch resolved with the same dataset and options
    /// ([`BatchStream::layout`]): `build` then neither resolves the selections nor looks for
    /// missing steps, which reads the time coordinate and lists every variable's chunks.
    /// Every epoch has the same layout (the order, seed and ranks are the batcher's), so a
    /// loop over epochs passes the first one's on. The options that make the layout
    /// (variables, windows, selections, `missing`) are not checked against it.
    pub fn layout(mut self, layout: Arc<SampleLayout>) -> Self {
        self.config.layout = Some(layout);
        self
    }

    /// Samples per batch (default 4); not used when batch dims or `concat_input_dims` fix the
    /// batches.
    pub fn batch_size(mut self, batch_size: usize) -> Self {
        self.config.batch_size = batch_size;
        self
    }

    /// Drops a last, short batch (default: keep it).
    pub fn drop_last(mut self, drop_last: bool) -> Self {
        self.config.epoch.drop_last = drop_last;
        self
    }

    /// Sample order: natural (default), a full seeded permutation, or chunk-aware blocks.
    pub fn shuffle(mut self, shuffle: Shuffle) -> Self {
        self.config.epoch.shuffle = shuffle;
        self
    }

    /// The shuffling seed; each epoch shuffles with `seed + epoch` (default 0).
    pub fn seed(mut self, seed: u64) -> Self {
        self.config.epoch.seed = seed;
        self
    }

    /// The epoch number (default 0).
    pub fn epoch(mut self, epoch: u64) -> Self {
        self.config.epoch.epoch = epoch;
        self
    }

    /// Epochs the stream delivers in a row (default 1), from [`epoch`](Self::epoch) (or the
    /// resumed one) on, each shuffled with its own seed. The chain then reads and decodes the
    /// next epoch's first batches while the consumer still trains on this one's last, so no
    /// epoch after the first starts from an empty chain;
    /// [`Batch::epoch`](zarrpipe_collate::Batch::epoch) tells them apart and
    /// [`BatchStream::epoch_metrics`] counts each. Memory stays bounded by the prefetch.
    pub fn epochs(mut self, count: u64) -> Self {
        self.config.epochs = count.max(1);
        self
    }

    /// This process's share of each epoch (default: the only rank; see
    /// [`Ranks::from_env`] for torchrun's variables).
    pub fn ranks(mut self, ranks: Ranks) -> Self {
        self.config.epoch.ranks = ranks;
        self
    }

    /// When samples don't divide evenly across ranks: pad by repeating samples (default) or drop.
    pub fn uneven(mut self, uneven: Uneven) -> Self {
        self.config.epoch.uneven = uneven;
        self
    }

    /// Every epoch option at once (order, seed, epoch, ranks, uneven, drop_last).
    pub fn epoch_options(mut self, options: EpochOptions) -> Self {
        self.config.epoch = options;
        self
    }

    /// Continues an epoch from a saved [`BatchStream::state`] with exactly the batches not yet
    /// delivered. The other options must be those of the saved run (checked).
    pub fn resume(mut self, state: SamplerState) -> Self {
        self.config.resume = Some(state);
        self
    }

    /// Batches loaded ahead of the consumer (default 4): decoded and collated, ready to be
    /// taken. Memory is bounded by these batches' tensors and the chunks of the batches read
    /// ahead ([`read_ahead`](Self::read_ahead)).
    pub fn prefetch(mut self, batches: usize) -> Self {
        self.config.prefetch = batches.max(1);
        self
    }

    /// Batches whose chunks are read ahead of decoding (default 2). Their reads go on while
    /// the chain is busy elsewhere, [`fetch_concurrency`](Self::fetch_concurrency) at once,
    /// the oldest batch's first: with batches of that many chunks or more, two keep every
    /// read busy, and more hold memory (pinned, on a GPU) and the cores' memory bandwidth
    /// for nothing. Four instead of two: W1 split 30% slower and W1 of 64 steps on the GPU
    /// 6% slower, epochs in a row (H100, 2026-11-28; docs/benchmarks.md, "Defaults and the
    /// measurements behind them").
    pub fn read_ahead(mut self, batches: usize) -> Self {
        self.config.read_ahead = batches.max(1);
        self
    }

    /// Chunk reads in flight at once (default 64), shared by the batches being fetched, the
    /// oldest batch's first.
    pub fn fetch_concurrency(mut self, reads: usize) -> Self {
        self.config.fetch_concurrency = reads.max(1);
        self
    }

    /// How the store is reached: object_store options (`endpoint`, `region`, `anonymous`,
    /// ...), retries, timeouts, the request limit, the chunk cache (see [`StoreOptions`]).
    /// Used when the pipeline opens the dataset from a URL.
    pub fn store_options(mut self, options: StoreOptions) -> Self {
        self.config.store_options = options;
        self
    }

    /// Keeps fetched chunks in `dir` on local disk, at most `max_bytes` (least recently used
    /// first out), so later epochs over a remote store read locally.
    pub fn cache_dir(mut self, dir: impl Into<std::path::PathBuf>, max_bytes: u64) -> Self {
        self.config.store_options = self.config.store_options.cache(dir, max_bytes);
        self
    }

    /// The GPU that GPU stages run on, as `Device::Cuda(ordinal)` (default `cuda:0`); the
    /// stages themselves are chosen with [`decode_on`](Self::decode_on) and
    /// [`collate_on_gpu`](Self::collate_on_gpu).
    pub fn device(mut self, device: Device) -> Self {
        self.config.device = device;
        self
    }

    /// Where chunks are decoded (default: the CPU). Either side feeds either collator: a
    /// batch is the same bit for bit.
    pub fn decode_on(mut self, decode_on: DecodeOn) -> Self {
        self.config.decode_on = decode_on;
        self
    }

    /// Replaces the decode stage with `decoder` (a [`CpuDecoder`] on a pool of its own, a
    /// `GpuDecoder`, or a decoder of your own); it overrides [`decode_on`](Self::decode_on).
    pub fn decoder(mut self, decoder: Arc<dyn BatchDecoder>) -> Self {
        self.config.decoder = Some(decoder);
        self
    }

    /// CPU decoding in a GPU pipeline (`DecodeOn::Cpu` with GPU collation, the CPU side of
    /// split and auto decoding): its threads (0: one per core; default:
    /// [`default_cpu_decode_threads`]). They run at a lower priority than the process's other
    /// threads, so a training loop and the GPU's feeders keep their cores.
    pub fn cpu_decode_threads(mut self, threads: usize) -> Self {
        self.config.cpu_decode_threads = Some(threads);
        self
    }

    /// Processes on this host that run pipelines, this one included (default 1): the default
    /// [`cpu_decode_threads`](Self::cpu_decode_threads) take this process's share of the
    /// host's cores, and so does rayon's global pool, where the GPU side checks and plans
    /// batches (when nothing in the process has used it yet). Under `torchrun`, one rank per
    /// GPU: its `LOCAL_WORLD_SIZE`. Ranks that each took every core would decode on several
    /// times the threads there are cores, beside as many training loops.
    pub fn processes_on_host(mut self, processes: usize) -> Self {
        self.config.processes_on_host = processes.max(1);
        self
    }

    /// This process's place among the [`processes_on_host`](Self::processes_on_host), from 0
    /// (under `torchrun`, its `LOCAL_RANK`): CPU decoding in a GPU pipeline then runs on this
    /// process's share of the cores it may use, a run of neighbouring cores
    /// ([`DecodeThreads::on_rank_share`]), instead of on any core. Without it, the ranks'
    /// decode threads are spread by the scheduler alone.
    pub fn rank_on_host(mut self, rank: usize) -> Self {
        self.config.rank_on_host = Some(rank);
        self
    }

    /// This process is a rank of the data-parallel job named `job`, whose ranks on this host
    /// ([`processes_on_host`](Self::processes_on_host), this one's place given by
    /// [`rank_on_host`](Self::rank_on_host)) step together: they share their consumers' waits
    /// ([`HostWaits`](crate::HostWaits)), so that `auto` decoding calls the GPU in when any
    /// rank waits, not only its own. A rank waiting for its batch holds every rank up at the
    /// next all-reduce, where the others count the time as their model's work: each rank's
    /// `auto` read its model as slow and kept its CPU side. Every rank passes the same name,
    /// unique to the run on this host (the Python package, under `torchrun`, its launcher's
    /// process id). Ranks on other hosts are not seen. A name that cannot name a file, or no
    /// rank given, is an error when the pipeline is built; a table the file system refuses is
    /// a warning, and the rank reads its own waits.
    pub fn share_waits_on_host(mut self, job: impl Into<String>) -> Self {
        self.config.waits_shared_by = Some(job.into());
        self
    }

    /// Makes the batches' tensors in GPU memory: the builder then builds a
    /// `BatchStream<Gpu>` of device tensors (f32, bf16 or f16; feature `cuda`).
    #[cfg(feature = "cuda")]
    pub fn collate_on_gpu(self) -> PipelineBuilder<zarrpipe_collate::Gpu> {
        self.collate_on()
    }

    /// Makes the batches' tensors in host memory (the default): float32 `ndarray`s.
    pub fn collate_on_host(self) -> PipelineBuilder<Host> {
        self.collate_on()
    }

    /// Makes the batches' tensors in `Q`'s memory.
    pub fn collate_on<Q: CollateOn>(self) -> PipelineBuilder<Q> {
        PipelineBuilder {
            config: self.config,
            place: PhantomData,
        }
    }

    /// Normalisation, NaN handling and (on the GPU) the tensor type; see [`CollateOptions`].
    /// Static fields and derived channels' coordinates given here (from
    /// [`read_channel_inputs`](crate::read_channel_inputs), kept across epochs) are not read
    /// again at `build`.
    pub fn collate_options(mut self, options: CollateOptions) -> Self {
        self.config.collate = options;
        self
    }

    /// Also deliver latitude weights (cos(latitude) over its mean, from the 1-D coordinate of
    /// `dim`, in degrees) per batch as `[batch, latitude window]`.
    pub fn latitude_weights(mut self, dim: impl Into<String>) -> Self {
        self.config.latitude_dim = Some(dim.into());
        self
    }

    /// The collate options set so far.
    pub fn collate_options_ref(&self) -> &CollateOptions {
        &self.config.collate
    }

    /// Normalises each channel with its own `mean` and `std` (else its variable's) from
    /// `zarrpipe stats --json` output (resolved against the layout when the pipeline is
    /// built); inputs and targets alike.
    pub fn normalize_with_stats(mut self, stats_json: impl Into<String>) -> Self {
        self.config.stats_json = Some(stats_json.into());
        self
    }

    /// GPU stages: run on this device's decoder and tensor pool (see
    /// [`GpuDevice`](crate::GpuDevice)), kept across epochs, instead of opening the device
    /// anew at `build`. Its ordinal overrides [`device`](Self::device).
    #[cfg(feature = "cuda")]
    pub fn gpu(mut self, device: Arc<crate::GpuDevice>) -> Self {
        self.config.gpu = Some(device);
        self
    }

    /// When the builder opens the device: most bytes of its memory the pipeline takes,
    /// shared half and half between decoding (decoded chunks not yet collated, stored bytes
    /// being decoded) and batch tensors (default: a quarter of the device's memory, see
    /// [`GpuMemory`](crate::GpuMemory)). Under it, fewer batches decode at once and the
    /// pipeline waits for dropped batches, instead of running out of memory beside a model.
    pub fn gpu_memory(mut self, bytes: usize) -> Self {
        self.config.gpu_memory = Some(bytes);
        self
    }

    /// GPU collation, when the builder opens the device: most device bytes in batch tensors
    /// at once (default: half of [`gpu_memory`](Self::gpu_memory)). Tensors the consumer
    /// still holds count, so the pipeline waits for dropped batches once there.
    pub fn gpu_tensor_memory(mut self, bytes: usize) -> Self {
        self.config.gpu_tensor_memory = Some(bytes);
        self
    }

    /// GPU decoding, when the builder opens the device: most stored bytes of the batches
    /// being decoded at once (default 8 GiB), which sit in pinned host memory until their batch
    /// is decoded; past it the next batch waits (one batch always goes through).
    pub fn gpu_pinned_memory(mut self, bytes: usize) -> Self {
        self.config.gpu_pinned_memory = bytes;
        self
    }

    /// Opens the dataset, checks the layout, opens the GPU if a stage runs there, and returns
    /// the stream of batches: read plans, then `fetch_batches`, `decode_batches`,
    /// `collate_batches` and `prefetch`, the chain a user can also compose by hand. Must be
    /// called inside a Tokio runtime.
    pub async fn build(mut self) -> Result<BatchStream<P>> {
        self.config.decode_on.check()?;
        share_the_global_pool(self.config.processes_on_host);
        let waits = self.host_waits()?;
        let gpu = self.open_gpu_if_used()?;
        let decoder = self.stage_decoder(&gpu, waits)?;
        let (prefetch, reads) = (self.config.prefetch, self.config.fetch_concurrency);
        let read_ahead = self.config.read_ahead;
        let epochs = self.config.epochs;
        let (dataset, batcher, collate) = self.config.prepare().await?;
        let collator = P::collator(batcher.layout().clone(), collate, &gpu)?;
        let device = P::device(&gpu);
        // A GPU decoder's pinned memory, when it has some: its chunks then upload unstaged.
        // The fetch stage asks for it at its first batch; asked now, it is set aside from
        // the start (a benchmark waits for it before timing). Only a local store's reads land
        // in it: elsewhere the chain gets none.
        let memory = decoder
            .read_memory()
            .filter(|_| dataset.reads_into_memory());
        if let Some(memory) = &memory {
            memory
                .clone()
                .expect_batches(most_batch_bytes(&batcher), read_ahead);
        }
        let chain = stream::iter(batcher.read_plans_with_epochs_after(epochs - 1))
            .fetch_batches_into(read_ahead, reads, memory)
            .decode_batches(decoder)
            .collate_batches(collator)
            .prefetch(prefetch);
        Ok(BatchStream::new(chain, dataset, batcher, device).epochs(epochs))
    }

    /// The GPU, when a stage runs there: the one given, or opened on `device`.
    fn open_gpu_if_used(&mut self) -> Result<StageGpu> {
        let needed = self.config.decode_on != DecodeOn::Cpu || P::NEEDS_GPU;
        // `auto` into host tensors only calls the GPU in when there is one to call.
        let optional = matches!(self.config.decode_on, DecodeOn::Auto { .. }) && !P::NEEDS_GPU;
        #[cfg(feature = "cuda")]
        if needed {
            if let Some(gpu) = self.config.gpu.take() {
                return Ok(StageGpu::on(gpu));
            }
            let ordinal = match self.config.device {
                Device::Cuda(ordinal) => ordinal,
                Device::Cpu => 0,
            };
            let options = zarrpipe_codec_gpu::GpuOptions {
                device: ordinal,
                pinned_memory: self.config.gpu_pinned_memory,
                ..Default::default()
            };
            let (budget, tensors) = (self.config.gpu_memory, self.config.gpu_tensor_memory);
            let opened = crate::GpuDevice::open_within(options, budget, tensors);
            return match opened {
                Ok(gpu) => Ok(StageGpu::on(gpu)),
                Err(error) if optional => {
                    self.decode_on_cpu_instead(&error.to_string());
                    Ok(StageGpu::none())
                }
                Err(error) => Err(error),
            };
        }
        match needed {
            true if optional => {
                self.decode_on_cpu_instead("this build has no `cuda` feature");
                Ok(StageGpu::none())
            }
            true => Err(Error::UnsupportedDevice {
                device: self.config.device,
                reason: "GPU stages need the `cuda` feature",
            }),
            false => Ok(StageGpu::none()),
        }
    }

    /// `auto` decoding without a usable GPU: every chunk decodes on the CPU, and the reason
    /// is traced (`zarrpipe run` prints it).
    fn decode_on_cpu_instead(&mut self, why: &str) {
        tracing::warn!(target: "zarrpipe", "decode auto: no usable GPU ({why}), decoding on the CPU");
        self.config.decode_on = DecodeOn::Cpu;
    }

    /// The decode stage.
    fn stage_decoder(
        &self,
        gpu: &StageGpu,
        waits: Option<crate::HostWaits>,
    ) -> Result<Arc<dyn BatchDecoder>> {
        if let Some(decoder) = &self.config.decoder {
            return Ok(decoder.clone());
        }
        let processes = self.config.processes_on_host;
        let count = self
            .config
            .cpu_decode_threads
            .unwrap_or_else(|| default_cpu_decode_threads(self.config.decode_on, processes));
        let threads = match self.config.rank_on_host {
            Some(rank) => DecodeThreads::on_rank_share(count, rank, processes)?,
            None => DecodeThreads::anywhere(count),
        };
        #[cfg(feature = "cuda")]
        if let Some(gpu) = gpu.device() {
            // The device's own split decoder: what it learnt carries over epochs.
            let split = |policy| -> Result<Arc<dyn BatchDecoder>> {
                Ok(gpu.split_decoder(policy, threads.clone())?)
            };
            return match self.config.decode_on {
                DecodeOn::Cpu => Ok(gpu.cpu_decoder(threads.clone())?),
                DecodeOn::Gpu => Ok(gpu.decoder()),
                DecodeOn::Split => split(SplitPolicy::Balanced),
                DecodeOn::SplitFixed { gpu_chunks } => split(SplitPolicy::Fixed { gpu_chunks }),
                DecodeOn::Auto { gpu_share } => {
                    let split = gpu.split_decoder(SplitPolicy::Auto { gpu_share }, threads)?;
                    if let Some(waits) = waits {
                        // A decoder that shares already (the device's, built before) keeps its
                        // table.
                        split.pace().share_waits(Box::new(waits));
                    }
                    Ok(split)
                }
            };
        }
        let _ = (gpu, threads, waits);
        match self.config.decode_on {
            DecodeOn::Cpu => Ok(Arc::new(CpuDecoder::new())),
            // Refused, or turned into CPU decoding, when the GPU was opened.
            _ => Err(StageGpu::missing("GPU decoding needs a GPU")),
        }
    }
}

impl<P: CollateOn> PipelineBuilder<P> {
    /// The table of waits this rank shares with its job's others on the host, when it is
    /// one of several ([`share_waits_on_host`](Self::share_waits_on_host)) and decodes with
    /// `auto`, the one stage that reads the consumer's pace.
    fn host_waits(&self) -> Result<Option<crate::HostWaits>> {
        let Some(job) = &self.config.waits_shared_by else {
            return Ok(None);
        };
        let ranks = self.config.processes_on_host;
        if ranks <= 1 || !matches!(self.config.decode_on, DecodeOn::Auto { .. }) {
            return Ok(None);
        }
        let Some(rank) = self.config.rank_on_host else {
            return Err(Error::SharedWaits {
                job: job.clone(),
                reason: format!("{ranks} processes on the host, and this one's rank among them not given (rank_on_host)"),
            });
        };
        crate::HostWaits::check(job, rank, ranks)?;
        // A table the file system refuses (no room, a read-only /dev/shm) costs the ranks the
        // others' waits, not the training.
        match crate::HostWaits::open_checked(job, rank, ranks) {
            Ok(waits) => Ok(Some(waits)),
            Err(error) => {
                tracing::warn!(target: "zarrpipe", "{error}; each rank's auto reads its own waits");
                Ok(None)
            }
        }
    }
}

/// Sizes rayon's global pool to this process's share of the host's cores, when several
/// processes share the host and the pool has not started yet.
fn share_the_global_pool(processes: usize) {
    if processes <= 1 {
        return;
    }
    let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
    let threads = (cores / processes).max(1);
    if let Err(error) = rayon::ThreadPoolBuilder::new()
        .num_threads(threads)
        .build_global()
    {
        tracing::debug!(target: "zarrpipe", "rayon's global pool keeps its size: {error}");
    }
}

/// The threads CPU decoding takes by default in a GPU pipeline decoding `on` that side, with
/// `processes` processes on the host sharing its cores
/// ([`PipelineBuilder::processes_on_host`]):
/// - split decoding: a quarter of the process's share of the cores (at least one). Feeding the
///   GPU (reads, frame checks, staging) takes the host's cores too: 16-thread split decoding of
///   W1 was slower than 2 or 4 threads (H100, 2026-11-24 and 25; docs/benchmarks.md,
///   "Defaults and the measurements behind them");
/// - CPU decoding: the process's share of every core (at least one). Its threads are niced,
///   so the training loop beside them keeps its core by priority: setup A in bf16 on an H100
///   host trained at 160 samples/s (155-168) with 16 threads against 143 (129-158) with 14,
///   four and five runs, two calls (2026-11-26; docs/benchmarks.md, "Defaults and the
///   measurements behind them");
/// - auto and a fixed split: the process's share of every core but two (at least one); two
///   stay for the consumers and the GPU's feeders, which these keep busy.
pub fn default_cpu_decode_threads(on: DecodeOn, processes: usize) -> usize {
    let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
    cpu_decode_threads_of(cores, on, processes)
}

/// [`default_cpu_decode_threads`] on a host of `cores` cores.
fn cpu_decode_threads_of(cores: usize, on: DecodeOn, processes: usize) -> usize {
    let processes = processes.max(1);
    match on {
        DecodeOn::Split => (cores / processes / 4).max(1),
        DecodeOn::Cpu => (cores / processes).max(1),
        DecodeOn::Gpu | DecodeOn::Auto { .. } | DecodeOn::SplitFixed { .. } => {
            (cores.saturating_sub(2) / processes).max(1)
        }
    }
}

/// The most decoded bytes one of the epoch's first batches reads (an upper bound for their
/// stored bytes).
fn most_batch_bytes(batcher: &Batcher) -> u64 {
    batcher
        .read_plans()
        .take(16)
        .map(|plan| {
            plan.payload
                .iter()
                .map(|chunk| chunk.decoded_bytes())
                .sum::<u64>()
        })
        .max()
        .unwrap_or(0)
}

/// Where a pipeline collates: the places a builder can make tensors in ([`Host`], and
/// [`Gpu`](zarrpipe_collate::Gpu) with the `cuda` feature).
pub trait CollateOn: Place + Sized {
    /// Whether collating here needs the GPU.
    const NEEDS_GPU: bool;

    /// The collator for `layout` with `options`.
    #[doc(hidden)]
    fn collator(
        layout: Arc<SampleLayout>,
        options: CollateOptions,
        gpu: &StageGpu,
    ) -> Result<Arc<dyn BatchCollator<Place = Self>>>;

    /// Where the batches end up.
    #[doc(hidden)]
    fn device(gpu: &StageGpu) -> Device;
}

impl CollateOn for Host {
    const NEEDS_GPU: bool = false;

    fn collator(
        layout: Arc<SampleLayout>,
        options: CollateOptions,
        _gpu: &StageGpu,
    ) -> Result<Arc<dyn BatchCollator<Place = Host>>> {
        Ok(Arc::new(HostCollator::with_options(layout, options)?))
    }

    fn device(_gpu: &StageGpu) -> Device {
        Device::Cpu
    }
}

#[cfg(feature = "cuda")]
impl CollateOn for zarrpipe_collate::Gpu {
    const NEEDS_GPU: bool = true;

    fn collator(
        layout: Arc<SampleLayout>,
        options: CollateOptions,
        gpu: &StageGpu,
    ) -> Result<Arc<dyn BatchCollator<Place = Self>>> {
        let gpu = gpu.required("GPU collation needs a GPU")?;
        Ok(Arc::new(gpu.collator(layout, options)?))
    }

    fn device(gpu: &StageGpu) -> Device {
        gpu.place()
    }
}

impl Config {
    /// Opens the dataset and resolves the layout, the batcher and the collate options.
    async fn prepare(self) -> Result<(Arc<Dataset>, Batcher, CollateOptions)> {
        tokio::runtime::Handle::try_current().map_err(|_| Error::NoRuntime)?;
        let dataset = match self.source {
            Source::Url(url) => Arc::new(Dataset::open_with(&url, &self.store_options).await?),
            Source::Dataset(dataset) => dataset,
        };
        let layout = match self.layout {
            Some(layout) => layout,
            None => {
                let variables = if self.variables.is_empty() {
                    dataset.data_variable_names()
                } else {
                    self.variables
                };
                let selections = (&self.selections, &self.channel_selections);
                let spec =
                    resolve_selections(&dataset, self.spec, selections.0, selections.1).await?;
                let mut layout = SampleLayout::new(&dataset, &variables, &spec)?;
                label_channels(&dataset, &mut layout).await?;
                Arc::new(apply_missing_steps(&dataset, layout, self.missing).await?)
            }
        };
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
        // Static fields and derived channels' coordinates: read once, here, unless given.
        let layout = batcher.layout();
        let fields_missing =
            !layout.static_variables().is_empty() && collate.static_fields.is_none();
        let derived_missing = !layout.derived_channels().is_empty() && collate.derived.is_none();
        if fields_missing || derived_missing {
            let (fields, derived) =
                read_channel_inputs(&dataset, layout, self.fetch_concurrency).await?;
            collate.static_fields = collate.static_fields.or(fields);
            collate.derived = collate.derived.or(derived);
        }
        Ok((dataset, batcher, collate))
    }
}

#[cfg(test)]
mod tests {
    use super::{cpu_decode_threads_of, DecodeOn};

    #[test]
    fn processes_on_one_host_share_its_cores_for_cpu_decoding() {
        let auto = DecodeOn::Auto { gpu_share: None };
        // One process: every core for cpu, every core but two for auto, a quarter for split.
        assert_eq!(cpu_decode_threads_of(16, DecodeOn::Cpu, 1), 16);
        assert_eq!(cpu_decode_threads_of(16, auto, 1), 14);
        assert_eq!(cpu_decode_threads_of(16, DecodeOn::Split, 1), 4);
        let fixed = DecodeOn::SplitFixed { gpu_chunks: 0.5 };
        assert_eq!(cpu_decode_threads_of(16, fixed, 1), 14);
        // Two ranks on 32 cores: 16 threads each (15 for auto, 4 for split), not 32.
        assert_eq!(cpu_decode_threads_of(32, DecodeOn::Cpu, 2), 16);
        assert_eq!(cpu_decode_threads_of(32, auto, 2), 15);
        assert_eq!(cpu_decode_threads_of(32, DecodeOn::Split, 2), 4);
        // More processes than cores, and no process count: at least one thread.
        assert_eq!(cpu_decode_threads_of(32, auto, 64), 1);
        assert_eq!(cpu_decode_threads_of(32, DecodeOn::Split, 64), 1);
        assert_eq!(cpu_decode_threads_of(1, DecodeOn::Cpu, 0), 1);
    }
}
