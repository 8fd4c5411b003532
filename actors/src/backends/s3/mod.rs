//! The `s3` backend: objects in an S3-compatible bucket through the official `aws-sdk-s3`.
//!
//! Objects are the raw chunk bytes under the literal object name (after an optional key
//! prefix), so a bucket written by LMCache MP is readable here and the reverse. Store is one PUT
//! per key; lookup uses the actor's ledger as its size cache, then HEAD (200 with a length > 0
//! is a hit, 404 a miss); load is a GET streamed straight into the caller's buffer, size
//! checked; delete is `DeleteObjects` in batches of up to 1000; listing is `ListObjectsV2` with
//! prefix `<model>@`.
//!
//! Requests run on a small multi-threaded tokio runtime owned by the storage, never on the
//! backend actor's arbiter, bounded to `s3_num_io_threads` in flight. The half-open circuit
//! breaker ([`crate::breaker`], shared with `hfbucket`) opens after 3 consecutive failures
//! that say the store is unwell (no connection, timeouts, 5xx or `SlowDown` after the retries)
//! and at once on `NoSuchBucket`: requests then fail at once without network traffic; after
//! `circuit_breaker_cooldown_secs` one request is let through as a probe, and an answer closes
//! the breaker again. While the breaker is not closed, lookups do not trust the size cache:
//! every key is probed, so lookups are misses at once (or the half-open probe) instead of
//! locking keys whose loads cannot succeed.
//!
//! A missing bucket is never a missing key: a GET 404 or any other answer whose code is
//! `NoSuchBucket` is an [`ErrorKind::BucketMissing`] error naming the bucket. A HEAD 404 has no
//! body, so it is a miss only when a request found the bucket within `s3_bucket_check_secs`;
//! otherwise one `HeadBucket` confirms the bucket first. What the request futures learn about
//! the bucket they note in an atomic timestamp that the storage shares with them.

mod client;
mod config;
mod direct;
mod http;

use std::future::Future;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime};

use aws_credential_types::provider::SharedCredentialsProvider;

use aws_sdk_s3::config::http::HttpResponse;
use aws_sdk_s3::error::{DisplayErrorContext, ProvideErrorMetadata, SdkError};
use aws_sdk_s3::primitives::ByteStream;
use aws_sdk_s3::types::{ChecksumAlgorithm, Delete, ObjectIdentifier};
use bytes::Bytes;
use futures_util::FutureExt;
use tokio::sync::Semaphore;

use client::{build_clients, current_credentials, io_runtime, send_put, with_config};
pub use client::{ATTEMPT_TIMEOUT, CONNECT_TIMEOUT, MAX_ATTEMPTS};
pub use config::{
    AddressingStyle, ChecksumMode, DataPath, PayloadSigning, ResolvedEndpoint, S3Config,
};
pub use direct::{Direct, Refresher};

use crate::buffer::LoadBuf;
use crate::key::{NameFormat, ObjectKey};
use crate::messages::KeyPage;
use crate::storage::{
    answer_known, status_kind, BackendError, ErrorKind, Fetched, Io, Recovered, Removed, Storage,
};

use crate::breaker::Breaker;
pub use crate::breaker::BREAKER_THRESHOLD;
/// Keys per `DeleteObjects` request (the S3 maximum).
const DELETE_BATCH: usize = 1000;

/// What request futures share (immutable, plus the in-flight bound).
struct Shared {
    client: aws_sdk_s3::Client,
    /// The SDK client's credential source (asked again when the store refuses credentials).
    credentials: SharedCredentialsProvider,
    bucket: String,
    prefix: String,
    format: NameFormat,
    permits: Semaphore,
    /// PUTs hash and sign their payload.
    sign_payload: bool,
    /// PUTs send their body's CRC32C for the store to check.
    put_crc32c: bool,
    /// GETs ask for the object's CRC32C and check it.
    get_crc32c: bool,
    /// When the bucket was last seen to exist: milliseconds since `opened`, plus 1 (0: not
    /// yet, or seen missing since).
    bucket_seen: AtomicU64,
    opened: Instant,
    /// A HEAD 404 is a miss without asking again whether the bucket exists for this long
    /// after the bucket was last seen.
    bucket_check_interval: Duration,
}

/// Refresh temporary credentials this long before they expire.
pub const REFRESH_AHEAD: Duration = Duration::from_secs(300);
/// Closer than this to expiry (no fresh credentials yet), data requests take the SDK path,
/// whose identity cache refreshes on its own.
pub const SDK_FALLBACK_WITHIN: Duration = Duration::from_secs(60);
/// After a failed refresh, wait this long before the next try.
const REFRESH_RETRY: Duration = Duration::from_secs(10);

/// A refresh that has not answered in this long is abandoned and tried again later.
const REFRESH_DEADLINE: Duration = Duration::from_secs(60);

type Refreshed = Result<aws_credential_types::Credentials, String>;

/// The direct data path and its credentials, owned by the storage. A refresh runs as a task on
/// the S3 runtime; the storage keeps its handle and looks at it (without waiting) at its next
/// data request. No channel and no lock: only the storage's owner, the backend actor, touches
/// this. A refresh task that panics counts as a failed refresh; one that hangs past
/// [`REFRESH_DEADLINE`] is aborted; either way another is tried after [`REFRESH_RETRY`].
struct DirectPath {
    /// The signer for new requests; requests in flight keep the one they started with.
    direct: Arc<Direct>,
    provider: SharedCredentialsProvider,
    /// When the current credentials expire (`None`: long-lived).
    expiry: Option<SystemTime>,
    /// The refresh in flight, and when it started.
    refreshing: Option<(tokio::task::JoinHandle<Refreshed>, Instant)>,
    retry_at: Option<Instant>,
    refreshes: u64,
    /// Credentials fetched by requests whose own were refused ([`Refresher`]).
    fresh: flume::Receiver<aws_credential_types::Credentials>,
    /// [`REFRESH_RETRY`] and [`REFRESH_DEADLINE`] (shorter in tests).
    refresh_retry: Duration,
    refresh_deadline: Duration,
    /// Refreshes that failed, panicked or were abandoned.
    refresh_failures: u64,
}

impl DirectPath {
    /// The path signing with `direct`'s credentials, which expire at `expiry`; requests whose
    /// credentials are refused fetch fresh ones from `provider` themselves.
    fn new(
        direct: Direct,
        provider: SharedCredentialsProvider,
        expiry: Option<SystemTime>,
    ) -> Self {
        let (tx, fresh) = flume::unbounded();
        let direct = direct.with_refresher(Refresher {
            provider: provider.clone(),
            fresh: tx,
        });
        Self {
            direct: Arc::new(direct),
            provider,
            expiry,
            refreshing: None,
            retry_at: None,
            refreshes: 0,
            fresh,
            refresh_retry: REFRESH_RETRY,
            refresh_deadline: REFRESH_DEADLINE,
            refresh_failures: 0,
        }
    }

    /// The signer for the next requests, or `None` when they should take the SDK path (the
    /// credentials are about to expire). Applies a finished refresh and starts one when due.
    fn signer(&mut self, runtime: &tokio::runtime::Handle) -> Option<Arc<Direct>> {
        // Newest last: credentials a refused request fetched.
        if let Some(creds) = self.fresh.try_iter().last() {
            self.apply(Ok(creds));
        }
        if let Some((task, started)) = self.refreshing.as_mut() {
            let res = match task.now_or_never() {
                Some(Ok(res)) => Some(res),
                Some(Err(e)) => Some(Err(format!("the refresh task failed: {e}"))),
                None if started.elapsed() >= self.refresh_deadline => {
                    task.abort();
                    Some(Err(format!(
                        "no answer from the credential source within {:.1}s",
                        self.refresh_deadline.as_secs_f64()
                    )))
                }
                None => None,
            };
            if let Some(res) = res {
                self.refreshing = None;
                self.apply(res);
            }
        }
        let Some(expiry) = self.expiry else {
            return Some(self.direct.clone());
        };
        let left = expiry
            .duration_since(SystemTime::now())
            .unwrap_or(Duration::ZERO);
        if left <= REFRESH_AHEAD
            && self.refreshing.is_none()
            && self.retry_at.is_none_or(|t| Instant::now() >= t)
        {
            let provider = self.provider.clone();
            let task = runtime.spawn(async move { current_credentials(&provider).await });
            self.refreshing = Some((task, Instant::now()));
        }
        (left > SDK_FALLBACK_WITHIN).then(|| self.direct.clone())
    }

    /// Takes a refresh's result: fresh credentials for the signer, or a time to try again.
    /// Credentials that themselves expire within [`REFRESH_AHEAD`] (a source handing out
    /// short-lived ones) are refreshed again only after [`REFRESH_RETRY`], not at every request.
    fn apply(&mut self, res: Refreshed) {
        match res {
            Ok(creds) => {
                self.expiry = creds.expiry();
                self.direct = Arc::new(self.direct.with_credentials(creds));
                self.refreshes += 1;
                let short = self.expiry.is_some_and(|t| {
                    t.duration_since(SystemTime::now())
                        .unwrap_or(Duration::ZERO)
                        <= REFRESH_AHEAD
                });
                self.retry_at = short.then(|| Instant::now() + self.refresh_retry);
                tracing::debug!("s3: direct data path has fresh credentials");
            }
            Err(e) => {
                tracing::warn!(error = %e, "s3: refreshing credentials failed; will retry");
                self.refresh_failures += 1;
                self.retry_at = Some(Instant::now() + self.refresh_retry);
            }
        }
    }

    fn status(&self) -> serde_json::Value {
        serde_json::json!({
            "expires_in_secs": self.expiry.map(|t| t
                .duration_since(SystemTime::now())
                .unwrap_or(Duration::ZERO)
                .as_secs()),
            "refreshes": self.refreshes,
            "refresh_failures": self.refresh_failures,
            "refreshing": self.refreshing.is_some(),
            "clock_offset_ms": self.direct.clock_offset_ms(),
        })
    }
}

impl Shared {
    fn object_key(&self, key: &ObjectKey) -> String {
        let mut s = self.prefix.clone();
        s.push_str(&key.object_name(self.format));
        s
    }

    /// Sends an SDK request built by `send` (given a config override, or none); when the
    /// store refuses its credentials (`ExpiredToken`, `InvalidAccessKeyId`, …), once more with
    /// credentials fetched again from their source, through a config override: the SDK's
    /// identity cache cannot be told to drop the ones it holds.
    async fn sdk_send<T, E, F, Fut>(&self, send: F) -> Result<T, SdkError<E, HttpResponse>>
    where
        F: Fn(Option<aws_sdk_s3::config::Builder>) -> Fut,
        Fut: Future<Output = Result<T, SdkError<E, HttpResponse>>>,
        E: ProvideErrorMetadata,
    {
        let first = send(None).await;
        let refused = matches!(&first, Err(e)
            if e.code().is_some_and(|c| direct::CREDENTIAL_CODES.contains(&c)));
        if !refused {
            return first;
        }
        match tokio::time::timeout(REFRESH_DEADLINE, current_credentials(&self.credentials)).await {
            Ok(Ok(creds)) => {
                tracing::info!("s3: credentials refused; retrying with fresh ones");
                let fresh = aws_sdk_s3::config::Builder::new().credentials_provider(creds);
                send(Some(fresh)).await
            }
            _ => first,
        }
    }

    /// Notes that the bucket exists (a request on it succeeded).
    fn bucket_exists_now(&self) {
        let ms = self.opened.elapsed().as_millis() as u64 + 1;
        self.bucket_seen.store(ms, Ordering::Relaxed);
    }

    /// Whether the bucket was seen within the bucket check interval.
    fn bucket_seen_recently(&self) -> bool {
        match self.bucket_seen.load(Ordering::Relaxed) {
            0 => false,
            ms => {
                let seen = Duration::from_millis(ms - 1);
                self.opened.elapsed().saturating_sub(seen) < self.bucket_check_interval
            }
        }
    }

    /// Takes the answer of one request: a missing bucket must be checked again before the
    /// next HEAD 404 counts as a miss; any other answer shows the bucket exists.
    fn follow<T>(&self, r: &Result<T, BackendError>) {
        match r {
            Ok(_) => self.bucket_exists_now(),
            Err(e) if e.kind() == ErrorKind::BucketMissing => {
                self.bucket_seen.store(0, Ordering::Relaxed)
            }
            Err(_) => {}
        }
    }

    /// A HEAD answered 404, which has no body to tell a missing object from a missing bucket:
    /// a miss when the bucket was seen within the check interval or exists now (one
    /// `HeadBucket`), else a [`ErrorKind::BucketMissing`] error. (Chosen over a check at
    /// start only, which misses a bucket deleted later, and over a GET or a listing per 404,
    /// which cost more than a HEAD of the bucket.)
    async fn confirm_absent(&self, direct: Option<&Direct>) -> Result<Option<u64>, BackendError> {
        if self.bucket_seen_recently() {
            return Ok(None);
        }
        let exists = match direct {
            Some(d) => d.bucket_exists().await?,
            None => match self.client.head_bucket().bucket(&self.bucket).send().await {
                Ok(_) => true,
                Err(e) => match e.raw_response().map(|r| r.status().as_u16()) {
                    Some(404) => false,
                    Some(403) => true,
                    _ => return Err(classify("head bucket", &self.bucket, e)),
                },
            },
        };
        if exists {
            self.bucket_exists_now();
            Ok(None)
        } else {
            self.bucket_seen.store(0, Ordering::Relaxed);
            Err(direct::no_such_bucket(
                "head",
                &self.bucket,
                "HeadBucket answered 404",
            ))
        }
    }
}

/// S3 storage. See the module docs.
pub struct S3Storage {
    shared: Arc<Shared>,
    runtime: Option<tokio::runtime::Runtime>,
    handle: tokio::runtime::Handle,
    breaker: Breaker,
    rebuild: bool,
    endpoint: ResolvedEndpoint,
    region: String,
    in_flight_bound: usize,
    /// The direct data path, or why the SDK carries the data instead.
    direct: Result<DirectPath, String>,
    /// How long a health check may take: [`PROBE_TIMEOUT`], or the attempt timeout if shorter.
    probe_timeout: Duration,
}

/// `"direct"`, or `"sdk: <why>"` (for status and the log).
fn data_path_name(direct: &Result<DirectPath, String>) -> String {
    match direct {
        Ok(_) => "direct".to_owned(),
        Err(why) => format!("sdk: {why}"),
    }
}

fn classify<E>(
    op: &'static str,
    bucket: &str,
    e: SdkError<E, aws_sdk_s3::config::http::HttpResponse>,
) -> BackendError
where
    E: std::error::Error + ProvideErrorMetadata + Send + Sync + 'static,
{
    let message = DisplayErrorContext(&e).to_string();
    if e.code() == Some("NoSuchBucket") {
        return direct::no_such_bucket(op, bucket, "NoSuchBucket").with_source(e);
    }
    let kind = match &e {
        SdkError::DispatchFailure(_) => ErrorKind::Connection,
        SdkError::TimeoutError(_) => ErrorKind::Timeout,
        SdkError::ServiceError(_) | SdkError::ResponseError(_) => e
            .raw_response()
            .map_or(ErrorKind::Other, |r| status_kind(r.status().as_u16())),
        _ => ErrorKind::Other,
    };
    BackendError::new(kind, op, message).with_source(e)
}

impl S3Storage {
    /// Validates the config, builds the client and its runtime. `capacity_bytes` decides the
    /// default of `rebuild_index_on_start`.
    pub async fn open(
        cfg: &S3Config,
        format: NameFormat,
        capacity_bytes: u64,
    ) -> Result<Self, BackendError> {
        Self::open_resolving(cfg, format, capacity_bytes, None).await
    }

    /// [`S3Storage::open`], with every host name resolved to `resolve_to` when given (like
    /// curl's `--resolve`: for virtual-host-style requests to servers without DNS entries).
    pub async fn open_resolving(
        cfg: &S3Config,
        format: NameFormat,
        capacity_bytes: u64,
        resolve_to: Option<std::net::IpAddr>,
    ) -> Result<Self, BackendError> {
        Self::open_with(cfg, format, capacity_bytes, resolve_to, None).await
    }

    /// [`S3Storage::open_resolving`] with `credentials` in place of the config's (static keys
    /// or the default chain): for tests, and for hosts with a credential source of their own.
    pub async fn open_with(
        cfg: &S3Config,
        format: NameFormat,
        capacity_bytes: u64,
        resolve_to: Option<std::net::IpAddr>,
        credentials: Option<SharedCredentialsProvider>,
    ) -> Result<Self, BackendError> {
        let endpoint = cfg
            .validate()
            .map_err(|e| BackendError::invalid(e.to_string()))?;
        let runtime = io_runtime(cfg).map_err(|e| BackendError::io("open", e))?;
        let handle = runtime.handle().clone();
        let (c, ep) = (cfg.clone(), endpoint.clone());
        let (client, source, direct) = handle
            .spawn(async move {
                let clients = build_clients(&c, &ep, resolve_to, credentials).await?;
                let client = clients.sdk;
                let provider = clients.credentials;
                let source = provider.clone();
                let direct = match c.s3_data_path {
                    DataPath::Sdk => Err("s3_data_path is \"sdk\"".to_owned()),
                    DataPath::Direct => match current_credentials(&provider).await {
                        Ok(creds) => {
                            let expiry = creds.expiry();
                            Direct::new(&c, &ep, clients.hyper, creds)
                                .map(|d| DirectPath::new(d, provider, expiry))
                                .map_err(str::to_owned)
                        }
                        Err(e) => Err(format!("no credentials at start ({e})")),
                    },
                };
                Ok::<_, BackendError>((client, source, direct))
            })
            .await
            .map_err(|e| BackendError::io("open", e))??;
        tracing::info!(data_path = %data_path_name(&direct), "s3 adapter: data requests");
        Ok(Self {
            shared: Arc::new(Shared {
                client,
                credentials: source,
                bucket: endpoint.bucket.clone(),
                prefix: cfg.key_prefix(),
                format,
                permits: Semaphore::new(cfg.s3_num_io_threads),
                sign_payload: cfg.signs_payload(&endpoint),
                put_crc32c: cfg.put_crc32c(&endpoint),
                get_crc32c: cfg.get_crc32c(),
                bucket_seen: AtomicU64::new(0),
                opened: Instant::now(),
                bucket_check_interval: Duration::from_secs_f64(cfg.s3_bucket_check_secs),
            }),
            runtime: Some(runtime),
            handle,
            breaker: Breaker::new(
                "s3",
                Duration::from_secs_f64(cfg.circuit_breaker_cooldown_secs),
            ),
            rebuild: cfg.rebuild_index_on_start.unwrap_or(capacity_bytes > 0),
            endpoint,
            region: cfg.s3_region.clone(),
            in_flight_bound: cfg.s3_num_io_threads,
            probe_timeout: PROBE_TIMEOUT.min(
                cfg.s3_attempt_timeout_secs
                    .map_or(PROBE_TIMEOUT, Duration::from_secs_f64),
            ),
            direct,
        })
    }

    /// The direct path's signer for the next data requests, or `None` for the SDK path.
    fn signer(&mut self) -> Option<Arc<Direct>> {
        let runtime = self.handle.clone();
        self.direct.as_mut().ok()?.signer(&runtime)
    }

    /// The bucket requests go to.
    pub fn bucket(&self) -> &str {
        &self.shared.bucket
    }

    /// Runs one request per item on the S3 runtime (each its own task, so they spread over its
    /// threads), unless the breaker refuses; results keep input order. When they are in, the
    /// breaker follows them (on the actor's thread, through [`Io::then`]).
    fn per_item<I, T, F, Fut>(
        &mut self,
        op: &'static str,
        items: Vec<I>,
        f: F,
    ) -> Io<Vec<Result<T, BackendError>>>
    where
        I: Send + 'static,
        T: Send + 'static,
        F: Fn(Arc<Shared>, I) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = Result<T, BackendError>> + Send + 'static,
    {
        let n = items.len();
        if let Err(e) = self.breaker.admit() {
            return Io::ready((0..n).map(|_| Err(e.clone())).collect());
        }
        let handles: Vec<_> = items
            .into_iter()
            .map(|item| {
                let shared = self.shared.clone();
                let fut = f(shared.clone(), item);
                self.handle.spawn(async move {
                    let _permit = shared.permits.acquire().await;
                    fut.await
                })
            })
            .collect();
        Io::pending_then(
            async move {
                let mut out = Vec::with_capacity(n);
                for h in handles {
                    out.push(
                        h.await
                            .unwrap_or_else(|e| Err(BackendError::worker(op, e.to_string()))),
                    );
                }
                out
            },
            |s: &mut S3Storage, out: Vec<Result<T, BackendError>>| {
                s.breaker.observe(&out);
                out
            },
        )
    }
}

/// The object a health check GETs (under the key prefix). It is no key's name (no `@`), so
/// listings and recovery skip it; it is not expected to exist.
pub const PROBE_OBJECT: &str = ".kvtier-health-check";

/// How long a health check may take before the endpoint counts as unreachable.
pub const PROBE_TIMEOUT: Duration = Duration::from_secs(10);

/// The health check: a GET of [`PROBE_OBJECT`] on the data path, the cheapest request that
/// exercises what loads need. `NoSuchKey` (or the object itself) means the store serves;
/// `NoSuchBucket` is a missing bucket; refused credentials, other errors and no connection are
/// failures. A plain `AccessDenied` is taken as serving: AWS answers it instead of 404 for a
/// missing object when the credentials lack `s3:ListBucket`, which kvtier does not need.
async fn probe_once(shared: &Shared, direct: Option<&Direct>) -> Result<(), BackendError> {
    let object = format!("{}{PROBE_OBJECT}", shared.prefix);
    let r = match direct {
        Some(d) => d.get(&object, &mut []).await.map(|_| ()),
        None => {
            let sent = shared
                .client
                .get_object()
                .bucket(&shared.bucket)
                .key(&object)
                .send()
                .await;
            match sent {
                Ok(_) => Ok(()),
                Err(e) if matches!(e.code(), Some("NoSuchKey" | "AccessDenied")) => Ok(()),
                Err(e) => Err(classify("health check", &shared.bucket, e)),
            }
        }
    };
    match r {
        Err(e) if e.kind() == ErrorKind::Permission && e.to_string().contains(": AccessDenied") => {
            Ok(())
        }
        // A failure (a missing bucket) is noted for the bucket check; an answer is not taken
        // as having seen the bucket, so health checks never change what a HEAD 404 means.
        Ok(()) => Ok(()),
        r => {
            shared.follow(&r);
            r
        }
    }
}

/// Reads one object into the caller's buffer (body frames copied straight into it).
async fn get_one(
    shared: Arc<Shared>,
    direct: Option<Arc<Direct>>,
    key: ObjectKey,
    buf: &mut [u8],
) -> Result<Fetched, BackendError> {
    if let Some(direct) = direct {
        return direct.get(&shared.object_key(&key), buf).await;
    }
    let object = shared.object_key(&key);
    let resp = shared
        .sdk_send(|config| {
            let mut req = shared
                .client
                .get_object()
                .bucket(&shared.bucket)
                .key(&object);
            if shared.get_crc32c {
                req = req.checksum_mode(aws_sdk_s3::types::ChecksumMode::Enabled);
            }
            with_config(req.customize(), config).send()
        })
        .await;
    let resp = match resp {
        Ok(r) => r,
        Err(e) => {
            // A missing key is a miss; a missing bucket (also a 404) is an error.
            let not_found = e.code() != Some("NoSuchBucket")
                && (e.as_service_error().is_some_and(|s| s.is_no_such_key())
                    || e.raw_response().is_some_and(|r| r.status().as_u16() == 404));
            return if not_found {
                Ok(Fetched::Absent)
            } else {
                Err(classify("get", &shared.bucket, e))
            };
        }
    };
    let declared = resp.content_length().unwrap_or(-1);
    if declared != buf.len() as i64 {
        return Ok(Fetched::SizeMismatch {
            actual: declared.max(0) as u64,
        });
    }
    let mut body = resp.body;
    let mut off = 0usize;
    loop {
        match body.try_next().await {
            Ok(Some(chunk)) => {
                let end = off + chunk.len();
                if end > buf.len() {
                    // The server sent more than it declared: a miss, never a partial copy.
                    return Ok(Fetched::SizeMismatch { actual: end as u64 });
                }
                buf[off..end].copy_from_slice(&chunk);
                off = end;
            }
            Ok(None) => break,
            Err(e) => return Err(BackendError::connection("get", e.to_string()).with_source(e)),
        }
    }
    if off != buf.len() {
        return Ok(Fetched::SizeMismatch { actual: off as u64 });
    }
    Ok(Fetched::Hit)
}

/// A PUT through the SDK.
async fn sdk_put(shared: &Shared, key: &ObjectKey, data: Bytes) -> Result<(), BackendError> {
    let len = data.len() as i64;
    let object = shared.object_key(key);
    let res = shared
        .sdk_send(|config| {
            let mut req = shared
                .client
                .put_object()
                .bucket(&shared.bucket)
                .key(&object)
                .content_type("application/octet-stream")
                .content_length(len)
                .body(ByteStream::from(data.clone()));
            if shared.put_crc32c {
                req = req.checksum_algorithm(ChecksumAlgorithm::Crc32C);
            }
            send_put(req, shared.sign_payload, config)
        })
        .await;
    res.map(|_| ())
        .map_err(|e| classify("put", &shared.bucket, e))
}

/// A HEAD through the SDK: the size of a present, non-empty object.
async fn sdk_head(shared: &Shared, key: &ObjectKey) -> Result<Option<u64>, BackendError> {
    let object = shared.object_key(key);
    let res = shared
        .sdk_send(|config| {
            let req = shared
                .client
                .head_object()
                .bucket(&shared.bucket)
                .key(&object);
            with_config(req.customize(), config).send()
        })
        .await;
    match res {
        Ok(r) => Ok(r.content_length().filter(|l| *l > 0).map(|l| l as u64)),
        Err(e)
            if e.as_service_error().is_some_and(|s| s.is_not_found())
                || e.raw_response().is_some_and(|r| r.status().as_u16() == 404) =>
        {
            Ok(None)
        }
        Err(e) => Err(classify("head", &shared.bucket, e)),
    }
}

async fn list_page(
    shared: &Shared,
    model: Option<&str>,
    cursor: Option<&str>,
    limit: usize,
) -> Result<(Vec<(String, ObjectKey, u64, u64)>, Option<String>), BackendError> {
    let mut prefix = shared.prefix.clone();
    if let Some(m) = model {
        prefix.push_str(m);
        prefix.push('@');
    }
    let mut req = shared
        .client
        .list_objects_v2()
        .bucket(&shared.bucket)
        .prefix(&prefix)
        .max_keys(limit.min(1000) as i32);
    if let Some(c) = cursor {
        req = req.start_after(format!("{}{}", shared.prefix, c));
    }
    let resp = req
        .send()
        .await
        .map_err(|e| classify("list", &shared.bucket, e))?;
    let mut out = Vec::new();
    let mut last = None;
    for obj in resp.contents() {
        let Some(full) = obj.key() else { continue };
        let name = full.strip_prefix(shared.prefix.as_str()).unwrap_or(full);
        last = Some(name.to_owned());
        let Ok(key) = ObjectKey::parse(name, shared.format) else {
            continue;
        };
        if model.is_some_and(|m| key.model_name() != m) {
            continue;
        }
        let size = obj.size().unwrap_or(0).max(0) as u64;
        let modified = obj.last_modified().map_or(0, |t| t.secs().max(0) as u64);
        out.push((name.to_owned(), key, size, modified));
    }
    let next = if resp.is_truncated().unwrap_or(false) {
        last
    } else {
        None
    };
    Ok((out, next))
}

impl Storage for S3Storage {
    fn kind(&self) -> &'static str {
        "s3"
    }

    fn put(&mut self, items: Vec<(ObjectKey, Bytes)>) -> Io<Vec<Result<(), BackendError>>> {
        let direct = self.signer();
        self.per_item(
            "put",
            items,
            move |shared, (key, data): (ObjectKey, Bytes)| {
                let direct = direct.clone();
                async move {
                    let r = match direct {
                        Some(d) => d.put(&shared.object_key(&key), data).await,
                        None => sdk_put(&shared, &key, data).await,
                    };
                    shared.follow(&r);
                    r
                }
            },
        )
    }

    /// The ledger is the size cache, trusted only while the breaker is closed: with the store
    /// unreachable, a size-cache hit would lock a key whose load must miss.
    fn head(
        &mut self,
        keys: &[ObjectKey],
        known: &[Option<u64>],
    ) -> Io<Vec<Result<Option<u64>, BackendError>>> {
        let trust = self.breaker.is_closed();
        let unknown_all = vec![None; if trust { 0 } else { keys.len() }];
        let known = if trust { known } else { &unknown_all };
        answer_known(keys, known, |unknown| {
            let direct = self.signer();
            self.per_item("head", unknown, move |shared, key: ObjectKey| {
                let direct = direct.clone();
                async move {
                    let r = match direct.as_deref() {
                        Some(d) => d.head(&shared.object_key(&key)).await,
                        None => sdk_head(&shared, &key).await,
                    };
                    match r {
                        Ok(None) => shared.confirm_absent(direct.as_deref()).await,
                        Ok(Some(size)) => {
                            shared.bucket_exists_now();
                            Ok(Some(size))
                        }
                        Err(e) => {
                            let r = Err(e);
                            shared.follow(&r);
                            r
                        }
                    }
                }
            })
        })
    }

    fn get(&mut self, items: Vec<(ObjectKey, LoadBuf)>) -> Io<Vec<Result<Fetched, BackendError>>> {
        let direct = self.signer();
        self.per_item(
            "get",
            items,
            move |shared, (key, mut buf): (ObjectKey, LoadBuf)| {
                let direct = direct.clone();
                async move {
                    let r = get_one(shared.clone(), direct, key, &mut buf).await;
                    if !matches!(r, Ok(Fetched::Absent)) {
                        shared.follow(&r);
                    }
                    r
                }
            },
        )
    }

    fn remove(&mut self, keys: Vec<ObjectKey>) -> Io<Vec<Result<Removed, BackendError>>> {
        let batches: Vec<Vec<ObjectKey>> = keys.chunks(DELETE_BATCH).map(|c| c.to_vec()).collect();
        let io = self.per_item(
            "delete",
            batches,
            |shared, batch: Vec<ObjectKey>| async move {
                let names: Vec<String> = batch.iter().map(|k| shared.object_key(k)).collect();
                let ids: Result<Vec<ObjectIdentifier>, _> = names
                    .iter()
                    .map(|n| ObjectIdentifier::builder().key(n).build())
                    .collect();
                let delete = match ids
                    .and_then(|ids| Delete::builder().set_objects(Some(ids)).quiet(true).build())
                {
                    Ok(d) => d,
                    Err(e) => return Err(BackendError::io("delete", e)),
                };
                let res = shared
                    .client
                    .delete_objects()
                    .bucket(&shared.bucket)
                    .delete(delete)
                    .send()
                    .await;
                match res {
                    Ok(out) => {
                        // Quiet mode lists only the failures.
                        let failed: std::collections::HashMap<&str, String> = out
                            .errors()
                            .iter()
                            .filter_map(|e| {
                                Some((e.key()?, e.message().unwrap_or("delete failed").to_owned()))
                            })
                            .collect();
                        Ok(names
                            .iter()
                            .map(|n| match failed.get(n.as_str()) {
                                Some(m) => Err(BackendError::io("delete", m)),
                                None => Ok(Removed::Unknown),
                            })
                            .collect::<Vec<_>>())
                    }
                    Err(e) => Err(classify("delete", &shared.bucket, e)),
                }
            },
        );
        let sizes: Vec<usize> = keys.chunks(DELETE_BATCH).map(|c| c.len()).collect();
        io.map(move |v| {
            v.into_iter()
                .zip(sizes)
                .flat_map(|(res, n)| match res {
                    Ok(per_key) => per_key,
                    Err(e) => vec![Err(e); n],
                })
                .collect()
        })
    }

    fn list(
        &mut self,
        model: Option<String>,
        cursor: Option<String>,
        limit: usize,
    ) -> Io<Result<KeyPage, BackendError>> {
        let io = self.per_item(
            "list",
            vec![(model, cursor)],
            move |shared, (model, cursor): (Option<String>, Option<String>)| async move {
                list_page(&shared, model.as_deref(), cursor.as_deref(), limit)
                    .await
                    .map(|(entries, next)| KeyPage {
                        entries: entries.into_iter().map(|(_, k, s, _)| (k, s)).collect(),
                        next,
                    })
            },
        );
        io.map(|mut v| {
            v.pop()
                .unwrap_or_else(|| Err(BackendError::io("list", "no reply")))
        })
    }

    fn recover(&mut self) -> Option<Io<Result<Vec<Recovered>, BackendError>>> {
        if !self.rebuild {
            return None;
        }
        let io = self.per_item("recover", vec![()], |shared, ()| async move {
            let mut found = Vec::new();
            let mut cursor: Option<String> = None;
            loop {
                match list_page(&shared, None, cursor.as_deref(), 1000).await {
                    Ok((entries, next)) => {
                        found.extend(entries.into_iter().map(|(_, key, size, modified)| {
                            Recovered {
                                key,
                                size,
                                modified,
                            }
                        }));
                        match next {
                            Some(n) => cursor = Some(n),
                            None => return Ok(found),
                        }
                    }
                    Err(e) => return Err(e),
                }
            }
        });
        Some(io.map(|mut v| {
            v.pop()
                .unwrap_or_else(|| Err(BackendError::io("recover", "no reply")))
        }))
    }

    fn unhealthy(&self) -> Option<String> {
        self.breaker.unhealthy()
    }

    /// One GET of [`PROBE_OBJECT`] under the prefix, bounded by [`PROBE_TIMEOUT`] (or the
    /// attempt timeout if shorter), while the
    /// breaker is closed. See `probe_once`.
    fn probe(&mut self) -> Io<()> {
        if !self.breaker.wants_probe() {
            return Io::ready(());
        }
        let direct = self.signer();
        let shared = self.shared.clone();
        let limit = self.probe_timeout;
        let task = self.handle.spawn(async move {
            tokio::time::timeout(limit, probe_once(&shared, direct.as_deref()))
                .await
                .unwrap_or_else(|_| {
                    Err(BackendError::new(
                        ErrorKind::Timeout,
                        "health check",
                        format!(
                            "no answer from the endpoint within {:.1}s",
                            limit.as_secs_f64()
                        ),
                    ))
                })
        });
        Io::pending_then(
            async move {
                task.await
                    .unwrap_or_else(|e| Err(BackendError::worker("health check", e.to_string())))
            },
            |s: &mut S3Storage, r: Result<(), BackendError>| s.breaker.probed(&r),
        )
    }

    fn details(&self) -> serde_json::Value {
        serde_json::json!({
            "bucket": self.shared.bucket,
            "endpoint": self.endpoint.endpoint_url.clone().unwrap_or_else(|| format!("aws ({})", self.region)),
            "path_style": self.endpoint.force_path_style,
            "key_prefix": self.shared.prefix,
            "in_flight_bound": self.in_flight_bound,
            "payload_signed": self.shared.sign_payload,
            "checksum": match (self.shared.put_crc32c, self.shared.get_crc32c) {
                (_, true) => "crc32c",
                (true, false) => "crc32c (put)",
                (false, false) => "none",
            },
            "data_path": data_path_name(&self.direct),
            "direct_credentials": self.direct.as_ref().ok().map(DirectPath::status),
            "circuit_breaker": self.breaker.status(),
        })
    }

    fn close(&mut self) {
        if let Some(rt) = self.runtime.take() {
            rt.shutdown_background();
        }
    }

    fn attach_metrics(&mut self, metrics: crate::metrics::AdapterMetrics) {
        if let Ok(path) = self.direct.as_mut() {
            // Refreshed signers copy it (`Direct::with_credentials`).
            path.direct = Arc::new(path.direct.with_metrics(metrics.clone()));
        }
        self.breaker.attach_metrics(metrics);
    }
}

impl Drop for S3Storage {
    fn drop(&mut self) {
        // A runtime must not be dropped inside another runtime's context.
        self.close();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use aws_credential_types::provider::{future, ProvideCredentials};
    use aws_credential_types::Credentials;
    use std::sync::atomic::{AtomicUsize, Ordering};

    /// A credential source answering from a list (the last answer repeats): access key id and
    /// lifetime.
    #[derive(Debug)]
    struct Rotating {
        calls: Arc<AtomicUsize>,
        answers: Vec<(&'static str, Duration)>,
    }

    impl ProvideCredentials for Rotating {
        fn provide_credentials<'a>(&'a self) -> future::ProvideCredentials<'a>
        where
            Self: 'a,
        {
            let n = self.calls.fetch_add(1, Ordering::SeqCst);
            let (id, ttl) = self.answers[n.min(self.answers.len() - 1)];
            future::ProvideCredentials::ready(Ok(Credentials::new(
                id,
                "secret",
                Some("token".into()),
                Some(SystemTime::now() + ttl),
                "test",
            )))
        }
    }

    /// A server answering every request 200 and reporting, per request, the access key id it
    /// was signed with and whether the SDK sent it (its `user-agent`).
    fn recording_server() -> (u16, std::sync::mpsc::Receiver<(String, bool)>) {
        recording_server_answering(Vec::new())
    }

    /// [`recording_server`], answering the first requests with `first` (raw responses).
    fn recording_server_answering(
        first: Vec<String>,
    ) -> (u16, std::sync::mpsc::Receiver<(String, bool)>) {
        use std::io::{Read, Write};
        let mut first = first.into_iter();
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let port = listener.local_addr().unwrap().port();
        let (tx, rx) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            for conn in listener.incoming() {
                let Ok(mut c) = conn else { break };
                let mut head = Vec::new();
                let mut byte = [0u8; 1];
                while !head.ends_with(b"\r\n\r\n") && c.read(&mut byte).unwrap_or(0) == 1 {
                    head.push(byte[0]);
                }
                let head = String::from_utf8_lossy(&head).to_lowercase();
                let header = |name: &str| {
                    head.lines()
                        .find_map(|l| l.strip_prefix(name).map(|v| v.trim().to_owned()))
                };
                let len: usize = header("content-length:")
                    .and_then(|v| v.parse().ok())
                    .unwrap_or(0);
                let mut body = vec![0u8; len];
                let _ = c.read_exact(&mut body);
                let akid = header("authorization:")
                    .and_then(|a| {
                        Some(a.split_once("credential=")?.1.split('/').next()?.to_owned())
                    })
                    .unwrap_or_default();
                let sdk = header("user-agent:").is_some_and(|u| u.contains("aws-sdk-rust"));
                let _ = tx.send((akid, sdk));
                let answer = first.next().unwrap_or_else(|| {
                    "HTTP/1.1 200 OK\r\nContent-Length: 0\r\nConnection: close\r\n\r\n".into()
                });
                let _ = c.write_all(answer.as_bytes());
            }
        });
        (port, rx)
    }

    fn block_on<F: Future>(f: F) -> F::Output {
        tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap()
            .block_on(f)
    }

    async fn put_one(st: &mut S3Storage, i: u8) -> Result<(), BackendError> {
        let key = ObjectKey::new("m", 0, vec![i]).unwrap();
        let io = st.put(vec![(key, Bytes::from_static(b"data"))]);
        let mut res = io.resolve(st).await;
        res.pop().unwrap()
    }

    async fn storage(port: u16, provider: impl ProvideCredentials + 'static) -> S3Storage {
        storage_on(port, provider, DataPath::Direct).await
    }

    async fn storage_on(
        port: u16,
        provider: impl ProvideCredentials + 'static,
        path: DataPath,
    ) -> S3Storage {
        let mut cfg = S3Config::for_endpoint(
            &format!("http://127.0.0.1:{port}"),
            "scripted",
            "garage",
            "unused",
            "unused",
        );
        cfg.s3_data_path = path;
        let provider = SharedCredentialsProvider::new(provider);
        S3Storage::open_with(&cfg, NameFormat::default(), 0, None, Some(provider))
            .await
            .unwrap()
    }

    /// Temporary credentials on the direct path: refreshed in the background once within
    /// [`REFRESH_AHEAD`] of expiry, and the next requests sign with the new ones.
    #[test]
    fn the_direct_path_refreshes_expiring_credentials() {
        block_on(async {
            let (port, seen) = recording_server();
            let calls = Arc::new(AtomicUsize::new(0));
            let mut st = storage(
                port,
                Rotating {
                    calls: calls.clone(),
                    answers: vec![
                        ("akidone", Duration::from_secs(120)),
                        ("akidtwo", Duration::from_secs(3600)),
                    ],
                },
            )
            .await;
            assert_eq!(st.details()["data_path"], "direct");
            put_one(&mut st, 0).await.unwrap();
            assert_eq!(seen.recv().unwrap(), ("akidone".into(), false));
            // That request started the refresh (2 minutes left); a later one picks it up.
            let mut fresh = false;
            for i in 1..50 {
                tokio::time::sleep(Duration::from_millis(20)).await;
                put_one(&mut st, i).await.unwrap();
                let (akid, sdk) = seen.recv().unwrap();
                assert!(!sdk, "the direct path carries the data throughout");
                if akid == "akidtwo" {
                    fresh = true;
                    break;
                }
                assert_eq!(akid, "akidone");
            }
            assert!(fresh, "the refreshed credentials were never used");
            assert_eq!(calls.load(Ordering::SeqCst), 2, "one refresh, no more");
            assert_eq!(st.details()["direct_credentials"]["refreshes"], 1);
        });
    }

    /// Credentials within [`SDK_FALLBACK_WITHIN`] of expiry are not used by the direct path:
    /// the SDK, whose identity cache handles them, carries the request.
    #[test]
    fn nearly_expired_credentials_send_data_through_the_sdk() {
        block_on(async {
            let (port, seen) = recording_server();
            let mut st = storage(
                port,
                Rotating {
                    calls: Arc::new(AtomicUsize::new(0)),
                    answers: vec![("akidshort", Duration::from_secs(45))],
                },
            )
            .await;
            put_one(&mut st, 0).await.unwrap();
            let (_, sdk) = seen.recv().unwrap();
            assert!(
                sdk,
                "a request signed with credentials about to expire went direct"
            );
        });
    }

    /// An S3 error answer with `status` (e.g. `"403 Forbidden"`) and error `code`.
    fn refusal(status: &str, code: &str) -> String {
        let body = format!("<Error><Code>{code}</Code><Message>no</Message></Error>");
        format!(
            "HTTP/1.1 {status}\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
            body.len()
        )
    }

    /// A source handing out `akidold`, then `akidnew` (both valid for an hour).
    fn old_then_new(calls: &Arc<AtomicUsize>) -> Rotating {
        Rotating {
            calls: calls.clone(),
            answers: vec![
                ("akidold", Duration::from_secs(3600)),
                ("akidnew", Duration::from_secs(3600)),
            ],
        }
    }

    /// A request whose credentials are refused (`ExpiredToken`, `InvalidAccessKeyId`, …)
    /// fetches fresh ones from the source and is retried once with them; the storage then
    /// signs later requests with them too.
    #[test]
    fn refused_credentials_are_fetched_again_and_the_request_retried() {
        for code in ["ExpiredToken", "InvalidAccessKeyId", "TokenRefreshRequired"] {
            block_on(async {
                let refused = refusal("403 Forbidden", code);
                let (port, seen) = recording_server_answering(vec![refused]);
                let calls = Arc::new(AtomicUsize::new(0));
                let mut st = storage(port, old_then_new(&calls)).await;
                put_one(&mut st, 0).await.unwrap();
                assert_eq!(seen.recv().unwrap(), ("akidold".into(), false), "{code}");
                assert_eq!(seen.recv().unwrap(), ("akidnew".into(), false), "{code}");
                assert_eq!(calls.load(Ordering::SeqCst), 2, "{code}: one refresh");
                put_one(&mut st, 1).await.unwrap();
                assert_eq!(seen.recv().unwrap().0, "akidnew", "{code}: adopted");
                assert_eq!(st.details()["direct_credentials"]["refreshes"], 1);
            });
        }
    }

    /// A source that only ever hands out credentials within [`REFRESH_AHEAD`] of expiry is
    /// asked again after [`REFRESH_RETRY`], not at every request.
    #[test]
    fn short_lived_credentials_are_not_refreshed_at_every_request() {
        block_on(async {
            let (port, seen) = recording_server();
            let calls = Arc::new(AtomicUsize::new(0));
            let mut st = storage(
                port,
                Rotating {
                    calls: calls.clone(),
                    answers: vec![("akidshort", Duration::from_secs(120))],
                },
            )
            .await;
            for i in 0..30 {
                put_one(&mut st, i).await.unwrap();
                seen.recv().unwrap();
            }
            let n = calls.load(Ordering::SeqCst);
            assert!(n <= 3, "the source was asked {n} times for 30 requests");
        });
    }

    /// On the SDK path too, a request whose credentials are refused is retried once with
    /// credentials fetched again from the source (through a config override: the SDK's
    /// identity cache keeps the ones it holds).
    #[test]
    fn refused_credentials_on_the_sdk_path_are_fetched_again() {
        block_on(async {
            let refused = refusal("400 Bad Request", "ExpiredToken");
            let (port, seen) = recording_server_answering(vec![refused]);
            let calls = Arc::new(AtomicUsize::new(0));
            let mut st = storage_on(port, old_then_new(&calls), DataPath::Sdk).await;
            put_one(&mut st, 0).await.unwrap();
            assert_eq!(seen.recv().unwrap(), ("akidold".into(), true));
            assert_eq!(seen.recv().unwrap(), ("akidnew".into(), true));
            assert_eq!(calls.load(Ordering::SeqCst), 2);
        });
    }

    /// A credential source that panics on its second call, never answers its third, and
    /// answers after that.
    #[derive(Debug)]
    struct Unruly {
        calls: Arc<AtomicUsize>,
    }

    impl ProvideCredentials for Unruly {
        fn provide_credentials<'a>(&'a self) -> future::ProvideCredentials<'a>
        where
            Self: 'a,
        {
            let n = self.calls.fetch_add(1, Ordering::SeqCst);
            future::ProvideCredentials::new(async move {
                match n {
                    0 => {}
                    1 => panic!("credential source panicked (on purpose, in a test)"),
                    2 => std::future::pending::<()>().await,
                    _ => {
                        return Ok(Credentials::new(
                            "akidlater",
                            "secret",
                            Some("token".into()),
                            Some(SystemTime::now() + Duration::from_secs(3600)),
                            "test",
                        ))
                    }
                }
                Ok(Credentials::new(
                    "akidfirst",
                    "secret",
                    Some("token".into()),
                    Some(SystemTime::now() + Duration::from_secs(120)),
                    "test",
                ))
            })
        }
    }

    /// A background refresh that panics, then one that hangs, cannot wedge the direct path:
    /// requests go on with the current credentials, the panic counts as a failed refresh, the
    /// hung one is abandoned after its deadline, and the next refresh lands.
    #[test]
    fn a_refresh_that_panics_or_hangs_does_not_wedge_the_direct_path() {
        block_on(async {
            let (port, seen) = recording_server();
            let calls = Arc::new(AtomicUsize::new(0));
            let mut st = storage(
                port,
                Unruly {
                    calls: calls.clone(),
                },
            )
            .await;
            {
                let path = st.direct.as_mut().unwrap();
                path.refresh_retry = Duration::ZERO;
                path.refresh_deadline = Duration::from_millis(200);
            }
            let mut fresh = false;
            for i in 0..200u32 {
                put_one(&mut st, (i % 250) as u8).await.unwrap();
                let (akid, sdk) = seen.recv().unwrap();
                assert!(!sdk, "the direct path carries the data throughout");
                if akid == "akidlater" {
                    fresh = true;
                    break;
                }
                assert_eq!(akid, "akidfirst");
                // Polls the refresh (bounded by the loop), not a wait for an outcome.
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
            assert!(fresh, "the adapter stayed wedged: {}", st.details());
            let d = st.details();
            assert_eq!(d["direct_credentials"]["refresh_failures"], 2, "{d}");
            assert_eq!(d["direct_credentials"]["refreshing"], false, "{d}");
            assert_eq!(calls.load(Ordering::SeqCst), 4);
        });
    }
}
