//! Turning a dataset URL or path into an object store rooted at the dataset.

use std::path::PathBuf;
use std::sync::Arc;

use object_store::local::LocalFileSystem;
use object_store::memory::InMemory;
use object_store::ObjectStore;

use crate::cache::DiskCache;
use crate::cloud::{is_cloud_scheme, remote_store};
use crate::io::StoreIo;
use crate::{Error, Result, StoreOptions};

/// An object store whose root is the dataset's root, and the URL it came from.
#[derive(Clone, Debug)]
pub struct Location {
    /// The URL or path the dataset was opened from (for a wrapped store, its display name).
    pub url: String,
    /// The object store, rooted at the dataset's root.
    pub store: Arc<dyn ObjectStore>,
    pub(crate) io: Arc<StoreIo>,
    /// For errors: where a remote store's requests go, with which credentials (S3).
    pub(crate) context: Option<String>,
}

impl Location {
    /// Parses `url` with default options (see [`Location::parse_with`]).
    pub fn parse(url: &str) -> Result<Self> {
        Self::parse_with(url, &StoreOptions::default())
    }

    /// Parses `url`: a local path or `file://` URL, `memory://` (an empty in-memory store),
    /// `http://` / `https://`, or a cloud bucket (`s3://`, `gs://`, `az://`, `abfs://`) with
    /// credentials from the environment and `options` on top. The scheme picks the backend.
    pub fn parse_with(url: &str, options: &StoreOptions) -> Result<Self> {
        let local = |path: &str| -> Result<(Arc<dyn ObjectStore>, Option<PathBuf>)> {
            let store = local_store(url, path)?;
            Ok((store, std::fs::canonicalize(path).ok()))
        };
        let (store, local_root): (Arc<dyn ObjectStore>, Option<PathBuf>) = match url
            .split_once("://")
        {
            None => local(url)?,
            Some(("file", path)) => local(path)?,
            Some(("memory", _)) => (Arc::new(InMemory::new()), None),
            Some((scheme, _))
                if scheme == "http" || scheme == "https" || is_cloud_scheme(scheme) =>
            {
                let (store, context) = remote_store(url, options)?;
                let mut location = Self::with_options(url, store, options, true, None)?;
                location.context = context;
                return Ok(location);
            }
            Some(_) => {
                return Err(Error::UnsupportedUrl {
                    url: url.to_string(),
                    reason:
                        "expected a path, file://, memory://, http(s)://, s3://, gs:// or az://",
                })
            }
        };
        Self::with_options(url, store, options, false, local_root)
    }

    /// Wraps an existing object store (rooted at the dataset) under a display name.
    pub fn from_store(url: impl Into<String>, store: Arc<dyn ObjectStore>) -> Self {
        let url = url.into();
        let io = StoreIo::new(
            url.clone(),
            store.clone(),
            StoreOptions::default(),
            None,
            false,
            None,
        );
        Self {
            url,
            store,
            io: Arc::new(io),
            context: None,
        }
    }

    /// Wraps an existing object store with options (retries, request limit, cache).
    pub fn from_store_with(
        url: impl Into<String>,
        store: Arc<dyn ObjectStore>,
        options: &StoreOptions,
    ) -> Result<Self> {
        Self::with_options(&url.into(), store, options, true, None)
    }

    fn with_options(
        url: &str,
        store: Arc<dyn ObjectStore>,
        options: &StoreOptions,
        remote: bool,
        local_root: Option<PathBuf>,
    ) -> Result<Self> {
        let cache = match &options.cache {
            Some(cache) => Some(Arc::new(DiskCache::open(&cache.dir, cache.max_bytes)?)),
            None => None,
        };
        let io = StoreIo::new(
            url.to_string(),
            store.clone(),
            options.clone(),
            cache,
            remote,
            local_root,
        );
        Ok(Self {
            url: url.to_string(),
            store,
            io: Arc::new(io),
            context: None,
        })
    }
}

fn local_store(url: &str, path: &str) -> Result<Arc<dyn ObjectStore>> {
    let path = std::path::Path::new(path);
    if path.exists() && !path.is_dir() {
        return Err(Error::NotADirectory {
            url: url.to_string(),
        });
    }
    if !path.is_dir() {
        return Err(Error::StoreNotFound {
            url: url.to_string(),
        });
    }
    let store = LocalFileSystem::new_with_prefix(path).map_err(|source| Error::OpenStore {
        url: url.to_string(),
        source,
    })?;
    Ok(Arc::new(store))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn picks_backend_by_scheme() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().to_str().unwrap();
        assert!(Location::parse(path).is_ok());
        assert!(Location::parse(&format!("file://{path}")).is_ok());
        assert!(Location::parse("memory://").is_ok());
        assert!(Location::parse("http://127.0.0.1:1/data.zarr").is_ok());
        let anonymous = StoreOptions::new().option("anonymous", "true");
        assert!(Location::parse_with("s3://bucket/data.zarr", &anonymous).is_ok());
        assert!(matches!(
            Location::parse("/no/such/store.zarr"),
            Err(Error::StoreNotFound { .. })
        ));
        assert!(matches!(
            Location::parse("ftp://x/y"),
            Err(Error::UnsupportedUrl { .. })
        ));
    }
}
