//! Object stores for `s3://`, `gs://`, `az://` and `http(s)://` URLs: credentials from the
//! environment as each cloud's tools read them, options on top, retries and timeouts from
//! [`StoreOptions`], rooted at the URL's path.

use std::sync::Arc;

use object_store::aws::{AmazonS3Builder, AmazonS3ConfigKey};
use object_store::azure::{AzureConfigKey, MicrosoftAzureBuilder};
use object_store::gcp::{GoogleCloudStorageBuilder, GoogleConfigKey};
use object_store::http::HttpBuilder;
use object_store::path::Path;
use object_store::prefix::PrefixStore;
use object_store::{BackoffConfig, ClientConfigKey, ObjectStore, RetryConfig};

use crate::{Error, Result, StoreOptions};

/// The schemes served by a cloud backend.
pub(crate) fn is_cloud_scheme(scheme: &str) -> bool {
    matches!(
        scheme,
        "s3" | "s3a" | "gs" | "gcs" | "az" | "azure" | "abfs" | "abfss" | "adl"
    )
}

/// Where an S3 store's requests go and with which credentials, for errors: a failed request
/// names the endpoint, and a store without credentials says so rather than showing only the
/// instance metadata service's refusal.
fn s3_context(builder: &AmazonS3Builder, anonymous: bool) -> String {
    let value = |key| builder.get_config_value(&key).filter(|v| !v.is_empty());
    let region = value(AmazonS3ConfigKey::Region).unwrap_or_else(|| "us-east-1".into());
    let endpoint = match value(AmazonS3ConfigKey::Endpoint) {
        Some(endpoint) => format!("endpoint {endpoint}"),
        None => format!("AWS's endpoint for region {region}"),
    };
    let env = |name: &str| std::env::var_os(name).is_some_and(|v| !v.is_empty());
    let credentials = if anonymous {
        "no credentials (anonymous=true: unsigned requests)"
    } else if value(AmazonS3ConfigKey::AccessKeyId).is_some() {
        "an access key (AWS_ACCESS_KEY_ID or --store-option access_key_id)"
    } else if env("AWS_WEB_IDENTITY_TOKEN_FILE") {
        "a web identity token (AWS_WEB_IDENTITY_TOKEN_FILE)"
    } else if env("AWS_CONTAINER_CREDENTIALS_RELATIVE_URI")
        || env("AWS_CONTAINER_CREDENTIALS_FULL_URI")
    {
        "the container's credentials (AWS_CONTAINER_CREDENTIALS_*)"
    } else {
        "none given (no AWS_ACCESS_KEY_ID / AWS_SECRET_ACCESS_KEY, no --store-option access_key_id), so they were asked of the EC2 instance metadata service, which refuses or is absent outside EC2; for a public bucket pass --store-option anonymous=true"
    };
    format!("S3 at {endpoint}, credentials: {credentials}")
}

/// Builds the store for a remote URL, rooted at the URL's path; with it, for S3, where its
/// requests go and with which credentials (see [`s3_context`]).
pub(crate) fn remote_store(
    url: &str,
    options: &StoreOptions,
) -> Result<(Arc<dyn ObjectStore>, Option<String>)> {
    let mut context = None;
    let parsed = url::Url::parse(url).map_err(|source| Error::BadUrl {
        url: url.to_string(),
        source,
    })?;
    let retry = RetryConfig {
        backoff: BackoffConfig {
            init_backoff: options.initial_backoff,
            max_backoff: options.max_backoff,
            base: 2.0,
        },
        max_retries: options.retries,
        retry_timeout: options.deadline(),
    };
    let timeout = format!("{}ms", options.timeout.as_millis());
    let anonymous = options
        .options
        .get("anonymous")
        .is_some_and(|value| matches!(value.as_str(), "true" | "1" | "yes"));
    let user_options = options
        .options
        .iter()
        .filter(|(key, _)| key.as_str() != "anonymous");
    let open_error = |source| Error::OpenStore {
        url: url.to_string(),
        source,
    };
    let option_error = |key: &str, source| Error::StoreOption {
        url: url.to_string(),
        key: key.to_string(),
        source,
    };
    let scheme = parsed.scheme();
    let (store, prefix): (Arc<dyn ObjectStore>, &str) = match scheme {
        "s3" | "s3a" => {
            let mut builder = AmazonS3Builder::from_env()
                .with_url(url)
                .with_retry(retry)
                .with_config(
                    AmazonS3ConfigKey::Client(ClientConfigKey::Timeout),
                    &timeout,
                );
            for (key, value) in user_options {
                let config = key.parse().map_err(|e| option_error(key, e))?;
                builder = builder.with_config(config, value);
            }
            if anonymous {
                builder = builder.with_skip_signature(true);
            }
            // An S3-compatible server at an http:// endpoint: plain HTTP was asked for.
            let endpoint = builder.get_config_value(&AmazonS3ConfigKey::Endpoint);
            context = Some(s3_context(&builder, anonymous));
            if endpoint.is_some_and(|endpoint| endpoint.starts_with("http://")) {
                builder = builder.with_allow_http(true);
            }
            (
                Arc::new(builder.build().map_err(open_error)?),
                parsed.path(),
            )
        }
        "gs" | "gcs" => {
            let mut builder = GoogleCloudStorageBuilder::from_env()
                .with_url(url)
                .with_retry(retry)
                .with_config(GoogleConfigKey::Client(ClientConfigKey::Timeout), &timeout);
            for (key, value) in user_options {
                let config = key.parse().map_err(|e| option_error(key, e))?;
                builder = builder.with_config(config, value);
            }
            if anonymous {
                builder = builder.with_skip_signature(true);
            }
            (
                Arc::new(builder.build().map_err(open_error)?),
                parsed.path(),
            )
        }
        "az" | "azure" | "abfs" | "abfss" | "adl" => {
            let mut builder = MicrosoftAzureBuilder::from_env()
                .with_url(url)
                .with_retry(retry)
                .with_config(AzureConfigKey::Client(ClientConfigKey::Timeout), &timeout);
            for (key, value) in user_options {
                let config = key.parse().map_err(|e| option_error(key, e))?;
                builder = builder.with_config(config, value);
            }
            if anonymous {
                builder = builder.with_skip_signature(true);
            }
            (
                Arc::new(builder.build().map_err(open_error)?),
                parsed.path(),
            )
        }
        "http" | "https" => {
            // The HTTP store is rooted at the URL itself.
            let mut builder = HttpBuilder::new()
                .with_url(url.trim_end_matches('/'))
                .with_retry(retry)
                .with_config(ClientConfigKey::Timeout, &timeout)
                // The user asked for http:// explicitly: don't insist on TLS.
                .with_config(ClientConfigKey::AllowHttp, (scheme == "http").to_string());
            for (key, value) in user_options {
                let config = key.parse().map_err(|e| option_error(key, e))?;
                builder = builder.with_config(config, value);
            }
            (Arc::new(builder.build().map_err(open_error)?), "")
        }
        _ => {
            return Err(Error::UnsupportedUrl {
                url: url.to_string(),
                reason: "expected a path, file://, memory://, http(s)://, s3://, gs:// or az://",
            })
        }
    };
    let prefix = prefix.trim_matches('/');
    if prefix.is_empty() {
        return Ok((store, context));
    }
    Ok((
        Arc::new(PrefixStore::new(store, Path::from(prefix))),
        context,
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn builds_each_cloud_from_its_url() {
        let options = StoreOptions::new()
            .option("region", "us-east-1")
            .option("anonymous", "true");
        assert!(remote_store("s3://bucket/data/era5.zarr", &options).is_ok());
        let custom = options.clone().option("endpoint", "http://127.0.0.1:9");
        assert!(remote_store("s3://bucket/era5.zarr", &custom).is_ok());
        let anonymous = StoreOptions::new().option("anonymous", "true");
        assert!(remote_store("gs://bucket/era5.zarr", &anonymous).is_ok());
        let azure = anonymous.clone().option("account_name", "account");
        assert!(remote_store("az://container/era5.zarr", &azure).is_ok());
        assert!(remote_store("https://example.com/era5.zarr", &anonymous).is_ok());
    }

    #[test]
    fn s3_context_names_the_endpoint_and_the_missing_credentials() {
        let builder = AmazonS3Builder::new()
            .with_bucket_name("bucket")
            .with_endpoint("http://127.0.0.1:9");
        let context = s3_context(&builder, false);
        assert!(context.contains("http://127.0.0.1:9"), "{context}");
        if std::env::var_os("AWS_WEB_IDENTITY_TOKEN_FILE").is_none() {
            assert!(context.contains("anonymous=true"), "{context}");
        }
        let keyed = builder
            .with_access_key_id("key")
            .with_secret_access_key("secret");
        assert!(s3_context(&keyed, false).contains("an access key"));
        assert!(s3_context(&keyed, true).contains("anonymous"));
    }

    #[test]
    fn unknown_options_name_the_key() {
        let options = StoreOptions::new().option("no_such_key", "1");
        match remote_store("s3://bucket/x.zarr", &options) {
            Err(Error::StoreOption { key, .. }) => assert_eq!(key, "no_such_key"),
            other => panic!("expected StoreOption, got {other:?}"),
        }
    }
}
