use std::collections::{BTreeMap, HashSet};
use std::sync::Arc;

use object_store::ObjectStore;
use serde_json::{Map, Value};
use zarrs::array::ArrayMetadata;
use zarrs_object_store::AsyncObjectStore;

use crate::location::Location;
use crate::metadata::read_hierarchy;
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
    /// Arrays zarrpipe cannot read (unsupported codec or data type), kept so that asking for
    /// one gives its error while the rest of the dataset stays usable.
    unreadable: Vec<(String, ArrayMetadata)>,
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

    /// The requests made so far for this dataset (metadata and chunks), and what they read.
    pub fn io_stats(&self) -> IoStats {
        self.location.io.stats()
    }

    async fn open_location(location: Location) -> Result<Self> {
        let hierarchy = read_hierarchy(&location).await?;
        let storage = Arc::new(AsyncObjectStore::new(location.store.clone()));
        let mut variables = Vec::with_capacity(hierarchy.arrays.len());
        let mut unreadable = Vec::new();
        for (path, metadata) in hierarchy.arrays {
            let name = if path.is_empty() {
                root_array_name(&location.url)
            } else {
                path
            };
            match Variable::new(&location, name.clone(), storage.clone(), metadata.clone()) {
                Ok(variable) => variables.push(variable),
                Err(Error::InvalidArray { .. } | Error::UnsupportedDataType { .. }) => {
                    unreadable.push((name, metadata))
                }
                Err(error) => return Err(error),
            }
        }
        mark_coordinates(&mut variables);
        Ok(Self {
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

    /// The names of the data variables, sorted: the default selection of pipelines.
    pub fn data_variable_names(&self) -> Vec<String> {
        self.data_variables()
            .map(|variable| variable.name().to_string())
            .collect()
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
    pub fn unreadable(&self) -> Vec<(String, Error)> {
        let names = self.unreadable.iter().map(|(name, _)| name);
        names
            .filter_map(|name| Some((name.clone(), self.unreadable_error(name)?)))
            .collect()
    }

    /// Opening the array again gives its error (errors are not `Clone`).
    fn unreadable_error(&self, name: &str) -> Option<Error> {
        let (_, metadata) = self
            .unreadable
            .iter()
            .find(|(unreadable, _)| unreadable == name)?;
        let storage = Arc::new(AsyncObjectStore::new(self.location.store.clone()));
        Variable::new(&self.location, name.to_string(), storage, metadata.clone()).err()
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
/// name listed in a variable's `coordinates` attribute.
fn mark_coordinates(variables: &mut [Variable]) {
    let listed: HashSet<String> = variables
        .iter()
        .filter_map(|variable| variable.attributes().get("coordinates")?.as_str())
        .flat_map(|names| names.split_whitespace().map(str::to_string))
        .collect();
    for variable in variables.iter_mut() {
        let is_index = variable.dims().len() == 1 && variable.dims()[0] == variable.name();
        if is_index || listed.contains(variable.name()) {
            variable.mark_coordinate();
        }
    }
}
