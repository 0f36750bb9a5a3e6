//! [`ObjectStoreRemote::from_url`]: a store from a URL and options, as object_store's
//! `parse_url_opts`, but with every option checked (object_store ignores keys it does not
//! know), timeouts and bounded retries on every HTTP call, and the conditional put required.

use std::str::FromStr;
use std::sync::Arc;
use std::time::Duration;

use object_store::aws::{AmazonS3Builder, AmazonS3ConfigKey};
use object_store::azure::{AzureConfigKey, MicrosoftAzureBuilder};
use object_store::gcp::{GoogleCloudStorageBuilder, GoogleConfigKey};
use object_store::memory::InMemory;
use object_store::prefix::PrefixStore;
use object_store::{
    BackoffConfig, ClientConfigKey, ClientOptions, ObjectStore, ObjectStoreScheme, RetryConfig,
};

use crate::{ObjectStoreRemote, SetupError};

/// The longest one HTTP call may take, answer body included (object_store's `timeout`
/// option overrides it): a call that neither finishes nor fails ends here.
pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(30);
/// The longest a connection may take to open (the `connect_timeout` option).
pub const DEFAULT_CONNECT_TIMEOUT: Duration = Duration::from_secs(5);
/// Retries of one call after a 5xx, a 429, a refused or dropped connection, or (for reads and
/// overwrites) a timeout (the `max_retries` option). The tiering job retries whole uploads
/// with its own backoff, so a few here are enough.
pub const DEFAULT_RETRIES: usize = 3;
/// No retry starts after this long from a call's first attempt (the `retry_timeout` option).
const DEFAULT_RETRY_TIMEOUT: Duration = Duration::from_secs(60);

/// The options this crate reads itself, for every cloud store; object_store has no keys for
/// its retry settings.
const OWN_KEYS: [&str; 2] = ["max_retries", "retry_timeout"];

impl ObjectStoreRemote {
    /// A store from a URL and options (object_store's configuration keys), reading the
    /// usual environment variables for what the options leave unset (`AWS_*`, `GOOGLE_*`,
    /// `AZURE_*`: credentials, region, endpoint).
    ///
    /// - `file:///dir`: [`ObjectStoreRemote::local`] of `/dir`; no options.
    /// - `memory://`: an in-memory store (tests, examples); no options.
    /// - `s3://bucket/prefix` (also `s3a://` and AWS's and R2's `https://` forms): S3, or an
    ///   S3-compatible server with `endpoint=http://host:9000` (add `allow_http=true` for
    ///   plain HTTP), `region`, `access_key_id`, `secret_access_key`, `session_token`,
    ///   `virtual_hosted_style_request`, ... (`object_store::aws::AmazonS3ConfigKey`, with or
    ///   without the `aws_` prefix). The manifest's conditional put is S3's
    ///   `If-None-Match: *`; `conditional_put=disabled` is refused.
    /// - `gs://bucket/prefix`: Google Cloud Storage (`GoogleConfigKey`).
    /// - `az://container/prefix` (and Azure's `abfs`/`adl`/`https` forms): Azure Blob Storage
    ///   (`AzureConfigKey`).
    ///
    /// For the clouds, `timeout` (default [`DEFAULT_TIMEOUT`]), `connect_timeout`
    /// ([`DEFAULT_CONNECT_TIMEOUT`]) and the other `ClientConfigKey`s bound each HTTP call, and
    /// this crate's own `max_retries` ([`DEFAULT_RETRIES`]) and `retry_timeout` (60 s; a
    /// number with `ms`, `s` or `m`) bound its retries. The path after the bucket is a key
    /// prefix: the store sees only the keys under it. An unknown key, a bad value, or a plain
    /// `http://` endpoint without `allow_http=true` is [`SetupError::Option`]; nothing is
    /// sent to the store here ([`ObjectStoreRemote::check_conditional_put`] does that).
    pub fn from_url(
        url: &str,
        options: &[(String, String)],
    ) -> Result<ObjectStoreRemote, SetupError> {
        ObjectStoreRemote::from_url_env(url, options, std::env::vars())
    }

    /// [`ObjectStoreRemote::from_url`] with `env` in place of the process's environment.
    pub fn from_url_env(
        url: &str,
        options: &[(String, String)],
        env: impl IntoIterator<Item = (String, String)>,
    ) -> Result<ObjectStoreRemote, SetupError> {
        let bad_url = |reason: String| SetupError::Url {
            url: url.to_string(),
            reason,
        };
        let parsed = url::Url::parse(url).map_err(|e| bad_url(e.to_string()))?;
        let (scheme, prefix) =
            ObjectStoreScheme::parse(&parsed).map_err(|e| bad_url(e.to_string()))?;
        let opts = Options {
            url,
            given: options,
        };
        let store: Arc<dyn ObjectStore> = match scheme {
            ObjectStoreScheme::Local => {
                opts.none_allowed("file")?;
                let dir = parsed
                    .to_file_path()
                    .map_err(|()| bad_url("not an absolute local path".into()))?;
                return ObjectStoreRemote::local(&dir);
            }
            ObjectStoreScheme::Memory => {
                opts.none_allowed("memory")?;
                Arc::new(InMemory::new())
            }
            ObjectStoreScheme::AmazonS3 => opts.s3(env)?,
            ObjectStoreScheme::GoogleCloudStorage => opts.gcs(env)?,
            ObjectStoreScheme::MicrosoftAzure => opts.azure(env)?,
            other => {
                return Err(bad_url(format!(
                    "{other:?} stores are not supported (file, memory, s3, gs and az are): a \
                     plain HTTP/WebDAV store has no conditional put"
                )))
            }
        };
        let store = if prefix.as_ref().is_empty() {
            store
        } else {
            Arc::new(PrefixStore::new(store, prefix))
        };
        ObjectStoreRemote::new(store)
    }
}

struct Options<'a> {
    url: &'a str,
    given: &'a [(String, String)],
}

impl Options<'_> {
    fn bad(&self, key: &str, reason: impl Into<String>) -> SetupError {
        SetupError::Option {
            url: self.url.to_string(),
            key: key.to_string(),
            reason: reason.into(),
        }
    }

    fn build_error(&self, e: object_store::Error) -> SetupError {
        SetupError::Build {
            url: self.url.to_string(),
            reason: e.to_string(),
        }
    }

    fn none_allowed(&self, scheme: &str) -> Result<(), SetupError> {
        match self.given.first() {
            None => Ok(()),
            Some((key, _)) => Err(self.bad(key, format!("a {scheme}:// store takes no options"))),
        }
    }

    /// The retry settings: the defaults, then `max_retries` and `retry_timeout`.
    fn retry(&self) -> Result<RetryConfig, SetupError> {
        let mut retry = RetryConfig {
            backoff: BackoffConfig {
                init_backoff: Duration::from_millis(100),
                max_backoff: Duration::from_secs(5),
                base: 2.,
            },
            max_retries: DEFAULT_RETRIES,
            retry_timeout: DEFAULT_RETRY_TIMEOUT,
        };
        for (key, value) in self.given {
            match key.as_str() {
                "max_retries" => {
                    retry.max_retries = value
                        .parse()
                        .map_err(|_| self.bad(key, format!("{value:?} is not a count")))?;
                }
                "retry_timeout" => {
                    retry.retry_timeout = parse_duration(value).ok_or_else(|| {
                        self.bad(key, format!("{value:?} is not a duration (500ms, 30s, 2m)"))
                    })?;
                }
                _ => {}
            }
        }
        Ok(retry)
    }

    fn client(&self) -> ClientOptions {
        ClientOptions::new()
            .with_timeout(DEFAULT_TIMEOUT)
            .with_connect_timeout(DEFAULT_CONNECT_TIMEOUT)
    }

    /// The given options but this crate's own, each parsed as `K` (a bad key refused).
    fn keyed<K: FromStr>(&self) -> Result<Vec<(K, &str)>, SetupError>
    where
        K::Err: std::fmt::Display,
    {
        self.given
            .iter()
            .filter(|(k, _)| !OWN_KEYS.contains(&k.as_str()))
            .map(|(k, v)| {
                k.to_ascii_lowercase()
                    .parse::<K>()
                    .map(|key| (key, v.as_str()))
                    .map_err(|e| self.bad(k, e.to_string()))
            })
            .collect()
    }

    fn s3(
        &self,
        env: impl IntoIterator<Item = (String, String)>,
    ) -> Result<Arc<dyn ObjectStore>, SetupError> {
        install_crypto();
        let mut b = AmazonS3Builder::new();
        for (k, v) in env {
            if let Some(key) = k
                .starts_with("AWS_")
                .then(|| k.to_ascii_lowercase().parse::<AmazonS3ConfigKey>().ok())
                .flatten()
            {
                b = b.with_config(key, v);
            }
        }
        b = b
            .with_url(self.url)
            .with_client_options(self.client())
            .with_retry(self.retry()?);
        for (key, value) in self.keyed::<AmazonS3ConfigKey>()? {
            b = b.with_config(key, value);
        }
        let setting = |key: AmazonS3ConfigKey| b.get_config_value(&key).unwrap_or_default();
        if setting(AmazonS3ConfigKey::ConditionalPut).eq_ignore_ascii_case("disabled") {
            return Err(SetupError::NoConditionalPut {
                store: self.url.to_string(),
                reason: "conditional_put=disabled: the manifest is written with \
                         If-None-Match: * so that two writers cannot both win"
                    .into(),
            });
        }
        let endpoint = setting(AmazonS3ConfigKey::Endpoint);
        let allow_http = setting(AmazonS3ConfigKey::Client(ClientConfigKey::AllowHttp));
        if endpoint.starts_with("http://") && !allow_http.eq_ignore_ascii_case("true") {
            return Err(self.bad(
                "endpoint",
                format!("{endpoint} is plain HTTP: set allow_http=true to use it"),
            ));
        }
        let store = b.build().map_err(|e| self.build_error(e))?;
        Ok(Arc::new(store))
    }

    fn gcs(
        &self,
        env: impl IntoIterator<Item = (String, String)>,
    ) -> Result<Arc<dyn ObjectStore>, SetupError> {
        install_crypto();
        let mut b = GoogleCloudStorageBuilder::new();
        for (k, v) in env {
            if let Some(key) = k
                .starts_with("GOOGLE_")
                .then(|| k.to_ascii_lowercase().parse::<GoogleConfigKey>().ok())
                .flatten()
            {
                b = b.with_config(key, v);
            }
        }
        b = b
            .with_url(self.url)
            .with_client_options(self.client())
            .with_retry(self.retry()?);
        for (key, value) in self.keyed::<GoogleConfigKey>()? {
            b = b.with_config(key, value);
        }
        let store = b.build().map_err(|e| self.build_error(e))?;
        Ok(Arc::new(store))
    }

    fn azure(
        &self,
        env: impl IntoIterator<Item = (String, String)>,
    ) -> Result<Arc<dyn ObjectStore>, SetupError> {
        install_crypto();
        let mut b = MicrosoftAzureBuilder::new();
        for (k, v) in env {
            if let Some(key) = k
                .starts_with("AZURE_")
                .then(|| k.to_ascii_lowercase().parse::<AzureConfigKey>().ok())
                .flatten()
            {
                b = b.with_config(key, v);
            }
        }
        b = b
            .with_url(self.url)
            .with_client_options(self.client())
            .with_retry(self.retry()?);
        for (key, value) in self.keyed::<AzureConfigKey>()? {
            b = b.with_config(key, value);
        }
        let store = b.build().map_err(|e| self.build_error(e))?;
        Ok(Arc::new(store))
    }
}

/// rustls's crypto for the HTTP client: ring, as the process default unless the embedder
/// installed one (reqwest is built without a provider of its own: aws-lc-rs is not linked).
/// rustls 0.23.48 deprecates ring's provider for its lack of post-quantum key exchange; an
/// embedder who wants that installs aws-lc-rs's provider first, and it is used instead.
#[allow(deprecated)]
fn install_crypto() {
    if rustls::crypto::CryptoProvider::get_default().is_none() {
        // Another thread may have installed one since: either is fine.
        let _ = rustls::crypto::ring::default_provider().install_default();
    }
}

/// `500ms`, `30s`, `2m`.
fn parse_duration(s: &str) -> Option<Duration> {
    let digits = s.find(|c: char| !c.is_ascii_digit())?;
    let n: u64 = s[..digits].parse().ok()?;
    match &s[digits..] {
        "ms" => Some(Duration::from_millis(n)),
        "s" => Some(Duration::from_secs(n)),
        "m" => Some(Duration::from_secs(n.checked_mul(60)?)),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::parse_duration;
    use std::time::Duration;

    #[test]
    fn durations_parse_with_their_unit_and_nothing_else() {
        assert_eq!(parse_duration("500ms"), Some(Duration::from_millis(500)));
        assert_eq!(parse_duration("30s"), Some(Duration::from_secs(30)));
        assert_eq!(parse_duration("2m"), Some(Duration::from_secs(120)));
        for bad in ["", "30", "s", "-1s", "1h", "1.5s", "ms"] {
            assert_eq!(parse_duration(bad), None, "{bad:?}");
        }
    }
}
