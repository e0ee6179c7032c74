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

    #[error("the decoding thread pool stopped before chunk `{key}` of `{variable}` was decoded")]
    WorkerGone { variable: String, key: String },

    #[error("CUDA is not available: {reason}")]
    CudaUnavailable { reason: String },
}
