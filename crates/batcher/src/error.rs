/// The result type of this crate.
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// What can be wrong with a window specification for the chosen variables.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    #[error(transparent)]
    Store(#[from] zarrpipe_store::Error),

    #[error("no variables selected")]
    NoVariables,

    #[error("dimension `{dim}` is windowed but variable `{variable}` does not have it (its dims: {dims:?})")]
    MissingDimension {
        dim: String,
        variable: String,
        dims: Vec<String>,
    },

    #[error("dimension `{dim}` has length {first} in `{first_variable}` but {other} in `{other_variable}`")]
    DimensionMismatch {
        dim: String,
        first_variable: String,
        first: u64,
        other_variable: String,
        other: u64,
    },

    #[error("window over `{dim}` has size {size} but the dimension has length {length}")]
    WindowTooLarge { dim: String, size: u64, length: u64 },

    #[error("window over `{dim}` needs a size and stride of at least 1 (got size {size}, stride {stride})")]
    EmptyWindow { dim: String, size: u64, stride: u64 },

    #[error("dimension `{dim}` is named twice in the window specification")]
    DuplicateDimension { dim: String },

    #[error("batch size must be at least 1")]
    ZeroBatchSize,
}
