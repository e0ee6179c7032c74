use serde::{Deserialize, Serialize};

use crate::Edge;

/// A window over one named dimension: `size` elements, moved by `stride` (xbatcher's
/// `input_dims` and `input_overlap`: stride = size - overlap).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Window {
    /// The dimension's name.
    pub dim: String,
    /// Elements in each window.
    pub size: u64,
    /// How far each window moves from the last.
    pub stride: u64,
}

/// Forecasting pairs along the first iterated dimension (time): the input holds `history`
/// steps ending at the sample's step, the target the same window at each lead time ahead.
/// Samples whose history or targets fall outside the data are not produced.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Forecast {
    /// Input steps, at least 1 (the sample's own step).
    pub history: u64,
    /// Steps ahead of the sample's step, each at least 1.
    pub leads: Vec<u64>,
}

/// Which dimensions are windowed and which are iterated (one sample per step, squeezed out of
/// the sample). Every other dimension of a variable, such as `level`, is stacked as channels.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct WindowSpec {
    /// The windows, one per windowed dimension.
    pub windows: Vec<Window>,
    /// `None`: iterate `time` when the variables have it and no window takes it.
    pub iterate: Option<Vec<String>>,
    /// Edge handling of every window (default: drop).
    #[serde(default)]
    pub edge: Edge,
    /// The value of padded elements with [`Edge::Pad`] (`None`: NaN).
    #[serde(default)]
    pub pad_value: Option<f32>,
    /// Input/target pairs along time (`None`: inputs only).
    #[serde(default)]
    pub forecast: Option<Forecast>,
    /// Index ranges of sample dimensions that samples must lie in, whole (windows, history and
    /// targets): subsets such as a time split or a latitude/longitude box.
    #[serde(default)]
    pub ranges: Vec<(String, std::ops::Range<u64>)>,
    /// xbatcher's `batch_dims`: the size of each batch along these dimensions. A dimension
    /// that is not windowed is iterated, and each batch holds a block of that many steps; a
    /// windowed one (with [`concat_input_dims`](Self::concat_input_dims) only) makes each
    /// batch hold the windows inside one block of that many elements. With batch dims or
    /// `concat_input_dims`, the layout fixes the batches as xbatcher does and the batch size
    /// is not used (see [`SampleLayout::batch_groups`](crate::SampleLayout::batch_groups)).
    #[serde(default)]
    pub batch_dims: Vec<(String, u64)>,
    /// xbatcher's `concat_input_dims`: every window position inside a batch's block goes into
    /// that batch (as xbatcher concatenates the patches along `input_batch`) instead of one
    /// batch per window position.
    #[serde(default)]
    pub concat_input_dims: bool,
    /// Dimensions stacked as channels, cut to these indices, in this order: only they
    /// become channels, of the variables that have the dimension (`--select level=500,850`,
    /// resolved by coordinate value). Variables without the dimension are not affected.
    #[serde(default)]
    pub stacked: Vec<(String, Vec<u64>)>,
}

impl WindowSpec {
    /// An empty specification: no windows, defaults for the rest.
    pub fn new() -> Self {
        Self::default()
    }

    /// Adds a window of `size` along `dim`, moved by `stride`.
    pub fn window(mut self, dim: impl Into<String>, size: u64, stride: u64) -> Self {
        self.windows.push(Window {
            dim: dim.into(),
            size,
            stride,
        });
        self
    }

    /// Adds windows in xbatcher's terms, in the order given: `input_dims` sizes and
    /// `input_overlap` overlaps (stride = size - overlap; a dim without an overlap has none).
    /// Refused: a size of 0, an overlap of a dim that `input_dims` does not window, or one not
    /// smaller than its window. The command line's `--input-dims`/`--input-overlap` and the Python
    /// package's `input_dims=`/`input_overlap=` both come here.
    ///
    /// ```
    /// use zarrpipe_batcher::WindowSpec;
    ///
    /// let sizes = [("latitude".to_string(), 64), ("longitude".to_string(), 64)];
    /// let spec = WindowSpec::new().input_dims(&sizes, &[("latitude".into(), 16)]).unwrap();
    /// assert_eq!((spec.windows[0].stride, spec.windows[1].stride), (48, 64));
    /// ```
    pub fn input_dims(
        mut self,
        input_dims: &[(String, u64)],
        input_overlap: &[(String, u64)],
    ) -> crate::Result<Self> {
        let size_of = |dim: &str| input_dims.iter().find(|(name, _)| name == dim);
        if let Some((dim, _)) = input_overlap.iter().find(|(dim, _)| size_of(dim).is_none()) {
            return Err(crate::Error::OverlapWithoutWindow { dim: dim.clone() });
        }
        for (dim, size) in input_dims {
            if *size == 0 {
                return Err(crate::Error::EmptyWindow {
                    dim: dim.clone(),
                    size: 0,
                    stride: 0,
                });
            }
            let overlap = input_overlap
                .iter()
                .find(|(name, _)| name == dim)
                .map_or(0, |(_, overlap)| *overlap);
            if overlap >= *size {
                return Err(crate::Error::OverlapTooLarge {
                    dim: dim.clone(),
                    overlap,
                    size: *size,
                });
            }
            self = self.window(dim.clone(), *size, size - overlap);
        }
        Ok(self)
    }

    /// Sets how windows end at the edge of a dimension.
    pub fn edge(mut self, edge: Edge) -> Self {
        self.edge = edge;
        self
    }

    /// Makes forecasting pairs: `history` input steps, a target at each of `leads` steps ahead.
    pub fn forecast(mut self, history: u64, leads: impl IntoIterator<Item = u64>) -> Self {
        self.forecast = Some(Forecast {
            history,
            leads: leads.into_iter().collect(),
        });
        self
    }

    /// Keeps samples inside `range` (element indices) of `dim`, history and targets included.
    pub fn select_indices(mut self, dim: impl Into<String>, range: std::ops::Range<u64>) -> Self {
        self.ranges.push((dim.into(), range));
        self
    }

    /// Sets the value of padded elements (default NaN).
    pub fn pad_value(mut self, value: f32) -> Self {
        self.pad_value = Some(value);
        self
    }

    /// Batches span blocks of `size` elements along `dim` (xbatcher's `batch_dims`).
    ///
    /// ```
    /// use zarrpipe_batcher::WindowSpec;
    ///
    /// // A batch per 64 x 64 patch position, holding 8 consecutive time steps...
    /// let spec = WindowSpec::new().window("latitude", 64, 64).window("longitude", 64, 64);
    /// let per_patch = spec.clone().batch_dim("time", 8);
    /// // ... or every patch of those 8 steps in one batch.
    /// let per_block = per_patch.clone().concat_input_dims(true);
    /// assert!(!spec.batches_by_layout() && per_patch.batches_by_layout());
    /// # let _ = per_block;
    /// ```
    pub fn batch_dim(mut self, dim: impl Into<String>, size: u64) -> Self {
        self.batch_dims.push((dim.into(), size));
        self
    }

    /// Puts every window position of a batch's block into that batch (xbatcher's
    /// `concat_input_dims`).
    pub fn concat_input_dims(mut self, concat: bool) -> Self {
        self.concat_input_dims = concat;
        self
    }

    /// Whether the layout, not a batch size, decides the batches (batch dims or
    /// `concat_input_dims`).
    pub fn batches_by_layout(&self) -> bool {
        !self.batch_dims.is_empty() || self.concat_input_dims
    }

    /// Sets the iterated dimensions (default: `time` where present).
    pub fn iterate<I: IntoIterator<Item = S>, S: Into<String>>(mut self, dims: I) -> Self {
        self.iterate = Some(dims.into_iter().map(Into::into).collect());
        self
    }
}
