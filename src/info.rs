//! A serialisable description of a dataset: what `zarrpipe info` prints.

use futures::TryStreamExt;
use serde::Serialize;
use zarrpipe_batcher::MissingSteps;
use zarrpipe_core::DType;
use zarrpipe_store::{Dataset, Encoding, Variable};

/// A dataset as `zarrpipe info` describes it.
#[derive(Clone, Debug, Serialize)]
pub struct DatasetInfo {
    /// The dataset's URL or path.
    pub url: String,
    /// Zarr format version, 2 or 3.
    pub zarr_format: u8,
    /// Whether the metadata was read from consolidated metadata.
    pub consolidated: bool,
    /// Dimension lengths, by name.
    pub dims: std::collections::BTreeMap<String, u64>,
    /// The root group's attributes.
    pub attributes: serde_json::Map<String, serde_json::Value>,
    /// Every readable variable.
    pub variables: Vec<VariableInfo>,
    /// Arrays zarrpipe cannot read, with the reason (unsupported codec or data type).
    pub unreadable: Vec<UnreadableInfo>,
    /// The dimension iterated as time by default, and why (`None`: none).
    pub time_dim: Option<TimeDimInfo>,
    /// Whether values are CF-decoded as xarray's `mask_and_scale` decodes them.
    pub mask_and_scale: bool,
    /// The missing steps of the time dimension over the data variables that have it; `None`
    /// without one.
    pub missing: Option<MissingSteps>,
}

/// The time dimension of a [`DatasetInfo`].
#[derive(Clone, Debug, Serialize)]
pub struct TimeDimInfo {
    /// The dimension.
    pub name: String,
    /// Why it is the time dimension.
    pub reason: String,
}

/// An array zarrpipe cannot read.
#[derive(Clone, Debug, Serialize)]
pub struct UnreadableInfo {
    /// The array's name.
    pub name: String,
    /// Why, as an error chain on one line.
    pub reason: String,
}

/// One variable of a [`DatasetInfo`].
#[derive(Clone, Debug, Serialize)]
pub struct VariableInfo {
    /// The variable's name.
    pub name: String,
    /// Whether it is an xarray coordinate variable.
    pub coordinate: bool,
    /// Its dimension names.
    pub dims: Vec<String>,
    /// Its shape.
    pub shape: Vec<u64>,
    /// Its element type.
    pub dtype: DType,
    /// The first chunk's shape (for sharded arrays: a shard's).
    pub chunk_shape: Vec<u64>,
    /// Chunks along each axis (for sharded arrays: shards).
    pub chunk_grid: Vec<u64>,
    /// The codec chain as names, outermost first.
    pub codecs: Vec<String>,
    /// Bytes of every object under the variable's prefix (metadata included); `None` when the
    /// store cannot be listed (plain HTTP).
    pub stored_bytes: Option<u64>,
    /// `None` when the shape claims more than 2^64 bytes.
    pub decoded_bytes: Option<u64>,
    /// Its CF encoding: what decoding does (`None`: nothing), and the valid range attributes
    /// (shown, not applied, as in xarray).
    pub encoding: Encoding,
}

/// Describes every variable of `dataset`, listing the store to size what is stored.
pub async fn describe(dataset: &Dataset) -> DatasetInfo {
    let mut variables = Vec::new();
    for variable in dataset.variables() {
        variables.push(describe_variable(dataset, variable).await);
    }
    let missing = missing_steps(dataset).await;
    DatasetInfo {
        missing,
        time_dim: dataset.time_dim().map(|time| TimeDimInfo {
            name: time.name.clone(),
            reason: time.reason.to_string(),
        }),
        mask_and_scale: dataset.mask_and_scale(),
        url: dataset.url().to_string(),
        zarr_format: dataset.zarr_format(),
        consolidated: dataset.consolidated(),
        dims: dataset.dims(),
        attributes: dataset.attributes().clone(),
        variables,
        unreadable: dataset
            .unreadable()
            .into_iter()
            .map(|(name, error)| UnreadableInfo {
                name,
                reason: crate::error_chain(error.as_ref()),
            })
            .collect(),
    }
}

/// The missing steps of the dataset's time dimension, over its data variables having it.
async fn missing_steps(dataset: &Dataset) -> Option<MissingSteps> {
    let dim = dataset.time_dim()?.name.clone();
    let names: Vec<&str> = dataset
        .data_variables()
        .filter(|variable| variable.axis(&dim).is_some())
        .map(|variable| variable.name())
        .collect();
    let found = zarrpipe_pipeline::find_missing_steps(dataset, &names, &dim).await;
    Some(found.unwrap_or_else(|error| MissingSteps {
        dim: dim.clone(),
        unchecked: vec![crate::error_chain(&error)],
        ..MissingSteps::default()
    }))
}

async fn describe_variable(dataset: &Dataset, variable: &Variable) -> VariableInfo {
    let prefix = variable.list_prefix();
    let stored_bytes = match dataset.can_list() {
        true => dataset
            .store()
            .list(prefix.as_ref())
            .map_ok(|object| object.size)
            .try_fold(0u64, |a, b| async move { Ok(a.saturating_add(b)) })
            .await
            .ok(),
        false => None,
    };
    VariableInfo {
        name: variable.name().to_string(),
        coordinate: variable.is_coordinate(),
        dims: variable.dims().to_vec(),
        shape: variable.shape().to_vec(),
        dtype: variable.dtype(),
        chunk_shape: variable.chunk_shape(),
        chunk_grid: variable.chunk_grid_shape().to_vec(),
        codecs: variable.codec_names(),
        stored_bytes,
        decoded_bytes: variable.decoded_bytes(),
        encoding: variable.encoding().clone(),
    }
}
