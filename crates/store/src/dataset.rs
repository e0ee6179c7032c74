use std::collections::{BTreeMap, HashSet};
use std::sync::Arc;

use object_store::ObjectStore;
use serde_json::{Map, Value};
use zarrs_object_store::AsyncObjectStore;

use crate::anemoi::name_anemoi_dims;
use crate::location::Location;
use crate::metadata::read_hierarchy;
use crate::time_dim::{find_time_dim, TimeDim, TimeDimReason};
use crate::{Error, IoStats, Result, StoreOptions, Variable};

/// An opened Zarr hierarchy seen the way xarray sees it: variables with named dimensions,
/// coordinate variables, and attributes.
#[derive(Debug)]
pub struct Dataset {
    location: Location,
    zarr_format: u8,
    consolidated: bool,
    attributes: Map<String, Value>,
    variables: Vec<Arc<Variable>>,
    /// The dimension iterated as time, if any.
    time_dim: Option<TimeDim>,
    /// Arrays zarrpipe cannot read (metadata that does not parse, an unsupported codec or data
    /// type, sizes that overflow), kept so that asking for one gives its error while the rest
    /// of the dataset stays usable, and so that no default selection leaves one out silently.
    unreadable: Vec<Unreadable>,
}

/// An array zarrpipe cannot read, and why.
#[derive(Debug)]
struct Unreadable {
    name: String,
    /// Named as a dimension or in a `coordinates` attribute: not in the default selection.
    is_coordinate: bool,
    error: Arc<Error>,
}

impl Dataset {
    /// Opens the dataset at a path or URL (`file://`, `memory://`, `http(s)://`).
    ///
    /// ```no_run
    /// # async fn demo() -> zarrpipe_store::Result<()> {
    /// let dataset = zarrpipe_store::Dataset::open("data/sample.zarr").await?;
    /// for variable in dataset.data_variables() {
    ///     println!("{} {:?} {:?}", variable.name(), variable.dims(), variable.shape());
    /// }
    /// # Ok(()) }
    /// ```
    pub async fn open(url: &str) -> Result<Self> {
        Self::open_location(Location::parse(url)?).await
    }

    /// Opens the dataset at a path or URL with store options: cloud URLs (`s3://`, `gs://`,
    /// `az://`) take credentials from the environment and `options` on top.
    ///
    /// ```no_run
    /// # async fn demo() -> zarrpipe_store::Result<()> {
    /// use zarrpipe_store::{Dataset, StoreOptions};
    /// let options = StoreOptions::new()
    ///     .option("endpoint", "http://127.0.0.1:9000")
    ///     .cache("/tmp/zarrpipe-cache", 20 << 30);
    /// let dataset = Dataset::open_with("s3://era5/w1.zarr", &options).await?;
    /// println!("{} requests so far", dataset.io_stats().requests);
    /// # Ok(()) }
    /// ```
    pub async fn open_with(url: &str, options: &StoreOptions) -> Result<Self> {
        Self::open_location(Location::parse_with(url, options)?).await
    }

    /// Opens the dataset rooted at an object store.
    pub async fn open_store(url: impl Into<String>, store: Arc<dyn ObjectStore>) -> Result<Self> {
        Self::open_location(Location::from_store(url, store)).await
    }

    /// Opens the dataset rooted at an object store, with store options (retries, request
    /// limit, cache).
    pub async fn open_store_with(
        url: impl Into<String>,
        store: Arc<dyn ObjectStore>,
        options: &StoreOptions,
    ) -> Result<Self> {
        Self::open_location(Location::from_store_with(url, store, options)?).await
    }

    /// Whether chunk reads land in a [`ReadMemory`](crate::ReadMemory) when one is given (a
    /// local store without a cache); elsewhere reads ignore it, and none need be set aside.
    pub fn reads_into_memory(&self) -> bool {
        self.location.io.reads_into_memory()
    }

    /// The requests made so far for this dataset (metadata and chunks), and what they read.
    pub fn io_stats(&self) -> IoStats {
        self.location.io.stats()
    }

    async fn open_location(location: Location) -> Result<Self> {
        let hierarchy = match read_hierarchy(&location).await {
            Ok(hierarchy) => hierarchy,
            // The first requests fail when the endpoint or the credentials are wrong: say which.
            Err(
                error @ (Error::ReadMetadata { .. }
                | Error::List { .. }
                | Error::MetadataTimeout { .. }),
            ) => {
                return Err(match &location.context {
                    Some(context) => Error::Remote {
                        url: location.url.clone(),
                        context: context.clone(),
                        source: Box::new(error),
                    },
                    None => error,
                })
            }
            Err(error) => return Err(error),
        };
        let storage = Arc::new(AsyncObjectStore::new(location.store.clone()));
        let mut variables = Vec::with_capacity(hierarchy.arrays.len());
        let mut unreadable = Vec::new();
        let mut datetime_arrays = Vec::new();
        for (path, metadata) in hierarchy.arrays {
            if let Ok(metadata) = &metadata {
                if let Some(dim) = datetime_dim(metadata) {
                    datetime_arrays.push((path.clone(), dim));
                }
            }
            let name = if path.is_empty() {
                root_array_name(&location.url)
            } else {
                path.clone()
            };
            let variable = metadata.and_then(|metadata| {
                Variable::new(&location, name.clone(), &path, storage.clone(), metadata)
            });
            match variable {
                Ok(variable) => variables.push(variable),
                Err(error) => unreadable.push(Unreadable {
                    name,
                    is_coordinate: false,
                    error: Arc::new(error),
                }),
            }
        }
        name_anemoi_dims(&hierarchy.attributes, &mut variables);
        mark_coordinates(&mut variables, &mut unreadable);
        let time_dim = match &location.io.options.time_dim {
            Some(dim) => Some(chosen_time_dim(&location.url, &variables, dim)?),
            None => find_time_dim(&variables, &datetime_arrays),
        };
        Ok(Self {
            time_dim,
            location,
            zarr_format: hierarchy.zarr_format,
            consolidated: hierarchy.consolidated,
            attributes: hierarchy.attributes,
            variables: variables.into_iter().map(Arc::new).collect(),
            unreadable,
        })
    }

    /// The path or URL the dataset was opened from.
    pub fn url(&self) -> &str {
        &self.location.url
    }

    /// The object store the dataset lives in, rooted at the dataset.
    pub fn store(&self) -> &Arc<dyn ObjectStore> {
        &self.location.store
    }

    /// Whether CF packing and missing values are decoded (xarray's `mask_and_scale`, see
    /// [`StoreOptions::mask_and_scale`]).
    pub fn mask_and_scale(&self) -> bool {
        self.location.io.options.mask_and_scale
    }

    /// Whether the store can be listed: every backend but plain HTTP, whose servers mostly
    /// answer a listing (WebDAV's PROPFIND) with an error page after every retry.
    pub fn can_list(&self) -> bool {
        let scheme = self
            .location
            .url
            .split_once("://")
            .map(|(scheme, _)| scheme);
        !matches!(scheme, Some("http" | "https"))
    }

    /// 2 or 3.
    pub fn zarr_format(&self) -> u8 {
        self.zarr_format
    }

    /// Whether the metadata came from consolidated metadata (one read, no listing).
    pub fn consolidated(&self) -> bool {
        self.consolidated
    }

    /// The root group's attributes.
    pub fn attributes(&self) -> &Map<String, Value> {
        &self.attributes
    }

    /// Every array, coordinates included, sorted by name.
    pub fn variables(&self) -> &[Arc<Variable>] {
        &self.variables
    }

    /// The arrays that are not coordinates.
    pub fn data_variables(&self) -> impl Iterator<Item = &Arc<Variable>> {
        self.variables
            .iter()
            .filter(|variable| !variable.is_coordinate())
    }

    /// The names of the data variables, sorted: the default selection of pipelines. Arrays
    /// zarrpipe cannot read are among them (unless they are coordinates), so that a default
    /// selection fails on them, naming them, rather than leaving them out silently.
    pub fn data_variable_names(&self) -> Vec<String> {
        let readable = self.data_variables().map(|variable| variable.name());
        let unreadable = self.unreadable.iter().filter(|u| !u.is_coordinate);
        let mut names: Vec<String> = readable
            .chain(unreadable.map(|u| u.name.as_str()))
            .map(str::to_string)
            .collect();
        names.sort();
        names
    }

    /// The names of every array, coordinates and arrays zarrpipe cannot read included, sorted.
    pub fn variable_names(&self) -> Vec<String> {
        let readable = self.variables.iter().map(|variable| variable.name());
        let mut names: Vec<String> = readable
            .chain(self.unreadable.iter().map(|u| u.name.as_str()))
            .map(str::to_string)
            .collect();
        names.sort();
        names
    }

    /// The coordinate arrays.
    pub fn coordinates(&self) -> impl Iterator<Item = &Arc<Variable>> {
        self.variables
            .iter()
            .filter(|variable| variable.is_coordinate())
    }

    /// A variable by name; for an array zarrpipe cannot read, the reason; for a name that is
    /// not there, an error listing the names there are.
    pub fn variable(&self, name: &str) -> Result<&Arc<Variable>> {
        if let Some(variable) = self
            .variables
            .iter()
            .find(|variable| variable.name() == name)
        {
            return Ok(variable);
        }
        if let Some(error) = self.unreadable_error(name) {
            return Err(error);
        }
        let names: Vec<&str> = self.variables.iter().map(|v| v.name()).collect();
        Err(Error::MissingVariable {
            name: name.to_string(),
            url: self.location.url.clone(),
            available: names.join(", "),
        })
    }

    /// The arrays of the store that zarrpipe cannot read, with the reason for each.
    pub fn unreadable(&self) -> Vec<(String, Arc<Error>)> {
        let unreadable = self.unreadable.iter();
        unreadable
            .map(|u| (u.name.clone(), u.error.clone()))
            .collect()
    }

    /// The error of an array zarrpipe cannot read: why, and how to go on without it.
    fn unreadable_error(&self, name: &str) -> Option<Error> {
        let unreadable = self.unreadable.iter().find(|u| u.name == name)?;
        let others: Vec<String> = self
            .data_variables()
            .map(|variable| variable.name().to_string())
            .collect();
        let hint = if others.is_empty() {
            "--var NAME (`.variables([..])` in Rust), but no data variable of this store is readable"
                .to_string()
        } else {
            let flags: Vec<String> = others.iter().map(|name| format!("--var {name}")).collect();
            format!("{} (`.variables({others:?})` in Rust)", flags.join(" "))
        };
        Some(Error::Unreadable {
            variable: name.to_string(),
            url: self.location.url.clone(),
            hint,
            source: unreadable.error.clone(),
        })
    }

    /// The dimension iterated as time by default, and why: the one `time_dim` names
    /// ([`StoreOptions::time_dim`]), else the one its coordinates say is time (CF's
    /// `axis: T`, `standard_name: time`, date units, a datetime type), else one named `time`,
    /// `valid_time` or `date`.
    pub fn time_dim(&self) -> Option<&TimeDim> {
        self.time_dim.as_ref()
    }

    /// Checks that the variables `names` and the coordinates of their dimensions (1-D
    /// variables named after them) agree on every dimension's length, as xarray requires of
    /// a dataset. A Zarr group may hold unrelated arrays whose dimensions share names, so
    /// this is checked for the variables a pipeline uses, not when the store opens.
    pub fn check_dimension_lengths(&self, names: &[&str]) -> Result<()> {
        let chosen: Vec<&Variable> = names
            .iter()
            .filter_map(|name| self.variable(name).ok())
            .map(|variable| variable.as_ref())
            .collect();
        let coordinates = chosen.iter().flat_map(|variable| {
            variable.dims().iter().filter_map(|dim| {
                let coordinate = self.variable(dim).ok()?;
                (coordinate.dims() == [dim.as_str()]).then_some(coordinate.as_ref())
            })
        });
        let all: Vec<&Variable> = chosen.iter().copied().chain(coordinates).collect();
        check_dimension_lengths(&self.location.url, all)
    }

    /// Dimension lengths, by name, as the first variable that has each dimension gives them.
    pub fn dims(&self) -> BTreeMap<String, u64> {
        let mut dims = BTreeMap::new();
        for variable in &self.variables {
            for (name, length) in variable.dims().iter().zip(variable.shape()) {
                dims.entry(name.clone()).or_insert(*length);
            }
        }
        dims
    }
}

/// Dimension lengths must agree between `variables` (xarray refuses a dataset where they do
/// not; zarrpipe would otherwise read one of them short and call the rest missing).
fn check_dimension_lengths<'a>(
    url: &str,
    variables: impl IntoIterator<Item = &'a Variable>,
) -> Result<()> {
    let mut seen: BTreeMap<&str, (&str, u64)> = BTreeMap::new();
    for variable in variables {
        for (dim, &length) in variable.dims().iter().zip(variable.shape()) {
            let (first, first_length) = *seen
                .entry(dim.as_str())
                .or_insert((variable.name(), length));
            if first_length != length {
                return Err(Error::ConflictingDimension {
                    url: url.to_string(),
                    dim: dim.clone(),
                    variable: first.to_string(),
                    length: first_length,
                    other: variable.name().to_string(),
                    other_length: length,
                });
            }
        }
    }
    Ok(())
}

/// The time dimension a user named, which some variable must have.
fn chosen_time_dim(url: &str, variables: &[Variable], dim: &str) -> Result<TimeDim> {
    if variables
        .iter()
        .any(|variable| variable.axis(dim).is_some())
    {
        return Ok(TimeDim {
            name: dim.to_string(),
            reason: TimeDimReason::Chosen,
        });
    }
    let mut available: Vec<&str> = variables
        .iter()
        .flat_map(|variable| variable.dims().iter().map(String::as_str))
        .collect();
    available.sort();
    available.dedup();
    Err(Error::NoSuchTimeDim {
        url: url.to_string(),
        dim: dim.to_string(),
        available: available.join(", "),
    })
}

/// The dimension of a 1-D array of a datetime type (`datetime64`, which zarrpipe does not
/// read, but which still says which dimension is time).
fn datetime_dim(metadata: &zarrs::array::ArrayMetadata) -> Option<String> {
    let document = serde_json::to_value(metadata).ok()?;
    let data_type = document
        .get("data_type")
        .or_else(|| document.get("dtype"))?
        .to_string();
    let is_datetime = data_type.contains("datetime") || data_type.contains("M8");
    let dims = document
        .get("dimension_names")
        .or_else(|| document.pointer("/attributes/_ARRAY_DIMENSIONS"))?
        .as_array()?;
    match dims.as_slice() {
        [dim] if is_datetime => dim.as_str().map(str::to_string),
        _ => None,
    }
}

/// A store whose root is an array: name the variable after the store's last path segment.
fn root_array_name(url: &str) -> String {
    let last = url
        .trim_end_matches('/')
        .rsplit('/')
        .next()
        .unwrap_or("data");
    last.trim_end_matches(".zarr").to_string()
}

/// xarray's rule: a 1-D variable named after its dimension is a coordinate, and so is every
/// name listed in a variable's `coordinates` attribute. An array zarrpipe cannot read counts as
/// a coordinate when a readable variable names it as a dimension or lists it.
fn mark_coordinates(variables: &mut [Variable], unreadable: &mut [Unreadable]) {
    let listed: HashSet<String> = variables
        .iter()
        .filter_map(|variable| variable.attributes().get("coordinates")?.as_str())
        .flat_map(|names| names.split_whitespace().map(str::to_string))
        .collect();
    let dims: HashSet<&str> = variables
        .iter()
        .flat_map(|variable| variable.dims().iter().map(String::as_str))
        .collect();
    for array in unreadable.iter_mut() {
        array.is_coordinate = dims.contains(array.name.as_str()) || listed.contains(&array.name);
    }
    for variable in variables.iter_mut() {
        let is_index = variable.dims().len() == 1 && variable.dims()[0] == variable.name();
        if is_index || listed.contains(variable.name()) {
            variable.mark_coordinate();
        }
    }
}
