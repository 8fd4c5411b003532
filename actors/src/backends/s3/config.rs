//! Configuration of the `s3` adapter: the fields of LMCache's MP S3 adapter (`s3.rst`), plus
//! the newer `s3_bucket`, `s3_addressing_style`, `s3_ca_bundle` and `s3_key_prefix`.

use std::path::PathBuf;

use serde::{Deserialize, Serialize};

use crate::config::{FieldError, Secret};

/// How the bucket appears in request URLs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum AddressingStyle {
    /// `https://<bucket>.<host>/<key>` (AWS default).
    Virtual,
    /// `https://<host>/<bucket>/<key>` (MinIO, Garage and most self-hosted stores).
    Path,
}

/// Whether PUT bodies are covered by the SigV4 signature (`x-amz-content-sha256`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum PayloadSigning {
    /// `UNSIGNED-PAYLOAD` (as the AWS CRT client, and so LMCache's own S3 adapter, sends
    /// everywhere). Over TLS the record MACs protect the bytes in transit; over plain HTTP every
    /// PUT also carries the CRC32C of its body (`x-amz-checksum-crc32c`, inside the signed
    /// headers), which the store checks before it keeps the object, so a body damaged on the
    /// way is refused (GETs check it only with `s3_checksum = "crc32c"`).
    ///
    /// Until 2026-12 `auto` signed the body's SHA-256 over plain HTTP. That pass cost about
    /// 0.5 CPU-s per GiB stored on the client and as much again on the server (which must
    /// hash the body to check the signature), and was most of what kept the 4 MiB store behind
    /// LMCache's own adapter on a 2-core host (docs/benchmarks.md, "kvtier through LMCache vs
    /// LMCache's own adapters"). A CRC32C is not a MAC: who must also defend stored bytes
    /// against an active attacker on a plain-HTTP network sets `"signed"` (or uses TLS).
    #[default]
    Auto,
    /// Always hash and sign the payload (one SHA-256 pass over every byte stored).
    Signed,
    /// Never: `UNSIGNED-PAYLOAD`, also over plain HTTP (pair it with `s3_checksum = "crc32c"`
    /// for an end-to-end integrity check at a fraction of the CPU).
    Unsigned,
}

/// End-to-end object checksum.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum ChecksumMode {
    /// None beyond what the transport and signing give (default).
    #[default]
    None,
    /// CRC32C (hardware-accelerated): sent with every PUT (`x-amz-checksum-crc32c`), which the
    /// store verifies, and checked on every GET whose response carries it.
    Crc32c,
}

/// Which client carries the data requests (PUT, GET, HEAD).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum DataPath {
    /// kvtier's direct path (default): SigV4 by `aws-sigv4`, the SDK's own signer, on the
    /// SDK's HTTP client, without the SDK's per-request orchestration, which at 256 KiB objects
    /// was most of the client's CPU. Used unless S3 Express is on. Temporary credentials
    /// (web identity/IRSA, instance roles, SSO) are refreshed 5 minutes before they expire;
    /// within a minute of expiry without fresh ones, the SDK carries the data.
    #[default]
    Direct,
    /// The SDK for every request.
    Sdk,
}

/// `type = "s3"`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
#[non_exhaustive]
pub struct S3Config {
    /// Bucket URL, required: `s3://bucket`, `s3://bucket.host`, the bare host form
    /// `bucket.s3.us-east-1.amazonaws.com`, or a plain endpoint URL (`http://127.0.0.1:3900`)
    /// together with `s3_bucket`.
    pub s3_endpoint: String,
    /// AWS region for signing, required.
    pub s3_region: String,
    /// Requests in flight at most (default 64); also caps the client's I/O threads at the
    /// number of CPUs.
    #[serde(default = "default_io_threads")]
    pub s3_num_io_threads: usize,
    /// Offer HTTP/2 via ALPN (`h2`, then `http/1.1`) on TLS connections (default true).
    #[serde(default = "default_true")]
    pub s3_prefer_http2: bool,
    /// Enable S3 Express One Zone session authentication (default false).
    #[serde(default)]
    pub s3_enable_s3express: bool,
    /// Plain HTTP instead of TLS, for non-AWS endpoints (default false).
    #[serde(default)]
    pub disable_tls: bool,
    /// Static access key id (with `aws_secret_access_key`); omit both for the default
    /// credential chain (environment, profile, web identity/IRSA, instance metadata).
    #[serde(default)]
    pub aws_access_key_id: Option<Secret>,
    /// Static secret access key (with `aws_access_key_id`).
    #[serde(default)]
    pub aws_secret_access_key: Option<Secret>,
    /// The bucket, when `s3_endpoint` is a plain endpoint URL.
    #[serde(default)]
    pub s3_bucket: Option<String>,
    /// `"virtual"` or `"path"`; default virtual for bucket URLs, path for plain endpoint URLs.
    #[serde(default)]
    pub s3_addressing_style: Option<AddressingStyle>,
    /// PEM file of extra CA certificates to trust (private endpoints).
    #[serde(default)]
    pub s3_ca_bundle: Option<PathBuf>,
    /// Every object is stored under this prefix (`<prefix>/<object name>`); default none.
    #[serde(default)]
    pub s3_key_prefix: Option<String>,
    /// List the bucket (under the prefix) at start to rebuild usage and LRU order; default true
    /// when `max_capacity_gb > 0`.
    #[serde(default)]
    pub rebuild_index_on_start: Option<bool>,
    /// Seconds an open circuit breaker waits before letting a probe through (default 5).
    #[serde(default = "default_cooldown")]
    pub circuit_breaker_cooldown_secs: f64,
    /// `"auto"` (default: sign the payload over plain HTTP, `UNSIGNED-PAYLOAD` over TLS),
    /// `"signed"` or `"unsigned"`. See [`PayloadSigning`].
    #[serde(default)]
    pub s3_payload_signing: PayloadSigning,
    /// `"none"` (default) or `"crc32c"`. See [`ChecksumMode`].
    #[serde(default)]
    pub s3_checksum: ChecksumMode,
    /// Seconds one request attempt may take before it counts as a connection failure
    /// (default 60; the SDK makes up to 3 attempts). Lower it so that a store that accepts
    /// connections but never answers opens the circuit breaker sooner.
    #[serde(default)]
    pub s3_attempt_timeout_secs: Option<f64>,
    /// `"direct"` (default) or `"sdk"`: which client carries PUT, GET and HEAD. See
    /// [`DataPath`].
    #[serde(default)]
    pub s3_data_path: DataPath,
    /// A HEAD answered 404 has no body to tell a missing object from a missing bucket: it is a
    /// miss without further question for this many seconds after a request last found the
    /// bucket; after that, one `HeadBucket` confirms the bucket first (default 30; 0 confirms
    /// on every HEAD 404).
    #[serde(default = "default_bucket_check")]
    pub s3_bucket_check_secs: f64,
    /// The total deadline of one request, every attempt and every wait between them included
    /// (default 120; in (0, 86400]): no retry starts that could not begin before it, and each
    /// attempt's timeout is cut to what is left, so no request outlives it whatever
    /// `s3_attempt_timeout_secs`, the backoff and `Retry-After` say. The SDK path (listing,
    /// deletes, S3 Express) gives it to the SDK as its operation timeout.
    #[serde(default = "crate::retry::default_retry_timeout_secs")]
    pub retry_timeout_secs: f64,
}

fn default_io_threads() -> usize {
    64
}
fn default_true() -> bool {
    true
}
fn default_cooldown() -> f64 {
    5.0
}
fn default_bucket_check() -> f64 {
    30.0
}

/// Where requests go, derived from `s3_endpoint`, `s3_bucket` and the TLS/addressing fields.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ResolvedEndpoint {
    /// The bucket.
    pub bucket: String,
    /// A custom endpoint URL, or `None` for AWS's own (resolved from the region by the SDK).
    pub endpoint_url: Option<String>,
    /// Path-style addressing.
    pub force_path_style: bool,
    /// Requests use TLS.
    pub tls: bool,
}

impl S3Config {
    /// An `s3` adapter on `s3_endpoint` (a bucket URL such as `s3://bucket`, or a plain endpoint
    /// URL together with [`S3Config::bucket`]), signing for `s3_region`. Every other field is
    /// at its default: credentials from the default chain (set static ones with
    /// [`S3Config::access_key_id`] and [`S3Config::secret_access_key`], each by name), and TLS
    /// unless the endpoint starts with `http://`.
    ///
    /// ```
    /// use kvtier_actors::backends::s3::S3Config;
    /// let c = S3Config::new("http://127.0.0.1:3900", "garage")
    ///     .bucket("kvcache")
    ///     .access_key_id("GK123")
    ///     .secret_access_key("s3cr3t")
    ///     .prefix("llama");
    /// assert!(c.validate().is_ok());
    /// ```
    pub fn new(s3_endpoint: impl Into<String>, s3_region: impl Into<String>) -> Self {
        let s3_endpoint = s3_endpoint.into();
        Self {
            disable_tls: s3_endpoint.starts_with("http://"),
            s3_endpoint,
            s3_region: s3_region.into(),
            s3_num_io_threads: default_io_threads(),
            s3_prefer_http2: true,
            s3_enable_s3express: false,
            aws_access_key_id: None,
            aws_secret_access_key: None,
            s3_bucket: None,
            s3_addressing_style: None,
            s3_ca_bundle: None,
            s3_key_prefix: None,
            rebuild_index_on_start: None,
            circuit_breaker_cooldown_secs: default_cooldown(),
            s3_payload_signing: PayloadSigning::Auto,
            s3_checksum: ChecksumMode::None,
            s3_attempt_timeout_secs: None,
            s3_data_path: DataPath::Direct,
            s3_bucket_check_secs: default_bucket_check(),
            retry_timeout_secs: crate::retry::default_retry_timeout_secs(),
        }
    }

    /// Sets `s3_bucket`: the bucket, when `s3_endpoint` is a plain endpoint URL.
    #[must_use]
    pub fn bucket(mut self, bucket: impl Into<String>) -> Self {
        self.s3_bucket = Some(bucket.into());
        self
    }

    /// Sets `aws_access_key_id`, the static access key id (with
    /// [`S3Config::secret_access_key`]).
    #[must_use]
    pub fn access_key_id(mut self, access_key_id: impl Into<String>) -> Self {
        self.aws_access_key_id = Some(Secret::new(access_key_id));
        self
    }

    /// Sets `aws_secret_access_key`, the static secret access key (with
    /// [`S3Config::access_key_id`]).
    #[must_use]
    pub fn secret_access_key(mut self, secret_access_key: impl Into<String>) -> Self {
        self.aws_secret_access_key = Some(Secret::new(secret_access_key));
        self
    }

    /// Sets `s3_key_prefix`: every object is stored under `<prefix>/`.
    #[must_use]
    pub fn prefix(mut self, prefix: impl Into<String>) -> Self {
        self.s3_key_prefix = Some(prefix.into());
        self
    }

    /// Sets `s3_checksum` (see [`ChecksumMode`]).
    #[must_use]
    pub fn checksum(mut self, mode: ChecksumMode) -> Self {
        self.s3_checksum = mode;
        self
    }

    /// Sets `s3_data_path` (see [`DataPath`]).
    #[must_use]
    pub fn data_path(mut self, path: DataPath) -> Self {
        self.s3_data_path = path;
        self
    }

    /// Test shorthand inside this crate: a plain endpoint, bucket and region with static
    /// credentials (hosts use [`S3Config::new`] and its named setters).
    #[cfg(test)]
    pub(crate) fn for_endpoint(
        endpoint: &str,
        bucket: &str,
        region: &str,
        key_id: &str,
        secret: &str,
    ) -> Self {
        Self::new(endpoint, region)
            .bucket(bucket)
            .access_key_id(key_id)
            .secret_access_key(secret)
    }

    /// Whether PUTs to this endpoint sign their payload's SHA-256 (see [`PayloadSigning`]).
    pub fn signs_payload(&self, _ep: &ResolvedEndpoint) -> bool {
        match self.s3_payload_signing {
            PayloadSigning::Signed => true,
            PayloadSigning::Unsigned | PayloadSigning::Auto => false,
        }
    }

    /// Whether PUTs to this endpoint send the CRC32C of their body for the store to check:
    /// with `s3_checksum = "crc32c"`, and with `auto` payload signing over plain HTTP (see
    /// [`PayloadSigning::Auto`]).
    pub fn put_crc32c(&self, ep: &ResolvedEndpoint) -> bool {
        self.s3_checksum == ChecksumMode::Crc32c
            || (self.s3_payload_signing == PayloadSigning::Auto && !ep.tls)
    }

    /// Whether GETs ask the store for the object's CRC32C and check it (`s3_checksum =
    /// "crc32c"` only).
    pub fn get_crc32c(&self) -> bool {
        self.s3_checksum == ChecksumMode::Crc32c
    }

    /// Checks every field and resolves the endpoint.
    pub fn validate(&self) -> Result<ResolvedEndpoint, FieldError> {
        if self.s3_region.trim().is_empty() {
            return Err(FieldError::new("s3_region", "must not be empty"));
        }
        if !(1..=4096).contains(&self.s3_num_io_threads) {
            return Err(FieldError::new(
                "s3_num_io_threads",
                format!("must be between 1 and 4096, got {}", self.s3_num_io_threads),
            ));
        }
        match (&self.aws_access_key_id, &self.aws_secret_access_key) {
            (Some(_), None) => {
                return Err(FieldError::new(
                    "aws_secret_access_key",
                    "missing: give both aws_access_key_id and aws_secret_access_key, or neither",
                ))
            }
            (None, Some(_)) => {
                return Err(FieldError::new(
                    "aws_access_key_id",
                    "missing: give both aws_access_key_id and aws_secret_access_key, or neither",
                ))
            }
            (Some(id), Some(_)) if id.expose().is_empty() => {
                return Err(FieldError::new("aws_access_key_id", "must not be empty"))
            }
            _ => {}
        }
        let c = self.circuit_breaker_cooldown_secs;
        if !(c.is_finite() && c >= 0.0) {
            return Err(FieldError::new(
                "circuit_breaker_cooldown_secs",
                format!("must be a finite number >= 0, got {c}"),
            ));
        }
        let b = self.s3_bucket_check_secs;
        if !(b.is_finite() && (0.0..=86_400.0).contains(&b)) {
            return Err(FieldError::new(
                "s3_bucket_check_secs",
                format!("must be a number of seconds in [0, 86400], got {b}"),
            ));
        }
        let t = self.retry_timeout_secs;
        if !(t.is_finite() && t > 0.0 && t <= 86_400.0) {
            return Err(FieldError::new(
                "retry_timeout_secs",
                format!("must be a number of seconds in (0, 86400], got {t}"),
            ));
        }
        if let Some(t) = self.s3_attempt_timeout_secs {
            if !(t.is_finite() && t > 0.0 && t <= 3600.0) {
                return Err(FieldError::new(
                    "s3_attempt_timeout_secs",
                    format!("must be a number of seconds in (0, 3600], got {t}"),
                ));
            }
        }
        if let Some(p) = &self.s3_key_prefix {
            if p.trim_matches('/').is_empty() {
                return Err(FieldError::new(
                    "s3_key_prefix",
                    "must contain something besides '/' (omit it for no prefix)",
                ));
            }
        }
        if let Some(b) = &self.s3_bucket {
            validate_bucket("s3_bucket", b)?;
        }
        self.resolve()
    }

    /// The key prefix with surrounding slashes removed and one `/` appended (`""` for none).
    pub fn key_prefix(&self) -> String {
        match &self.s3_key_prefix {
            Some(p) => format!("{}/", p.trim_matches('/')),
            None => String::new(),
        }
    }

    fn resolve(&self) -> Result<ResolvedEndpoint, FieldError> {
        let ep = self.s3_endpoint.trim();
        let err = |m: String| FieldError::new("s3_endpoint", m);
        if ep.is_empty() {
            return Err(err("must not be empty".into()));
        }
        let virtual_default;
        let (bucket, endpoint_url) = if let Some(rest) = ep
            .strip_prefix("http://")
            .map(|r| ("http", r))
            .or_else(|| ep.strip_prefix("https://").map(|r| ("https", r)))
        {
            let (scheme, host) = rest;
            if scheme == "https" && self.disable_tls {
                return Err(err("is an https:// URL but disable_tls is true".into()));
            }
            if scheme == "http" && !self.disable_tls {
                return Err(err(
                    "is an http:// URL: set disable_tls = true to send requests without TLS".into(),
                ));
            }
            if host.trim_end_matches('/').is_empty() || host.trim_end_matches('/').contains('/') {
                return Err(err(format!(
                    "{ep:?} must be scheme://host[:port] with no path"
                )));
            }
            let bucket = self.s3_bucket.clone().ok_or_else(|| {
                FieldError::new(
                    "s3_bucket",
                    "required when s3_endpoint is a plain http(s):// endpoint URL",
                )
            })?;
            virtual_default = false;
            (
                bucket,
                Some(format!("{scheme}://{}", host.trim_end_matches('/'))),
            )
        } else {
            let target = ep.strip_prefix("s3://").unwrap_or(ep).trim_end_matches('/');
            if target.is_empty() || target.contains('/') {
                return Err(err(format!(
                    "{ep:?} must be s3://bucket, s3://bucket.host or bucket.host (no path)"
                )));
            }
            virtual_default = true;
            let scheme = if self.disable_tls { "http" } else { "https" };
            let (bucket, host) = match (&self.s3_bucket, target.split_once('.')) {
                (Some(b), Some(_)) => (b.clone(), Some(target.to_owned())),
                (Some(b), None) if b != target => {
                    return Err(FieldError::new(
                        "s3_bucket",
                        format!("{b:?} contradicts the bucket {target:?} in s3_endpoint"),
                    ))
                }
                (_, None) => (target.to_owned(), None),
                (None, Some((b, h))) => (b.to_owned(), Some(h.to_owned())),
            };
            validate_bucket("s3_endpoint", &bucket)?;
            // AWS hosts are left to the SDK's endpoint rules (they know S3 Express); others
            // become a custom endpoint.
            let url = match host {
                Some(h) if !h.ends_with(".amazonaws.com") || self.disable_tls => {
                    Some(format!("{scheme}://{h}"))
                }
                None if self.disable_tls => {
                    Some(format!("http://s3.{}.amazonaws.com", self.s3_region))
                }
                _ => None,
            };
            (bucket, url)
        };
        let force_path_style = match self.s3_addressing_style {
            Some(AddressingStyle::Path) => true,
            Some(AddressingStyle::Virtual) => false,
            None => !virtual_default,
        };
        Ok(ResolvedEndpoint {
            bucket,
            endpoint_url,
            force_path_style,
            tls: !self.disable_tls,
        })
    }
}

fn validate_bucket(field: &str, b: &str) -> Result<(), FieldError> {
    let ok = (3..=63).contains(&b.len())
        && b.bytes()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == b'-' || c == b'.');
    if ok {
        Ok(())
    } else {
        Err(FieldError::new(
            field,
            format!("{b:?} is not a valid bucket name (3-63 of a-z, 0-9, '-', '.')"),
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cfg(endpoint: &str) -> S3Config {
        let mut c = S3Config::for_endpoint(endpoint, "b", "us-east-1", "id", "secret");
        c.s3_bucket = None;
        c.disable_tls = false;
        c.aws_access_key_id = None;
        c.aws_secret_access_key = None;
        c
    }

    #[test]
    fn endpoint_forms() {
        let r = cfg("s3://my-bucket").validate().unwrap();
        assert_eq!(
            (r.bucket.as_str(), r.endpoint_url, r.force_path_style),
            ("my-bucket", None, false)
        );
        let r = cfg("my-bucket.s3.us-east-1.amazonaws.com")
            .validate()
            .unwrap();
        assert_eq!((r.bucket.as_str(), r.endpoint_url), ("my-bucket", None));
        let r = cfg("s3://test-127.cwlota.com").validate().unwrap();
        assert_eq!(
            (r.bucket.as_str(), r.endpoint_url.as_deref()),
            ("test-127", Some("https://cwlota.com"))
        );
        let mut c = cfg("s3://kvc.cwlota.com");
        c.disable_tls = true;
        let r = c.validate().unwrap();
        assert_eq!(
            (r.bucket.as_str(), r.endpoint_url.as_deref()),
            ("kvc", Some("http://cwlota.com"))
        );
        let mut c = cfg("http://127.0.0.1:3900");
        c.disable_tls = true;
        assert_eq!(c.validate().unwrap_err().field, "s3_bucket");
        c.s3_bucket = Some("kvtier".into());
        let r = c.validate().unwrap();
        assert_eq!(
            (
                r.bucket.as_str(),
                r.endpoint_url.as_deref(),
                r.force_path_style
            ),
            ("kvtier", Some("http://127.0.0.1:3900"), true)
        );
        c.s3_addressing_style = Some(AddressingStyle::Virtual);
        assert!(!c.validate().unwrap().force_path_style);
        c.disable_tls = false;
        assert_eq!(c.validate().unwrap_err().field, "s3_endpoint");
    }

    #[test]
    fn field_errors() {
        let mut c = cfg("s3://bucket");
        c.aws_access_key_id = Some(Secret::new("AKIA"));
        assert_eq!(c.validate().unwrap_err().field, "aws_secret_access_key");
        let mut c = cfg("s3://bucket");
        c.s3_num_io_threads = 0;
        assert_eq!(c.validate().unwrap_err().field, "s3_num_io_threads");
        let mut c = cfg("s3://bucket");
        c.s3_region = " ".into();
        assert_eq!(c.validate().unwrap_err().field, "s3_region");
        assert_eq!(
            cfg("s3://Bad_Bucket").validate().unwrap_err().field,
            "s3_endpoint"
        );
        assert_eq!(
            cfg("s3://b/x/y").validate().unwrap_err().field,
            "s3_endpoint"
        );
        let mut c = cfg("s3://bucket");
        c.s3_attempt_timeout_secs = Some(0.0);
        assert_eq!(c.validate().unwrap_err().field, "s3_attempt_timeout_secs");
        c.s3_attempt_timeout_secs = Some(2.5);
        assert!(c.validate().is_ok());
        let mut c = cfg("s3://bucket");
        c.s3_bucket_check_secs = -1.0;
        let e = c.validate().unwrap_err();
        assert_eq!(e.field, "s3_bucket_check_secs");
        assert!(e.to_string().contains("got -1"), "{e}");
        c.s3_bucket_check_secs = 0.0;
        assert!(c.validate().is_ok());
        let mut c = cfg("s3://bucket");
        c.s3_key_prefix = Some("/".into());
        assert_eq!(c.validate().unwrap_err().field, "s3_key_prefix");
        c.s3_key_prefix = Some("/kv/prod/".into());
        assert_eq!(c.key_prefix(), "kv/prod/");
    }

    #[test]
    fn payload_signing_and_put_checksum_follow_tls() {
        let mut c = cfg("http://127.0.0.1:3900");
        c.disable_tls = true;
        c.s3_bucket = Some("kvtier".into());
        let plain = c.validate().unwrap();
        assert!(!c.signs_payload(&plain), "auto never hashes the payload");
        assert!(c.put_crc32c(&plain), "auto sends a CRC32C over plain http");
        assert!(!c.get_crc32c(), "auto does not check GETs");
        let tls = cfg("s3://bucket").validate().unwrap();
        assert!(
            !c.signs_payload(&tls) && !c.put_crc32c(&tls),
            "auto: TLS is enough"
        );
        c.s3_payload_signing = PayloadSigning::Unsigned;
        assert!(!c.signs_payload(&plain) && !c.put_crc32c(&plain));
        c.s3_checksum = ChecksumMode::Crc32c;
        assert!(c.put_crc32c(&plain) && c.put_crc32c(&tls) && c.get_crc32c());
        c.s3_checksum = ChecksumMode::None;
        c.s3_payload_signing = PayloadSigning::Signed;
        assert!(c.signs_payload(&tls) && c.signs_payload(&plain));
        assert!(!c.put_crc32c(&plain));
        let parsed: S3Config = serde_json::from_str(
            r#"{"s3_endpoint": "s3://b", "s3_region": "r", "s3_payload_signing": "unsigned", "s3_checksum": "crc32c"}"#,
        )
        .unwrap();
        assert_eq!(
            (parsed.s3_payload_signing, parsed.s3_checksum),
            (PayloadSigning::Unsigned, ChecksumMode::Crc32c)
        );
        assert!(serde_json::from_str::<S3Config>(
            r#"{"s3_endpoint": "s3://b", "s3_region": "r", "s3_checksum": "md5"}"#
        )
        .is_err());
    }

    #[test]
    fn secrets_do_not_show() {
        let c = S3Config::for_endpoint("http://h:1", "bkt", "r", "AKIAEXAMPLE", "s3cr3t-value");
        let dbg = format!("{c:?}");
        let json = serde_json::to_string(&c).unwrap();
        for text in [dbg, json] {
            assert!(
                !text.contains("s3cr3t-value") && !text.contains("AKIAEXAMPLE"),
                "{text}"
            );
        }
    }
}
