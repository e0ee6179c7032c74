//! Each destination array's chunk and shard shape, from the options and the source.

use zarrpipe_store::Variable;

use super::{DimSizes, RechunkError, RechunkOptions};

/// The chunking of one destination array.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ArrayLayout {
    /// The chunk shape (the inner chunk when sharded).
    pub chunk: Vec<u64>,
    /// The shard shape, when the array is sharded.
    pub shard: Option<Vec<u64>>,
}

impl ArrayLayout {
    /// The shape of one object written: the shard, or the chunk.
    pub fn write_shape(&self) -> &[u64] {
        self.shard.as_deref().unwrap_or(&self.chunk)
    }
}

/// Checks that every dimension named exists and that shards are whole multiples of chunks.
pub fn check_options(
    options: &RechunkOptions,
    variables: &[&Variable],
    url: &str,
) -> Result<(), RechunkError> {
    let mut known: Vec<&str> = variables
        .iter()
        .flat_map(|variable| variable.dims().iter().map(String::as_str))
        .collect();
    known.sort_unstable();
    known.dedup();
    for (flag, sizes) in [("--chunks", &options.chunks), ("--shard", &options.shards)] {
        if let Some(dim) = sizes.keys().find(|dim| !known.contains(&dim.as_str())) {
            return Err(RechunkError::UnknownDimension {
                flag: flag.to_string(),
                dim: dim.clone(),
                url: url.to_string(),
                known: known.join(", "),
            });
        }
    }
    for (dim, &shard) in &options.shards {
        let Some(&chunk) = options.chunks.get(dim) else {
            return Err(RechunkError::ShardWithoutChunk {
                dim: dim.clone(),
                shard,
            });
        };
        if shard % chunk != 0 {
            return Err(RechunkError::ShardNotMultiple {
                dim: dim.clone(),
                shard,
                chunk,
            });
        }
    }
    Ok(())
}

/// The layout of one array. 1-D coordinate variables are written as one chunk (xarray reads
/// them whole when it opens a dataset). Otherwise a dimension named in `chunks` gets that
/// size, any other keeps the source's chunk size (the inner chunk's when the source is
/// sharded); sizes are clipped to the array's extent. Shards along a dimension not named in
/// `shards` hold one chunk; an array whose shards would all equal its chunks is not sharded.
pub fn layout_of(variable: &Variable, options: &RechunkOptions) -> ArrayLayout {
    let shape = variable.shape();
    if variable.is_coordinate() && shape.len() == 1 {
        return ArrayLayout {
            chunk: vec![shape[0].max(1)],
            shard: None,
        };
    }
    let source_chunk = variable
        .inner_chunk_shape()
        .unwrap_or_else(|| variable.chunk_shape());
    let size_of = |sizes: &DimSizes, axis: usize| sizes.get(&variable.dims()[axis]).copied();
    let mut chunk = Vec::with_capacity(shape.len());
    let mut shard = Vec::with_capacity(shape.len());
    for (axis, &extent) in shape.iter().enumerate() {
        let wanted = size_of(&options.chunks, axis).unwrap_or(source_chunk[axis]);
        let c = wanted.min(extent).max(1);
        // Shards are multiples of the requested chunk (checked); clipped to the extent
        // rounded up to whole chunks, they stay multiples of the clipped chunk.
        let s = size_of(&options.shards, axis)
            .unwrap_or(wanted)
            .min(extent.div_ceil(c) * c)
            .max(c);
        chunk.push(c);
        shard.push(s);
    }
    let shard = (shard != chunk).then_some(shard);
    ArrayLayout { chunk, shard }
}
