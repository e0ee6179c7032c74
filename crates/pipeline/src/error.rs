/// The result type of this crate.
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// Errors of a pipeline: from any stage, with that stage's context, or of the pipeline itself.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    #[error(transparent)]
    Store(#[from] zarrpipe_store::Error),

    #[error(transparent)]
    Decode(#[from] zarrpipe_codec_gpu::Error),

    #[error(transparent)]
    Layout(#[from] zarrpipe_batcher::Error),

    #[error(transparent)]
    Collate(#[from] zarrpipe_collate::Error),

    #[error("batch {batch} failed: its loading task panicked or was cancelled")]
    TaskFailed {
        batch: u64,
        #[source]
        source: tokio::task::JoinError,
    },

    #[error("cannot select on `{dim}`: {reason}")]
    Select { dim: String, reason: String },

    #[error("derived channels need dates from the time coordinate `{dim}`: {reason}")]
    TimeCoordinate { dim: String, reason: String },

    #[error("a pipeline must be built inside a Tokio runtime (it runs its stages as Tokio tasks)")]
    NoRuntime,

    #[error("GPU pipeline, {what}: {source}")]
    Gpu {
        what: String,
        #[source]
        source: Box<dyn std::error::Error + Send + Sync>,
    },

    #[error("the GPU worker thread stopped before the batch was delivered")]
    WorkerStopped,

    #[error("device {device} is not supported by this build: {reason}")]
    UnsupportedDevice {
        device: zarrpipe_core::Device,
        reason: &'static str,
    },
}
