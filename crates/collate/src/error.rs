/// The result type of this crate.
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// What can go wrong gathering windows into a batch tensor.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// An error from the store stage, passed through.
    #[error(transparent)]
    Store(#[from] zarrpipe_store::Error),

    /// An error from the decode stage, passed through.
    #[error(transparent)]
    Decode(#[from] zarrpipe_codec_gpu::Error),

    /// A sample needs a chunk the batch does not hold.
    #[error(
        "sample {sample} needs chunk {indices:?} of variable `{variable}`, which was not decoded"
    )]
    MissingChunk {
        /// The sample's number in the epoch.
        sample: u64,
        /// The variable's name.
        variable: String,
        /// The chunk's indices in the variable's chunk grid.
        indices: Vec<u64>,
    },

    /// A chunk sent to be decoded with a part of the batch that did not hand it back.
    #[error("chunk {indices:?} of variable `{variable}` went to a decoder that did not return it")]
    ChunkNotReturned {
        /// The variable's name.
        variable: String,
        /// The chunk's indices in the variable's chunk grid.
        indices: Vec<u64>,
    },

    /// A decoded chunk of a variable the layout does not read.
    #[error("decoded chunk {indices:?} of variable `{variable}` is not part of this layout")]
    UnknownVariable {
        /// The variable's name.
        variable: String,
        /// The chunk's indices in the variable's chunk grid.
        indices: Vec<u64>,
    },

    /// Collating a batch on the CPU panicked (caught, so the process goes on).
    #[error("collating the batch of samples {samples} panicked (a bug): {message}")]
    Panicked {
        /// The batch's sample numbers (the first 8, and how many more).
        samples: String,
        /// The panic's message.
        message: String,
    },

    /// The collate thread pool stopped before the batch was collated.
    #[error("the collate thread pool stopped before the batch was finished")]
    WorkerGone,

    /// A gather of more axes than the GPU kernel takes ([`MAX_AXES`](crate::MAX_AXES)).
    #[error("variable `{variable}` needs {axes} axes in a gather, more than the GPU kernel's 8")]
    TooManyAxes {
        /// The variable's name.
        variable: String,
        /// The axes the gather needs.
        axes: usize,
    },

    /// Collate options that do not fit the layout.
    #[error("collate options: {reason}")]
    BadOptions {
        /// What does not fit.
        reason: String,
    },

    /// A derived channel that cannot be computed.
    #[error("derived channel `{channel}`: {reason}")]
    DerivedChannel {
        /// The channel's name.
        channel: &'static str,
        /// Why, e.g. a coordinate that was not given.
        reason: String,
    },

    /// A tensor type other than float32 asked of the host collator.
    #[error("the host collator delivers float32 tensors, not {0:?}: collate on the GPU for that")]
    HostTensorType(crate::TensorDType),

    /// Collating on the GPU failed: a CUDA or candle call, or the batch's task.
    #[error(transparent)]
    Cuda(#[from] zarrpipe_cuda::CudaError),
}
