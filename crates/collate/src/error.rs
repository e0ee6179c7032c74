/// The result type of this crate.
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// What can go wrong gathering windows into a batch tensor.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    #[error(transparent)]
    Store(#[from] zarrpipe_store::Error),

    #[error(transparent)]
    Decode(#[from] zarrpipe_codec_gpu::Error),

    #[error(
        "sample {sample} needs chunk {indices:?} of variable `{variable}`, which was not decoded"
    )]
    MissingChunk {
        sample: u64,
        variable: String,
        indices: Vec<u64>,
    },

    #[error("decoded chunk {indices:?} of variable `{variable}` is not part of this layout")]
    UnknownVariable { variable: String, indices: Vec<u64> },

    #[error("collating the batch of samples {samples} panicked (a bug): {message}")]
    Panicked { samples: String, message: String },

    #[error("the collate thread pool stopped before the batch was finished")]
    WorkerGone,

    #[error("variable `{variable}` needs {axes} axes in a gather, more than the GPU kernel's 8")]
    TooManyAxes { variable: String, axes: usize },

    #[error("collate options: {reason}")]
    BadOptions { reason: String },

    #[error("derived channel `{channel}`: {reason}")]
    DerivedChannel {
        channel: &'static str,
        reason: String,
    },

    #[error("the host collator delivers float32 tensors, not {0:?}: collate on the GPU for that")]
    HostTensorType(crate::TensorDType),

    #[error("CUDA, {what}: {source}")]
    Cuda {
        what: String,
        #[source]
        source: Box<dyn std::error::Error + Send + Sync>,
    },
}
