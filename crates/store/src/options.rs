//! How a dataset's store is reached (object_store options, retries and timeouts, request
//! limits, range merging, the local chunk cache) and how it is read (xarray's `mask_and_scale`,
//! the time dimension).

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::Duration;

/// Options for opening a dataset's store, on top of what the environment gives (`AWS_*`,
/// `GOOGLE_*`, `AZURE_*` variables are read by the cloud backends).
///
/// ```
/// use std::time::Duration;
/// use zarrpipe_store::StoreOptions;
///
/// let options = StoreOptions::new()
///     .option("endpoint", "http://127.0.0.1:9000") // an S3-compatible server
///     .option("anonymous", "true")                  // a public bucket: no signing
///     .timeout(Duration::from_secs(10))
///     .retries(3)
///     .cache("/tmp/zarrpipe-cache", 10 << 30);
/// assert_eq!(options.options["endpoint"], "http://127.0.0.1:9000");
/// ```
#[derive(Clone, Debug, PartialEq)]
pub struct StoreOptions {
    /// object_store configuration keys and values (`endpoint`, `region`, `allow_http`,
    /// `access_key_id`, `service_account`, `account_name`, ...), or `anonymous=true` for
    /// unsigned requests to public buckets. Unknown keys are an error naming the key.
    pub options: BTreeMap<String, String>,
    /// Retries of one request after throttling (429, 503 SlowDown), 5xx answers, dropped
    /// connections, timeouts and truncated bodies (default 5).
    pub retries: usize,
    /// The first retry waits this long; each next one waits twice as long, up to
    /// `max_backoff` (default 100 ms and 5 s).
    pub initial_backoff: Duration,
    /// The longest wait between two retries.
    pub max_backoff: Duration,
    /// Time allowed for one HTTP request, body included (default 30 s).
    pub timeout: Duration,
    /// Requests in flight at once over every batch of a remote store (default 64; local
    /// stores are not limited).
    pub max_requests: usize,
    /// Byte ranges of one shard closer than this are read as one request (default 0: only
    /// ranges that touch are merged, so nothing unneeded is read).
    pub merge_gap: u64,
    /// Keep fetched chunks on local disk, so later epochs read them locally.
    pub cache: Option<CacheOptions>,
    /// Decode CF packing and missing values as xarray's `mask_and_scale` does (default
    /// true): `scale_factor`, `add_offset`, `_FillValue`, `missing_value`, `_Unsigned`.
    /// False gives the stored values.
    pub mask_and_scale: bool,
    /// The dimension to iterate as time (default `None`: found by its meaning, see
    /// [`Dataset::time_dim`](crate::Dataset::time_dim)).
    pub time_dim: Option<String>,
}

/// A bounded on-disk chunk cache: least recently used entries go first.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CacheOptions {
    /// The directory the cached chunks are kept in.
    pub dir: PathBuf,
    /// The most bytes the cache holds before evicting.
    pub max_bytes: u64,
}

impl Default for StoreOptions {
    fn default() -> Self {
        Self {
            options: BTreeMap::new(),
            retries: 5,
            initial_backoff: Duration::from_millis(100),
            max_backoff: Duration::from_secs(5),
            timeout: Duration::from_secs(30),
            max_requests: 64,
            merge_gap: 0,
            cache: None,
            mask_and_scale: true,
            time_dim: None,
        }
    }
}

impl StoreOptions {
    /// The defaults (see the fields).
    pub fn new() -> Self {
        Self::default()
    }

    /// Sets one object_store option (see [`StoreOptions::options`]).
    pub fn option(mut self, key: impl Into<String>, value: impl Into<String>) -> Self {
        self.options.insert(key.into(), value.into());
        self
    }

    /// Sets options from `key=value` strings, as the command line gives them.
    pub fn parse_options<I: IntoIterator<Item = S>, S: AsRef<str>>(
        mut self,
        pairs: I,
    ) -> Result<Self, crate::Error> {
        for pair in pairs {
            let pair = pair.as_ref();
            let (key, value) =
                pair.split_once('=')
                    .ok_or_else(|| crate::Error::BadStoreOption {
                        option: pair.to_string(),
                    })?;
            self.options.insert(key.trim().into(), value.trim().into());
        }
        Ok(self)
    }

    /// Sets [`StoreOptions::retries`].
    pub fn retries(mut self, retries: usize) -> Self {
        self.retries = retries;
        self
    }

    /// Sets the first and the longest wait between retries (`max` is at least `initial`).
    pub fn backoff(mut self, initial: Duration, max: Duration) -> Self {
        self.initial_backoff = initial;
        self.max_backoff = max.max(initial);
        self
    }

    /// Sets [`StoreOptions::timeout`].
    pub fn timeout(mut self, timeout: Duration) -> Self {
        self.timeout = timeout;
        self
    }

    /// Sets [`StoreOptions::max_requests`] (at least 1).
    pub fn max_requests(mut self, requests: usize) -> Self {
        self.max_requests = requests.max(1);
        self
    }

    /// Sets [`StoreOptions::merge_gap`].
    pub fn merge_gap(mut self, bytes: u64) -> Self {
        self.merge_gap = bytes;
        self
    }

    /// Caches fetched chunks under `dir`, at most `max_bytes` of them.
    pub fn cache(mut self, dir: impl Into<PathBuf>, max_bytes: u64) -> Self {
        self.cache = Some(CacheOptions {
            dir: dir.into(),
            max_bytes,
        });
        self
    }

    /// Sets [`StoreOptions::mask_and_scale`].
    pub fn mask_and_scale(mut self, decode: bool) -> Self {
        self.mask_and_scale = decode;
        self
    }

    /// Sets [`StoreOptions::time_dim`].
    pub fn time_dim(mut self, dim: impl Into<String>) -> Self {
        self.time_dim = Some(dim.into());
        self
    }

    /// The longest one fetch may take, retries and backoff included: past it the fetch
    /// fails with [`Error::FetchTimeout`](crate::Error::FetchTimeout), so a hung server
    /// never hangs the pipeline.
    pub fn deadline(&self) -> Duration {
        let attempts = u32::try_from(self.retries)
            .unwrap_or(u32::MAX)
            .saturating_add(1);
        let per_attempt = self.timeout.saturating_add(self.max_backoff);
        per_attempt.saturating_mul(attempts)
    }
}
