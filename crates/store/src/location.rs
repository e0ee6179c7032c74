//! Turning a dataset URL or path into an object store rooted at the dataset.

use std::sync::Arc;

use object_store::http::HttpBuilder;
use object_store::local::LocalFileSystem;
use object_store::memory::InMemory;
use object_store::{ClientOptions, ObjectStore};

use crate::{Error, Result};

/// An object store whose root is the dataset's root, and the URL it came from.
#[derive(Clone, Debug)]
pub struct Location {
    pub url: String,
    pub store: Arc<dyn ObjectStore>,
}

impl Location {
    /// Parses `url`: a local path or `file://` URL, `memory://` (an empty in-memory store),
    /// or `http://` / `https://`. The scheme picks the backend.
    pub fn parse(url: &str) -> Result<Self> {
        let store: Arc<dyn ObjectStore> = match url.split_once("://") {
            None => local_store(url, url)?,
            Some(("file", path)) => local_store(url, path)?,
            Some(("memory", _)) => Arc::new(InMemory::new()),
            Some((scheme @ ("http" | "https"), _)) => Arc::new(
                HttpBuilder::new()
                    .with_url(url.trim_end_matches('/'))
                    // The user asked for http:// explicitly: don't insist on TLS.
                    .with_client_options(ClientOptions::new().with_allow_http(scheme == "http"))
                    .build()
                    .map_err(|source| Error::OpenStore {
                        url: url.to_string(),
                        source,
                    })?,
            ),
            Some(("s3" | "gs" | "az" | "abfs", _)) => {
                return Err(Error::UnsupportedUrl {
                    url: url.to_string(),
                    reason: "cloud object stores are not built into this version yet; \
                             serve the store over HTTP(S) or copy it locally",
                })
            }
            Some(_) => {
                return Err(Error::UnsupportedUrl {
                    url: url.to_string(),
                    reason: "expected a path, file://, memory://, http:// or https://",
                })
            }
        };
        Ok(Self {
            url: url.to_string(),
            store,
        })
    }

    /// Wraps an existing object store (rooted at the dataset) under a display name.
    pub fn from_store(url: impl Into<String>, store: Arc<dyn ObjectStore>) -> Self {
        Self {
            url: url.into(),
            store,
        }
    }
}

fn local_store(url: &str, path: &str) -> Result<Arc<dyn ObjectStore>> {
    let path = std::path::Path::new(path);
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
