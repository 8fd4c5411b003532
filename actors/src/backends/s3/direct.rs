//! The direct data path: `PutObject`, `GetObject` and `HeadObject` signed with `aws-sigv4` (the
//! SDK's own SigV4 signer) and sent on the same pooled hyper client the SDK uses, without the
//! SDK's per-request orchestration (config layering, interceptors, endpoint rules, identity
//! resolution, retry bookkeeping).
//!
//! At 256 KiB objects that orchestration was most of the client's CPU per request (docs/benchmarks.md).
//! Everything else (listing, deletes, S3 Express sessions, the credential chain) stays on the
//! SDK; see [`super::DataPath`] for when this path is used.
//!
//! What a request does here, matching the SDK path:
//!
//! - SigV4 over the method, the percent-encoded object URL, `host`, `x-amz-date`,
//!   `x-amz-content-sha256` (the payload's SHA-256, or `UNSIGNED-PAYLOAD`) and the other headers
//!   sent; the session token when the credentials carry one;
//! - attempts under [`RetryPolicy::S3`] (kvtier's one retry policy, [`crate::retry`], which the
//!   Hub client shares): up to 3, each bounded by the attempt timeout, exponential backoff with
//!   full jitter or the server's `Retry-After` (capped), retrying connection failures, 5xx,
//!   408 and 429 (including 503 SlowDown); a timed-out GET or HEAD is retried once, a
//!   timed-out PUT is not; other statuses fail at once;
//! - `RequestTimeTooSkewed`: the signer adopts the server's clock offset (from its `Date`
//!   header; kept for later requests) and the request is signed again and retried at once;
//! - `ExpiredToken`, `InvalidAccessKeyId`, `InvalidToken`, `TokenRefreshRequired`: the
//!   credentials are fetched again from their source and the request retried once with them;
//!   the storage adopts the fresh credentials for later requests;
//! - a 404 whose code is `NoSuchBucket` is an [`ErrorKind::BucketMissing`] error, never a
//!   miss (a HEAD 404 has no body: the storage confirms the bucket, see
//!   [`Direct::bucket_exists`]);
//! - a GET's body is read inside its attempt, straight into the caller's buffer, so a body that
//!   stalls or breaks off mid-stream times out or is retried like any other failure;
//! - with `s3_checksum = "crc32c"`, PUTs send `x-amz-checksum-crc32c` (which the store checks)
//!   and GETs ask for it back and check it; with `auto` payload signing over plain HTTP, PUTs
//!   send it too.

use std::ops::ControlFlow;
use std::sync::atomic::{AtomicI64, Ordering};
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use aws_credential_types::provider::SharedCredentialsProvider;

use aws_credential_types::Credentials;
use aws_sdk_s3::error::DisplayErrorContext;
use aws_sigv4::http_request::{
    sign, PayloadChecksumKind, PercentEncodingMode, SignableBody, SignableRequest, SigningSettings,
    UriPathNormalizationMode,
};
use aws_sigv4::sign::v4;
use aws_smithy_runtime_api::client::identity::Identity;
use aws_smithy_types::body::SdkBody;
use bytes::Bytes;
use http_body_util::BodyExt;
use percent_encoding::{utf8_percent_encode, AsciiSet, NON_ALPHANUMERIC};

use super::client::{current_credentials, ATTEMPT_TIMEOUT};
use super::config::{ResolvedEndpoint, S3Config};
use super::http::HyperClient;
use crate::retry::{parse_retry_after, Attempts, Outcome, RetryPolicy};
use crate::storage::{status_kind, BackendError, ErrorKind, Fetched};
use response::{content_length, crc32c_header, error_code, read_capped, server_clock_offset};

/// Bytes an object name keeps as they are in the URL path: RFC 3986 unreserved plus `/`, as the
/// SDK encodes S3 keys. Everything else is percent-encoded (once: the canonical request uses
/// the path as sent).
const KEY_ENCODE: &AsciiSet = &NON_ALPHANUMERIC
    .remove(b'-')
    .remove(b'_')
    .remove(b'.')
    .remove(b'~')
    .remove(b'/');

/// Most of an error body read to find its S3 `<Code>` and `<Message>`.
const ERROR_BODY_MAX: usize = 8 * 1024;

/// Error codes that mean the credentials must be fetched again.
pub(crate) const CREDENTIAL_CODES: [&str; 4] = [
    "ExpiredToken",
    "InvalidAccessKeyId",
    "InvalidToken",
    "TokenRefreshRequired",
];

/// One attempt's failure, and what the retry policy needs to know about it.
struct Failure {
    error: BackendError,
    /// How the attempt failed; `None`: final whatever the policy (the request could not even
    /// be built).
    outcome: Option<Outcome>,
    /// The server's `Retry-After`.
    retry_after: Option<Duration>,
    /// Something to fix before one immediate retry.
    fix: Option<Fix>,
}

/// A correctable failure.
enum Fix {
    /// The server's clock is this many milliseconds ahead of ours (negative: behind).
    ClockSkew(i64),
    /// The credentials were refused as expired or unknown: fetch them again.
    Credentials,
}

impl Failure {
    fn fatal(error: BackendError) -> Self {
        Self {
            error,
            outcome: None,
            retry_after: None,
            fix: None,
        }
    }

    fn connection(error: BackendError) -> Self {
        Self {
            outcome: Some(Outcome::Connection),
            ..Self::fatal(error)
        }
    }
}

/// Where fresh credentials come from when a request finds its own refused, and where they go
/// (the storage adopts what arrives on the channel at its next request).
#[derive(Clone)]
pub(crate) struct Refresher {
    /// The credential source.
    pub provider: SharedCredentialsProvider,
    /// To the storage.
    pub fresh: flume::Sender<Credentials>,
}

/// One request's retry state.
struct RequestState {
    attempts: Attempts,
    /// Credentials fetched for this request after the first were refused.
    identity: Option<Identity>,
    skew_fixed: bool,
    credentials_fixed: bool,
}

/// The direct path's fixed parts, shared by every request. Its credentials are fixed too: the
/// storage swaps in a new `Direct` ([`Direct::with_credentials`]) when temporary credentials
/// are refreshed.
#[derive(Clone)]
pub(super) struct Direct {
    client: HyperClient,
    /// `scheme://authority[/path]` requests start with, bucket included when virtual-hosted.
    base: String,
    /// `/bucket` for path-style addressing, empty for virtual-hosted.
    bucket_path: String,
    region: String,
    /// The bucket (for error messages and the bucket check).
    bucket: String,
    identity: Identity,
    /// Server clock minus ours, in milliseconds, as learnt from a `RequestTimeTooSkewed`
    /// answer; shared by every copy of this path (refreshed signers included).
    clock_offset: Arc<AtomicI64>,
    /// Where to get fresh credentials when a request finds its own refused.
    refresher: Option<Refresher>,
    sign_payload: bool,
    /// PUTs send `x-amz-checksum-crc32c`.
    put_crc32c: bool,
    /// GETs ask for the CRC32C and check it.
    get_crc32c: bool,
    attempt_timeout: Duration,
    /// The retry policy, with the request deadline (`retry_timeout_secs`).
    policy: RetryPolicy,
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
    pub(super) fn new(
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
            bucket: ep.bucket.clone(),
            identity: credentials.into(),
            clock_offset: Arc::new(AtomicI64::new(0)),
            refresher: None,
            sign_payload: cfg.signs_payload(ep),
            put_crc32c: cfg.put_crc32c(ep),
            get_crc32c: cfg.get_crc32c(),
            attempt_timeout: cfg
                .s3_attempt_timeout_secs
                .map_or(ATTEMPT_TIMEOUT, Duration::from_secs_f64),
            policy: RetryPolicy::S3
                .with_retry_timeout(Duration::from_secs_f64(cfg.retry_timeout_secs)),
            metrics: crate::metrics::AdapterMetrics::off(),
        })
    }

    /// The same path, counting its retries in `metrics`.
    pub(super) fn with_metrics(&self, metrics: crate::metrics::AdapterMetrics) -> Self {
        Self {
            metrics,
            ..self.clone()
        }
    }

    /// The same path, fetching fresh credentials through `refresher` when a request finds its
    /// own refused.
    pub(crate) fn with_refresher(&self, refresher: Refresher) -> Self {
        Self {
            refresher: Some(refresher),
            ..self.clone()
        }
    }

    /// The clock offset adopted from the server (milliseconds; positive: the server is ahead).
    pub(crate) fn clock_offset_ms(&self) -> i64 {
        self.clock_offset.load(Ordering::Relaxed)
    }

    /// The time to sign with: ours, corrected by the server's clock offset.
    fn signing_time(&self) -> SystemTime {
        let offset = self.clock_offset_ms();
        let now = SystemTime::now();
        if offset >= 0 {
            now + Duration::from_millis(offset as u64)
        } else {
            now.checked_sub(Duration::from_millis(offset.unsigned_abs()))
                .unwrap_or(now)
        }
    }

    /// The same path signing with other credentials (after a refresh).
    pub(crate) fn with_credentials(&self, credentials: Credentials) -> Self {
        Self {
            identity: credentials.into(),
            ..self.clone()
        }
    }

    /// The request URL of an object (its full key, prefix included).
    pub(super) fn url(&self, object: &str) -> String {
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
        identity: Option<&Identity>,
    ) -> Result<http::Request<SdkBody>, BackendError> {
        let invalid =
            |e: &dyn std::fmt::Display| BackendError::io(op, format!("signing the request: {e}"));
        let mut settings = SigningSettings::default();
        settings.percent_encoding_mode = PercentEncodingMode::Single;
        settings.uri_path_normalization_mode = UriPathNormalizationMode::Disabled;
        settings.payload_checksum_kind = PayloadChecksumKind::XAmzSha256;
        let params = v4::SigningParams::builder()
            .identity(identity.unwrap_or(&self.identity))
            .region(&self.region)
            .name("s3")
            .time(self.signing_time())
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

    /// A request's retry state; `idempotent` requests are retried once after a timeout.
    fn state(&self, idempotent: bool) -> RequestState {
        RequestState {
            attempts: Attempts::new(self.policy, idempotent),
            identity: None,
            skew_fixed: false,
            credentials_fixed: false,
        }
    }

    /// Settles one attempt of `op`: `Break` with the result to return, or `Continue` (after
    /// the wait the retry policy asks for, or a fix) when it should be tried again.
    async fn settle<T>(
        &self,
        op: &'static str,
        st: &mut RequestState,
        outcome: Result<Result<T, Failure>, tokio::time::error::Elapsed>,
    ) -> ControlFlow<Result<T, BackendError>> {
        let failure = match outcome {
            Ok(Ok(v)) => return ControlFlow::Break(Ok(v)),
            Ok(Err(f)) => f,
            Err(_) => Failure {
                outcome: Some(Outcome::TimedOut),
                ..Failure::fatal(BackendError::new(
                    ErrorKind::Timeout,
                    op,
                    if st.attempts.deadline_passed() {
                        "no complete answer before the request's deadline".to_owned()
                    } else {
                        format!(
                            "no complete answer within the attempt timeout ({:.1}s)",
                            self.attempt_timeout.as_secs_f64()
                        )
                    },
                ))
            },
        };
        match failure.fix {
            Some(Fix::ClockSkew(offset)) if !st.skew_fixed => {
                st.skew_fixed = true;
                self.clock_offset.store(offset, Ordering::Relaxed);
                self.metrics.retry("clock_skew");
                tracing::warn!(
                    op,
                    offset_ms = offset,
                    "s3: the server's clock differs from ours; signing with its time"
                );
                return ControlFlow::Continue(());
            }
            Some(Fix::Credentials) if !st.credentials_fixed => {
                st.credentials_fixed = true;
                if let Some(identity) = self.fresh_identity(op).await {
                    st.identity = Some(identity);
                    self.metrics.retry("credentials");
                    return ControlFlow::Continue(());
                }
            }
            _ => {}
        }
        let wait = failure
            .outcome
            .and_then(|o| st.attempts.next(o, failure.retry_after).map(|w| (o, w)));
        let Some((outcome, wait)) = wait else {
            let e = failure.error;
            let message = st.attempts.give_up(e.message().to_owned());
            return ControlFlow::Break(Err(BackendError::new(e.kind(), e.op(), message)));
        };
        self.metrics.retry(outcome.label());
        tracing::debug!(op, attempt = st.attempts.number() - 1, error = %failure.error, wait_ms = wait.as_millis() as u64, "s3: retrying");
        tokio::time::sleep(wait).await;
        ControlFlow::Continue(())
    }

    /// Credentials fetched again from their source (after a request found its own refused),
    /// also handed to the storage for later requests; `None` when there is no source or it
    /// failed or did not answer within the attempt timeout.
    async fn fresh_identity(&self, op: &'static str) -> Option<Identity> {
        let r = self.refresher.as_ref()?;
        match tokio::time::timeout(self.attempt_timeout, current_credentials(&r.provider)).await {
            Ok(Ok(creds)) => {
                tracing::info!(op, "s3: credentials refused; fetched fresh ones");
                let _ = r.fresh.send(creds.clone());
                Some(creds.into())
            }
            Ok(Err(e)) => {
                tracing::warn!(op, error = %e, "s3: credentials refused and fetching fresh ones failed");
                None
            }
            Err(_) => {
                tracing::warn!(
                    op,
                    "s3: credentials refused and their source did not answer"
                );
                None
            }
        }
    }

    /// Runs `attempt` until [`Direct::settle`] says it is done.
    async fn retrying<T, Fut>(
        &self,
        op: &'static str,
        idempotent: bool,
        attempt: impl Fn(Option<Identity>) -> Fut,
    ) -> Result<T, BackendError>
    where
        Fut: std::future::Future<Output = Result<T, Failure>>,
    {
        let mut st = self.state(idempotent);
        loop {
            let limit = st.attempts.attempt_timeout(self.attempt_timeout);
            let outcome = tokio::time::timeout(limit, attempt(st.identity.clone())).await;
            if let ControlFlow::Break(r) = self.settle(op, &mut st, outcome).await {
                return r;
            }
        }
    }

    /// Sends one request; transport failures are retried connection errors.
    async fn send(
        &self,
        op: &'static str,
        req: http::Request<SdkBody>,
    ) -> Result<http::Response<hyper::body::Incoming>, Failure> {
        self.client.request(req).await.map_err(|e| {
            Failure::connection(BackendError::connection(
                op,
                DisplayErrorContext(&e).to_string(),
            ))
        })
    }

    /// PUTs `data` under the object name `object`.
    pub(super) async fn put(&self, object: &str, data: Bytes) -> Result<(), BackendError> {
        let url = self.url(object);
        let mut headers = vec![
            ("content-length", data.len().to_string()),
            ("content-type", "application/octet-stream".to_owned()),
        ];
        if self.put_crc32c {
            headers.push(("x-amz-checksum-crc32c", crc32c_header(&data)));
        }
        self.retrying("put", false, |identity| {
            let (url, headers, data) = (&url, &headers, &data);
            async move {
                let req = self
                    .request(
                        "put",
                        http::Method::PUT,
                        url,
                        headers,
                        Some(data),
                        identity.as_ref(),
                    )
                    .map_err(Failure::fatal)?;
                let resp = self.send("put", req).await?;
                if resp.status().is_success() {
                    Ok(())
                } else {
                    Err(self.status_failure("put", resp).await)
                }
            }
        })
        .await
    }

    /// The object's size (`None` when absent or empty, as the SDK path's lookup).
    pub(super) async fn head(&self, object: &str) -> Result<Option<u64>, BackendError> {
        let url = self.url(object);
        let (status, len) = self.head_url("head", &url, &[404]).await?;
        Ok(len.filter(|l| *l > 0 && status != 404))
    }

    /// Whether the bucket exists (`HeadBucket`): a HEAD 404 has no body to say whether the
    /// object or the bucket is missing, so the storage asks this before it calls such a 404 a
    /// miss. A 403 counts as existing (the credentials may lack `s3:ListBucket`; requests on
    /// objects then tell the rest).
    pub(super) async fn bucket_exists(&self) -> Result<bool, BackendError> {
        let url = format!("{}{}/", self.base, self.bucket_path);
        let (status, _) = self.head_url("head bucket", &url, &[403, 404]).await?;
        Ok(status != 404)
    }

    /// A HEAD of `url` under the retry policy: its status (2xx or one of `answers`) and
    /// declared length; any other status is a failure.
    async fn head_url(
        &self,
        op: &'static str,
        url: &str,
        answers: &[u16],
    ) -> Result<(u16, Option<u64>), BackendError> {
        self.retrying(op, true, |identity| async move {
            let req = self
                .request(op, http::Method::HEAD, url, &[], None, identity.as_ref())
                .map_err(Failure::fatal)?;
            let resp = self.send(op, req).await?;
            let status = resp.status().as_u16();
            if resp.status().is_success() || answers.contains(&status) {
                Ok((status, content_length(&resp)))
            } else {
                Err(self.status_failure(op, resp).await)
            }
        })
        .await
    }

    /// GETs the object into `buf`, which must end up exactly full.
    pub(super) async fn get(&self, object: &str, buf: &mut [u8]) -> Result<Fetched, BackendError> {
        let url = self.url(object);
        let headers: Vec<(&'static str, String)> = if self.get_crc32c {
            vec![("x-amz-checksum-mode", "ENABLED".to_owned())]
        } else {
            Vec::new()
        };
        // Not [`Direct::retrying`]: each attempt borrows the buffer mutably, in turn.
        let mut st = self.state(true);
        loop {
            let attempt = self.get_attempt(&url, &headers, &mut *buf, st.identity.as_ref());
            let limit = st.attempts.attempt_timeout(self.attempt_timeout);
            let outcome = tokio::time::timeout(limit, attempt).await;
            if let ControlFlow::Break(r) = self.settle("get", &mut st, outcome).await {
                return r;
            }
        }
    }

    /// One GET attempt into `buf`, body included.
    async fn get_attempt(
        &self,
        url: &str,
        headers: &[(&'static str, String)],
        buf: &mut [u8],
        identity: Option<&Identity>,
    ) -> Result<Fetched, Failure> {
        let req = self
            .request("get", http::Method::GET, url, headers, None, identity)
            .map_err(Failure::fatal)?;
        let resp = self.send("get", req).await?;
        match resp.status().as_u16() {
            200..=299 => {}
            // A missing key is a miss; a missing bucket is an error.
            404 => {
                let failure = self.status_failure("get", resp).await;
                return match failure.error.kind() {
                    ErrorKind::BucketMissing => Err(failure),
                    _ => Ok(Fetched::Absent),
                };
            }
            _ => return Err(self.status_failure("get", resp).await),
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
                Failure::connection(BackendError::connection(
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
                return Err(Failure::connection(BackendError::new(
                    ErrorKind::Corrupt,
                    "get",
                    format!("CRC32C mismatch: the store declared {want}, the body has {got}"),
                )));
            }
        }
        Ok(Fetched::Hit)
    }
}

impl Direct {
    /// A non-success answer as a failure. The retry policy decides on its status (5xx, 408 and
    /// 429 are retried); `RequestTimeTooSkewed` and refused credentials carry a fix; a 404
    /// `NoSuchBucket` is a [`ErrorKind::BucketMissing`] error naming the bucket. The message
    /// names the status and the S3 error code and message, never the rest of the body (a
    /// `SignatureDoesNotMatch` body echoes the string to sign).
    async fn status_failure(
        &self,
        op: &'static str,
        resp: http::Response<hyper::body::Incoming>,
    ) -> Failure {
        let status = resp.status();
        let retry_after = resp
            .headers()
            .get(http::header::RETRY_AFTER)
            .and_then(|v| v.to_str().ok())
            .and_then(parse_retry_after);
        let offset = server_clock_offset(&resp);
        let body = read_capped(resp.into_body(), ERROR_BODY_MAX).await;
        let (code, text) = error_code(&body);
        let mut message = format!("HTTP {status}");
        for part in [&code, &text].into_iter().flatten() {
            message.push_str(": ");
            message.push_str(part);
        }
        let code = code.as_deref().unwrap_or("");
        if code == "NoSuchBucket" {
            return Failure::fatal(no_such_bucket(op, &self.bucket, &message));
        }
        let fix = match code {
            "RequestTimeTooSkewed" => offset.map(Fix::ClockSkew),
            c if CREDENTIAL_CODES.contains(&c) && self.refresher.is_some() => {
                Some(Fix::Credentials)
            }
            _ => None,
        };
        Failure {
            error: BackendError::new(status_kind(status.as_u16()), op, message),
            outcome: Some(Outcome::Status(status.as_u16())),
            retry_after,
            fix,
        }
    }
}

/// The error for a bucket that does not exist: it names the bucket and what to check.
pub(crate) fn no_such_bucket(op: &'static str, bucket: &str, detail: &str) -> BackendError {
    BackendError::new(
        ErrorKind::BucketMissing,
        op,
        format!(
            "bucket {bucket:?} does not exist ({detail}): it was deleted, or s3_endpoint/s3_bucket name another"
        ),
    )
}

mod response;
#[cfg(test)]
mod tests;
