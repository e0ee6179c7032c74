/// The result type of this crate.
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// What can be wrong with a window specification for the chosen variables.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// An error from the store, e.g. a variable that cannot be opened.
    #[error(transparent)]
    Store(#[from] zarrpipe_store::Error),

    /// The selection names no variable.
    #[error("no variables selected")]
    NoVariables,

    /// Samples touch steps missing from the store, and missing steps are an error.
    #[error("samples touch missing steps along `{dim}`: {dates} (--missing skip leaves such samples out, --missing fill keeps them)")]
    MissingSteps {
        /// The dimension with missing steps.
        dim: String,
        /// The dates touched, the first 20 and how many more.
        dates: String,
    },

    /// Filling gaps without the gappy dimension iterated, or with batch dims.
    #[error("--missing fill with gaps in the `{dim}` coordinate needs `{dim}` iterated (one step per sample, history and leads allowed) and no batch dims: a window or block of steps would span steps the store does not hold (--missing skip leaves such samples out)")]
    FillNeedsIteratedTime {
        /// The dimension with gaps.
        dim: String,
    },

    /// A channel name that is neither a variable nor a derived channel.
    #[error(
        "`{name}` is neither a variable of the dataset nor a derived channel ({derived}): {source}"
    )]
    UnknownChannel {
        /// The name asked for.
        name: String,
        /// The store's error looking the name up.
        #[source]
        source: zarrpipe_store::Error,
        /// The derived channels' names.
        derived: String,
    },

    /// Derived channels chosen without a stored variable.
    #[error("derived channels ({names}) need at least one stored variable beside them: their grid and times are those of the variables")]
    OnlyDerivedChannels {
        /// The derived channels chosen.
        names: String,
    },

    /// A variable selected twice.
    #[error("variable `{name}` is selected twice (each variable may be given once, e.g. one --var {name})")]
    DuplicateVariable {
        /// The variable's name.
        name: String,
    },

    /// A windowed dimension that a selected variable lacks.
    #[error("dimension `{dim}` is windowed but variable `{variable}` does not have it (its dims: {dims:?})")]
    MissingDimension {
        /// The windowed dimension.
        dim: String,
        /// The variable without it.
        variable: String,
        /// The variable's dimensions.
        dims: Vec<String>,
    },

    /// A dimension with different lengths in two variables.
    #[error("dimension `{dim}` has length {first} in `{first_variable}` but {other} in `{other_variable}`")]
    DimensionMismatch {
        /// The dimension.
        dim: String,
        /// The first variable that has it.
        first_variable: String,
        /// Its length there.
        first: u64,
        /// The variable that disagrees.
        other_variable: String,
        /// Its length there.
        other: u64,
    },

    /// A window larger than its dimension.
    #[error("window over `{dim}` has size {size} but the dimension has length {length}")]
    WindowTooLarge {
        /// The windowed dimension.
        dim: String,
        /// The window's size.
        size: u64,
        /// The dimension's length.
        length: u64,
    },

    /// A window of size or stride zero.
    #[error("window over `{dim}` needs a size and stride of at least 1 (got size {size}, stride {stride})")]
    EmptyWindow {
        /// The windowed dimension.
        dim: String,
        /// The window's size.
        size: u64,
        /// The window's stride.
        stride: u64,
    },

    /// An overlap for a dimension that has no window.
    #[error("an overlap is given for `{dim}`, which the input dims do not window")]
    OverlapWithoutWindow {
        /// The dimension.
        dim: String,
    },

    /// An overlap not smaller than its window.
    #[error("overlap {overlap} of `{dim}` must be smaller than its window size {size}")]
    OverlapTooLarge {
        /// The windowed dimension.
        dim: String,
        /// The overlap given.
        overlap: u64,
        /// The window's size.
        size: u64,
    },

    /// A dimension named twice in the window specification.
    #[error("dimension `{dim}` is named twice in the window specification")]
    DuplicateDimension {
        /// The dimension.
        dim: String,
    },

    /// A selection that is not a range within its dimension.
    #[error("selection {start}..{end} of `{dim}` is not a range of its {length} elements")]
    BadSelection {
        /// The dimension selected on.
        dim: String,
        /// The selection's first element.
        start: u64,
        /// The selection's end (exclusive).
        end: u64,
        /// The dimension's length.
        length: u64,
    },

    /// A selection on a dimension that is stacked as channels.
    #[error("selection on `{dim}`, which is not a sample dimension (windowed or iterated)")]
    SelectionOnStackedDim {
        /// The dimension.
        dim: String,
    },

    /// A selection of channels along a dimension that is not stacked as channels, that no
    /// variable has, or with indices past its end.
    #[error("channel selection on `{dim}`: {reason}")]
    BadStackedSelection {
        /// The dimension selected on.
        dim: String,
        /// What is wrong.
        reason: String,
    },

    /// Padded windows together with a selection.
    #[error("padded windows cannot be combined with a selection on `{dim}`: padding is for the array's edge")]
    PadWithSelection {
        /// The dimension selected on.
        dim: String,
    },

    /// A windowed batch dim without `concat_input_dims`.
    #[error("batch dim `{dim}` is windowed: a block of its windows per batch needs concat_input_dims (xbatcher ignores it there, with a warning)")]
    BatchDimNeedsConcat {
        /// The batch dim.
        dim: String,
    },

    /// A windowed batch dim whose windows do not drop the edge.
    #[error(
        "batch dim `{dim}` is windowed with edge {edge:?}: blocks of windows need the drop edge"
    )]
    BatchDimWithEdge {
        /// The batch dim.
        dim: String,
        /// Its windows' edge handling.
        edge: crate::Edge,
    },

    /// A batch block smaller than one window or larger than the usable length.
    #[error("batch block of {block} along `{dim}` must hold one window ({window}) and fit its {length} usable elements")]
    BadBatchBlock {
        /// The batch dim.
        dim: String,
        /// The block size given.
        block: u64,
        /// The window's size.
        window: u64,
        /// The dimension's usable length.
        length: u64,
    },

    /// A forecast specification that cannot be planned.
    #[error("forecasting pairs need {reason}")]
    InvalidForecast {
        /// What the forecast needs.
        reason: &'static str,
    },

    /// A sample of more than [`MAX_SAMPLE_VALUES`](crate::MAX_SAMPLE_VALUES) values.
    #[error("one sample would hold {elements} values ({what}), more than the {limit} zarrpipe allows: window the large dimensions (--input-dims DIM=SIZE, `.window(..)`) or select fewer variables")]
    SampleTooLarge {
        /// The count, or "more than 2^64".
        elements: String,
        /// The channel count and the windows.
        what: String,
        /// The most values a sample may hold.
        limit: u64,
    },

    /// A sample that would read more than [`MAX_SAMPLE_CHUNKS`](crate::MAX_SAMPLE_CHUNKS) chunks.
    #[error("one sample would read up to {chunks} chunks, more than the {limit} zarrpipe plans: the chunks are tiny for the window; use smaller windows (--input-dims) or rechunk the store")]
    TooManyChunks {
        /// The count, or "more than 2^64".
        chunks: String,
        /// The most chunks a sample may read.
        limit: u64,
    },

    /// A sample count that overflows a `u64`.
    #[error("the number of samples overflows a u64 ({dims}): select a range (--select) or use larger strides")]
    TooManySamples {
        /// The window positions along each sample dimension, joined by ` x `.
        dims: String,
    },

    /// More samples than [`MAX_SHUFFLED_SAMPLES`](crate::MAX_SHUFFLED_SAMPLES) to shuffle.
    #[error("a shuffled epoch keeps its order in memory, 8 bytes a sample: {samples} samples is more than the {limit} zarrpipe shuffles; use --shuffle none (computed on the fly), select a range (--select) or use larger strides")]
    TooManyToShuffle {
        /// The samples in the epoch.
        samples: u64,
        /// The most samples zarrpipe shuffles.
        limit: u64,
    },

    /// A batch size of zero.
    #[error("batch size must be at least 1")]
    ZeroBatchSize,

    /// A rank outside its world, or a world of size zero.
    #[error("rank {rank} is not valid in a world of size {world_size} (need world_size >= 1 and rank < world_size)")]
    InvalidRanks {
        /// The rank given.
        rank: usize,
        /// The world size given.
        world_size: usize,
    },

    /// A rank environment variable that does not parse.
    #[error("environment variable {variable}=`{value}` is invalid: {reason}")]
    BadEnvVar {
        /// The variable's name.
        variable: &'static str,
        /// Its value.
        value: String,
        /// What is wrong with it.
        reason: String,
    },

    /// One rank environment variable set without its partner.
    #[error("environment variable {set} is set but {variable} is not: set both (as torchrun does) or neither")]
    MissingEnvVar {
        /// The variable that is unset.
        variable: &'static str,
        /// The variable that is set.
        set: &'static str,
    },

    /// Block shuffling without block ids.
    #[error("block shuffling needs a block id per sample (`SamplerSpec::block_of`)")]
    MissingBlocks,

    /// Block ids that do not match the sample count.
    #[error("`block_of` has {found} block ids but there are {num_samples} samples")]
    BlockCountMismatch {
        /// The samples in the epoch.
        num_samples: u64,
        /// The block ids given.
        found: u64,
    },

    /// A saved sampler state from another sampler.
    #[error("saved sampler state belongs to another sampler: its {field} is {found}, this sampler's is {expected} (resume with the same dataset, windows, variables, seed, shuffle, ranks and batch size)")]
    StateMismatch {
        /// The field that differs (`spec_hash` or `seed`).
        field: &'static str,
        /// This sampler's value.
        expected: u64,
        /// The state's value.
        found: u64,
    },

    /// A saved position past the end of its epoch.
    #[error("saved sampler state says {position} batches of epoch {epoch} were delivered, but the epoch has {num_batches}")]
    PositionBeyondEpoch {
        /// The state's epoch.
        epoch: u64,
        /// The batches the state says were delivered.
        position: u64,
        /// The batches in the epoch.
        num_batches: u64,
    },
}
