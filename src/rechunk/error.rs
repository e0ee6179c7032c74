use std::path::PathBuf;

/// Why `rechunk` refused its options or its destination, or stopped.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum RechunkError {
    /// A `DIM=N` list that does not parse.
    #[error("{flag} {text:?}: {reason} (expected e.g. time=1,latitude=320)")]
    DimSize {
        /// The flag it was given with, e.g. `--chunks`.
        flag: String,
        /// The part that does not parse.
        text: String,
        /// What is wrong with it.
        reason: String,
    },
    /// A codec name or level that is not understood.
    #[error("unknown codec {text:?}: expected zstd[:LEVEL -7..22], blosc-lz4[:0..9], blosc-zstd[:0..9], gzip[:0..9] or none")]
    Codec {
        /// The codec as given.
        text: String,
    },
    /// zarrs refused to create the codec.
    #[error("cannot create the {codec} codec")]
    CodecCreate {
        /// The codec.
        codec: String,
        /// zarrs' error.
        #[source]
        source: Box<dyn std::error::Error + Send + Sync>,
    },
    /// A dimension that no array of the source has.
    #[error(
        "{flag} names dimension {dim:?}, which no array of {url} has (its dimensions: {known})"
    )]
    UnknownDimension {
        /// The flag that names it.
        flag: String,
        /// The dimension named.
        dim: String,
        /// The source's URL.
        url: String,
        /// The source's dimensions, comma-separated.
        known: String,
    },
    /// A shard size that is not a multiple of the chunk size.
    #[error("--shard {dim}={shard} is not a multiple of the chunk size {chunk} along {dim}")]
    ShardNotMultiple {
        /// The dimension.
        dim: String,
        /// The shard size given.
        shard: u64,
        /// The chunk size along it.
        chunk: u64,
    },
    /// A shard size for a dimension without a chunk size.
    #[error("--shard {dim}={shard} without a chunk size for {dim}: name it in --chunks too")]
    ShardWithoutChunk {
        /// The dimension.
        dim: String,
        /// The shard size given.
        shard: u64,
    },
    /// A non-empty destination without a rechunk journal.
    #[error("{} exists and is not empty, and holds no rechunk journal ({}): choose a new or empty directory", path.display(), super::PLAN_FILE)]
    DestinationNotEmpty {
        /// The destination directory.
        path: PathBuf,
    },
    /// A destination whose journal was started with other arguments or another source.
    #[error("{} was started by a rechunk with other arguments or from another source ({what} differs); rerun with the same ones, or choose a new directory", path.display())]
    JournalMismatch {
        /// The destination directory.
        path: PathBuf,
        /// The first plan key that differs.
        what: String,
    },
    /// An array to rewrite that cannot be read.
    #[error("array {variable} cannot be read, so it cannot be rechunked{hint}")]
    Unreadable {
        /// The array's name.
        variable: String,
        /// How to leave it out, when it was not asked for by name.
        hint: String,
        /// Why it cannot be read.
        #[source]
        source: std::sync::Arc<zarrpipe_store::Error>,
    },
    /// Stopped after [`stop_after`](super::RechunkOptions::stop_after) destination chunks.
    #[error(
        "stopped after {written} destination chunks, as asked (--stop-after); rerun to resume"
    )]
    Stopped {
        /// Destination chunks written.
        written: u64,
    },
}
