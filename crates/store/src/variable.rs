use std::ops::Range;
use std::sync::Arc;

use object_store::ObjectStore;
use serde_json::{Map, Value};
use zarrpipe_core::{CfDecoding, DType};
use zarrs::array::{Array, ArrayMetadata, ArraySubset};
use zarrs::plugin::{ExtensionName, ZarrVersion};
use zarrs::storage::AsyncReadableStorageTraits;

use crate::cf_attributes::{read_encoding, Encoding};
use crate::io::StoreIo;
use crate::location::Location;
use crate::ranges::{nth_in_ranges, ShardLayout};
use crate::{Error, Result};

/// A zarrs array over the dataset's store, for users who want zarrs' own API.
pub type ZarrArray = Array<dyn AsyncReadableStorageTraits>;

/// One array of a dataset, with its dimension names (xarray's view of it).
pub struct Variable {
    name: String,
    /// Its path in the store: the name, or "" for a store whose root is the array.
    path: String,
    dims: Vec<String>,
    dtype: DType,
    /// Its CF encoding attributes.
    encoding: Encoding,
    /// How its values decode: the encoding's, unless the dataset was opened with
    /// `mask_and_scale` off.
    decoding: Option<CfDecoding>,
    is_coordinate: bool,
    array: ZarrArray,
    io: Arc<StoreIo>,
    /// For arrays sharded with `sharding_indexed` alone: how to read inner chunks by range.
    sharding: Option<ShardLayout>,
    /// The chunk shape of a regular grid (every Zarr v2 array, v3 `regular`), for planning
    /// without zarrs' general grid code; `None` for other grids.
    regular_chunks: Option<Vec<u64>>,
}

impl Variable {
    pub(crate) fn new(
        location: &Location,
        name: String,
        path: &str,
        storage: Arc<dyn AsyncReadableStorageTraits>,
        metadata: ArrayMetadata,
    ) -> Result<Self> {
        let url = &location.url;
        // A root array ("") keeps its chunks at the store's root, whatever it is named.
        let is_root = path.is_empty();
        let node_path = format!("/{path}");
        let array = Array::new_with_metadata(storage, &node_path, metadata).map_err(|source| {
            Error::InvalidArray {
                url: url.clone(),
                variable: name.clone(),
                source: Box::new(source),
            }
        })?;
        let data_type = array
            .data_type()
            .name(ZarrVersion::V3)
            .map_or_else(|| array.data_type().to_string(), |name| name.into_owned());
        let dtype =
            DType::from_zarr_name(&data_type).ok_or_else(|| Error::UnsupportedDataType {
                variable: name.clone(),
                data_type,
            })?;
        // xarray takes a v2 array's `fill_value` for its `_FillValue`; a root array is no
        // xarray dataset (`xr.open_zarr` refuses it) and reads as zarr-python reads it.
        let zarr_fill_value = match array.metadata() {
            ArrayMetadata::V2(metadata) if !is_root => {
                serde_json::to_value(&metadata.fill_value).ok()
            }
            _ => None,
        };
        let zarr_format = match array.metadata() {
            ArrayMetadata::V2(_) => 2,
            ArrayMetadata::V3(_) => 3,
        };
        let encoding = read_encoding(
            dtype,
            array.attributes(),
            zarr_fill_value.as_ref(),
            zarr_format,
        )
        .map_err(|reason| Error::BadEncoding {
            url: url.clone(),
            variable: name.clone(),
            reason,
        })?;
        let decoding = match location.io.options.mask_and_scale {
            true => encoding.decoding.clone(),
            false => None,
        };
        let dims = dimension_names(&array, &name)?;
        check_sizes(&array, &name, dtype)?;
        let regular = match array.metadata() {
            ArrayMetadata::V2(_) => true,
            ArrayMetadata::V3(metadata) => metadata.chunk_grid.name() == "regular",
        };
        let origin = vec![0; array.dimensionality()];
        let regular_chunks = regular
            .then(|| array.chunk_shape(&origin).ok())
            .flatten()
            .map(|shape| shape.iter().map(|n| n.get()).collect::<Vec<u64>>());
        let sharding = regular_chunks
            .as_ref()
            .and_then(|shard_shape| ShardLayout::of(array.metadata(), shard_shape));
        Ok(Self {
            name,
            path: path.to_string(),
            dims,
            dtype,
            encoding,
            decoding,
            is_coordinate: false,
            array,
            io: location.io.clone(),
            sharding,
            regular_chunks,
        })
    }

    /// Names the axes (datasets whose layout says what unnamed axes are: anemoi's).
    pub(crate) fn rename_dims(&mut self, dims: Vec<String>) {
        debug_assert_eq!(dims.len(), self.dims.len());
        self.dims = dims;
    }

    pub(crate) fn mark_coordinate(&mut self) {
        self.is_coordinate = true;
    }

    /// The variable's path in the store ("t2m", "group/x").
    pub fn name(&self) -> &str {
        &self.name
    }

    /// Its path in the store: the name, or "" for a store whose root is the array.
    pub fn path(&self) -> &str {
        &self.path
    }

    /// The prefix under which its objects (metadata and chunks) are listed; `None` for a
    /// root array, whose objects are the whole store's.
    pub fn list_prefix(&self) -> Option<object_store::path::Path> {
        (!self.path.is_empty()).then(|| crate::io::object_path(&self.path).ok())?
    }

    /// Dimension names, one per axis: v3 `dimension_names`, v2 `_ARRAY_DIMENSIONS`, or
    /// `dim_0`, `dim_1`, ... when the store has none.
    pub fn dims(&self) -> &[String] {
        &self.dims
    }

    /// The axis of a named dimension.
    pub fn axis(&self, dim: &str) -> Option<usize> {
        self.dims.iter().position(|name| name == dim)
    }

    /// The element type.
    pub fn dtype(&self) -> DType {
        self.dtype
    }

    /// How its stored values decode to what xarray gives (`None`: as stored, also when the
    /// dataset was opened with [`mask_and_scale`](crate::StoreOptions::mask_and_scale) off).
    pub fn decoding(&self) -> Option<&CfDecoding> {
        self.decoding.as_ref()
    }

    /// Its CF encoding attributes, whether or not they are applied.
    pub fn encoding(&self) -> &Encoding {
        &self.encoding
    }

    /// Elements along each axis.
    pub fn shape(&self) -> &[u64] {
        self.array.shape()
    }

    /// True for xarray coordinate variables (named after their dimension, or listed in a
    /// data variable's `coordinates` attribute).
    pub fn is_coordinate(&self) -> bool {
        self.is_coordinate
    }

    /// The array's attributes (for Zarr v2, its `.zattrs`).
    pub fn attributes(&self) -> &Map<String, Value> {
        self.array.attributes()
    }

    /// The number of chunks along each axis (for sharded arrays: shards).
    pub fn chunk_grid_shape(&self) -> &[u64] {
        self.array.chunk_grid_shape()
    }

    /// The shape of the first chunk (for sharded arrays: of a shard), which every chunk of a
    /// regular grid shares.
    pub fn chunk_shape(&self) -> Vec<u64> {
        let origin = vec![0; self.shape().len()];
        self.array
            .chunk_shape(&origin)
            .map(|shape| shape.iter().map(|n| n.get()).collect())
            .unwrap_or_default()
    }

    /// The store key of a chunk, such as `t2m/c/0/0/0` or `t2m/0.0.0`.
    pub fn chunk_key(&self, indices: &[u64]) -> String {
        self.array.chunk_key(indices).to_string()
    }

    /// The element region of a chunk: its start and (unclipped) shape.
    pub fn chunk_region(&self, indices: &[u64]) -> Result<(Vec<u64>, Vec<u64>)> {
        let subset = self
            .array
            .chunk_subset(indices)
            .map_err(|_| self.out_of_grid(indices))?;
        Ok((subset.start().to_vec(), subset.shape().to_vec()))
    }

    /// Checks that `indices` name a chunk of this variable's grid.
    pub fn check_chunk(&self, indices: &[u64]) -> Result<()> {
        let grid = self.chunk_grid_shape();
        if indices.len() == grid.len() && indices.iter().zip(grid).all(|(i, n)| i < n) {
            Ok(())
        } else {
            Err(self.out_of_grid(indices))
        }
    }

    /// The chunks that intersect `region` (one range per axis), in C order.
    pub fn chunks_in(&self, region: &[Range<u64>]) -> Vec<Vec<u64>> {
        if let Some(chunk_shape) = &self.regular_chunks {
            return regular_chunks_in(region, chunk_shape, self.chunk_grid_shape());
        }
        let subset = ArraySubset::new_with_ranges(region);
        match self.array.chunks_in_array_subset(&subset) {
            Ok(Some(chunks)) => chunks.indices().into_iter().map(|c| c.to_vec()).collect(),
            _ => Vec::new(),
        }
    }

    /// Every chunk of the grid, in C order, computed as it goes (a grid may have more chunks
    /// than memory holds indices).
    pub fn every_chunk(&self) -> impl Iterator<Item = Vec<u64>> + Send + 'static {
        let ranges: Vec<Range<u64>> = self.chunk_grid_shape().iter().map(|&n| 0..n).collect();
        // The chunk count fits a u64: checked when the variable was opened.
        let total: u64 = ranges.iter().map(|range| range.end - range.start).product();
        (0..total).map(move |flat| nth_in_ranges(flat, &ranges))
    }

    /// Bytes of one decoded (full-size) chunk (checked when the variable was opened).
    pub fn decoded_chunk_bytes(&self) -> u64 {
        self.chunk_shape().iter().product::<u64>() * self.dtype.size() as u64
    }

    /// Bytes of the whole decoded array; `None` when that overflows a `u64` (a shape can
    /// claim more than any store holds).
    pub fn decoded_bytes(&self) -> Option<u64> {
        checked_bytes(self.shape(), self.dtype.size())
    }

    /// The codec chain as names, outermost (array-to-array) first, e.g. `["bytes", "zstd"]`.
    pub fn codec_names(&self) -> Vec<String> {
        let mut names = Vec::new();
        match self.array.metadata() {
            ArrayMetadata::V3(metadata) => {
                names.extend(metadata.codecs.iter().map(|codec| codec.name().to_string()))
            }
            ArrayMetadata::V2(metadata) => {
                let filters = metadata.filters.iter().flatten();
                names.extend(filters.map(|filter| filter.id().to_string()));
                names.extend(
                    metadata
                        .compressor
                        .iter()
                        .map(|codec| codec.id().to_string()),
                );
            }
        }
        names
    }

    /// The object store holding the variable's chunks, rooted at the dataset.
    pub fn store(&self) -> &Arc<dyn ObjectStore> {
        &self.io.store
    }

    /// The URL of the dataset the variable belongs to.
    pub fn url(&self) -> &str {
        &self.io.url
    }

    /// Whether its chunks are read into a [`ReadMemory`](crate::ReadMemory) when one is given
    /// (a local store without a cache); elsewhere reads ignore it.
    pub fn reads_into_memory(&self) -> bool {
        self.io.reads_into_memory()
    }

    pub(crate) fn io(&self) -> &Arc<StoreIo> {
        &self.io
    }

    pub(crate) fn sharding(&self) -> Option<&ShardLayout> {
        self.sharding.as_ref()
    }

    /// Whether inner chunks of this variable's shards can be read by byte range.
    pub fn reads_inner_chunks(&self) -> bool {
        self.sharding.is_some()
    }

    /// Decoded bytes of one inner chunk, for arrays read by inner chunk.
    pub fn inner_chunk_bytes(&self) -> Option<u64> {
        let sharding = self.sharding.as_ref()?;
        Some(sharding.inner_decoded_bytes(self.dtype.size()))
    }

    /// For a shard of an array read by inner chunk: the inner chunks (C-order numbers within
    /// the shard) that meet `region`; `None` for other arrays (read whole chunks).
    pub fn inner_chunks_in(&self, shard: &[u64], region: &[Range<u64>]) -> Option<Vec<u64>> {
        let sharding = self.sharding.as_ref()?;
        let shard_shape = self.regular_chunks.as_ref()?;
        let start: Vec<u64> = shard.iter().zip(shard_shape).map(|(i, n)| i * n).collect();
        Some(sharding.inner_chunks_in(&start, region).collect())
    }

    /// The shape of one inner chunk, for arrays read by inner chunk.
    pub fn inner_chunk_shape(&self) -> Option<Vec<u64>> {
        Some(self.sharding.as_ref()?.inner_shape().to_vec())
    }

    /// Inner chunks per shard, for arrays read by inner chunk.
    pub fn inner_chunks_per_shard(&self) -> Option<u64> {
        Some(self.sharding.as_ref()?.inner_count())
    }

    /// The zarrs array behind this variable.
    pub fn array(&self) -> &ZarrArray {
        &self.array
    }

    fn out_of_grid(&self, indices: &[u64]) -> Error {
        Error::ChunkOutOfGrid {
            variable: self.name.clone(),
            indices: indices.to_vec(),
            grid: self.chunk_grid_shape().to_vec(),
        }
    }
}

/// The chunks of a regular grid that intersect `region`, in C order (planning's hot path).
fn regular_chunks_in(region: &[Range<u64>], chunk_shape: &[u64], grid: &[u64]) -> Vec<Vec<u64>> {
    let ranges: Vec<Range<u64>> = region
        .iter()
        .zip(chunk_shape)
        .zip(grid)
        .map(|((range, &chunk), &count)| {
            if range.start >= range.end {
                return 0..0;
            }
            (range.start / chunk).min(count)..((range.end - 1) / chunk + 1).min(count)
        })
        .collect();
    // The grid's chunk count fits a u64 (checked at open), and so does any box of it; the
    // capacity is only a hint, so a huge region cannot ask for a huge allocation up front.
    let total: u64 = ranges.iter().map(|range| range.end - range.start).product();
    let mut chunks = Vec::with_capacity(total.min(1 << 16) as usize);
    for flat in 0..total {
        chunks.push(nth_in_ranges(flat, &ranges));
    }
    chunks
}

impl std::fmt::Debug for Variable {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Variable")
            .field("name", &self.name)
            .field("dims", &self.dims)
            .field("shape", &self.shape())
            .field("dtype", &self.dtype)
            .field("chunk_shape", &self.chunk_shape())
            .finish()
    }
}

/// Dimension names, one per axis; names of the wrong count are an error, not a guess.
fn dimension_names(array: &ZarrArray, variable: &str) -> Result<Vec<String>> {
    let rank = array.dimensionality();
    let wrong_count = |names: usize, source_key| Error::DimensionNames {
        variable: variable.to_string(),
        names,
        rank,
        source_key,
    };
    if let Some(names) = array.dimension_names() {
        if names.len() != rank {
            return Err(wrong_count(names.len(), "dimension_names"));
        }
        let names = names.iter().enumerate();
        return Ok(names
            .map(|(axis, name)| name.clone().unwrap_or(format!("dim_{axis}")))
            .collect());
    }
    let from_attributes = array
        .attributes()
        .get("_ARRAY_DIMENSIONS")
        .and_then(|names| {
            names
                .as_array()?
                .iter()
                .map(|name| name.as_str().map(str::to_string))
                .collect::<Option<Vec<String>>>()
        });
    match from_attributes {
        Some(names) if names.len() != rank => Err(wrong_count(names.len(), "_ARRAY_DIMENSIONS")),
        Some(names) => Ok(names),
        None => Ok((0..rank).map(|axis| format!("dim_{axis}")).collect()),
    }
}

/// `shape`'s elements times `element_size`, if that fits a `u64`.
fn checked_bytes(shape: &[u64], element_size: usize) -> Option<u64> {
    shape
        .iter()
        .try_fold(element_size as u64, |bytes, &n| bytes.checked_mul(n))
}

/// The largest decoded chunk (for sharded arrays: shard) zarrpipe opens: 16 GiB. A chunk is
/// decoded whole, so a larger one claims more memory than a training host has to spare.
pub const MAX_CHUNK_BYTES: u64 = 16 << 30;

/// A chunk must fit in memory, and a chunk grid in a `u64`: sizes from storage are checked
/// here, once, so later arithmetic on them cannot overflow.
fn check_sizes(array: &ZarrArray, variable: &str, dtype: DType) -> Result<()> {
    let overflow = |what| Error::SizeOverflow {
        variable: variable.to_string(),
        what,
        shape: array.shape().to_vec(),
    };
    let origin = vec![0; array.dimensionality()];
    if let Ok(chunk) = array.chunk_shape(&origin) {
        let chunk: Vec<u64> = chunk.iter().map(|n| n.get()).collect();
        let bytes = checked_bytes(&chunk, dtype.size()).ok_or(overflow("a chunk's size"))?;
        if bytes > MAX_CHUNK_BYTES {
            return Err(overflow(
                "a chunk's size (over the 16 GiB zarrpipe decodes at once)",
            ));
        }
    }
    let grid = array.chunk_grid_shape();
    grid.iter()
        .try_fold(1u64, |count, &n| count.checked_mul(n))
        .ok_or(overflow("the number of chunks"))?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::regular_chunks_in;

    /// Every chunk of the grid whose extent meets the region, by brute force.
    fn brute_force(region: &[std::ops::Range<u64>], chunk: &[u64], grid: &[u64]) -> Vec<Vec<u64>> {
        let mut all = vec![vec![]];
        for &count in grid {
            all = all
                .into_iter()
                .flat_map(|prefix: Vec<u64>| {
                    (0..count).map(move |i| [prefix.clone(), vec![i]].concat())
                })
                .collect();
        }
        all.into_iter()
            .filter(|indices| {
                indices.iter().enumerate().all(|(a, &i)| {
                    let (start, end) = (i * chunk[a], (i + 1) * chunk[a]);
                    region[a].start < end && start < region[a].end
                })
            })
            .collect()
    }

    #[test]
    fn regular_grid_lookup_matches_brute_force() {
        let (chunk, grid) = ([3u64, 4, 5], [4u64, 3, 2]); // array of 12 x 12 x 10 (last partial)
        for a in 0..12 {
            for b in (a + 1)..=12 {
                let region = [a..b, (b % 7)..12, 0..(1 + a % 10)];
                assert_eq!(
                    regular_chunks_in(&region, &chunk, &grid),
                    brute_force(&region, &chunk, &grid),
                    "{region:?}"
                );
            }
        }
        assert_eq!(
            regular_chunks_in(std::slice::from_ref(&(2..2)), &[4], &[3]),
            Vec::<Vec<u64>>::new()
        );
        assert_eq!(regular_chunks_in(&[], &[], &[]), vec![Vec::<u64>::new()]);
    }
}
