//! The window options shared by `run` and `plan`, in xbatcher's terms.

use anyhow::bail;
use zarrpipe::batcher::WindowSpec;

/// `DIM=SIZE,DIM=SIZE` in the order given.
#[derive(Debug, Clone, Default)]
pub struct DimSizes(Vec<(String, u64)>);

impl DimSizes {
    fn get(&self, dim: &str) -> Option<u64> {
        self.0
            .iter()
            .find(|(name, _)| name == dim)
            .map(|(_, size)| *size)
    }
}

#[derive(Debug, Clone, clap::Args)]
pub struct WindowArgs {
    /// Variables stacked as channels (repeatable; default: every data variable, by name).
    #[arg(long = "var", value_name = "NAME")]
    pub variables: Vec<String>,
    /// Window size per dimension, xbatcher's `input_dims` (default: whole latitude/longitude).
    #[arg(long, value_name = "DIM=SIZE,...", value_parser = parse_sizes)]
    pub input_dims: Option<DimSizes>,
    /// Overlap of neighbouring windows per dimension, xbatcher's `input_overlap`
    /// (stride = size - overlap).
    #[arg(long, value_name = "DIM=SIZE,...", value_parser = parse_sizes)]
    pub input_overlap: Option<DimSizes>,
    /// Samples per batch.
    #[arg(long, default_value_t = 4)]
    pub batch_size: usize,
}

impl WindowArgs {
    /// The window specification, windows in the order --input-dims gives them.
    pub fn spec(&self) -> anyhow::Result<WindowSpec> {
        let sizes = self.input_dims.clone().unwrap_or_default();
        let overlaps = self.input_overlap.clone().unwrap_or_default();
        if let Some((dim, _)) = overlaps.0.iter().find(|(dim, _)| sizes.get(dim).is_none()) {
            bail!("--input-overlap names `{dim}`, which --input-dims does not window");
        }
        let mut spec = WindowSpec::new();
        for (dim, size) in sizes.0 {
            let overlap = overlaps.get(&dim).unwrap_or(0);
            if overlap >= size {
                bail!("overlap {overlap} of `{dim}` must be smaller than its window size {size}");
            }
            spec = spec.window(dim, size, size - overlap);
        }
        Ok(spec)
    }
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
