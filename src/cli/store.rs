//! Options for reaching a dataset's store, shared by every command that opens one.

use std::path::PathBuf;
use std::time::Duration;

use anyhow::{bail, Context};
use zarrpipe::store::{Dataset, StoreOptions};

#[derive(Clone, Debug, clap::Args)]
pub struct StoreArgs {
    /// An object-store option for cloud URLs, KEY=VALUE (repeatable): endpoint, region,
    /// anonymous=true, allow_http=true, access_key_id, ... Credentials also come from the
    /// usual AWS_*, GOOGLE_* and AZURE_* variables.
    #[arg(long = "store-option", value_name = "KEY=VALUE")]
    store_options: Vec<String>,
    /// Keep fetched chunks in this directory, so later runs read them locally.
    #[arg(long, value_name = "DIR")]
    cache_dir: Option<PathBuf>,
    /// Bound of the chunk cache, e.g. 500M, 20G (least recently used chunks go first).
    #[arg(long, default_value = "10G", value_name = "SIZE")]
    cache_size: String,
    /// Requests in flight at once to a remote store.
    #[arg(long, default_value_t = 64, value_name = "N")]
    max_requests: usize,
    /// Seconds allowed for one request before it is retried.
    #[arg(long, default_value_t = 30.0, value_name = "SECONDS")]
    timeout: f64,
    /// Retries of a failed request (throttling, 5xx, dropped connections, timeouts).
    #[arg(long, default_value_t = 5, value_name = "N")]
    retries: usize,
}

impl StoreArgs {
    pub fn options(&self) -> anyhow::Result<StoreOptions> {
        let mut options = StoreOptions::new()
            .parse_options(&self.store_options)?
            .max_requests(self.max_requests)
            .timeout(Duration::from_secs_f64(self.timeout.max(0.001)))
            .retries(self.retries);
        if let Some(dir) = &self.cache_dir {
            options = options.cache(dir, parse_size(&self.cache_size)?);
        }
        Ok(options)
    }

    /// Opens the dataset at `url` with these options.
    pub async fn open(&self, url: &str) -> anyhow::Result<Dataset> {
        Dataset::open_with(url, &self.options()?)
            .await
            .with_context(|| format!("cannot open {url}"))
    }
}

/// `123`, `500K`, `20M`, `10G`, `1T` (powers of 1024; a trailing `B` or `iB` is allowed).
pub(crate) fn parse_size(text: &str) -> anyhow::Result<u64> {
    let upper = text.trim().to_ascii_uppercase();
    let trimmed = upper.trim_end_matches("IB").trim_end_matches('B');
    let (number, shift) = match trimmed.chars().last() {
        Some('K') => (&trimmed[..trimmed.len() - 1], 10),
        Some('M') => (&trimmed[..trimmed.len() - 1], 20),
        Some('G') => (&trimmed[..trimmed.len() - 1], 30),
        Some('T') => (&trimmed[..trimmed.len() - 1], 40),
        _ => (trimmed, 0),
    };
    let Ok(number) = number.trim().parse::<f64>() else {
        bail!("cannot read the size `{text}` (expected e.g. 500M or 20G)");
    };
    Ok((number * (1u64 << shift) as f64) as u64)
}

#[cfg(test)]
mod tests {
    use super::parse_size;

    #[test]
    fn sizes_parse_with_binary_suffixes() {
        assert_eq!(parse_size("123").unwrap(), 123);
        assert_eq!(parse_size("2K").unwrap(), 2048);
        assert_eq!(parse_size("1.5G").unwrap(), 3 << 29);
        assert_eq!(parse_size("10GiB").unwrap(), 10 << 30);
        assert!(parse_size("lots").is_err());
    }
}
