/// The result type of this crate.
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// What can go wrong opening a dataset or fetching its chunks. Each variant names the store,
/// variable or chunk key involved.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// A local store path that does not exist.
    #[error("store not found: {url}")]
    StoreNotFound {
        /// The store's path or URL.
        url: String,
    },

    /// A local store path that names a file.
    #[error("{url} is a file, not a directory: a local Zarr store is a directory (the one holding zarr.json, .zgroup or .zarray)")]
    NotADirectory {
        /// The store's path or URL.
        url: String,
    },

    /// A URL whose scheme no backend handles.
    #[error("unsupported store URL `{url}`: {reason}")]
    UnsupportedUrl {
        /// The URL given.
        url: String,
        /// The schemes that are supported.
        reason: &'static str,
    },

    /// A first metadata request to a remote store failed; `context` says where it went.
    #[error("cannot read {url} from {context}")]
    Remote {
        /// The store's URL.
        url: String,
        /// The endpoint and the credentials used (S3).
        context: String,
        /// The failed request's error.
        #[source]
        source: Box<Error>,
    },

    /// The object store backend could not be built.
    #[error("cannot open store {url}")]
    OpenStore {
        /// The store's URL.
        url: String,
        /// The backend's error.
        #[source]
        source: object_store::Error,
    },

    /// A store with no Zarr metadata at its root.
    #[error("{url} is not a Zarr store: no zarr.json, .zgroup or .zarray at its root")]
    NotZarr {
        /// The store's URL.
        url: String,
    },

    /// Two variables give one dimension different lengths (xarray refuses such a dataset).
    #[error("conflicting sizes for dimension `{dim}` in {url}: {length} on `{variable}`, {other_length} on `{other}`")]
    ConflictingDimension {
        /// The store's URL.
        url: String,
        /// The dimension.
        dim: String,
        /// The first variable that has it, and its length there.
        variable: String,
        /// Its length on `variable`.
        length: u64,
        /// A variable that disagrees.
        other: String,
        /// Its length on `other`.
        other_length: u64,
    },

    /// CF encoding attributes that cannot be read as numbers.
    #[error("cannot read the encoding of `{variable}` in {url}: {reason}")]
    BadEncoding {
        /// The store's URL.
        url: String,
        /// The variable.
        variable: String,
        /// What is wrong.
        reason: String,
    },

    /// `time_dim` names a dimension no variable has.
    #[error("no dimension `{dim}` to iterate as time in {url} (its dimensions: {available})")]
    NoSuchTimeDim {
        /// The store's URL.
        url: String,
        /// The dimension asked for.
        dim: String,
        /// The dimensions there are.
        available: String,
    },

    /// A metadata document could not be read.
    #[error("cannot read metadata `{key}` of {url}")]
    ReadMetadata {
        /// The store's URL.
        url: String,
        /// The metadata key, e.g. `zarr.json` or `t2m/.zarray`.
        key: String,
        /// The store's error.
        #[source]
        source: object_store::Error,
    },

    /// Listing a prefix failed (stores without consolidated metadata are listed).
    #[error("cannot list `{prefix}` in {url} (stores without consolidated metadata are listed)")]
    List {
        /// The store's URL.
        url: String,
        /// The prefix listed.
        prefix: String,
        /// The store's error.
        #[source]
        source: object_store::Error,
    },

    /// A metadata document that is not valid JSON or not valid Zarr metadata.
    #[error("malformed metadata `{key}` in {url}")]
    MalformedMetadata {
        /// The store's URL.
        url: String,
        /// The metadata key.
        key: String,
        /// The parser's error.
        #[source]
        source: serde_json::Error,
    },

    /// zarrs refused a variable's metadata.
    #[error("variable `{variable}` in {url} cannot be opened")]
    InvalidArray {
        /// The store's URL.
        url: String,
        /// The variable's name.
        variable: String,
        /// zarrs' error.
        #[source]
        source: Box<zarrs::array::ArrayCreateError>,
    },

    /// A variable of a data type [`DType`](zarrpipe_core::DType) has no variant for.
    #[error("variable `{variable}` has data type {data_type}, which zarrpipe does not read")]
    UnsupportedDataType {
        /// The variable's name.
        variable: String,
        /// The data type's Zarr name.
        data_type: String,
    },

    /// A variable whose dimension names do not match its rank.
    #[error(
        "variable `{variable}` has {names} dimension names ({source_key}) for its {rank} axes"
    )]
    DimensionNames {
        /// The variable's name.
        variable: String,
        /// How many names there are.
        names: usize,
        /// How many axes the variable has.
        rank: usize,
        /// Where the names came from: `dimension_names` or `_ARRAY_DIMENSIONS`.
        source_key: &'static str,
    },

    /// A variable asked for by name that zarrpipe cannot read.
    #[error("variable `{variable}` of {url} cannot be read; to go on without it, name the variables to use: {hint}")]
    Unreadable {
        /// The variable's name.
        variable: String,
        /// The store's URL.
        url: String,
        /// `--var a --var b (.variables(["a", "b"]) in Rust)`, the readable data variables.
        hint: String,
        /// Why it cannot be opened.
        #[source]
        source: std::sync::Arc<Error>,
    },

    /// A variable whose chunk size or chunk count overflows what zarrpipe reads.
    #[error("variable `{variable}`: {what} overflows (shape {shape:?})")]
    SizeOverflow {
        /// The variable's name.
        variable: String,
        /// What overflows: a chunk's size or the number of chunks.
        what: &'static str,
        /// The variable's shape.
        shape: Vec<u64>,
    },

    /// A variable name the dataset does not have.
    #[error("no variable `{name}` in {url} (it has: {available})")]
    MissingVariable {
        /// The name asked for.
        name: String,
        /// The store's URL.
        url: String,
        /// The dataset's variable names, comma-separated.
        available: String,
    },

    /// Chunk indices outside the variable's chunk grid.
    #[error("chunk {indices:?} is outside the chunk grid {grid:?} of variable `{variable}`")]
    ChunkOutOfGrid {
        /// The variable's name.
        variable: String,
        /// The chunk indices asked for.
        indices: Vec<u64>,
        /// The chunk grid's shape.
        grid: Vec<u64>,
    },

    /// Reading a chunk failed.
    #[error("cannot fetch `{key}` (variable `{variable}`) from {url}")]
    Fetch {
        /// The store's URL.
        url: String,
        /// The variable's name.
        variable: String,
        /// The chunk key that failed.
        key: String,
        /// The store's error.
        #[source]
        source: object_store::Error,
    },

    /// A chunk's read stopped without an answer (its task panicked or was cancelled).
    #[error("reading `{key}` (variable `{variable}`) from {url} stopped: {reason}")]
    ReadStopped {
        /// The store's URL.
        url: String,
        /// The variable's name.
        variable: String,
        /// The chunk's key.
        key: String,
        /// Why the read's task ended.
        reason: String,
    },

    /// Reading a chunk took longer than the fetch timeout.
    #[error("fetching `{key}` (variable `{variable}`) from {url} took longer than {after:?}, retries included")]
    FetchTimeout {
        /// The store's URL.
        url: String,
        /// The variable's name.
        variable: String,
        /// The chunk key that timed out.
        key: String,
        /// The timeout that passed.
        after: std::time::Duration,
    },

    /// Reading a metadata document took longer than the fetch timeout.
    #[error("cannot read metadata `{key}` of {url}: no answer within {after:?}, retries included")]
    MetadataTimeout {
        /// The store's URL.
        url: String,
        /// The metadata key that timed out.
        key: String,
        /// The timeout that passed.
        after: std::time::Duration,
    },

    /// A shard index that cannot be decoded.
    #[error("malformed shard index of `{key}` (variable `{variable}`) in {url}")]
    ShardIndex {
        /// The store's URL.
        url: String,
        /// The variable's name.
        variable: String,
        /// The shard's key.
        key: String,
        /// The codec's error.
        #[source]
        source: zarrs::array::CodecError,
    },

    /// A store URL that does not parse.
    #[error("cannot parse store URL `{url}`")]
    BadUrl {
        /// The URL given.
        url: String,
        /// The parser's error.
        #[source]
        source: url::ParseError,
    },

    /// A store option the backend does not know.
    #[error("store option `{key}` is not understood for {url}")]
    StoreOption {
        /// The store's URL.
        url: String,
        /// The option's key.
        key: String,
        /// The backend's error.
        #[source]
        source: object_store::Error,
    },

    /// A store option without a `=`.
    #[error("store option `{option}` is not of the form key=value")]
    BadStoreOption {
        /// The option as given.
        option: String,
    },

    /// The chunk cache directory cannot be created or read.
    #[error("cannot use the chunk cache directory {}", path.display())]
    Cache {
        /// The cache directory.
        path: std::path::PathBuf,
        /// The I/O error.
        #[source]
        source: std::io::Error,
    },
}
