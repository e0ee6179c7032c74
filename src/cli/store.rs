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
    /// Give the stored values, not CF-decoded ones (xarray's `mask_and_scale=False`):
    /// `scale_factor`, `add_offset`, `_FillValue`, `missing_value` and `_Unsigned` ignored.
    #[arg(long)]
    raw_values: bool,
    /// The dimension to iterate as time (default: found by its coordinates, as `info` says).
    #[arg(long, value_name = "DIM")]
    time_dim: Option<String>,
}

impl StoreArgs {
    pub fn options(&self) -> anyhow::Result<StoreOptions> {
        let mut options = StoreOptions::new()
            .parse_options(&self.store_options)?
            .max_requests(self.max_requests)
            .timeout(seconds("--timeout", self.timeout)?.max(Duration::from_millis(1)))
            .retries(self.retries)
            .mask_and_scale(!self.raw_values);
        if let Some(dim) = &self.time_dim {
            options = options.time_dim(dim);
        }
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

/// A number of seconds given on the command line as a duration: a time past any run's
/// length (even `inf`) waits for ever; a negative or NaN one is an error naming the flag.
pub(crate) fn seconds(flag: &str, value: f64) -> anyhow::Result<Duration> {
    if value.is_nan() || value < 0.0 {
        bail!("{flag} {value}: expected a number of seconds, 0 or more");
    }
    Ok(Duration::try_from_secs_f64(value).unwrap_or(Duration::MAX))
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
    let number = match number.trim().parse::<f64>() {
        Ok(number) if number.is_finite() && number >= 0.0 => number,
        _ => bail!("cannot read the size `{text}` (expected e.g. 500M or 20G)"),
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
        assert!(parse_size("-1G").is_err());
        assert!(parse_size("inf").is_err());
    }

    #[test]
    fn seconds_never_panic() {
        use std::time::Duration;
        assert_eq!(super::seconds("--timeout", 1e30).unwrap(), Duration::MAX);
        assert_eq!(
            super::seconds("--timeout", 2.5).unwrap(),
            Duration::from_millis(2500)
        );
        assert!(super::seconds("--timeout", -1.0).is_err());
        assert!(super::seconds("--timeout", f64::NAN).is_err());
    }
}
