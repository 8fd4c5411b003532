//! The direct data path: `PutObject`, `GetObject` and `HeadObject` signed with `aws-sigv4` (the
//! SDK's own SigV4 signer) and sent on the same pooled hyper client the SDK uses, without the
//! SDK's per-request orchestration (config layering, interceptors, endpoint rules, identity
//! resolution, retry bookkeeping).
//!
//! At 256 KiB objects that orchestration was most of the client's CPU per request (BENCHMARKS.md).
//! Everything else (listing, deletes, S3 Express sessions, the credential chain) stays on the
//! SDK; see [`super::DataPath`] for when this path is used.
//!
//! What a request does here, matching the SDK path:
//!
//! - SigV4 over the method, the percent-encoded object URL, `host`, `x-amz-date`,
//!   `x-amz-content-sha256` (the payload's SHA-256, or `UNSIGNED-PAYLOAD`) and the other headers
//!   sent; the session token when the credentials carry one;
//! - up to [`MAX_ATTEMPTS`] attempts, each bounded by the attempt timeout, with the SDK
//!   standard strategy's exponential backoff and full jitter, retrying connection failures,
//!   5xx and 429 (including 503 SlowDown); other statuses fail at once;
//! - a GET's body is read inside its attempt, straight into the caller's buffer, so a body that
//!   stalls or breaks off mid-stream times out or is retried like any other failure;
//! - with `s3_checksum = "crc32c"`, PUTs send `x-amz-checksum-crc32c` (which the store checks)
//!   and GETs ask for it back and check it; with `auto` payload signing over plain HTTP, PUTs
//!   send it too.

use std::ops::ControlFlow;
use std::time::{Duration, SystemTime};

use aws_credential_types::Credentials;
use aws_sdk_s3::error::DisplayErrorContext;
use aws_sigv4::http_request::{
    sign, PayloadChecksumKind, PercentEncodingMode, SignableBody, SignableRequest, SigningSettings,
    UriPathNormalizationMode,
};
use aws_sigv4::sign::v4;
use aws_smithy_runtime_api::client::identity::Identity;
use aws_smithy_types::body::SdkBody;
use base64::Engine as _;
use bytes::Bytes;
use http_body_util::BodyExt;
use percent_encoding::{utf8_percent_encode, AsciiSet, NON_ALPHANUMERIC};

use super::client::{ATTEMPT_TIMEOUT, MAX_ATTEMPTS};
use super::config::{ResolvedEndpoint, S3Config};
use super::http::HyperClient;
use crate::storage::{BackendError, ErrorKind, Fetched};

/// Bytes an object name keeps as they are in the URL path: RFC 3986 unreserved plus `/`, as the
/// SDK encodes S3 keys. Everything else is percent-encoded (once: the canonical request uses
/// the path as sent).
const KEY_ENCODE: &AsciiSet = &NON_ALPHANUMERIC
    .remove(b'-')
    .remove(b'_')
    .remove(b'.')
    .remove(b'~')
    .remove(b'/');

/// First retry waits up to this long (times 2 for every further attempt; full jitter), as the
/// SDK's standard retry strategy.
const INITIAL_BACKOFF: Duration = Duration::from_secs(1);

/// Most of an error body read to find its S3 `<Code>` and `<Message>`.
const ERROR_BODY_MAX: usize = 8 * 1024;

/// One attempt's failure: retried or final.
enum Failure {
    Retry(BackendError),
    Final(BackendError),
}

/// The direct path's fixed parts, shared by every request. Its credentials are fixed too: the
/// storage swaps in a new `Direct` ([`Direct::with_credentials`]) when temporary credentials
/// are refreshed.
#[derive(Clone)]
pub struct Direct {
    client: HyperClient,
    /// `scheme://authority[/path]` requests start with, bucket included when virtual-hosted.
    base: String,
    /// `/bucket` for path-style addressing, empty for virtual-hosted.
    bucket_path: String,
    region: String,
    identity: Identity,
    sign_payload: bool,
    /// PUTs send `x-amz-checksum-crc32c`.
    put_crc32c: bool,
    /// GETs ask for the CRC32C and check it.
    get_crc32c: bool,
    attempt_timeout: Duration,
    /// Counts retries by cause (off until [`Direct::with_metrics`]).
    metrics: crate::metrics::AdapterMetrics,
}

impl std::fmt::Debug for Direct {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // Never the identity: it holds the secret key.
        f.debug_struct("Direct")
            .field("base", &self.base)
            .field("bucket_path", &self.bucket_path)
            .field("region", &self.region)
            .finish_non_exhaustive()
    }
}

/// AWS's regional S3 host for `region` (China regions have their own domain).
fn aws_host(region: &str) -> String {
    if region.starts_with("cn-") {
        format!("s3.{region}.amazonaws.com.cn")
    } else {
        format!("s3.{region}.amazonaws.com")
    }
}

/// Whether `bucket` can be the first label of a host name (otherwise requests need path-style
/// addressing, which the SDK's endpoint rules pick on their own).
fn host_label(bucket: &str) -> bool {
    (3..=63).contains(&bucket.len())
        && bucket
            .bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
        && !bucket.starts_with('-')
        && !bucket.ends_with('-')
}

impl Direct {
    /// The direct path for these settings, or why the SDK must carry the data instead.
    pub fn new(
        cfg: &S3Config,
        ep: &ResolvedEndpoint,
        client: HyperClient,
        credentials: Credentials,
    ) -> Result<Self, &'static str> {
        if cfg.s3_enable_s3express {
            return Err("S3 Express session auth is on (the SDK signs those requests)");
        }
        let (scheme, authority, path) = match &ep.endpoint_url {
            Some(url) => {
                let uri: http::Uri = url.parse().map_err(|_| "the endpoint URL does not parse")?;
                let scheme = uri.scheme_str().ok_or("the endpoint URL has no scheme")?;
                let authority = uri.authority().ok_or("the endpoint URL has no host")?;
                (
                    scheme.to_owned(),
                    authority.as_str().to_owned(),
                    uri.path().trim_end_matches('/').to_owned(),
                )
            }
            // AWS: the regional endpoint the SDK's rules give for a general-purpose bucket.
            None => (
                if ep.tls { "https" } else { "http" }.to_owned(),
                aws_host(&cfg.s3_region),
                String::new(),
            ),
        };
        let (base, bucket_path) = if ep.force_path_style {
            (
                format!("{scheme}://{authority}{path}"),
                format!("/{}", utf8_percent_encode(&ep.bucket, KEY_ENCODE)),
            )
        } else if host_label(&ep.bucket) {
            (
                format!("{scheme}://{}.{authority}{path}", ep.bucket),
                String::new(),
            )
        } else {
            return Err("the bucket name cannot be a host label for virtual-hosted addressing");
        };
        Ok(Self {
            client,
            base,
            bucket_path,
            region: cfg.s3_region.clone(),
            identity: credentials.into(),
            sign_payload: cfg.signs_payload(ep),
            put_crc32c: cfg.put_crc32c(ep),
            get_crc32c: cfg.get_crc32c(),
            attempt_timeout: cfg
                .s3_attempt_timeout_secs
                .map_or(ATTEMPT_TIMEOUT, Duration::from_secs_f64),
            metrics: crate::metrics::AdapterMetrics::off(),
        })
    }

    /// The same path, counting its retries in `metrics`.
    pub fn with_metrics(&self, metrics: crate::metrics::AdapterMetrics) -> Self {
        Self {
            metrics,
            ..self.clone()
        }
    }

    /// The same path signing with other credentials (after a refresh).
    pub fn with_credentials(&self, credentials: Credentials) -> Self {
        Self {
            identity: credentials.into(),
            ..self.clone()
        }
    }

    /// The request URL of an object (its full key, prefix included).
    pub fn url(&self, object: &str) -> String {
        let mut s =
            String::with_capacity(self.base.len() + self.bucket_path.len() + object.len() + 8);
        s.push_str(&self.base);
        s.push_str(&self.bucket_path);
        s.push('/');
        s.extend(utf8_percent_encode(object, KEY_ENCODE));
        s
    }

    /// A signed request. `headers` are sent and signed; `payload` is the PUT body to hash when
    /// the payload is signed.
    fn request(
        &self,
        op: &'static str,
        method: http::Method,
        url: &str,
        headers: &[(&'static str, String)],
        payload: Option<&Bytes>,
    ) -> Result<http::Request<SdkBody>, BackendError> {
        let invalid =
            |e: &dyn std::fmt::Display| BackendError::io(op, format!("signing the request: {e}"));
        let mut settings = SigningSettings::default();
        settings.percent_encoding_mode = PercentEncodingMode::Single;
        settings.uri_path_normalization_mode = UriPathNormalizationMode::Disabled;
        settings.payload_checksum_kind = PayloadChecksumKind::XAmzSha256;
        let params = v4::SigningParams::builder()
            .identity(&self.identity)
            .region(&self.region)
            .name("s3")
            .time(SystemTime::now())
            .settings(settings)
            .build()
            .map_err(|e| invalid(&e))?
            .into();
        let body = match payload {
            Some(data) if self.sign_payload => SignableBody::Bytes(data),
            Some(_) => SignableBody::UnsignedPayload,
            None => SignableBody::empty(),
        };
        let signable = SignableRequest::new(
            method.as_str(),
            url,
            headers.iter().map(|(k, v)| (*k, v.as_str())),
            body,
        )
        .map_err(|e| invalid(&e))?;
        let (instructions, _) = sign(signable, &params)
            .map_err(|e| invalid(&e))?
            .into_parts();
        let mut b = http::Request::builder().method(method).uri(url);
        for (k, v) in headers {
            b = b.header(*k, v);
        }
        let mut req = b
            .body(payload.map_or_else(SdkBody::empty, |d| SdkBody::from(d.clone())))
            .map_err(|e| invalid(&e))?;
        instructions.apply_to_request_http1x(&mut req);
        Ok(req)
    }

    /// Settles attempt `n` (1-based) of `op`: `Break` with the result to return, or
    /// `Continue` after the backoff when it should be tried again (a retryable failure with
    /// attempts left). An attempt that timed out is not retried: a store that accepts
    /// connections but never answers would only triple the wait before the breaker hears of it.
    async fn settle<T>(
        &self,
        op: &'static str,
        n: u32,
        outcome: Result<Result<T, Failure>, tokio::time::error::Elapsed>,
    ) -> ControlFlow<Result<T, BackendError>> {
        let err = match outcome {
            Ok(Ok(v)) => return ControlFlow::Break(Ok(v)),
            Ok(Err(Failure::Final(e))) => return ControlFlow::Break(Err(e)),
            Ok(Err(Failure::Retry(e))) => e,
            Err(_) => {
                return ControlFlow::Break(Err(BackendError::new(
                    ErrorKind::Timeout,
                    op,
                    format!(
                        "no complete answer within the attempt timeout ({:.1}s)",
                        self.attempt_timeout.as_secs_f64()
                    ),
                )))
            }
        };
        if n >= MAX_ATTEMPTS {
            return ControlFlow::Break(Err(err));
        }
        let wait = backoff(n);
        self.metrics.retry(err.kind().as_str());
        tracing::debug!(op, attempt = n, error = %err, wait_ms = wait.as_millis() as u64, "s3: retrying");
        tokio::time::sleep(wait).await;
        ControlFlow::Continue(())
    }

    /// Runs `attempt` until [`Direct::settle`] says it is done.
    async fn retrying<T, Fut>(
        &self,
        op: &'static str,
        attempt: impl Fn() -> Fut,
    ) -> Result<T, BackendError>
    where
        Fut: std::future::Future<Output = Result<T, Failure>>,
    {
        for n in 1.. {
            let outcome = tokio::time::timeout(self.attempt_timeout, attempt()).await;
            if let ControlFlow::Break(r) = self.settle(op, n, outcome).await {
                return r;
            }
        }
        unreachable!("settle ends the loop by MAX_ATTEMPTS")
    }

    /// Sends one request; transport failures are retried connection errors.
    async fn send(
        &self,
        op: &'static str,
        req: http::Request<SdkBody>,
    ) -> Result<http::Response<hyper::body::Incoming>, Failure> {
        self.client.request(req).await.map_err(|e| {
            Failure::Retry(BackendError::connection(
                op,
                DisplayErrorContext(&e).to_string(),
            ))
        })
    }

    /// PUTs `data` under the object name `object`.
    pub async fn put(&self, object: &str, data: Bytes) -> Result<(), BackendError> {
        let url = self.url(object);
        let mut headers = vec![
            ("content-length", data.len().to_string()),
            ("content-type", "application/octet-stream".to_owned()),
        ];
        if self.put_crc32c {
            headers.push(("x-amz-checksum-crc32c", crc32c_header(&data)));
        }
        self.retrying("put", || async {
            let req = self
                .request("put", http::Method::PUT, &url, &headers, Some(&data))
                .map_err(Failure::Final)?;
            let resp = self.send("put", req).await?;
            if resp.status().is_success() {
                Ok(())
            } else {
                Err(status_failure("put", resp).await)
            }
        })
        .await
    }

    /// The object's size (`None` when absent or empty, as the SDK path's lookup).
    pub async fn head(&self, object: &str) -> Result<Option<u64>, BackendError> {
        let url = self.url(object);
        self.retrying("head", || async {
            let req = self
                .request("head", http::Method::HEAD, &url, &[], None)
                .map_err(Failure::Final)?;
            let resp = self.send("head", req).await?;
            match resp.status().as_u16() {
                200..=299 => Ok(content_length(&resp).filter(|l| *l > 0)),
                404 => Ok(None),
                _ => Err(status_failure("head", resp).await),
            }
        })
        .await
    }

    /// GETs the object into `buf`, which must end up exactly full.
    pub async fn get(&self, object: &str, buf: &mut [u8]) -> Result<Fetched, BackendError> {
        let url = self.url(object);
        let headers: Vec<(&'static str, String)> = if self.get_crc32c {
            vec![("x-amz-checksum-mode", "ENABLED".to_owned())]
        } else {
            Vec::new()
        };
        // Not [`Direct::retrying`]: each attempt borrows the buffer mutably, in turn.
        for n in 1.. {
            let attempt = self.get_attempt(&url, &headers, &mut *buf);
            let outcome = tokio::time::timeout(self.attempt_timeout, attempt).await;
            if let ControlFlow::Break(r) = self.settle("get", n, outcome).await {
                return r;
            }
        }
        unreachable!("settle ends the loop by MAX_ATTEMPTS")
    }

    /// One GET attempt into `buf`, body included.
    async fn get_attempt(
        &self,
        url: &str,
        headers: &[(&'static str, String)],
        buf: &mut [u8],
    ) -> Result<Fetched, Failure> {
        let req = self
            .request("get", http::Method::GET, url, headers, None)
            .map_err(Failure::Final)?;
        let resp = self.send("get", req).await?;
        match resp.status().as_u16() {
            200..=299 => {}
            404 => {
                // Read the small error body, so the connection can be reused.
                read_capped(resp.into_body(), ERROR_BODY_MAX).await;
                return Ok(Fetched::Absent);
            }
            _ => return Err(status_failure("get", resp).await),
        }
        let len = buf.len();
        match content_length(&resp) {
            Some(declared) if declared == len as u64 => {}
            declared => {
                return Ok(Fetched::SizeMismatch {
                    actual: declared.unwrap_or(0),
                })
            }
        }
        let expected_crc = if self.get_crc32c {
            resp.headers()
                .get("x-amz-checksum-crc32c")
                .and_then(|v| v.to_str().ok())
                .map(str::to_owned)
        } else {
            None
        };
        let mut body = resp.into_body();
        let mut off = 0usize;
        while let Some(frame) = body.frame().await {
            let frame = frame.map_err(|e| {
                Failure::Retry(BackendError::connection(
                    "get",
                    format!("reading the body: {}", DisplayErrorContext(&e)),
                ))
            })?;
            let Ok(chunk) = frame.into_data() else {
                continue;
            };
            let end = off + chunk.len();
            if end > len {
                // More than declared: a miss, never a partial copy.
                return Ok(Fetched::SizeMismatch { actual: end as u64 });
            }
            buf[off..end].copy_from_slice(&chunk);
            off = end;
        }
        if off != len {
            return Ok(Fetched::SizeMismatch { actual: off as u64 });
        }
        // A multipart object's checksum is composite (`…-N`): not comparable here.
        if let Some(want) = expected_crc.filter(|c| !c.contains('-')) {
            let got = crc32c_header(buf);
            if got != want {
                return Err(Failure::Retry(BackendError::io(
                    "get",
                    format!("CRC32C mismatch: the store declared {want}, the body has {got}"),
                )));
            }
        }
        Ok(Fetched::Hit)
    }
}

/// The wait before retry `n` (1-based): up to 1 s × 2ⁿ⁻¹, full jitter.
fn backoff(n: u32) -> Duration {
    let cap = INITIAL_BACKOFF.saturating_mul(1 << (n.saturating_sub(1)).min(4));
    cap.mul_f64(rand::random::<f64>())
}

fn content_length<B>(resp: &http::Response<B>) -> Option<u64> {
    resp.headers()
        .get(http::header::CONTENT_LENGTH)?
        .to_str()
        .ok()?
        .parse()
        .ok()
}

/// The base64 of the big-endian CRC32C, as `x-amz-checksum-crc32c` carries it.
fn crc32c_header(data: &[u8]) -> String {
    let crc = crc_fast::checksum(crc_fast::CrcAlgorithm::Crc32Iscsi, data) as u32;
    base64::engine::general_purpose::STANDARD.encode(crc.to_be_bytes())
}

/// Up to about `cap` bytes of a body (all of a short error body, which lets hyper reuse the
/// connection); a transport error ends it early.
async fn read_capped(mut body: hyper::body::Incoming, cap: usize) -> Vec<u8> {
    let mut out = Vec::new();
    while out.len() < cap {
        match body.frame().await {
            Some(Ok(frame)) => {
                if let Ok(d) = frame.into_data() {
                    out.extend_from_slice(&d);
                }
            }
            _ => break,
        }
    }
    out
}

/// A non-success status as a failure: 5xx and 429 (throttling, `SlowDown`) are retried, the
/// rest are final. The message names the status and the S3 error code and message, never the
/// rest of the body (a `SignatureDoesNotMatch` body echoes the string to sign).
async fn status_failure(op: &'static str, resp: http::Response<hyper::body::Incoming>) -> Failure {
    let status = resp.status();
    let body = read_capped(resp.into_body(), ERROR_BODY_MAX).await;
    let text = String::from_utf8_lossy(&body);
    let tag = |name: &str| {
        let open = format!("<{name}>");
        let start = text.find(&open)? + open.len();
        let end = text[start..].find('<')? + start;
        Some(text[start..end].to_owned())
    };
    let mut message = format!("HTTP {status}");
    if let Some(code) = tag("Code") {
        message.push_str(": ");
        message.push_str(&code);
    }
    if let Some(m) = tag("Message") {
        message.push_str(": ");
        message.push_str(&m);
    }
    let e = BackendError::new(status_kind(status.as_u16()), op, message);
    if status.is_server_error() || status.as_u16() == 429 {
        Failure::Retry(e)
    } else {
        Failure::Final(e)
    }
}

/// The kind of failure an HTTP status stands for.
pub(crate) fn status_kind(status: u16) -> ErrorKind {
    match status {
        401 | 403 => ErrorKind::Permission,
        404 => ErrorKind::NotFound,
        408 => ErrorKind::Timeout,
        429 | 503 => ErrorKind::Throttled,
        400..=499 => ErrorKind::Invalid,
        _ => ErrorKind::Other,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn object_names_are_encoded_once_keeping_slashes() {
        let got: String = utf8_percent_encode("p/m@1@0@abc def+%", KEY_ENCODE).collect();
        assert_eq!(got, "p/m%401%400%40abc%20def%2B%25");
    }

    #[test]
    fn crc32c_header_is_base64_big_endian() {
        // CRC32C("123456789") = 0xE3069283.
        assert_eq!(crc32c_header(b"123456789"), "4waSgw==");
    }

    #[test]
    fn backoff_is_jittered_under_the_cap() {
        for n in 1..=6 {
            let cap = INITIAL_BACKOFF * (1 << (n - 1).min(4));
            assert!(backoff(n) <= cap);
        }
    }

    fn direct(cfg: &S3Config, creds: Credentials) -> Result<Direct, &'static str> {
        let ep = cfg.validate().unwrap();
        let (_, hyper) =
            super::super::http::client(None, Duration::from_secs(1), true, None).unwrap();
        Direct::new(cfg, &ep, hyper, creds)
    }

    fn config(endpoint: &str) -> S3Config {
        let mut c = S3Config::for_endpoint(endpoint, "kvcache", "us-west-2", "AKID", "SECRET");
        c.s3_bucket = None;
        c
    }

    fn static_creds() -> Credentials {
        Credentials::new("AKID", "SECRET", None, None, "test")
    }

    /// The URLs the SDK's endpoint rules give for each `s3_endpoint` form and addressing style.
    #[test]
    fn object_urls_for_every_endpoint_form() {
        let url = |c: &S3Config| direct(c, static_creds()).unwrap().url("pre/m@1@ab");
        assert_eq!(
            url(&config("s3://my-bucket")),
            "https://my-bucket.s3.us-west-2.amazonaws.com/pre/m%401%40ab"
        );
        let mut c = config("s3://my-bucket");
        c.s3_addressing_style = Some(super::super::AddressingStyle::Path);
        assert_eq!(
            url(&c),
            "https://s3.us-west-2.amazonaws.com/my-bucket/pre/m%401%40ab"
        );
        let mut c = config("s3://my-bucket.cwlota.com");
        c.disable_tls = true;
        assert_eq!(url(&c), "http://my-bucket.cwlota.com/pre/m%401%40ab");
        let mut c = config("http://127.0.0.1:3900");
        c.s3_bucket = Some("kvcache".into());
        assert_eq!(url(&c), "http://127.0.0.1:3900/kvcache/pre/m%401%40ab");
    }

    /// S3 Express sessions are signed by the SDK only.
    #[test]
    fn s3_express_stays_on_the_sdk() {
        let mut c = config("s3://my-bucket");
        c.s3_enable_s3express = true;
        assert!(direct(&c, static_creds()).is_err());
    }

    /// `Debug` never shows the credentials.
    #[test]
    fn debug_has_no_secret() {
        let d = direct(&config("s3://my-bucket"), static_creds()).unwrap();
        let shown = format!("{d:?}");
        assert!(
            !shown.contains("SECRET") && !shown.contains("AKID"),
            "{shown}"
        );
    }

    #[test]
    fn aws_regional_hosts() {
        assert_eq!(aws_host("us-east-1"), "s3.us-east-1.amazonaws.com");
        assert_eq!(aws_host("cn-north-1"), "s3.cn-north-1.amazonaws.com.cn");
    }

    #[test]
    fn virtual_host_labels() {
        assert!(host_label("kvtier-test"));
        assert!(!host_label("Upper"));
        assert!(!host_label("dotted.bucket"));
        assert!(!host_label("ab"));
    }
}
