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

    #[error("samples touch missing steps along `{dim}`: {dates} (--missing skip leaves such samples out, --missing fill keeps them)")]
    MissingSteps { dim: String, dates: String },

    #[error("--missing fill with gaps in the `{dim}` coordinate needs `{dim}` iterated (one step per sample, history and leads allowed) and no batch dims: a window or block of steps would span steps the store does not hold (--missing skip leaves such samples out)")]
    FillNeedsIteratedTime { dim: String },

    #[error(
        "`{name}` is neither a variable of the dataset nor a derived channel ({derived}): {source}"
    )]
    UnknownChannel {
        name: String,
        #[source]
        source: zarrpipe_store::Error,
        derived: String,
    },

    #[error("derived channels ({names}) need at least one stored variable beside them: their grid and times are those of the variables")]
    OnlyDerivedChannels { names: String },

    #[error("variable `{name}` is selected twice (each variable may be given once, e.g. one --var {name})")]
    DuplicateVariable { name: String },

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

    #[error("an overlap is given for `{dim}`, which the input dims do not window")]
    OverlapWithoutWindow { dim: String },

    #[error("overlap {overlap} of `{dim}` must be smaller than its window size {size}")]
    OverlapTooLarge {
        dim: String,
        overlap: u64,
        size: u64,
    },

    #[error("dimension `{dim}` is named twice in the window specification")]
    DuplicateDimension { dim: String },

    #[error("selection {start}..{end} of `{dim}` is not a range of its {length} elements")]
    BadSelection {
        dim: String,
        start: u64,
        end: u64,
        length: u64,
    },

    #[error("selection on `{dim}`, which is not a sample dimension (windowed or iterated)")]
    SelectionOnStackedDim { dim: String },

    #[error("padded windows cannot be combined with a selection on `{dim}`: padding is for the array's edge")]
    PadWithSelection { dim: String },

    #[error("batch dim `{dim}` is windowed: a block of its windows per batch needs concat_input_dims (xbatcher ignores it there, with a warning)")]
    BatchDimNeedsConcat { dim: String },

    #[error(
        "batch dim `{dim}` is windowed with edge {edge:?}: blocks of windows need the drop edge"
    )]
    BatchDimWithEdge { dim: String, edge: crate::Edge },

    #[error("batch block of {block} along `{dim}` must hold one window ({window}) and fit its {length} usable elements")]
    BadBatchBlock {
        dim: String,
        block: u64,
        window: u64,
        length: u64,
    },

    #[error("forecasting pairs need {reason}")]
    InvalidForecast { reason: &'static str },

    #[error("one sample would hold {elements} values ({what}), more than the {limit} zarrpipe allows: window the large dimensions (--input-dims DIM=SIZE, `.window(..)`) or select fewer variables")]
    SampleTooLarge {
        /// The count, or "more than 2^64".
        elements: String,
        what: String,
        limit: u64,
    },

    #[error("one sample would read up to {chunks} chunks, more than the {limit} zarrpipe plans: the chunks are tiny for the window; use smaller windows (--input-dims) or rechunk the store")]
    TooManyChunks { chunks: String, limit: u64 },

    #[error("the number of samples overflows a u64 ({dims}): select a range (--select) or use larger strides")]
    TooManySamples { dims: String },

    #[error("a shuffled epoch keeps its order in memory, 8 bytes a sample: {samples} samples is more than the {limit} zarrpipe shuffles; use --shuffle none (computed on the fly), select a range (--select) or use larger strides")]
    TooManyToShuffle { samples: u64, limit: u64 },

    #[error("batch size must be at least 1")]
    ZeroBatchSize,

    #[error("rank {rank} is not valid in a world of size {world_size} (need world_size >= 1 and rank < world_size)")]
    InvalidRanks { rank: usize, world_size: usize },

    #[error("environment variable {variable}=`{value}` is invalid: {reason}")]
    BadEnvVar {
        variable: &'static str,
        value: String,
        reason: String,
    },

    #[error("environment variable {set} is set but {variable} is not: set both (as torchrun does) or neither")]
    MissingEnvVar {
        variable: &'static str,
        set: &'static str,
    },

    #[error("block shuffling needs a block id per sample (`SamplerSpec::block_of`)")]
    MissingBlocks,

    #[error("`block_of` has {found} block ids but there are {num_samples} samples")]
    BlockCountMismatch { num_samples: u64, found: u64 },

    #[error("saved sampler state belongs to another sampler: its {field} is {found}, this sampler's is {expected} (resume with the same dataset, windows, variables, seed, shuffle, ranks and batch size)")]
    StateMismatch {
        field: &'static str,
        expected: u64,
        found: u64,
    },

    #[error("saved sampler state says {position} batches of epoch {epoch} were delivered, but the epoch has {num_batches}")]
    PositionBeyondEpoch {
        epoch: u64,
        position: u64,
        num_batches: u64,
    },
}
