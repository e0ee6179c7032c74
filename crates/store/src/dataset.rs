use std::collections::{BTreeMap, HashSet};
use std::sync::Arc;

use object_store::ObjectStore;
use serde_json::{Map, Value};
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
        for (path, metadata) in hierarchy.arrays {
            let name = if path.is_empty() {
                root_array_name(&location.url)
            } else {
                path
            };
            let variable = metadata.and_then(|metadata| {
                Variable::new(&location, name.clone(), storage.clone(), metadata)
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
        mark_coordinates(&mut variables, &mut unreadable);
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
