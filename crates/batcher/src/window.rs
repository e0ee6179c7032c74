use serde::{Deserialize, Serialize};

/// A window over one named dimension: `size` elements, moved by `stride` (xbatcher's
/// `input_dims` and `input_overlap`: stride = size - overlap).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Window {
    pub dim: String,
    pub size: u64,
    pub stride: u64,
}

/// Which dimensions are windowed and which are iterated (one sample per step, squeezed out of
/// the sample). Every other dimension of a variable, such as `level`, is stacked as channels.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct WindowSpec {
    pub windows: Vec<Window>,
    /// `None`: iterate `time` when the variables have it.
    pub iterate: Option<Vec<String>>,
}

impl WindowSpec {
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

    /// Sets the iterated dimensions (default: `time` where present).
    pub fn iterate<I: IntoIterator<Item = S>, S: Into<String>>(mut self, dims: I) -> Self {
        self.iterate = Some(dims.into_iter().map(Into::into).collect());
        self
    }
}
