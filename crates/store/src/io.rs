//! Every read of a dataset's objects goes through [`StoreIo::get`]: the request limit, the
//! local cache, retries of truncated bodies, the overall deadline and the counters.

use std::collections::HashMap;
use std::ops::Range;
use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use bytes::Bytes;
use object_store::path::Path;
use object_store::{GetOptions, GetRange, ObjectStore};
use tokio::sync::Semaphore;

use crate::cache::{DiskCache, Lookup};
use crate::local_read::{key_path, local_error, read_local, LocalRead};
use crate::ranges::ShardIndex;
use crate::{ReadMemory, StoreOptions};

/// Why a read failed, after its retries.
#[derive(Debug)]
pub(crate) enum GetFailure {
    Store(object_store::Error),
    /// The read, retries included, took longer than [`StoreOptions::deadline`].
    Timeout(Duration),
}

/// Counters of the requests a dataset made and what they returned.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, serde::Serialize)]
pub struct IoStats {
    /// GET requests sent (retries included, cache hits not).
    pub requests: u64,
    /// Bytes those requests returned.
    pub bytes_fetched: u64,
    /// Reads served by the local cache.
    pub cache_hits: u64,
    /// Bytes those cache hits returned.
    pub cache_bytes: u64,
    /// Reads retried after a truncated or failed body.
    pub retries: u64,
    /// Stored bytes of the chunks (or inner chunks) that reads asked for: the least a
    /// reader could fetch. `bytes_fetched / bytes_needed` is the read amplification.
    pub bytes_needed: u64,
}

#[derive(Debug, Default)]
struct Counters {
    requests: AtomicU64,
    bytes_fetched: AtomicU64,
    cache_hits: AtomicU64,
    cache_bytes: AtomicU64,
    retries: AtomicU64,
    bytes_needed: AtomicU64,
}

fn add(counter: &AtomicU64, value: u64) {
    counter.fetch_add(value, Ordering::Relaxed);
}

/// The object store of a dataset with the options it was opened with.
#[derive(Debug)]
pub(crate) struct StoreIo {
    pub url: String,
    pub store: Arc<dyn ObjectStore>,
    pub options: StoreOptions,
    cache: Option<Arc<DiskCache>>,
    limiter: Option<Arc<Semaphore>>,
    /// A local store's root directory: reads into [`ReadMemory`] go straight to its files.
    local_root: Option<PathBuf>,
    /// Shard indexes read or being read, by shard key: batches in flight at once that need
    /// the same shard wait for one read of its index.
    indexes: Mutex<HashMap<String, Arc<IndexCell>>>,
    counters: Counters,
}

pub(crate) type IndexCell = tokio::sync::OnceCell<Option<Arc<ShardIndex>>>;

/// Shard indexes kept in memory at most (about 100 MB of small shards' indexes).
const MAX_INDEXES: usize = 1 << 20;

impl StoreIo {
    pub(crate) fn new(
        url: String,
        store: Arc<dyn ObjectStore>,
        options: StoreOptions,
        cache: Option<Arc<DiskCache>>,
        remote: bool,
        local_root: Option<PathBuf>,
    ) -> Self {
        let limiter = remote.then(|| Arc::new(Semaphore::new(options.max_requests.max(1))));
        Self {
            url,
            store,
            options,
            cache,
            limiter,
            local_root,
            indexes: Mutex::new(HashMap::new()),
            counters: Counters::default(),
        }
    }

    /// Whether chunk reads land in a [`ReadMemory`] (a local directory without a cache): other
    /// stores' reads ignore it, so none need be set aside for them.
    pub(crate) fn reads_into_memory(&self) -> bool {
        self.local_root.is_some() && self.cache.is_none()
    }

    pub(crate) fn stats(&self) -> IoStats {
        let load = |counter: &AtomicU64| counter.load(Ordering::Relaxed);
        let c = &self.counters;
        IoStats {
            requests: load(&c.requests),
            bytes_fetched: load(&c.bytes_fetched),
            cache_hits: load(&c.cache_hits),
            cache_bytes: load(&c.cache_bytes),
            retries: load(&c.retries),
            bytes_needed: load(&c.bytes_needed),
        }
    }

    /// The file of `key` when this store's reads go straight to local files.
    pub(crate) fn local_path(&self, key: &str) -> Option<PathBuf> {
        match (&self.local_root, self.reads_into_memory()) {
            (Some(root), true) => key_path(root, key),
            _ => None,
        }
    }

    /// A whole chunk file of `bytes` read by its decoder (0: not there), counted as the fetch
    /// stage counts its reads.
    pub(crate) fn count_local_read(&self, bytes: u64) {
        add(&self.counters.requests, 1);
        add(&self.counters.bytes_fetched, bytes);
        self.add_needed(bytes);
    }

    pub(crate) fn add_needed(&self, bytes: u64) {
        add(&self.counters.bytes_needed, bytes);
    }

    /// The cell holding the index of the shard at `key` (`None` in it: no such shard), read
    /// at most once (a failed read leaves it empty for the next try).
    pub(crate) fn index_cell(&self, key: &str) -> Arc<IndexCell> {
        let mut indexes = self.indexes.lock().unwrap_or_else(PoisonError::into_inner);
        if indexes.len() >= MAX_INDEXES && !indexes.contains_key(key) {
            indexes.clear();
        }
        indexes.entry(key.to_string()).or_default().clone()
    }

    /// Like [`Self::get`], into a buffer of `memory` when the store is a local directory
    /// without a cache (elsewhere, or when `memory` has no buffer to give, as `get`).
    pub(crate) async fn get_into(
        &self,
        key: &str,
        range: Option<GetRange>,
        memory: Option<&Arc<dyn ReadMemory>>,
    ) -> Result<Option<Bytes>, GetFailure> {
        let direct = memory.zip(self.local_path(key));
        let Some((memory, path)) = direct else {
            return self.get(key, range).await;
        };
        let (memory, read_range) = (memory.clone(), range.clone());
        let read =
            tokio::task::spawn_blocking(move || read_local(&path, read_range.as_ref(), &*memory))
                .await
                .unwrap_or_else(|panic| Err(std::io::Error::other(panic.to_string())));
        // A declined read is counted by the object store's read that follows.
        if !matches!(read, Ok(LocalRead::Declined)) {
            add(&self.counters.requests, 1);
        }
        match read {
            Ok(LocalRead::Read(bytes)) => {
                add(&self.counters.bytes_fetched, bytes.len() as u64);
                Ok(Some(bytes))
            }
            Ok(LocalRead::Missing) => Ok(None),
            Ok(LocalRead::Declined) => self.get(key, range).await,
            Err(source) => Err(GetFailure::Store(local_error(source))),
        }
    }

    /// Reads an object or a range of it through the cache; `None` when the object does not
    /// exist. With a cache, a missing object is remembered as missing too.
    pub(crate) async fn get(
        &self,
        key: &str,
        range: Option<GetRange>,
    ) -> Result<Option<Bytes>, GetFailure> {
        let Some(cache) = &self.cache else {
            return self.get_uncached(key, range).await;
        };
        let id = cache_id(&self.url, key, range.as_ref());
        let lookup = {
            let (cache, id) = (cache.clone(), id.clone());
            tokio::task::spawn_blocking(move || cache.get_blocking(&id))
                .await
                .unwrap_or(Lookup::Miss)
        };
        if let Lookup::Hit(entry) = lookup {
            // One flag byte: 1 = present, 0 = known missing.
            if let Some((&flag, _)) = entry.split_first() {
                add(&self.counters.cache_hits, 1);
                add(&self.counters.cache_bytes, entry.len() as u64 - 1);
                return Ok((flag == 1).then(|| entry.slice(1..)));
            }
        }
        let bytes = self.get_uncached(key, range).await?;
        let mut entry = Vec::with_capacity(1 + bytes.as_ref().map_or(0, Bytes::len));
        entry.push(bytes.is_some() as u8);
        entry.extend_from_slice(bytes.as_deref().unwrap_or_default());
        let cache = cache.clone();
        let _ = tokio::task::spawn_blocking(move || cache.put_blocking(&id, &entry)).await;
        Ok(bytes)
    }

    async fn get_uncached(
        &self,
        key: &str,
        range: Option<GetRange>,
    ) -> Result<Option<Bytes>, GetFailure> {
        // A deadline past any run's length is as good as none, and cannot overflow a clock.
        let budget = self.options.deadline().min(Duration::from_secs(1 << 32));
        // Remote stores only (the request limiter is theirs).
        let deadline = self
            .limiter
            .is_some()
            .then(|| tokio::time::Instant::now() + budget);
        let path = object_path(key).map_err(GetFailure::Store)?;
        if let Some(root) = &self.local_root {
            check_plain_file(root, key)?;
        }
        let mut backoff = self.options.initial_backoff;
        let mut attempt = 0;
        loop {
            let _permit = match &self.limiter {
                Some(limiter) => Some(
                    limiter
                        .acquire()
                        .await
                        .expect("the limiter is never closed"),
                ),
                None => None,
            };
            add(&self.counters.requests, 1);
            let options = GetOptions {
                range: range.clone(),
                ..GetOptions::default()
            };
            // Errors of the request itself were retried by object_store's client already;
            // an error reading the body (a truncated or dropped body) is retried here.
            let read = async {
                let result = self.store.get_opts(&path, options).await.map_err(Err)?;
                result.bytes().await.map_err(Ok)
            };
            // Local stores need no deadline (and so no timer: they also work on runtimes
            // without one).
            let read = match deadline {
                Some(deadline) => tokio::time::timeout_at(deadline, read).await,
                None => Ok(read.await),
            };
            match read {
                Err(_) => return Err(GetFailure::Timeout(budget)),
                Ok(Ok(bytes)) => {
                    add(&self.counters.bytes_fetched, bytes.len() as u64);
                    return Ok(Some(bytes));
                }
                Ok(Err(Err(object_store::Error::NotFound { .. }))) => return Ok(None),
                Ok(Err(Err(source))) => return Err(GetFailure::Store(source)),
                Ok(Err(Ok(source))) => {
                    if attempt >= self.options.retries || deadline.is_none() {
                        return Err(GetFailure::Store(source));
                    }
                }
            }
            attempt += 1;
            add(&self.counters.retries, 1);
            tokio::time::sleep(backoff).await;
            backoff = (backoff * 2).min(self.options.max_backoff);
        }
    }
}

/// The object path of a store key, taken as it is. `Path::from` would percent-encode what
/// object_store reserves (`%`, `#`, `[`, non-ASCII letters), and its backends then read
/// another key than the one zarr-python wrote (`temp%C3%A9rature/c/0` for `température/c/0`).
pub(crate) fn object_path(key: &str) -> Result<Path, object_store::Error> {
    Path::parse(key).map_err(|source| object_store::Error::InvalidPath { source })
}

/// A local store's key must be a regular file, or nothing (a directory too reads as no
/// object, as object_store reads it): object_store would block for ever reading a FIFO.
fn check_plain_file(root: &std::path::Path, key: &str) -> Result<(), GetFailure> {
    let Some(path) = key_path(root, key) else {
        return Ok(());
    };
    match std::fs::metadata(&path) {
        Ok(metadata) if !metadata.is_file() && !metadata.is_dir() => {
            Err(GetFailure::Store(object_store::Error::Generic {
                store: "LocalFileSystem",
                source: format!("{} is not a regular file", path.display()).into(),
            }))
        }
        _ => Ok(()),
    }
}

/// A cache entry's id: the dataset, the key and the byte range.
fn cache_id(url: &str, key: &str, range: Option<&GetRange>) -> String {
    match range {
        None => format!("{url}#{key}"),
        Some(GetRange::Bounded(Range { start, end })) => format!("{url}#{key}@{start}-{end}"),
        Some(GetRange::Offset(start)) => format!("{url}#{key}@{start}-"),
        Some(GetRange::Suffix(length)) => format!("{url}#{key}@-{length}"),
    }
}
