//! The window options shared by `run` and `plan`, in xbatcher's terms.

use anyhow::bail;
use zarrpipe::batcher::{Edge, EpochOptions, Missing, Ranks, Shuffle, WindowSpec};
use zarrpipe::pipeline::{resolve_selections, ChannelSelection, Selection};
use zarrpipe::store::Dataset;

/// `DIM=SIZE,DIM=SIZE` in the order given.
#[derive(Debug, Clone, Default)]
pub struct DimSizes(Vec<(String, u64)>);

#[derive(Debug, Clone, clap::Args)]
pub struct WindowArgs {
    /// Variables stacked as channels (repeatable; default: every data variable, by name). A
    /// variable without time is a static field, read once; a name that is not a variable but
    /// one of sin_lat, cos_lat, sin_lon, cos_lon, sin_time_of_day, cos_time_of_day,
    /// sin_local_time, cos_local_time, sin_day_of_year, cos_day_of_year, cos_zenith is a
    /// derived channel, computed on each sample's grid and time.
    #[arg(long = "var", value_name = "NAME")]
    pub variables: Vec<String>,
    /// Window size per dimension, xbatcher's `input_dims` (default: whole latitude/longitude).
    #[arg(long, value_name = "DIM=SIZE,...", value_parser = parse_sizes)]
    pub input_dims: Option<DimSizes>,
    /// Overlap of neighbouring windows per dimension, xbatcher's `input_overlap`
    /// (stride = size - overlap).
    #[arg(long, value_name = "DIM=SIZE,...", value_parser = parse_sizes)]
    pub input_overlap: Option<DimSizes>,
    /// Batch size per dimension, xbatcher's `batch_dims`: each batch spans a block of that
    /// many elements (iterated steps, or with --concat-input-dims the windows inside it);
    /// the batches are then fixed by the blocks and --batch-size is not used.
    #[arg(long, value_name = "DIM=SIZE,...", value_parser = parse_sizes)]
    pub batch_dims: Option<DimSizes>,
    /// xbatcher's `concat_input_dims`: every window position of a batch's block in that batch
    /// (without --batch-dims, one batch of the whole epoch).
    #[arg(long)]
    pub concat_input_dims: bool,
    /// Samples per batch (not used with --batch-dims or --concat-input-dims).
    #[arg(long, default_value_t = 4)]
    pub batch_size: usize,
    /// Windows at the end of a dimension: drop (xbatcher), pad with NaN (batches carry a mask),
    /// or shift the last one back to end at the edge.
    #[arg(long, value_enum, default_value_t = EdgeArg::Drop)]
    pub edge: EdgeArg,
    /// Keep samples between two coordinate values of a dimension, ends included (repeatable):
    /// `time=2000-01-01..2000-01-31T18:00`, `latitude=70..30`; on a dimension stacked as
    /// channels, the channels of the values listed or inside the range: `level=500,850`,
    /// `level=300..700` (variables without it keep theirs).
    #[arg(long, value_name = "DIM=FROM..TO|DIM=V,...", value_parser = parse_selection)]
    pub select: Vec<SelectArg>,
    /// Forecasting pairs: input steps ending at each sample's time step (needs --leads).
    #[arg(long, value_name = "STEPS", requires = "leads")]
    pub history: Option<u64>,
    /// Forecasting pairs: targets this many steps ahead (comma-separated).
    #[arg(long, value_name = "STEPS,...", value_delimiter = ',')]
    pub leads: Vec<u64>,
    /// Sample order: natural, a full seeded permutation, or chunk-aware blocks.
    #[arg(long, value_enum, default_value_t = ShuffleArg::None)]
    pub shuffle: ShuffleArg,
    /// Shuffling seed (each epoch uses seed + epoch).
    #[arg(long, default_value_t = 0)]
    pub seed: u64,
    /// Epoch number.
    #[arg(long, default_value_t = 0)]
    pub epoch: u64,
    /// Samples whose inputs or targets touch a missing time step (a step the time coordinate
    /// leaves out of its regular frequency, or one whose whole field is absent from the
    /// store): skip leaves them out, fill keeps them (NaN for left-out steps, the fill value
    /// for absent data), error stops naming the dates; ignore does not look for them (no
    /// coordinate read or store listing at start; for stores known whole, or too large to
    /// list).
    #[arg(long, value_enum, default_value_t = MissingArg::Skip)]
    pub missing: MissingArg,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum MissingArg {
    Skip,
    Fill,
    Error,
    Ignore,
}

impl From<MissingArg> for Missing {
    fn from(missing: MissingArg) -> Self {
        match missing {
            MissingArg::Skip => Missing::Skip,
            MissingArg::Fill => Missing::Fill,
            MissingArg::Error => Missing::Error,
            MissingArg::Ignore => Missing::Ignore,
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum EdgeArg {
    Drop,
    Pad,
    Shift,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum ShuffleArg {
    None,
    Full,
    Blocks,
}

impl WindowArgs {
    /// Epoch order and this process's share: ranks from RANK and WORLD_SIZE as torchrun sets them.
    pub fn epoch_options(&self) -> anyhow::Result<EpochOptions> {
        let shuffle = match self.shuffle {
            ShuffleArg::None => Shuffle::None,
            ShuffleArg::Full => Shuffle::Full,
            ShuffleArg::Blocks => Shuffle::Blocks,
        };
        let ranks = Ranks::from_env()?;
        Ok(EpochOptions {
            epoch: self.epoch,
            seed: self.seed,
            shuffle,
            ranks,
            ..EpochOptions::default()
        })
    }

    /// [`spec`](Self::spec) with the selections resolved to index ranges of `dataset`.
    pub async fn resolved_spec(&self, dataset: &Dataset) -> anyhow::Result<WindowSpec> {
        let (ranges, lists) = self.selections();
        Ok(resolve_selections(dataset, self.spec()?, &ranges, &lists).await?)
    }

    /// The window specification, windows in the order --input-dims gives them.
    pub fn spec(&self) -> anyhow::Result<WindowSpec> {
        let sizes = self.input_dims.clone().unwrap_or_default();
        let overlaps = self.input_overlap.clone().unwrap_or_default();
        let mut spec = WindowSpec::new().edge(match self.edge {
            EdgeArg::Drop => Edge::Drop,
            EdgeArg::Pad => Edge::Pad,
            EdgeArg::Shift => Edge::Shift,
        });
        if !self.leads.is_empty() {
            spec = spec.forecast(self.history.unwrap_or(1), self.leads.iter().copied());
        }
        if let Some((dim, _)) = sizes.0.iter().find(|(_, size)| *size == 0) {
            bail!("--input-dims {dim}=0: a window needs a size of at least 1");
        }
        let mut spec = spec.input_dims(&sizes.0, &overlaps.0)?;
        for (dim, size) in self.batch_dims.clone().unwrap_or_default().0 {
            spec = spec.batch_dim(dim, size);
        }
        Ok(spec.concat_input_dims(self.concat_input_dims))
    }
}

/// A `--select`: a range of coordinate values, or a list of them.
#[derive(Debug, Clone)]
pub enum SelectArg {
    Range(Selection),
    Values(ChannelSelection),
}

impl WindowArgs {
    /// The ranges and the value lists of `--select`.
    pub fn selections(&self) -> (Vec<Selection>, Vec<ChannelSelection>) {
        let mut ranges = Vec::new();
        let mut lists = Vec::new();
        for selection in &self.select {
            match selection {
                SelectArg::Range(range) => ranges.push(range.clone()),
                SelectArg::Values(list) => lists.push(list.clone()),
            }
        }
        (ranges, lists)
    }
}

fn parse_selection(text: &str) -> Result<SelectArg, String> {
    let expected = "expected DIM=FROM..TO or DIM=VALUE,VALUE,...";
    let (dim, picked) = text.split_once('=').ok_or(expected)?;
    if dim.is_empty() || picked.is_empty() {
        return Err(expected.into());
    }
    if let Some((from, to)) = picked.split_once("..") {
        return Ok(SelectArg::Range(Selection {
            dim: dim.to_string(),
            from: from.into(),
            to: to.into(),
        }));
    }
    Ok(SelectArg::Values(ChannelSelection {
        dim: dim.to_string(),
        values: picked.split(',').map(|value| value.trim().into()).collect(),
    }))
}

fn parse_sizes(text: &str) -> Result<DimSizes, String> {
    let pairs = text.split(',').map(|pair| {
        let (dim, size) = pair
            .split_once('=')
            .ok_or(format!("`{pair}`: expected DIM=SIZE"))?;
        let size = size
            .parse()
            .map_err(|_| format!("`{size}` is not a whole number"))?;
        Ok((dim.to_string(), size))
    });
    pairs.collect::<Result<_, String>>().map(DimSizes)
}
