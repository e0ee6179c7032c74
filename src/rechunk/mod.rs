//! Rewrite a dataset with new chunks, shards and codec, as a Zarr v3 store on local disk:
//! the first step of a GPU-friendly layout (`zarrpipe rechunk`).
//!
//! Every array (data variables and coordinates) is rewritten with its shape, data type, fill
//! value, dimension names and attributes; the root group's attributes are kept, and
//! consolidated metadata is written when the source had it. Sources are Zarr v2 or v3,
//! local or remote, read through [`zarrpipe_store::Dataset`] (each destination chunk's region
//! is read with zarrs from the dataset's store); the destination is written with zarrs
//! (`sharding_indexed` when sharded), one destination chunk (shard) per task, a few at once,
//! so memory stays at about `concurrency` shards whatever the store's size. A source chunk
//! that several destination chunks overlap is read once by each of them.
//!
//! A rechunk is resumable: its plan (source, options and every array's metadata) is written
//! first, and each finished destination chunk is logged; rerun with the same arguments, it
//! checks the plan and skips what is logged. The journal is removed when the store is complete.
//!
//! ```no_run
//! use zarrpipe::rechunk::{parse_dim_sizes, rechunk, Codec, RechunkOptions};
//! # async fn demo() -> anyhow::Result<()> {
//! let source = zarrpipe::store::Dataset::open("data/sample.zarr").await?;
//! let options = RechunkOptions {
//!     chunks: parse_dim_sizes("--chunks", "time=1,latitude=64,longitude=128")?,
//!     shards: parse_dim_sizes("--shard", "latitude=128,longitude=256")?,
//!     codec: Codec::Zstd(3),
//!     ..Default::default()
//! };
//! let report = rechunk(&source, "data/sample-tiles.zarr".as_ref(), &options, |_, _| {}).await?;
//! println!("{} chunks written", report.written);
//! # Ok(()) }
//! ```

mod error;
pub mod journal;
mod layout;
mod options;

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use anyhow::Context;
use base64::Engine;
use futures::{stream, StreamExt};
use serde_json::{json, Map, Value};
use zarrpipe_store::{Dataset, Variable};
use zarrs::array::codec::BytesCodec;
use zarrs::array::{
    Array, ArrayBuilder, ArrayBytes, ArrayMetadata, ArrayMetadataOptions, ArraySubset, Endianness,
};
use zarrs::filesystem::FilesystemStore;
use zarrs::group::GroupBuilder;

pub use error::RechunkError;
pub use journal::Journal;
pub use layout::{check_options, layout_of, ArrayLayout};
pub use options::{parse_dim_sizes, Codec, DimSizes, RechunkOptions};

/// The plan, beside the arrays in the destination.
pub const PLAN_FILE: &str = ".zarrpipe-rechunk.json";
/// One finished destination chunk per line: `ARRAY<TAB>i,j,k`.
pub const LOG_FILE: &str = ".zarrpipe-rechunk.log";

/// What [`rechunk`] did.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RechunkReport {
    /// Arrays rewritten (data variables and coordinates).
    pub arrays: usize,
    /// Destination chunks (shards) in the store.
    pub chunks: u64,
    /// Of those, written by this run (the rest were finished by an interrupted one).
    pub written: u64,
    /// Bytes of the values this run wrote, decoded.
    pub decoded_bytes: u64,
}

/// Rewrites every array of `source` into a new Zarr v3 store at `destination` (absent, empty,
/// or an interrupted rechunk's destination with the same arguments). `progress` is called
/// after each destination chunk with (done, total), from one task at a time.
pub async fn rechunk(
    source: &Dataset,
    destination: &Path,
    options: &RechunkOptions,
    progress: impl Fn(u64, u64) + Send + Sync,
) -> anyhow::Result<RechunkReport> {
    let selected = select(source, &options.variables)?;
    let variables: Vec<&Variable> = selected.iter().map(AsRef::as_ref).collect();
    check_options(options, &variables, source.url())?;

    let store = Arc::new(FilesystemStore::new(destination).with_context(|| {
        format!(
            "cannot open a filesystem store at {}",
            destination.display()
        )
    })?);
    let mut arrays = Vec::with_capacity(variables.len());
    let mut plan_arrays = Map::new();
    for variable in &variables {
        let layout = layout_of(variable, options);
        let array = destination_array(&store, variable, &layout, options.codec)?;
        plan_arrays.insert(
            variable.name().to_string(),
            serde_json::to_value(array.metadata_opt(&metadata_options()))?,
        );
        arrays.push(Arc::new(array));
    }
    let plan = json!({
        "source": source.url(),
        "chunks": options.chunks,
        "shards": options.shards,
        "codec": options.codec.to_string(),
        "arrays": plan_arrays,
    });
    let journal = Journal::open(destination, &plan)?;

    let groups = write_groups(&store, source, &variables, destination)?;
    for (variable, array) in variables.iter().zip(&arrays) {
        array
            .store_metadata_opt(&metadata_options())
            .with_context(|| format!("cannot write the metadata of {}", variable.name()))?;
    }

    let mut tasks = Vec::new();
    let mut total = 0u64;
    for (variable, array) in selected.iter().zip(&arrays) {
        let grid = ArraySubset::new_with_shape(array.chunk_grid_shape().to_vec());
        for indices in &grid.indices() {
            total += 1;
            if !journal.is_done(variable.name(), &indices) {
                tasks.push((variable.clone(), array.clone(), indices.to_vec()));
            }
        }
    }
    let already = total - tasks.len() as u64;
    progress(already, total);

    let written = AtomicU64::new(0);
    let decoded_bytes = AtomicU64::new(0);
    let mut results = stream::iter(tasks)
        .map(|(variable, array, indices)| async move {
            let bytes = copy_chunk(variable.clone(), array, indices.clone()).await?;
            Ok::<_, anyhow::Error>((variable, indices, bytes))
        })
        .buffer_unordered(options.concurrency.max(1));
    while let Some(result) = results.next().await {
        let (variable, indices, bytes) = result?;
        journal.record(variable.name(), &indices)?;
        decoded_bytes.fetch_add(bytes, Ordering::Relaxed);
        let count = written.fetch_add(1, Ordering::Relaxed) + 1;
        progress(already + count, total);
        if options.stop_after.is_some_and(|stop| count >= stop) && already + count < total {
            return Err(RechunkError::Stopped { written: count }.into());
        }
    }
    drop(results);

    if source.consolidated() {
        consolidate(destination, &plan["arrays"], &groups)?;
    }
    journal.finish()?;
    Ok(RechunkReport {
        arrays: arrays.len(),
        chunks: total,
        written: written.into_inner(),
        decoded_bytes: decoded_bytes.into_inner(),
    })
}

/// The arrays to rewrite: every one, or the named data variables and every coordinate. An
/// array zarrpipe cannot read is an error when it would be rewritten.
fn select(source: &Dataset, names: &[String]) -> anyhow::Result<Vec<Arc<Variable>>> {
    if names.is_empty() {
        if let Some((variable, error)) = source.unreadable().into_iter().next() {
            let readable: Vec<String> = source
                .data_variables()
                .map(|v| format!("--var {}", v.name()))
                .collect();
            return Err(RechunkError::Unreadable {
                variable,
                hint: format!("; to leave it out, name the others: {}", readable.join(" ")),
                source: error,
            }
            .into());
        }
        return Ok(source.variables().to_vec());
    }
    let mut selected = Vec::new();
    for name in names {
        let variable = source.variable(name).map_err(|error| {
            match source
                .unreadable()
                .into_iter()
                .find(|(unreadable, _)| unreadable == name)
            {
                Some((variable, source)) => anyhow::Error::new(RechunkError::Unreadable {
                    variable,
                    hint: String::new(),
                    source,
                }),
                None => anyhow::Error::new(error),
            }
        })?;
        selected.push(variable.clone());
    }
    for coordinate in source.coordinates() {
        if !selected.iter().any(|v| v.name() == coordinate.name()) {
            selected.push(coordinate.clone());
        }
    }
    Ok(selected)
}

/// Reads one destination chunk's region from the source and writes it; returns its decoded
/// size.
async fn copy_chunk(
    variable: Arc<Variable>,
    array: Arc<Array<FilesystemStore>>,
    indices: Vec<u64>,
) -> anyhow::Result<u64> {
    let region = array
        .chunk_subset_bounded(&indices)
        .with_context(|| format!("destination chunk {indices:?} of {}", variable.name()))?;
    let bytes: ArrayBytes<'static> = variable
        .array()
        .async_retrieve_array_subset(&region)
        .await
        .with_context(|| {
            format!(
                "cannot read {} region {:?} from {}",
                variable.name(),
                region,
                variable.url()
            )
        })?;
    let size = bytes.size() as u64;
    tokio::task::spawn_blocking(move || {
        // An edge chunk is written by reading, updating and writing it: a file left half
        // written by an interrupted run must not be read back.
        array
            .erase_chunk(&indices)
            .with_context(|| format!("cannot remove chunk {indices:?} of {}", variable.name()))?;
        array.store_array_subset(&region, bytes).with_context(|| {
            format!(
                "cannot write chunk {indices:?} of {} ({:?})",
                variable.name(),
                region
            )
        })
    })
    .await
    .context("a writing task failed")??;
    Ok(size)
}

/// Keeps array attributes to the source's (no `_zarrs` provenance entry).
fn metadata_options() -> ArrayMetadataOptions {
    ArrayMetadataOptions::default().with_include_zarrs_metadata(false)
}

/// The destination array of `variable`: same shape, data type, fill value, dimension names and
/// attributes; little-endian `bytes`, then `codec`; sharded when the layout says so.
fn destination_array(
    store: &Arc<FilesystemStore>,
    variable: &Variable,
    layout: &ArrayLayout,
    codec: Codec,
) -> anyhow::Result<Array<FilesystemStore>> {
    let source = variable.array();
    let element_size = source.data_type().fixed_size().with_context(|| {
        format!(
            "{} has a variable-size data type, which rechunk does not write",
            variable.name()
        )
    })?;
    let endian = (element_size > 1).then_some(Endianness::Little);
    let mut builder = ArrayBuilder::new(
        source.shape().to_vec(),
        layout.write_shape().to_vec(),
        source.data_type().clone(),
        source.fill_value().clone(),
    );
    builder
        .array_to_bytes_codec(Arc::new(BytesCodec::new(endian)))
        .bytes_to_bytes_codecs(codec.codecs(element_size)?)
        .attributes(attributes(variable));
    if has_dimension_names(variable) {
        builder.dimension_names(Some(variable.dims().iter().map(String::as_str)));
    }
    if layout.shard.is_some() {
        builder.subchunk_shape(layout.chunk.clone());
    }
    builder
        .build(store.clone(), &format!("/{}", variable.name()))
        .with_context(|| format!("cannot build the destination array {}", variable.name()))
}

fn has_dimension_names(variable: &Variable) -> bool {
    variable.array().dimension_names().is_some()
        || variable.attributes().contains_key("_ARRAY_DIMENSIONS")
}

/// The source's attributes, without v2's `_ARRAY_DIMENSIONS` (v3 has `dimension_names`). An
/// array xarray wrote as v2 (it has `_ARRAY_DIMENSIONS`) keeps its fill value as xarray's
/// `_FillValue` attribute, encoded as xarray encodes it in v3 (floats as the base64 of a
/// little-endian double), so xarray masks the same values in both.
fn attributes(variable: &Variable) -> Map<String, Value> {
    let mut attributes = variable.attributes().clone();
    let from_xarray_v2 = attributes.remove("_ARRAY_DIMENSIONS").is_some();
    if let (true, ArrayMetadata::V2(metadata)) = (from_xarray_v2, variable.array().metadata()) {
        if !attributes.contains_key("_FillValue") {
            let fill = serde_json::to_value(&metadata.fill_value).unwrap_or(Value::Null);
            if let Some(encoded) = xarray_v3_fill_value(&fill, variable) {
                attributes.insert("_FillValue".into(), encoded);
            }
        }
    }
    attributes
}

/// xarray's v3 `_FillValue` encoding of a v2 `fill_value` (`null`: none).
fn xarray_v3_fill_value(fill: &Value, variable: &Variable) -> Option<Value> {
    use zarrpipe_core::DType;
    let as_f64 = match fill {
        Value::Null => return None,
        Value::String(text) => match text.as_str() {
            "NaN" => f64::NAN,
            "Infinity" => f64::INFINITY,
            "-Infinity" => f64::NEG_INFINITY,
            _ => return None,
        },
        Value::Number(number) => number.as_f64()?,
        Value::Bool(flag) => return Some(Value::Bool(*flag)),
        _ => return None,
    };
    match variable.dtype() {
        DType::Float16 | DType::BFloat16 | DType::Float32 | DType::Float64 => Some(Value::String(
            base64::engine::general_purpose::STANDARD.encode(as_f64.to_le_bytes()),
        )),
        DType::Bool => Some(Value::Bool(as_f64 != 0.0)),
        _ => fill
            .as_i64()
            .or_else(|| fill.as_u64().map(|n| n as i64))
            .map(Value::from),
    }
}

/// Writes the root group (with the source's attributes) and every group above an array;
/// returns each group's metadata by path, for consolidation.
fn write_groups(
    store: &Arc<FilesystemStore>,
    source: &Dataset,
    variables: &[&Variable],
    destination: &Path,
) -> anyhow::Result<BTreeMap<String, Value>> {
    let mut paths: Vec<String> = vec![String::new()];
    for variable in variables {
        let parts: Vec<&str> = variable.name().split('/').collect();
        for end in 1..parts.len() {
            paths.push(parts[..end].join("/"));
        }
    }
    paths.sort();
    paths.dedup();
    let mut groups = BTreeMap::new();
    for path in paths {
        let attributes = if path.is_empty() {
            source.attributes().clone()
        } else {
            Map::new()
        };
        let group = GroupBuilder::new()
            .attributes(attributes)
            .build(store.clone(), &format!("/{path}"))
            .with_context(|| format!("cannot build group /{path} in {}", destination.display()))?;
        group
            .store_metadata()
            .with_context(|| format!("cannot write group /{path} in {}", destination.display()))?;
        if !path.is_empty() {
            groups.insert(path, serde_json::to_value(group.metadata())?);
        }
    }
    Ok(groups)
}

/// Adds zarr-python's inline consolidated metadata (every array and sub-group) to the root
/// `zarr.json`.
fn consolidate(
    destination: &Path,
    arrays: &Value,
    groups: &BTreeMap<String, Value>,
) -> anyhow::Result<()> {
    let path = destination.join("zarr.json");
    let bytes = std::fs::read(&path).with_context(|| format!("cannot read {}", path.display()))?;
    let mut root: Value = serde_json::from_slice(&bytes)
        .with_context(|| format!("cannot parse {}", path.display()))?;
    let mut metadata = arrays.as_object().cloned().unwrap_or_default();
    for (name, group) in groups {
        metadata.insert(name.clone(), group.clone());
    }
    root["consolidated_metadata"] = json!({
        "kind": "inline",
        "must_understand": false,
        "metadata": metadata,
    });
    journal::write_atomically(&path, &serde_json::to_vec_pretty(&root)?)
}
