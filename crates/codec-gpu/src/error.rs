use crate::frames::FrameError;

/// The result type of this crate.
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// What can go wrong decoding a chunk. Every variant names the variable and chunk key. The
/// CUDA variants exist with or without the `cuda` feature, so the enum never changes shape.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    #[error(transparent)]
    Store(#[from] zarrpipe_store::Error),

    #[error("cannot decode chunk `{key}` of variable `{variable}`")]
    Decode {
        variable: String,
        key: String,
        #[source]
        source: zarrs::array::CodecError,
    },

    #[error(
        "chunk `{key}` of variable `{variable}` decoded to {actual} bytes, expected {expected}"
    )]
    DecodedSize {
        variable: String,
        key: String,
        expected: usize,
        actual: usize,
    },

    #[error("decoding chunk `{key}` of variable `{variable}` panicked (a bug, here or in a codec, on this chunk's bytes): {message}")]
    Panicked {
        variable: String,
        key: String,
        message: String,
    },

    #[error("the decoding thread pool stopped before chunk `{key}` of `{variable}` was decoded")]
    WorkerGone { variable: String, key: String },

    #[error("the {stage} task of a batch panicked or was cancelled")]
    StageTask {
        stage: &'static str,
        #[source]
        source: tokio::task::JoinError,
    },

    #[error("CUDA is not available: {reason}")]
    CudaUnavailable { reason: String },

    #[error("chunk `{key}` of variable `{variable}` cannot be decoded")]
    Frame {
        variable: String,
        key: String,
        #[source]
        source: FrameError,
    },

    #[error("chunk `{key}` of variable `{variable}` needs the CPU, and the GPU decoder is strict")]
    GpuUnsupported {
        variable: String,
        key: String,
        #[source]
        source: FrameError,
    },

    #[error("chunk `{key}` of variable `{variable}` failed on the GPU: {detail}")]
    GpuDecode {
        variable: String,
        key: String,
        detail: String,
    },

    #[error("CUDA call failed: {what}")]
    Cuda {
        what: String,
        #[source]
        source: Box<dyn std::error::Error + Send + Sync>,
    },

    #[error("nvCOMP call {call} failed with status {status} ({name})")]
    Nvcomp {
        call: &'static str,
        status: i32,
        name: &'static str,
    },
}
