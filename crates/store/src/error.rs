/// The result type of this crate.
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// What can go wrong opening a dataset or fetching its chunks. Each variant names the store,
/// variable or chunk key involved.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    #[error("store not found: {url}")]
    StoreNotFound { url: String },

    #[error("{url} is a file, not a directory: a local Zarr store is a directory (the one holding zarr.json, .zgroup or .zarray)")]
    NotADirectory { url: String },

    #[error("unsupported store URL `{url}`: {reason}")]
    UnsupportedUrl { url: String, reason: &'static str },

    #[error("cannot read {url} from {context}")]
    Remote {
        url: String,
        context: String,
        #[source]
        source: Box<Error>,
    },

    #[error("cannot open store {url}")]
    OpenStore {
        url: String,
        #[source]
        source: object_store::Error,
    },

    #[error("{url} is not a Zarr store: no zarr.json, .zgroup or .zarray at its root")]
    NotZarr { url: String },

    #[error("cannot read metadata `{key}` of {url}")]
    ReadMetadata {
        url: String,
        key: String,
        #[source]
        source: object_store::Error,
    },

    #[error("cannot list `{prefix}` in {url} (stores without consolidated metadata are listed)")]
    List {
        url: String,
        prefix: String,
        #[source]
        source: object_store::Error,
    },

    #[error("malformed metadata `{key}` in {url}")]
    MalformedMetadata {
        url: String,
        key: String,
        #[source]
        source: serde_json::Error,
    },

    #[error("variable `{variable}` in {url} cannot be opened")]
    InvalidArray {
        url: String,
        variable: String,
        #[source]
        source: Box<zarrs::array::ArrayCreateError>,
    },

    #[error("variable `{variable}` has data type {data_type}, which zarrpipe does not read")]
    UnsupportedDataType { variable: String, data_type: String },

    #[error(
        "variable `{variable}` has {names} dimension names ({source_key}) for its {rank} axes"
    )]
    DimensionNames {
        variable: String,
        names: usize,
        rank: usize,
        source_key: &'static str,
    },

    #[error("variable `{variable}` of {url} cannot be read; to go on without it, name the variables to use: {hint}")]
    Unreadable {
        variable: String,
        url: String,
        /// `--var a --var b (.variables(["a", "b"]) in Rust)`, the readable data variables.
        hint: String,
        #[source]
        source: std::sync::Arc<Error>,
    },

    #[error("variable `{variable}`: {what} overflows (shape {shape:?})")]
    SizeOverflow {
        variable: String,
        what: &'static str,
        shape: Vec<u64>,
    },

    #[error("no variable `{name}` in {url} (it has: {available})")]
    MissingVariable {
        name: String,
        url: String,
        available: String,
    },

    #[error("chunk {indices:?} is outside the chunk grid {grid:?} of variable `{variable}`")]
    ChunkOutOfGrid {
        variable: String,
        indices: Vec<u64>,
        grid: Vec<u64>,
    },

    #[error("cannot fetch `{key}` (variable `{variable}`) from {url}")]
    Fetch {
        url: String,
        variable: String,
        key: String,
        #[source]
        source: object_store::Error,
    },

    #[error("fetching `{key}` (variable `{variable}`) from {url} took longer than {after:?}, retries included")]
    FetchTimeout {
        url: String,
        variable: String,
        key: String,
        after: std::time::Duration,
    },

    #[error("cannot read metadata `{key}` of {url}: no answer within {after:?}, retries included")]
    MetadataTimeout {
        url: String,
        key: String,
        after: std::time::Duration,
    },

    #[error("malformed shard index of `{key}` (variable `{variable}`) in {url}")]
    ShardIndex {
        url: String,
        variable: String,
        key: String,
        #[source]
        source: zarrs::array::CodecError,
    },

    #[error("cannot parse store URL `{url}`")]
    BadUrl {
        url: String,
        #[source]
        source: url::ParseError,
    },

    #[error("store option `{key}` is not understood for {url}")]
    StoreOption {
        url: String,
        key: String,
        #[source]
        source: object_store::Error,
    },

    #[error("store option `{option}` is not of the form key=value")]
    BadStoreOption { option: String },

    #[error("cannot use the chunk cache directory {}", path.display())]
    Cache {
        path: std::path::PathBuf,
        #[source]
        source: std::io::Error,
    },
}
