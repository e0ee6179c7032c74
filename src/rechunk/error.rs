use std::path::PathBuf;

/// Why `rechunk` refused its options or its destination, or stopped.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum RechunkError {
    #[error("{flag} {text:?}: {reason} (expected e.g. time=1,latitude=320)")]
    DimSize {
        flag: String,
        text: String,
        reason: String,
    },
    #[error("unknown codec {text:?}: expected zstd[:LEVEL -7..22], blosc-lz4[:0..9], blosc-zstd[:0..9], gzip[:0..9] or none")]
    Codec { text: String },
    #[error("cannot create the {codec} codec")]
    CodecCreate {
        codec: String,
        #[source]
        source: Box<dyn std::error::Error + Send + Sync>,
    },
    #[error(
        "{flag} names dimension {dim:?}, which no array of {url} has (its dimensions: {known})"
    )]
    UnknownDimension {
        flag: String,
        dim: String,
        url: String,
        known: String,
    },
    #[error("--shard {dim}={shard} is not a multiple of the chunk size {chunk} along {dim}")]
    ShardNotMultiple { dim: String, shard: u64, chunk: u64 },
    #[error("--shard {dim}={shard} without a chunk size for {dim}: name it in --chunks too")]
    ShardWithoutChunk { dim: String, shard: u64 },
    #[error("{} exists and is not empty, and holds no rechunk journal ({}): choose a new or empty directory", path.display(), super::journal::PLAN_FILE)]
    DestinationNotEmpty { path: PathBuf },
    #[error("{} was started by a rechunk with other arguments or from another source ({what} differs); rerun with the same ones, or choose a new directory", path.display())]
    JournalMismatch { path: PathBuf, what: String },
    #[error("array {variable} cannot be read, so it cannot be rechunked{hint}")]
    Unreadable {
        variable: String,
        /// How to leave it out, when it was not asked for by name.
        hint: String,
        #[source]
        source: std::sync::Arc<zarrpipe_store::Error>,
    },
    #[error(
        "stopped after {written} destination chunks, as asked (--stop-after); rerun to resume"
    )]
    Stopped { written: u64 },
}
