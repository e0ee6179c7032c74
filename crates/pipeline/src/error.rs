/// The result type of this crate.
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// Errors of a pipeline: from any stage, with that stage's context, or of the pipeline itself.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// An error from the store stage.
    #[error(transparent)]
    Store(#[from] zarrpipe_store::Error),

    /// An error from the decode stage.
    #[error(transparent)]
    Decode(#[from] zarrpipe_codec_gpu::Error),

    /// An error in the sample layout or the sampler.
    #[error(transparent)]
    Layout(#[from] zarrpipe_batcher::Error),

    /// An error from the collate stage.
    #[error(transparent)]
    Collate(#[from] zarrpipe_collate::Error),

    /// A batch's loading task panicked or was cancelled.
    #[error("batch {batch} failed: its loading task panicked or was cancelled")]
    TaskFailed {
        /// The batch's number in the epoch.
        batch: u64,
        /// The task's join error.
        #[source]
        source: tokio::task::JoinError,
    },

    /// A selection that cannot be resolved to an index range.
    #[error("cannot select on `{dim}`: {reason}")]
    Select {
        /// The dimension selected on.
        dim: String,
        /// Why it cannot be resolved.
        reason: String,
    },

    /// Derived channels need dates the time coordinate does not give.
    #[error("derived channels need dates from the time coordinate `{dim}`: {reason}")]
    TimeCoordinate {
        /// The time dimension.
        dim: String,
        /// What is wrong with its coordinate.
        reason: String,
    },

    /// A pipeline built outside a Tokio runtime.
    #[error("a pipeline must be built inside a Tokio runtime (it runs its stages as Tokio tasks)")]
    NoRuntime,

    /// Setting up a GPU stage failed.
    #[error("GPU pipeline, {what}: {source}")]
    Gpu {
        /// What was being set up.
        what: String,
        /// The underlying error.
        #[source]
        source: Box<dyn std::error::Error + Send + Sync>,
    },

    /// The GPU worker thread stopped before delivering the batch.
    #[error("the GPU worker thread stopped before the batch was delivered")]
    WorkerStopped,

    /// A chain handed to [`BatchStream::new`](crate::BatchStream::new) delivered a batch that
    /// the batcher or device given beside it does not plan.
    #[error("the chain does not deliver what its batcher and device plan: {what} (build the chain from that batcher's read plans, collating on that device)")]
    ChainMismatch {
        /// What differs, naming the batch.
        what: String,
    },

    /// The waits of a data-parallel job's ranks on this host cannot be shared.
    #[error("cannot share waits between the ranks of job {job:?}: {reason}")]
    SharedWaits {
        /// The job's name.
        job: String,
        /// What is wrong.
        reason: String,
    },

    /// A process's place among the processes on its host that cannot be.
    #[error("cannot place CPU decoding on this process's share of the host's cores: {reason}")]
    RankOnHost {
        /// What is wrong.
        reason: String,
    },

    /// A fixed split's share of the chunks on the GPU that is not a fraction.
    #[error("decode_on split with gpu_chunks = {gpu_chunks}: the fraction of each batch's chunks decoded on the GPU must be from 0 to 1")]
    GpuChunks {
        /// The share asked for.
        gpu_chunks: f64,
    },

    /// A device this build cannot use.
    #[error("device {device} is not supported by this build: {reason}")]
    UnsupportedDevice {
        /// The device asked for.
        device: zarrpipe_core::Device,
        /// Why it cannot be used.
        reason: &'static str,
    },
}
