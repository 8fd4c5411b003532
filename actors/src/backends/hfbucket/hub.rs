//! A blocking client for the Hugging Face Hub's bucket routes, on `ureq`. Every call runs on
//! the adapter's worker pool, never on an arbiter. Retries follow kvtier's one retry policy
//! ([`crate::retry`], [`RetryPolicy::HUB`], shared with the S3 direct data path): connection
//! failures and answers 408, 429 and 5xx are retried with jittered backoff or after the Hub's
//! `Retry-After` (capped); a timed-out request is retried once (every Hub route kvtier uses
//! is idempotent: reads, `addFile` of the same hash, `deleteFile`, create with 409 on
//! existing; the Xet CAS's write routes are content-addressed: a repeated xorb grant, upload,
//! commit or shard stores the same thing once). A failure after the retries keeps the kind of
//! its last attempt (connection, timeout, throttled, server), which the adapter's circuit
//! breaker counts. Every request has one total deadline (`retry_timeout_secs`, see
//! [`crate::retry`]): each attempt's timeout (at most [`ATTEMPT_TIMEOUT`]) is cut to what is left
//! of it, and no retry starts after it; an error given up for it says so.

use std::collections::HashMap;
use std::io::Read;
use std::thread::sleep;
use std::time::Duration;

use crate::retry::{parse_retry_after, Attempts, Outcome, RetryPolicy};

use bytes::Bytes;
use serde::Deserialize;
use serde_json::{json, Value};
use xet_client::cas_types::{
    Checksum, HttpRange, QueryReconstructionResponse, XorbUploadGrant, XorbUploadGrantRequest,
};

use super::config::BucketHandle;
use crate::config::Secret;
use crate::key::hf_encode;
use crate::storage::{status_kind, BackendError, ErrorKind, Fetched};

/// Most paths per `paths-info` request and lines per `batch` request.
pub(crate) const MAX_PER_REQUEST: usize = 1000;
/// Longest a single attempt may take (body included), unless the request's deadline is nearer.
pub(crate) const ATTEMPT_TIMEOUT: Duration = Duration::from_secs(120);

/// One attempt of a Hub request: the client's agent, with the attempt's timeout applied to
/// every request built through it.
pub(super) struct Attempt<'a> {
    agent: &'a ureq::Agent,
    timeout: Duration,
}

impl Attempt<'_> {
    /// A GET of `uri`.
    pub(super) fn get<T>(&self, uri: T) -> ureq::RequestBuilder<ureq::typestate::WithoutBody>
    where
        ureq::http::Uri: TryFrom<T>,
        <ureq::http::Uri as TryFrom<T>>::Error: Into<ureq::http::Error>,
    {
        self.agent
            .get(uri)
            .config()
            .timeout_global(Some(self.timeout))
            .build()
    }

    /// A POST to `uri`.
    pub(super) fn post<T>(&self, uri: T) -> ureq::RequestBuilder<ureq::typestate::WithBody>
    where
        ureq::http::Uri: TryFrom<T>,
        <ureq::http::Uri as TryFrom<T>>::Error: Into<ureq::http::Error>,
    {
        self.agent
            .post(uri)
            .config()
            .timeout_global(Some(self.timeout))
            .build()
    }

    /// Sends a prepared request.
    pub(super) fn run<B: ureq::AsSendBody>(
        &self,
        req: ureq::http::Request<B>,
    ) -> Result<ureq::http::Response<ureq::Body>, ureq::Error> {
        let req = self
            .agent
            .configure_request(req)
            .timeout_global(Some(self.timeout))
            .build();
        self.agent.run(req)
    }
}

/// One entry of a listing or `paths-info` reply.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
pub(crate) struct Entry {
    /// `file` or `directory`.
    #[serde(rename = "type")]
    pub(crate) kind: String,
    /// Path inside the bucket.
    pub(crate) path: String,
    /// Size in bytes (files).
    #[serde(default)]
    pub(crate) size: u64,
    /// The Xet hash of the file's content (files stored through Xet).
    #[serde(rename = "xetHash", default)]
    pub(crate) xet_hash: Option<String>,
}

/// What `paths-info` says about one file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct FileMeta {
    /// Size in bytes.
    pub(crate) size: u64,
    /// The Xet hash of its content, when the Hub gives one.
    pub(crate) xet_hash: Option<String>,
}

/// A `batch` reply.
#[derive(Debug, Clone, Default, Deserialize)]
pub(crate) struct BatchReply {
    /// Lines that failed, with their errors.
    #[serde(default)]
    pub(crate) failed: Vec<BatchFailure>,
}

/// One failed line of a batch.
#[derive(Debug, Clone, Deserialize)]
pub(crate) struct BatchFailure {
    /// Its path.
    pub(crate) path: String,
    /// Why.
    #[serde(default)]
    pub(crate) error: String,
}

/// A Xet token from `xet-write-token` / `xet-read-token`.
#[derive(Debug, Clone, Deserialize)]
pub(crate) struct XetToken {
    /// The CAS access token.
    #[serde(rename = "accessToken")]
    pub(crate) access_token: Secret,
    /// Expiry, seconds since the epoch.
    pub(crate) exp: u64,
    /// The CAS base URL.
    #[serde(rename = "casUrl")]
    pub(crate) cas_url: String,
    /// When it was fetched, seconds since the epoch (so `exp - fetched` is its lifetime).
    #[serde(skip, default = "unix_now")]
    pub(crate) fetched: u64,
}

impl XetToken {
    /// The `Authorization` header value of CAS requests.
    pub(crate) fn bearer(&self) -> String {
        format!("Bearer {}", self.access_token.expose())
    }

    /// Whether the token is still valid `secs` seconds after `now` (seconds since the epoch).
    pub(crate) fn lasts(&self, now: u64, secs: u64) -> bool {
        self.exp > now.saturating_add(secs)
    }
}

/// Seconds since the epoch.
pub(crate) fn unix_now() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs())
}

/// The Hub client of one bucket. Cheap to share (immutable; `ureq::Agent` pools connections).
#[derive(Debug, Clone)]
pub(crate) struct HubClient {
    agent: ureq::Agent,
    endpoint: String,
    handle: BucketHandle,
    token: Option<Secret>,
    /// The retry policy, with the request deadline (`retry_timeout_secs`).
    policy: RetryPolicy,
    /// Requests by route and retries by cause (off until [`HubClient::set_metrics`]).
    metrics: crate::metrics::AdapterMetrics,
}

fn connection(op: &'static str, e: impl std::fmt::Display) -> BackendError {
    BackendError::connection(op, e.to_string())
}

/// A transport failure: timed out, or no connection.
fn transport(op: &'static str, e: &ureq::Error) -> (Outcome, BackendError) {
    match e {
        ureq::Error::Timeout(_) => (
            Outcome::TimedOut,
            BackendError::new(ErrorKind::Timeout, op, e.to_string()),
        ),
        _ => (Outcome::Connection, connection(op, e)),
    }
}

fn status_error(op: &'static str, status: u16, body: &str) -> BackendError {
    let body: String = body.chars().take(300).collect();
    BackendError::new(
        status_kind(status),
        op,
        format!("the Hub answered {status}: {body}"),
    )
}

/// The error of an answer that is not one the caller expects: its status and (the start of)
/// its body.
fn answer_error(op: &'static str, mut r: ureq::http::Response<ureq::Body>) -> BackendError {
    let s = r.status().as_u16();
    let body = r.body_mut().read_to_string().unwrap_or_default();
    status_error(op, s, &body)
}

impl HubClient {
    /// A client for `handle` on the Hub at `endpoint`, for `workers` threads at once: it keeps
    /// up to `workers` idle connections per host (the Hub, the CAS and the xorb hosts), so
    /// that no worker's connection is closed after each request (ureq keeps 3 by default).
    pub(crate) fn new(
        endpoint: &str,
        handle: BucketHandle,
        token: Option<Secret>,
        workers: usize,
    ) -> Self {
        let agent: ureq::Agent = ureq::Agent::config_builder()
            .http_status_as_error(false)
            .max_idle_connections_per_host(workers.max(3))
            .max_idle_connections((3 * workers).max(10))
            .timeout_global(Some(ATTEMPT_TIMEOUT))
            .max_redirects(5)
            .build()
            .into();
        Self {
            agent,
            endpoint: endpoint.trim_end_matches('/').to_owned(),
            handle,
            token,
            policy: RetryPolicy::HUB,
            metrics: crate::metrics::AdapterMetrics::off(),
        }
    }

    /// The same client with the total deadline of a request (`retry_timeout_secs`).
    pub(crate) fn with_retry_timeout(mut self, retry_timeout: Duration) -> Self {
        self.policy = self.policy.with_retry_timeout(retry_timeout);
        self
    }

    /// Counts this client's requests (by route: the operation name) and retries in `metrics`.
    pub(crate) fn set_metrics(&mut self, metrics: crate::metrics::AdapterMetrics) {
        self.metrics = metrics;
    }

    /// The bucket handle.
    pub(crate) fn handle(&self) -> &BucketHandle {
        &self.handle
    }

    fn api(&self, tail: &str) -> String {
        format!("{}/api/buckets/{}{tail}", self.endpoint, self.handle.id())
    }

    /// Sends a request built by `make`, retrying under [`RetryPolicy::HUB`] within the
    /// request's deadline.
    pub(super) fn call(
        &self,
        op: &'static str,
        make: impl Fn(&Attempt<'_>) -> Result<ureq::http::Response<ureq::Body>, ureq::Error>,
    ) -> Result<ureq::http::Response<ureq::Body>, BackendError> {
        let mut attempts = Attempts::new(self.policy, true);
        loop {
            self.metrics.hub_request(op);
            let attempt = Attempt {
                agent: &self.agent,
                timeout: attempts
                    .attempt_timeout(ATTEMPT_TIMEOUT)
                    .max(Duration::from_millis(1)),
            };
            let (outcome, retry_after, error) = match make(&attempt) {
                Ok(r) if !crate::retry::retryable_status(r.status().as_u16()) => return Ok(r),
                Ok(r) => {
                    let s = r.status().as_u16();
                    let retry_after = r
                        .headers()
                        .get("retry-after")
                        .and_then(|v| v.to_str().ok())
                        .and_then(parse_retry_after);
                    (Outcome::Status(s), retry_after, answer_error(op, r))
                }
                Err(e) => {
                    let (outcome, error) = transport(op, &e);
                    (outcome, None, error)
                }
            };
            let Some(wait) = attempts.next(outcome, retry_after) else {
                let message = attempts.give_up(error.message().to_owned());
                return Err(BackendError::new(error.kind(), error.op(), message));
            };
            self.metrics.retry(outcome.label());
            tracing::debug!(
                op,
                attempt = attempts.number() - 1,
                error = %error,
                wait_ms = wait.as_millis() as u64,
                "retrying Hub request"
            );
            sleep(wait);
        }
    }

    fn auth<B>(&self, req: ureq::RequestBuilder<B>) -> ureq::RequestBuilder<B> {
        match &self.token {
            Some(t) => req.header("Authorization", format!("Bearer {}", t.expose())),
            None => req,
        }
    }

    fn expect_json<T: serde::de::DeserializeOwned>(
        op: &'static str,
        mut r: ureq::http::Response<ureq::Body>,
    ) -> Result<T, BackendError> {
        if !(200..300).contains(&r.status().as_u16()) {
            return Err(answer_error(op, r));
        }
        r.body_mut()
            .with_config()
            .limit(256 << 20)
            .read_json()
            .map_err(|e| BackendError::io(op, e))
    }

    /// Whether the bucket exists.
    pub(crate) fn bucket_exists(&self) -> Result<bool, BackendError> {
        let r = self.call("bucket info", |a| self.auth(a.get(self.api(""))).call())?;
        match r.status().as_u16() {
            404 => Ok(false),
            s if (200..300).contains(&s) => Ok(true),
            s => Err(status_error("bucket info", s, "")),
        }
    }

    /// Creates the bucket; an existing bucket (409) is fine.
    pub(crate) fn create_bucket(&self) -> Result<(), BackendError> {
        let r = self.call("create bucket", |a| {
            self.auth(a.post(self.api(""))).send_json(json!({}))
        })?;
        match r.status().as_u16() {
            409 => Ok(()),
            s if (200..300).contains(&s) => Ok(()),
            _ => Err(answer_error("create bucket", r)),
        }
    }

    /// Sizes of the files among `paths` (missing paths are absent from the map).
    pub(crate) fn paths_info(
        &self,
        paths: &[String],
    ) -> Result<HashMap<String, u64>, BackendError> {
        Ok(self
            .paths_meta(paths)?
            .into_iter()
            .map(|(p, m)| (p, m.size))
            .collect())
    }

    /// Size and Xet hash of the files among `paths` (missing paths are absent from the map).
    pub(crate) fn paths_meta(
        &self,
        paths: &[String],
    ) -> Result<HashMap<String, FileMeta>, BackendError> {
        let mut out = HashMap::new();
        for chunk in paths.chunks(MAX_PER_REQUEST) {
            let r = self.call("paths-info", |a| {
                self.auth(a.post(self.api("/paths-info")))
                    .send_json(json!({ "paths": chunk }))
            })?;
            let entries: Vec<Entry> = Self::expect_json("paths-info", r)?;
            out.extend(entries.into_iter().filter(|e| e.kind == "file").map(|e| {
                let meta = FileMeta {
                    size: e.size,
                    xet_hash: e.xet_hash,
                };
                (e.path, meta)
            }));
        }
        Ok(out)
    }

    /// Every file under the handle's prefix (all pages).
    pub(crate) fn tree(&self) -> Result<Vec<Entry>, BackendError> {
        let mut url = match &self.handle.prefix {
            Some(p) => self.api(&format!("/tree/{}?recursive=true", hf_encode(p))),
            None => self.api("/tree?recursive=true"),
        };
        let mut out = Vec::new();
        loop {
            let r = self.call("tree", |a| self.auth(a.get(&url)).call())?;
            if r.status().as_u16() == 404 {
                return Ok(out);
            }
            let next = next_link(&r);
            let page: Vec<Entry> = Self::expect_json("tree", r)?;
            out.extend(page.into_iter().filter(|e| e.kind == "file"));
            match next {
                Some(n) => url = n,
                None => return Ok(out),
            }
        }
    }

    /// Sends NDJSON `lines` (at most [`MAX_PER_REQUEST`]) to the batch route.
    pub(crate) fn batch(&self, lines: &[Value]) -> Result<BatchReply, BackendError> {
        let mut body = String::new();
        for l in lines {
            body.push_str(&l.to_string());
            body.push('\n');
        }
        let mut r = self.call("batch", |a| {
            self.auth(a.post(self.api("/batch")))
                .header("Content-Type", "application/x-ndjson")
                .send(body.as_str())
        })?;
        match r.status().as_u16() {
            // 422: every line failed; the reply still lists them.
            s if (200..300).contains(&s) || s == 422 => r
                .body_mut()
                .read_json()
                .map_err(|e| BackendError::io("batch", e)),
            _ => Err(answer_error("batch", r)),
        }
    }

    /// A Xet write token for this bucket.
    pub(crate) fn xet_write_token(&self) -> Result<XetToken, BackendError> {
        let r = self.call("xet-write-token", |a| {
            self.auth(a.get(self.api("/xet-write-token"))).call()
        })?;
        Self::expect_json("xet-write-token", r)
    }

    /// The URL of the write-token route (for Xet's token refresher).
    pub(crate) fn xet_write_token_url(&self) -> String {
        self.api("/xet-write-token")
    }

    /// A Xet read token for this bucket.
    pub(crate) fn xet_read_token(&self) -> Result<XetToken, BackendError> {
        let r = self.call("xet-read-token", |a| {
            self.auth(a.get(self.api("/xet-read-token"))).call()
        })?;
        Self::expect_json("xet-read-token", r)
    }

    /// The URL of the read-token route (for Xet's token refresher).
    pub(crate) fn xet_read_token_url(&self) -> String {
        self.api("/xet-read-token")
    }

    /// The `Authorization` header value, if there is a token.
    pub(crate) fn bearer(&self) -> Option<String> {
        self.token
            .as_ref()
            .map(|t| format!("Bearer {}", t.expose()))
    }

    /// Downloads `path` straight into `buf` (following the resolve redirect); a size other than
    /// `buf.len()` is a mismatch and a missing file is absent.
    pub(crate) fn download(&self, path: &str, buf: &mut [u8]) -> Result<Fetched, BackendError> {
        let url = format!(
            "{}/buckets/{}/resolve/{}",
            self.endpoint,
            self.handle.id(),
            hf_encode(path)
        );
        let mut r = self.call("get", |a| self.auth(a.get(&url)).call())?;
        match r.status().as_u16() {
            404 => return Ok(Fetched::Absent),
            s if (200..300).contains(&s) => {}
            _ => return Err(answer_error("get", r)),
        }
        let declared = content_length(&r);
        if declared.is_some_and(|d| d != buf.len() as u64) {
            return Ok(Fetched::SizeMismatch {
                actual: declared.unwrap_or(0),
            });
        }
        let mut reader = r
            .body_mut()
            .with_config()
            .limit(buf.len() as u64 + 1)
            .reader();
        let mut off = 0;
        loop {
            if off == buf.len() {
                // One more byte would mean the body is longer than declared.
                let mut probe = [0u8; 1];
                return match reader.read(&mut probe) {
                    Ok(0) => Ok(Fetched::Hit),
                    Ok(_) => Ok(Fetched::SizeMismatch {
                        actual: buf.len() as u64 + 1,
                    }),
                    Err(e) => Err(connection("get", e)),
                };
            }
            match reader.read(&mut buf[off..]) {
                Ok(0) => return Ok(Fetched::SizeMismatch { actual: off as u64 }),
                Ok(n) => off += n,
                Err(e) => return Err(connection("get", e)),
            }
        }
    }
}

impl HubClient {
    /// The reconstruction of the Xet file `hash` (`GET {cas}/v1/reconstructions/{hash}` with
    /// the CAS token `token`, under the Hub's retry policy): its terms and where to fetch them.
    pub(crate) fn xet_reconstruction(
        &self,
        token: &XetToken,
        hash: &str,
    ) -> Result<QueryReconstructionResponse, BackendError> {
        const OP: &str = "xet-reconstruction";
        let url = format!(
            "{}/v1/reconstructions/{hash}",
            token.cas_url.trim_end_matches('/')
        );
        let bearer = token.bearer();
        let r = self.call(OP, |a| a.get(&url).header("Authorization", &bearer).call())?;
        Self::expect_json(OP, r)
    }

    /// Fetches the byte range `range` of a xorb from `url` (a URL the CAS handed out, which
    /// carries its own authorisation), under the Hub's retry policy. The answer is 206, or 200
    /// with exactly the range's length; anything else is an error.
    pub(crate) fn xet_range(
        &self,
        url: &str,
        range: &HttpRange,
    ) -> Result<ureq::http::Response<ureq::Body>, BackendError> {
        const OP: &str = "xet-range";
        let header = range.range_header();
        let r = self.call(OP, |a| a.get(url).header("Range", &header).call())?;
        let length = content_length(&r);
        match r.status().as_u16() {
            206 => Ok(r),
            200 if length == Some(range.length()) => Ok(r),
            200 => Err(BackendError::io(
                OP,
                format!("the CAS ignored the range {header} (200 with {length:?} bytes)"),
            )),
            _ => Err(answer_error(OP, r)),
        }
    }
}

/// What the CAS answered a xorb upload-grant request.
#[derive(Debug)]
pub(crate) enum GrantAnswer {
    /// Upload the xorb as this grant says, then commit it.
    Granted(XorbUploadGrant),
    /// The CAS holds the xorb already.
    Exists,
    /// This CAS offers no grants: post the xorb to it instead.
    NotOffered,
}

/// A request body made of pieces sent one after the other (a xorb: chunk headers and slices of
/// the caller's memory), read afresh for every attempt.
struct Pieces {
    pieces: Vec<Bytes>,
    at: usize,
    off: usize,
}

impl Read for Pieces {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        while let Some(p) = self.pieces.get(self.at) {
            if self.off < p.len() {
                let n = buf.len().min(p.len() - self.off);
                buf[..n].copy_from_slice(&p[self.off..self.off + n]);
                self.off += n;
                return Ok(n);
            }
            self.at += 1;
            self.off = 0;
        }
        Ok(0)
    }
}

fn body_of(pieces: &[Bytes]) -> (ureq::SendBody<'static>, u64) {
    let len = pieces.iter().map(|p| p.len() as u64).sum();
    let reader = Pieces {
        pieces: pieces.to_vec(),
        at: 0,
        off: 0,
    };
    (ureq::SendBody::from_owned_reader(reader), len)
}

impl HubClient {
    fn cas(token: &XetToken, tail: &str) -> String {
        format!("{}{tail}", token.cas_url.trim_end_matches('/'))
    }

    /// Asks the CAS of `token` for a grant to upload the xorb `key` (`prefix/hash`) of
    /// `length` serialized bytes with CRC-64/NVME `crc` (`POST {cas}/v1/xorb-grants/{key}`).
    pub(crate) fn xet_xorb_grant(
        &self,
        token: &XetToken,
        key: &str,
        length: u64,
        crc: u64,
    ) -> Result<GrantAnswer, BackendError> {
        const OP: &str = "xet-xorb-grant";
        let url = Self::cas(token, &format!("/v1/xorb-grants/{key}"));
        let bearer = token.bearer();
        let req = XorbUploadGrantRequest {
            length,
            checksum: Checksum::Crc64Nvme(crc),
        };
        let r = self.call(OP, |a| {
            a.post(&url)
                .header("Authorization", &bearer)
                .send_json(&req)
        })?;
        match r.status().as_u16() {
            201 => Self::expect_json(OP, r).map(GrantAnswer::Granted),
            200 => Ok(GrantAnswer::Exists),
            404 => Ok(GrantAnswer::NotOffered),
            _ => Err(answer_error(OP, r)),
        }
    }

    /// Uploads a xorb's serialized `pieces` as `grant` says: its method and URL, exactly its
    /// headers, no CAS credentials. `Ok(true)`: stored (a 412 means an earlier attempt stored
    /// it); `Ok(false)`: the grant was refused (400, 403, 409), ask for a new one.
    pub(crate) fn xet_grant_upload(
        &self,
        grant: &XorbUploadGrant,
        pieces: &[Bytes],
    ) -> Result<bool, BackendError> {
        const OP: &str = "xet-grant-upload";
        let method = ureq::http::Method::from_bytes(grant.method.as_bytes()).map_err(|_| {
            BackendError::io(OP, format!("the CAS granted the method {:?}", grant.method))
        })?;
        let r = self.call(OP, |a| {
            let (body, len) = body_of(pieces);
            let mut req = ureq::http::Request::builder()
                .method(method.clone())
                .uri(&grant.url)
                .header("content-length", len);
            for (k, v) in &grant.headers {
                req = req.header(k.as_str(), v.as_str());
            }
            let req = req
                .body(body)
                .map_err(|e| ureq::Error::BadUri(e.to_string()))?;
            a.run(req)
        })?;
        match r.status().as_u16() {
            200..=299 | 412 => Ok(true),
            400 | 403 | 409 => Ok(false),
            _ => Err(answer_error(OP, r)),
        }
    }

    /// Commits the xorb `key` uploaded through grant `grant_id`
    /// (`POST {cas}/v1/xorb-commits/{key}/grant/{id}`). `Ok(false)`: the CAS found no upload
    /// for the grant.
    pub(crate) fn xet_xorb_commit(
        &self,
        token: &XetToken,
        key: &str,
        grant_id: &str,
    ) -> Result<bool, BackendError> {
        const OP: &str = "xet-xorb-commit";
        if matches!(grant_id, "" | "." | "..") {
            return Err(BackendError::io(
                OP,
                format!("the CAS granted the id {grant_id:?}"),
            ));
        }
        let url = Self::cas(
            token,
            &format!("/v1/xorb-commits/{key}/grant/{}", hf_encode(grant_id)),
        );
        let bearer = token.bearer();
        let r = self.call(OP, |a| {
            a.post(&url).header("Authorization", &bearer).send_empty()
        })?;
        match r.status().as_u16() {
            200..=299 => Ok(true),
            404 => Ok(false),
            _ => Err(answer_error(OP, r)),
        }
    }

    /// Posts a xorb's serialized `pieces` to the CAS itself (`POST {cas}/v1/xorbs/{key}`), for
    /// a CAS that offers no grants.
    pub(crate) fn xet_post_xorb(
        &self,
        token: &XetToken,
        key: &str,
        pieces: &[Bytes],
    ) -> Result<(), BackendError> {
        const OP: &str = "xet-post-xorb";
        let url = Self::cas(token, &format!("/v1/xorbs/{key}"));
        self.xet_post(OP, token, &url, pieces)
    }

    /// Posts a shard to the CAS (`POST {cas}/v1/shards`), after all its xorbs.
    pub(crate) fn xet_post_shard(
        &self,
        token: &XetToken,
        shard: Bytes,
    ) -> Result<(), BackendError> {
        const OP: &str = "xet-post-shard";
        let url = Self::cas(token, "/v1/shards");
        self.xet_post(OP, token, &url, &[shard])
    }

    fn xet_post(
        &self,
        op: &'static str,
        token: &XetToken,
        url: &str,
        pieces: &[Bytes],
    ) -> Result<(), BackendError> {
        let bearer = token.bearer();
        let r = self.call(op, |a| {
            let (body, len) = body_of(pieces);
            a.post(url)
                .header("Authorization", &bearer)
                .header("content-length", len)
                .send(body)
        })?;
        match r.status().as_u16() {
            200..=299 => Ok(()),
            _ => Err(answer_error(op, r)),
        }
    }
}

/// The `Content-Length` an answer declares, if any.
fn content_length(r: &ureq::http::Response<ureq::Body>) -> Option<u64> {
    r.headers()
        .get("content-length")?
        .to_str()
        .ok()?
        .parse()
        .ok()
}

/// The `rel="next"` target of a `Link` header.
fn next_link(r: &ureq::http::Response<ureq::Body>) -> Option<String> {
    let link = r.headers().get("link")?.to_str().ok()?;
    link.split(',').find_map(|part| {
        let (url, params) = part.split_once(';')?;
        params.contains("rel=\"next\"").then(|| {
            url.trim()
                .trim_start_matches('<')
                .trim_end_matches('>')
                .to_owned()
        })
    })
}
