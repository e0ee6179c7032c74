use crate::frames::FrameError;

/// The result type of this crate.
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// What can go wrong decoding a chunk. Every variant names the variable and chunk key. The
/// CUDA variant exists with or without the `cuda` feature, so the enum never changes shape.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// An error from the store stage, passed through.
    #[error(transparent)]
    Store(#[from] zarrpipe_store::Error),

    /// A codec of the chunk failed on the CPU.
    #[error("cannot decode chunk `{key}` of variable `{variable}`")]
    Decode {
        /// The variable's name.
        variable: String,
        /// The chunk key that failed.
        key: String,
        /// The codec's error.
        #[source]
        source: zarrs::array::CodecError,
    },

    /// A codec library refused a chunk's bytes on the CPU.
    #[error("cannot decode chunk `{key}` of variable `{variable}` ({codec}): {message}")]
    Codec {
        /// The variable's name.
        variable: String,
        /// The chunk key that failed.
        key: String,
        /// The codec that failed.
        codec: &'static str,
        /// What it said.
        message: String,
    },

    /// A chunk that decoded to the wrong number of bytes.
    #[error(
        "chunk `{key}` of variable `{variable}` decoded to {actual} bytes, expected {expected}"
    )]
    DecodedSize {
        /// The variable's name.
        variable: String,
        /// The chunk key that failed.
        key: String,
        /// The bytes of the chunk's shape and data type.
        expected: usize,
        /// The bytes decoded.
        actual: usize,
    },

    /// Decoding a chunk on the CPU panicked (caught, so the process goes on).
    #[error("decoding chunk `{key}` of variable `{variable}` panicked (a bug, here or in a codec, on this chunk's bytes): {message}")]
    Panicked {
        /// The variable's name.
        variable: String,
        /// The chunk key that failed.
        key: String,
        /// The panic's message.
        message: String,
    },

    /// The CPU thread pool stopped before decoding the chunk.
    #[error("the decoding thread pool stopped before chunk `{key}` of `{variable}` was decoded")]
    WorkerGone {
        /// The variable's name.
        variable: String,
        /// The chunk key that was not decoded.
        key: String,
    },

    /// A stage's task panicked or was cancelled.
    #[error("the {stage} task of a batch panicked or was cancelled")]
    StageTask {
        /// The stage, e.g. `GPU decode`.
        stage: &'static str,
        /// The task's join error.
        #[source]
        source: tokio::task::JoinError,
    },

    /// A chunk whose frames fail the checks made on the CPU before decoding.
    #[error("chunk `{key}` of variable `{variable}` cannot be decoded")]
    Frame {
        /// The variable's name.
        variable: String,
        /// The chunk key that failed.
        key: String,
        /// What is wrong with the frame.
        #[source]
        source: FrameError,
    },

    /// A chunk the GPU cannot decode, with [`GpuOptions::strict`](crate::GpuOptions::strict) set.
    #[error("chunk `{key}` of variable `{variable}` needs the CPU, and the GPU decoder is strict")]
    GpuUnsupported {
        /// The variable's name.
        variable: String,
        /// The chunk key that failed.
        key: String,
        /// Why it needs the CPU.
        #[source]
        source: FrameError,
    },

    /// A decoder handed a device batch with a chunk outside its buffer, or shorter than the
    /// chunk's decoded size.
    #[error(
        "chunk `{key}` of variable `{variable}` is {len} bytes at offset {offset} of a device \
         buffer of {buffer}, and decodes to {expected}"
    )]
    DeviceChunkOutside {
        /// The variable's name.
        variable: String,
        /// The chunk's key.
        key: String,
        /// Where the decoder put the chunk.
        offset: usize,
        /// The bytes it said the chunk takes.
        len: usize,
        /// The chunk's decoded size.
        expected: usize,
        /// The buffer's length.
        buffer: usize,
    },

    /// Decoding a chunk on the GPU failed.
    #[error("chunk `{key}` of variable `{variable}` failed on the GPU: {detail}")]
    GpuDecode {
        /// The variable's name.
        variable: String,
        /// The chunk key that failed.
        key: String,
        /// What failed.
        detail: String,
    },

    /// The GPU cannot be used (no driver, device, NVRTC or nvCOMP, no `cuda` feature, an
    /// earlier fault of the decoder's context), or a CUDA call failed.
    #[error(transparent)]
    Cuda(#[from] zarrpipe_cuda::CudaError),

    /// An nvCOMP call returned an error status.
    #[error("nvCOMP call {call} failed with status {status} ({name})")]
    Nvcomp {
        /// The nvCOMP function.
        call: &'static str,
        /// The status it returned.
        status: i32,
        /// The status's name.
        name: &'static str,
    },
}

impl Error {
    /// The GPU path cannot run here (see [`zarrpipe_cuda::CudaError::Unavailable`]).
    pub fn unavailable(reason: impl Into<String>) -> Self {
        Self::Cuda(zarrpipe_cuda::CudaError::unavailable(reason))
    }
}
