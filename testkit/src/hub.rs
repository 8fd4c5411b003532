//! A loopback emulator of the Hugging Face Hub bucket API, for tests and as a standalone server
//! (`cargo run --release --example hub_emulator -- --port N --token T`).
//!
//! The Hub routes (create/info/paths-info/tree/batch/resolve/xet tokens) are served by this file
//! on 127.0.0.1 with axum. File bytes live in the Xet project's own local CAS server
//! (`xet_client::cas_client::LocalTestServer`, feature `simulation`, in memory), which clients
//! reach directly with the `casUrl` of the xet token routes: uploads are checked by code we did
//! not write. `addFile` lines are accepted only when the CAS knows the `xetHash`; a missing `size`
//! is taken from the CAS. `resolve` redirects to `/_xet-bridge/{hash}`, a route of this server
//! that reconstructs the file (or a byte range of it) from the CAS in process.
//!
//! Faults can be injected at run time, either through the [`HubEmulator`] handle or through the
//! admin routes under `/_emulator/` (no auth, loopback only):
//!
//! - `POST /_emulator/faults` with a JSON object of any of
//!   `{"throttle": {"count", "retry_after_secs", "route"?}, "server_errors": {"count", "status",
//!   "route"?}, "latency_ms", "fail_batch_line", "fail_batch_paths", "tree_page_size"}`
//!   (`route` is a [`Route::as_str`] name; `null` clears `fail_batch_line`);
//! - `POST /_emulator/reset` clears the faults and the request counters;
//! - `GET /_emulator/requests` returns the request count per route and `total`;
//! - `GET /_emulator/buckets/{ns}/{name}/files` lists the stored files.

#![allow(dead_code)]

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::io;
use std::sync::mpsc;
use std::sync::{Arc, Mutex, MutexGuard};
use std::thread::JoinHandle;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use axum::body::{Body, Bytes};
use axum::extract::{DefaultBodyLimit, Path, Query, State};
use axum::http::{header, HeaderMap, HeaderName, HeaderValue, Method, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::Router;
use percent_encoding::{utf8_percent_encode, NON_ALPHANUMERIC};
use serde_json::{json, Value};
use xet_client::cas_client::{DirectAccessClient, LocalTestServerBuilder};
use xet_client::cas_types::FileRange;
use xet_core_structures::merklehash::MerkleHash;

/// Most paths accepted by one `paths-info` call, and most lines in one `batch` call.
pub const MAX_ITEMS_PER_CALL: usize = 1000;
/// Default number of entries per `tree` page.
pub const DEFAULT_TREE_PAGE_SIZE: usize = 1000;
/// Lifetime of the xet tokens handed out.
pub const XET_TOKEN_LIFETIME: Duration = Duration::from_secs(3600);

/// The routes of the emulator, as counted by [`HubEmulator::requests`].
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Route {
    /// `POST /api/buckets/{ns}/{name}`
    CreateBucket,
    /// `GET /api/buckets/{ns}/{name}`
    BucketInfo,
    /// `POST /api/buckets/{ns}/{name}/paths-info`
    PathsInfo,
    /// `GET /api/buckets/{ns}/{name}/tree[/{prefix}]`
    Tree,
    /// `POST /api/buckets/{ns}/{name}/batch`
    Batch,
    /// `GET /buckets/{ns}/{name}/resolve/{path}`
    Resolve,
    /// `HEAD /buckets/{ns}/{name}/resolve/{path}`
    ResolveHead,
    /// `GET /api/buckets/{ns}/{name}/xet-write-token`
    XetWriteToken,
    /// `GET /api/buckets/{ns}/{name}/xet-read-token`
    XetReadToken,
    /// `GET|HEAD /_xet-bridge/{hash}`: the bytes a resolve redirects to (no auth, like a CDN URL).
    Bytes,
}

impl Route {
    pub const ALL: [Route; 10] = [
        Route::CreateBucket,
        Route::BucketInfo,
        Route::PathsInfo,
        Route::Tree,
        Route::Batch,
        Route::Resolve,
        Route::ResolveHead,
        Route::XetWriteToken,
        Route::XetReadToken,
        Route::Bytes,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            Route::CreateBucket => "create_bucket",
            Route::BucketInfo => "bucket_info",
            Route::PathsInfo => "paths_info",
            Route::Tree => "tree",
            Route::Batch => "batch",
            Route::Resolve => "resolve",
            Route::ResolveHead => "resolve_head",
            Route::XetWriteToken => "xet_write_token",
            Route::XetReadToken => "xet_read_token",
            Route::Bytes => "bytes",
        }
    }

    pub fn parse(name: &str) -> Option<Route> {
        Route::ALL.into_iter().find(|r| r.as_str() == name)
    }
}

/// A file registered in a bucket.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct StoredFile {
    pub path: String,
    pub size: u64,
    pub xet_hash: String,
    pub mtime: SystemTime,
    pub uploaded_at: SystemTime,
}

/// How to start an emulator.
#[derive(Clone, Debug)]
pub struct HubOptions {
    /// Port on 127.0.0.1; 0 picks a free one.
    pub port: u16,
    /// The only token accepted in `Authorization: Bearer <token>`.
    pub token: String,
    /// Entries per `tree` page (the `Link: rel="next"` header points to the next one).
    pub tree_page_size: usize,
}

impl HubOptions {
    pub fn new(token: &str) -> HubOptions {
        HubOptions {
            port: 0,
            token: token.to_string(),
            tree_page_size: DEFAULT_TREE_PAGE_SIZE,
        }
    }
}

/// A running emulator: the Hub on its own thread and tokio runtime, with an in-memory Xet CAS.
/// Dropping it stops both.
pub struct HubEmulator {
    shared: Arc<Shared>,
    stop: Option<tokio::sync::oneshot::Sender<()>>,
    thread: Option<JoinHandle<()>>,
}

impl HubEmulator {
    /// Starts an emulator on a free port that accepts `token`. Panics if it cannot start.
    /// Safe to call from any thread, including inside an actix or tokio runtime.
    pub fn start(token: &str) -> HubEmulator {
        Self::start_with(HubOptions::new(token)).expect("start the Hub emulator")
    }

    /// Starts an emulator with the given options.
    pub fn start_with(options: HubOptions) -> io::Result<HubEmulator> {
        let (ready_tx, ready_rx) = mpsc::channel::<io::Result<Arc<Shared>>>();
        let (stop_tx, stop_rx) = tokio::sync::oneshot::channel::<()>();
        let thread = std::thread::Builder::new()
            .name("hub-emulator".into())
            .spawn(move || serve_thread(options, ready_tx, stop_rx))?;
        let shared = match ready_rx.recv() {
            Ok(Ok(shared)) => shared,
            Ok(Err(e)) => {
                let _ = thread.join();
                return Err(e);
            }
            Err(_) => {
                let _ = thread.join();
                return Err(io::Error::other(
                    "the Hub emulator thread died while starting",
                ));
            }
        };
        Ok(HubEmulator {
            shared,
            stop: Some(stop_tx),
            thread: Some(thread),
        })
    }

    /// `http://127.0.0.1:PORT`, the value for `hf_endpoint`.
    pub fn endpoint(&self) -> &str {
        &self.shared.endpoint
    }

    pub fn token(&self) -> &str {
        &self.shared.token
    }

    /// The Xet CAS endpoint handed out as `casUrl`.
    pub fn cas_endpoint(&self) -> &str {
        &self.shared.cas_endpoint
    }

    // ---- buckets, directly (not counted as requests) ----

    /// Creates bucket `ns/name`; false if it already existed.
    pub fn create_bucket(&self, bucket_id: &str) -> bool {
        let mut st = self.shared.lock();
        if st.buckets.contains_key(bucket_id) {
            return false;
        }
        st.buckets.insert(bucket_id.to_string(), Bucket::new(true));
        true
    }

    pub fn bucket_exists(&self, bucket_id: &str) -> bool {
        self.shared.lock().buckets.contains_key(bucket_id)
    }

    /// Removes a bucket and its files; false if it did not exist.
    pub fn delete_bucket(&self, bucket_id: &str) -> bool {
        self.shared.lock().buckets.remove(bucket_id).is_some()
    }

    /// Every file of the bucket, sorted by path (empty if the bucket does not exist).
    pub fn files(&self, bucket_id: &str) -> Vec<StoredFile> {
        self.shared
            .lock()
            .buckets
            .get(bucket_id)
            .map(|b| b.files.values().cloned().collect())
            .unwrap_or_default()
    }

    /// Every file path of the bucket, sorted.
    pub fn paths(&self, bucket_id: &str) -> Vec<String> {
        self.files(bucket_id).into_iter().map(|f| f.path).collect()
    }

    /// Sum of the file sizes of the bucket.
    pub fn total_size(&self, bucket_id: &str) -> u64 {
        self.files(bucket_id).iter().map(|f| f.size).sum()
    }

    /// Registers a file without checking the CAS (metadata only: unless `xet_hash` was
    /// uploaded, resolving it finds no bytes). Creates the bucket if needed.
    pub fn insert_file(&self, bucket_id: &str, path: &str, xet_hash: &str, size: u64) {
        let now = SystemTime::now();
        let mut st = self.shared.lock();
        let bucket = st
            .buckets
            .entry(bucket_id.to_string())
            .or_insert_with(|| Bucket::new(true));
        bucket.files.insert(
            path.to_string(),
            StoredFile {
                path: path.to_string(),
                size,
                xet_hash: xet_hash.to_string(),
                mtime: now,
                uploaded_at: now,
            },
        );
    }

    /// Removes one file behind the client's back; false if it was not there.
    pub fn remove_file(&self, bucket_id: &str, path: &str) -> bool {
        let mut st = self.shared.lock();
        st.buckets
            .get_mut(bucket_id)
            .is_some_and(|b| b.files.remove(path).is_some())
    }

    // ---- faults ----

    /// The next `count` requests (to `only`, or to any route) get 429 with
    /// `Retry-After: retry_after_secs`.
    pub fn throttle_next(&self, count: u32, retry_after_secs: u64, only: Option<Route>) {
        self.shared.lock().faults.throttle = Burst {
            remaining: count,
            only,
            status: 429,
            retry_after_secs,
        };
    }

    /// The next `count` requests (to `only`, or to any route) get `status` (e.g. 500, 502, 503).
    pub fn fail_next(&self, count: u32, status: u16, only: Option<Route>) {
        self.shared.lock().faults.errors = Burst {
            remaining: count,
            only,
            status,
            retry_after_secs: 0,
        };
    }

    /// Delay added before every request is handled (zero turns it off).
    pub fn set_latency(&self, latency: Duration) {
        self.shared.lock().faults.latency = latency;
    }

    /// In every following batch call, line `n` (1-based, counting every operation line) fails
    /// with `"injected failure"` and is not applied. `None` turns it off.
    pub fn fail_batch_line(&self, n: Option<usize>) {
        self.shared.lock().faults.fail_batch_line = n;
    }

    /// Batch operations on these paths fail with `"injected failure"` until cleared.
    pub fn fail_batch_paths<I, S>(&self, paths: I)
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        self.shared
            .lock()
            .faults
            .fail_batch_paths
            .extend(paths.into_iter().map(Into::into));
    }

    /// Entries per `tree` page.
    pub fn set_tree_page_size(&self, n: usize) {
        self.shared.lock().tree_page_size = n.max(1);
    }

    /// Xet tokens handed out from now on live `lifetime` (default [`XET_TOKEN_LIFETIME`]).
    pub fn set_xet_token_lifetime(&self, lifetime: Duration) {
        self.shared.lock().xet_token_lifetime = Some(lifetime);
    }

    /// Turns every fault off (the tree page size and token lifetime are kept).
    pub fn clear_faults(&self) {
        self.shared.lock().faults = Faults::default();
    }

    // ---- request counters ----

    /// Requests received on `route` (every request counts, whatever its answer).
    pub fn requests(&self, route: Route) -> u64 {
        self.shared.lock().counts.get(&route).copied().unwrap_or(0)
    }

    /// Requests received on every route but the admin ones.
    pub fn total_requests(&self) -> u64 {
        self.shared.lock().counts.values().sum()
    }

    /// Count per route name.
    pub fn request_counts(&self) -> BTreeMap<&'static str, u64> {
        let st = self.shared.lock();
        Route::ALL
            .into_iter()
            .map(|r| (r.as_str(), st.counts.get(&r).copied().unwrap_or(0)))
            .collect()
    }

    pub fn reset_requests(&self) {
        self.shared.lock().counts.clear();
    }
}

impl Drop for HubEmulator {
    fn drop(&mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

// ------------------------------------------------------------------------------------------
// Server thread and shared state
// ------------------------------------------------------------------------------------------

fn serve_thread(
    options: HubOptions,
    ready: mpsc::Sender<io::Result<Arc<Shared>>>,
    stop: tokio::sync::oneshot::Receiver<()>,
) {
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .thread_name("hub-emulator-rt")
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            let _ = ready.send(Err(e));
            return;
        }
    };
    runtime.block_on(async move {
        // The CAS binds 127.0.0.1:0 and stops when dropped.
        let cas = LocalTestServerBuilder::new().start().await;
        let listener = match tokio::net::TcpListener::bind(("127.0.0.1", options.port)).await {
            Ok(l) => l,
            Err(e) => {
                let _ = ready.send(Err(e));
                return;
            }
        };
        let addr = match listener.local_addr() {
            Ok(a) => a,
            Err(e) => {
                let _ = ready.send(Err(e));
                return;
            }
        };
        let shared = Arc::new(Shared {
            endpoint: format!("http://{addr}"),
            token: options.token,
            cas_endpoint: cas.http_endpoint().to_string(),
            cas: cas.client().clone(),
            state: Mutex::new(HubState {
                tree_page_size: options.tree_page_size.max(1),
                ..HubState::default()
            }),
        });
        let app = router(shared.clone());
        if ready.send(Ok(shared)).is_err() {
            return;
        }
        tokio::select! {
            res = axum::serve(listener, app) => {
                if let Err(e) = res {
                    eprintln!("hub emulator: server error: {e}");
                }
            }
            _ = stop => {}
        }
        drop(cas);
    });
    runtime.shutdown_timeout(Duration::from_secs(2));
}

struct Shared {
    endpoint: String,
    token: String,
    cas_endpoint: String,
    cas: Arc<dyn DirectAccessClient>,
    state: Mutex<HubState>,
}

#[derive(Default)]
struct HubState {
    buckets: BTreeMap<String, Bucket>,
    faults: Faults,
    counts: HashMap<Route, u64>,
    tree_page_size: usize,
    token_seq: u64,
    /// Lifetime of Xet tokens handed out from now on (`None`: [`XET_TOKEN_LIFETIME`]).
    xet_token_lifetime: Option<Duration>,
}

struct Bucket {
    private: bool,
    created_at: SystemTime,
    files: BTreeMap<String, StoredFile>,
}

impl Bucket {
    fn new(private: bool) -> Bucket {
        Bucket {
            private,
            created_at: SystemTime::now(),
            files: BTreeMap::new(),
        }
    }
}

#[derive(Clone, Debug, Default)]
struct Burst {
    remaining: u32,
    only: Option<Route>,
    status: u16,
    retry_after_secs: u64,
}

impl Burst {
    /// Takes one from the burst if it applies to `route`.
    fn take(&mut self, route: Route) -> bool {
        if self.remaining == 0 || self.only.is_some_and(|r| r != route) {
            return false;
        }
        self.remaining -= 1;
        true
    }
}

#[derive(Clone, Debug, Default)]
struct Faults {
    throttle: Burst,
    errors: Burst,
    latency: Duration,
    fail_batch_line: Option<usize>,
    fail_batch_paths: BTreeSet<String>,
}

impl Shared {
    fn lock(&self) -> MutexGuard<'_, HubState> {
        // A panicking handler must not wedge the emulator for the rest of a test.
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Counts the request, applies latency, checks auth, then injected faults.
    async fn enter(&self, route: Route, headers: &HeaderMap, auth: bool) -> Result<(), Response> {
        let latency = {
            let mut st = self.lock();
            *st.counts.entry(route).or_default() += 1;
            st.faults.latency
        };
        if !latency.is_zero() {
            tokio::time::sleep(latency).await;
        }
        if auth && !self.authorized(headers) {
            return Err(hub_error(
                StatusCode::UNAUTHORIZED,
                None,
                "Invalid credentials in Authorization header",
            ));
        }
        let mut st = self.lock();
        if st.faults.throttle.take(route) {
            let secs = st.faults.throttle.retry_after_secs;
            let mut resp = hub_error(
                StatusCode::TOO_MANY_REQUESTS,
                None,
                "You have exceeded the rate limit (injected)",
            );
            resp.headers_mut()
                .insert(header::RETRY_AFTER, HeaderValue::from(secs));
            return Err(resp);
        }
        if st.faults.errors.take(route) {
            let status = StatusCode::from_u16(st.faults.errors.status)
                .unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
            return Err(hub_error(status, None, "Injected server error"));
        }
        Ok(())
    }

    fn authorized(&self, headers: &HeaderMap) -> bool {
        let Some(value) = headers
            .get(header::AUTHORIZATION)
            .and_then(|v| v.to_str().ok())
        else {
            return false;
        };
        let value = value.trim();
        match value.split_once(' ') {
            Some((scheme, token)) => {
                scheme.eq_ignore_ascii_case("bearer") && token.trim() == self.token
            }
            None => false,
        }
    }

    fn bucket_url(&self, bucket_id: &str) -> String {
        format!("{}/buckets/{bucket_id}", self.endpoint)
    }
}

// ------------------------------------------------------------------------------------------
// Helpers: errors, dates, JSON shapes
// ------------------------------------------------------------------------------------------

/// A Hub-style error: JSON `{"error": msg}`, `X-Error-Message`, and `X-Error-Code` when given.
fn hub_error(status: StatusCode, code: Option<&str>, msg: &str) -> Response {
    let mut resp = (status, json_body(&json!({ "error": msg }))).into_response();
    let h = resp.headers_mut();
    if let Some(code) = code {
        h.insert("x-error-code", HeaderValue::from_str(code).unwrap());
    }
    if let Ok(v) = HeaderValue::from_str(msg) {
        h.insert("x-error-message", v);
    }
    resp
}

fn repo_not_found(bucket_id: &str) -> Response {
    hub_error(
        StatusCode::NOT_FOUND,
        Some("RepoNotFound"),
        &format!("Bucket {bucket_id} not found"),
    )
}

fn entry_not_found(path: &str) -> Response {
    hub_error(
        StatusCode::NOT_FOUND,
        Some("EntryNotFound"),
        &format!("Entry not found: {path}"),
    )
}

fn bad_request(msg: &str) -> Response {
    hub_error(StatusCode::BAD_REQUEST, Some("BadRequest"), msg)
}

fn json_body(v: &Value) -> ([(HeaderName, HeaderValue); 1], String) {
    (
        [(
            header::CONTENT_TYPE,
            HeaderValue::from_static("application/json"),
        )],
        v.to_string(),
    )
}

fn json_response(status: StatusCode, v: &Value) -> Response {
    (status, json_body(v)).into_response()
}

/// ISO 8601 with milliseconds, `YYYY-MM-DDTHH:MM:SS.fffZ`.
fn iso(t: SystemTime) -> String {
    humantime::format_rfc3339_millis(t).to_string()
}

fn unix_secs(t: SystemTime) -> u64 {
    t.duration_since(UNIX_EPOCH).unwrap_or_default().as_secs()
}

/// Full percent-encoding, like Python's `quote(s, safe="")`.
fn encode(s: &str) -> String {
    utf8_percent_encode(s, NON_ALPHANUMERIC).to_string()
}

fn file_json(f: &StoredFile) -> Value {
    json!({
        "type": "file",
        "path": f.path,
        "size": f.size,
        "xetHash": f.xet_hash,
        "mtime": iso(f.mtime),
        "uploadedAt": iso(f.uploaded_at),
    })
}

fn dir_json(path: &str, uploaded_at: Option<SystemTime>) -> Value {
    let mut v = json!({ "type": "directory", "path": path });
    if let Some(t) = uploaded_at {
        v["uploadedAt"] = Value::String(iso(t));
    }
    v
}

fn bucket_id(ns: &str, name: &str) -> String {
    format!("{ns}/{name}")
}

fn valid_bucket_part(s: &str) -> bool {
    !s.is_empty()
        && s.len() <= 96
        && s.chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.'))
        && !s.starts_with(['-', '.'])
}

/// A path the Hub accepts: non-empty, relative, no empty, `.` or `..` segments.
fn valid_file_path(p: &str) -> bool {
    !p.is_empty() && p.len() <= 4096 && p.split('/').all(|s| !s.is_empty() && s != "." && s != "..")
}

/// Latest upload time of the files under directory `dir`, or None if it holds none.
fn dir_uploaded_at(files: &BTreeMap<String, StoredFile>, dir: &str) -> Option<SystemTime> {
    let prefix = format!("{dir}/");
    files
        .range(prefix.clone()..)
        .take_while(|(p, _)| p.starts_with(&prefix))
        .map(|(_, f)| f.uploaded_at)
        .max()
}

// ------------------------------------------------------------------------------------------
// Router and handlers
// ------------------------------------------------------------------------------------------

type S = State<Arc<Shared>>;

fn router(shared: Arc<Shared>) -> Router {
    Router::new()
        .route(
            "/api/buckets/{ns}/{name}",
            post(create_bucket).get(bucket_info),
        )
        .route("/api/buckets/{ns}/{name}/paths-info", post(paths_info))
        .route("/api/buckets/{ns}/{name}/tree", get(tree_root))
        .route("/api/buckets/{ns}/{name}/tree/{*prefix}", get(tree_prefix))
        .route("/api/buckets/{ns}/{name}/batch", post(batch))
        .route(
            "/api/buckets/{ns}/{name}/xet-write-token",
            get(xet_write_token),
        )
        .route(
            "/api/buckets/{ns}/{name}/xet-read-token",
            get(xet_read_token),
        )
        .route(
            "/buckets/{ns}/{name}/resolve/{*path}",
            get(resolve_get).head(resolve_head),
        )
        .route("/_xet-bridge/{hash}", get(bridge_bytes))
        .route("/_emulator/faults", post(admin_faults))
        .route("/_emulator/reset", post(admin_reset))
        .route("/_emulator/requests", get(admin_requests))
        .route("/_emulator/buckets/{ns}/{name}/files", get(admin_files))
        .fallback(|| async {
            hub_error(
                StatusCode::NOT_FOUND,
                None,
                "Sorry, we can't find the page you are looking for.",
            )
        })
        .layer(DefaultBodyLimit::disable())
        .with_state(shared)
}

async fn create_bucket(
    State(s): S,
    Path((ns, name)): Path<(String, String)>,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    if let Err(r) = s.enter(Route::CreateBucket, &headers, true).await {
        return r;
    }
    if !valid_bucket_part(&ns) || !valid_bucket_part(&name) {
        return bad_request("Invalid bucket name");
    }
    let private = if body.is_empty() {
        true
    } else {
        match serde_json::from_slice::<Value>(&body) {
            Ok(v) => v.get("private").and_then(Value::as_bool).unwrap_or(true),
            Err(_) => return bad_request("Invalid JSON body"),
        }
    };
    let id = bucket_id(&ns, &name);
    let url = s.bucket_url(&id);
    let mut st = s.lock();
    if st.buckets.contains_key(&id) {
        return json_response(
            StatusCode::CONFLICT,
            &json!({ "error": "You already created this bucket", "url": url }),
        );
    }
    st.buckets.insert(id.clone(), Bucket::new(private));
    json_response(StatusCode::OK, &json!({ "url": url, "name": id, "id": id }))
}

async fn bucket_info(
    State(s): S,
    Path((ns, name)): Path<(String, String)>,
    headers: HeaderMap,
) -> Response {
    if let Err(r) = s.enter(Route::BucketInfo, &headers, true).await {
        return r;
    }
    let id = bucket_id(&ns, &name);
    let st = s.lock();
    let Some(b) = st.buckets.get(&id) else {
        return repo_not_found(&id);
    };
    let size: u64 = b.files.values().map(|f| f.size).sum();
    json_response(
        StatusCode::OK,
        &json!({
            "id": id,
            "private": b.private,
            "createdAt": iso(b.created_at),
            "size": size,
            "totalFiles": b.files.len(),
        }),
    )
}

async fn paths_info(
    State(s): S,
    Path((ns, name)): Path<(String, String)>,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    if let Err(r) = s.enter(Route::PathsInfo, &headers, true).await {
        return r;
    }
    let id = bucket_id(&ns, &name);
    if !s.lock().buckets.contains_key(&id) {
        return repo_not_found(&id);
    }
    let paths: Vec<String> = match serde_json::from_slice::<Value>(&body) {
        Ok(v) => match v.get("paths").and_then(Value::as_array) {
            Some(a) if a.iter().all(Value::is_string) => a
                .iter()
                .map(|p| p.as_str().unwrap_or_default().to_string())
                .collect(),
            _ => return bad_request("Body must be {\"paths\": [string, ...]}"),
        },
        Err(_) => return bad_request("Invalid JSON body"),
    };
    if paths.len() > MAX_ITEMS_PER_CALL {
        return bad_request(&format!(
            "Too many paths: {} > {MAX_ITEMS_PER_CALL}",
            paths.len()
        ));
    }
    let st = s.lock();
    let Some(b) = st.buckets.get(&id) else {
        return repo_not_found(&id);
    };
    let mut seen = BTreeSet::new();
    let mut out = Vec::new();
    for p in paths {
        let p = p.trim_matches('/').to_string();
        if !seen.insert(p.clone()) {
            continue;
        }
        if let Some(f) = b.files.get(&p) {
            out.push(file_json(f));
        } else if let Some(t) = dir_uploaded_at(&b.files, &p) {
            out.push(dir_json(&p, Some(t)));
        }
    }
    json_response(StatusCode::OK, &Value::Array(out))
}

async fn tree_root(
    state: S,
    Path((ns, name)): Path<(String, String)>,
    Query(q): Query<HashMap<String, String>>,
    headers: HeaderMap,
) -> Response {
    tree(state, ns, name, String::new(), q, headers).await
}

async fn tree_prefix(
    state: S,
    Path((ns, name, prefix)): Path<(String, String, String)>,
    Query(q): Query<HashMap<String, String>>,
    headers: HeaderMap,
) -> Response {
    tree(state, ns, name, prefix, q, headers).await
}

async fn tree(
    State(s): S,
    ns: String,
    name: String,
    prefix: String,
    q: HashMap<String, String>,
    headers: HeaderMap,
) -> Response {
    if let Err(r) = s.enter(Route::Tree, &headers, true).await {
        return r;
    }
    let id = bucket_id(&ns, &name);
    // axum has decoded the path once; a `%2F` sent by the client is a `/` here.
    let prefix = prefix.trim_start_matches('/').to_string();
    let recursive = q
        .get("recursive")
        .is_some_and(|v| v == "true" || v == "1" || v == "True");
    let cursor = q.get("cursor").cloned();

    let st = s.lock();
    let Some(b) = st.buckets.get(&id) else {
        return repo_not_found(&id);
    };
    let page_size = st.tree_page_size;

    // Every listed entry, keyed by path. A prefix with nothing under it lists nothing (200).
    let mut entries: BTreeMap<String, Value> = BTreeMap::new();
    let add_dir = |entries: &mut BTreeMap<String, Value>, dir: &str| {
        if !entries.contains_key(dir) {
            entries.insert(
                dir.to_string(),
                dir_json(dir, dir_uploaded_at(&b.files, dir)),
            );
        }
    };
    if recursive {
        // A plain string-prefix match, as the Hub's bucket tree does (huggingface_hub notes
        // that prefix `sub` also returns `submarine.txt`): callers must check the `/` boundary.
        // Files, plus the directories above them that are longer than the prefix.
        let matching = b
            .files
            .range(prefix.clone()..)
            .take_while(|(p, _)| p.starts_with(&prefix));
        for (path, f) in matching {
            entries.insert(path.clone(), file_json(f));
            for (i, _) in path.match_indices('/') {
                if i > prefix.len() {
                    add_dir(&mut entries, &path[..i]);
                }
            }
        }
    } else {
        // The direct children of the directory `prefix`.
        let dir = prefix.trim_end_matches('/');
        let base = if dir.is_empty() {
            String::new()
        } else {
            format!("{dir}/")
        };
        let children = b
            .files
            .range(base.clone()..)
            .take_while(|(p, _)| p.starts_with(&base));
        for (path, f) in children {
            match path[base.len()..].find('/') {
                Some(i) => add_dir(&mut entries, &path[..base.len() + i]),
                None => {
                    entries.insert(path.clone(), file_json(f));
                }
            }
        }
    }

    let mut iter: Box<dyn Iterator<Item = (&String, &Value)>> = match &cursor {
        Some(c) => Box::new(entries.range::<String, _>((
            std::ops::Bound::Excluded(c.clone()),
            std::ops::Bound::Unbounded,
        ))),
        None => Box::new(entries.iter()),
    };
    let page: Vec<(&String, &Value)> = iter.by_ref().take(page_size).collect();
    let more = iter.next().is_some();
    let body = Value::Array(page.iter().map(|(_, v)| (*v).clone()).collect());
    let mut resp = json_response(StatusCode::OK, &body);
    if more {
        let last = page.last().map(|(p, _)| p.as_str()).unwrap_or_default();
        let mut next = format!("{}/api/buckets/{id}/tree", s.endpoint);
        if !prefix.is_empty() {
            next.push('/');
            next.push_str(&encode(&prefix));
        }
        next.push_str(&format!(
            "?recursive={}&cursor={}",
            if recursive { "true" } else { "false" },
            encode(last)
        ));
        let link = format!("<{next}>; rel=\"next\"");
        resp.headers_mut()
            .insert(header::LINK, HeaderValue::from_str(&link).unwrap());
    }
    resp
}

/// One parsed batch line.
enum Op {
    Add {
        path: String,
        hash: String,
        size: Option<u64>,
        mtime: Option<SystemTime>,
    },
    Delete {
        path: String,
    },
}

impl Op {
    fn path(&self) -> &str {
        match self {
            Op::Add { path, .. } | Op::Delete { path } => path,
        }
    }
}

fn parse_mtime(v: &Value) -> Option<SystemTime> {
    if let Some(ms) = v.as_u64() {
        return Some(UNIX_EPOCH + Duration::from_millis(ms));
    }
    if let Some(ms) = v.as_f64() {
        return (ms >= 0.0).then(|| UNIX_EPOCH + Duration::from_secs_f64(ms / 1000.0));
    }
    v.as_str()
        .and_then(|s| humantime::parse_rfc3339_weak(s).ok())
}

fn parse_batch_line(line: &str) -> Result<Op, String> {
    let v: Value = serde_json::from_str(line).map_err(|e| format!("Invalid JSON line: {e}"))?;
    let path = v
        .get("path")
        .and_then(Value::as_str)
        .ok_or("Missing \"path\"")?
        .to_string();
    match v.get("type").and_then(Value::as_str) {
        Some("addFile") => {
            let hash = v
                .get("xetHash")
                .and_then(Value::as_str)
                .ok_or("addFile: missing \"xetHash\"")?
                .to_string();
            let size = match v.get("size") {
                None | Some(Value::Null) => None,
                Some(s) => Some(s.as_u64().ok_or("addFile: \"size\" must be an integer")?),
            };
            let mtime = match v.get("mtime") {
                None | Some(Value::Null) => None,
                Some(m) => Some(parse_mtime(m).ok_or("addFile: invalid \"mtime\"")?),
            };
            Ok(Op::Add {
                path,
                hash,
                size,
                mtime,
            })
        }
        Some("deleteFile") => Ok(Op::Delete { path }),
        Some(other) => Err(format!("Unsupported operation type {other:?}")),
        None => Err("Missing \"type\"".to_string()),
    }
}

async fn batch(
    State(s): S,
    Path((ns, name)): Path<(String, String)>,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    if let Err(r) = s.enter(Route::Batch, &headers, true).await {
        return r;
    }
    let id = bucket_id(&ns, &name);
    if !s.lock().buckets.contains_key(&id) {
        return repo_not_found(&id);
    }
    let Ok(text) = std::str::from_utf8(&body) else {
        return bad_request("Body is not UTF-8");
    };
    let mut ops = Vec::new();
    for (i, line) in text.lines().enumerate() {
        if line.trim().is_empty() {
            continue;
        }
        match parse_batch_line(line) {
            Ok(op) => ops.push(op),
            Err(e) => return bad_request(&format!("Line {}: {e}", i + 1)),
        }
    }
    if ops.is_empty() {
        return bad_request("Empty batch");
    }
    if ops.len() > MAX_ITEMS_PER_CALL {
        return bad_request(&format!(
            "Too many operations: {} > {MAX_ITEMS_PER_CALL}",
            ops.len()
        ));
    }

    // Ask the CAS about every added hash first (without holding the lock across awaits): the
    // same lookup its `HEAD /v1/files/{hash}` route answers with Content-Length.
    let mut cas_sizes: HashMap<String, Result<u64, String>> = HashMap::new();
    for op in &ops {
        if let Op::Add { hash, .. } = op {
            if cas_sizes.contains_key(hash) {
                continue;
            }
            let res = match MerkleHash::from_hex(hash) {
                Ok(h) => s
                    .cas
                    .get_file_size(&h)
                    .await
                    .map_err(|_| format!("Xet file {hash} not found in the CAS")),
                Err(_) => Err(format!("Invalid xetHash {hash:?}")),
            };
            cas_sizes.insert(hash.clone(), res);
        }
    }

    let now = SystemTime::now();
    let mut st = s.lock();
    let faults = st.faults.clone();
    let Some(b) = st.buckets.get_mut(&id) else {
        return repo_not_found(&id);
    };
    let mut failed = Vec::new();
    let mut succeeded = 0usize;
    for (i, op) in ops.iter().enumerate() {
        let path = op.path();
        let error =
            if faults.fail_batch_line == Some(i + 1) || faults.fail_batch_paths.contains(path) {
                Some("injected failure".to_string())
            } else if !valid_file_path(path) {
                Some(format!("Invalid path {path:?}"))
            } else {
                match op {
                    Op::Add {
                        hash, size, mtime, ..
                    } => match &cas_sizes[hash] {
                        Err(e) => Some(e.clone()),
                        Ok(cas_size) if size.is_some_and(|sz| sz != *cas_size) => Some(format!(
                            "Size mismatch: declared {}, Xet file has {cas_size}",
                            size.unwrap_or_default()
                        )),
                        Ok(cas_size) => {
                            b.files.insert(
                                path.to_string(),
                                StoredFile {
                                    path: path.to_string(),
                                    size: *cas_size,
                                    xet_hash: hash.clone(),
                                    mtime: mtime.unwrap_or(now),
                                    uploaded_at: now,
                                },
                            );
                            None
                        }
                    },
                    Op::Delete { .. } => match b.files.remove(path) {
                        Some(_) => None,
                        None => Some(format!("Entry not found: {path}")),
                    },
                }
            };
        match error {
            Some(error) => failed.push(json!({ "path": path, "error": error })),
            None => succeeded += 1,
        }
    }
    let status = if succeeded == 0 {
        StatusCode::UNPROCESSABLE_ENTITY
    } else {
        StatusCode::OK
    };
    json_response(
        status,
        &json!({
            "success": failed.is_empty(),
            "processed": ops.len(),
            "succeeded": succeeded,
            "failed": failed,
        }),
    )
}

async fn xet_token(
    s: Arc<Shared>,
    route: Route,
    ns: String,
    name: String,
    headers: HeaderMap,
) -> Response {
    if let Err(r) = s.enter(route, &headers, true).await {
        return r;
    }
    let id = bucket_id(&ns, &name);
    let (seq, lifetime) = {
        let mut st = s.lock();
        if !st.buckets.contains_key(&id) {
            return repo_not_found(&id);
        }
        st.token_seq += 1;
        (
            st.token_seq,
            st.xet_token_lifetime.unwrap_or(XET_TOKEN_LIFETIME),
        )
    };
    let kind = if route == Route::XetWriteToken {
        "write"
    } else {
        "read"
    };
    let access_token = format!("emulator-xet-{kind}-{seq}");
    let exp = unix_secs(SystemTime::now() + lifetime);
    let mut resp = json_response(
        StatusCode::OK,
        &json!({ "accessToken": access_token, "exp": exp, "casUrl": s.cas_endpoint }),
    );
    let h = resp.headers_mut();
    h.insert(
        "x-xet-cas-url",
        HeaderValue::from_str(&s.cas_endpoint).unwrap(),
    );
    h.insert(
        "x-xet-access-token",
        HeaderValue::from_str(&access_token).unwrap(),
    );
    h.insert("x-xet-token-expiration", HeaderValue::from(exp));
    resp
}

async fn xet_write_token(
    State(s): S,
    Path((ns, name)): Path<(String, String)>,
    headers: HeaderMap,
) -> Response {
    xet_token(s, Route::XetWriteToken, ns, name, headers).await
}

async fn xet_read_token(
    State(s): S,
    Path((ns, name)): Path<(String, String)>,
    headers: HeaderMap,
) -> Response {
    xet_token(s, Route::XetReadToken, ns, name, headers).await
}

/// Looks a file up for resolve; Err is the 404 to send.
fn resolve_lookup(s: &Shared, id: &str, path: &str) -> Result<StoredFile, Box<Response>> {
    let st = s.lock();
    let b = st
        .buckets
        .get(id)
        .ok_or_else(|| Box::new(repo_not_found(id)))?;
    b.files
        .get(path)
        .cloned()
        .ok_or_else(|| Box::new(entry_not_found(path)))
}

fn resolve_headers(s: &Shared, id: &str, f: &StoredFile, h: &mut HeaderMap) {
    h.insert("x-xet-hash", HeaderValue::from_str(&f.xet_hash).unwrap());
    h.insert(
        header::ETAG,
        HeaderValue::from_str(&format!("\"{}\"", f.xet_hash)).unwrap(),
    );
    h.insert("x-linked-size", HeaderValue::from(f.size));
    h.insert(
        "x-linked-etag",
        HeaderValue::from_str(&format!("\"{}\"", f.xet_hash)).unwrap(),
    );
    let link = format!(
        "<{}/api/buckets/{id}/xet-read-token>; rel=\"xet-auth\"",
        s.endpoint
    );
    h.insert(header::LINK, HeaderValue::from_str(&link).unwrap());
    h.insert(header::ACCEPT_RANGES, HeaderValue::from_static("bytes"));
}

async fn resolve_get(
    State(s): S,
    Path((ns, name, path)): Path<(String, String, String)>,
    headers: HeaderMap,
) -> Response {
    if let Err(r) = s.enter(Route::Resolve, &headers, true).await {
        return r;
    }
    let id = bucket_id(&ns, &name);
    let f = match resolve_lookup(&s, &id, &path) {
        Ok(f) => f,
        Err(r) => return *r,
    };
    let location = format!("{}/_xet-bridge/{}", s.endpoint, f.xet_hash);
    let mut resp = StatusCode::FOUND.into_response();
    let h = resp.headers_mut();
    h.insert(header::LOCATION, HeaderValue::from_str(&location).unwrap());
    resolve_headers(&s, &id, &f, h);
    resp
}

async fn resolve_head(
    State(s): S,
    Path((ns, name, path)): Path<(String, String, String)>,
    headers: HeaderMap,
) -> Response {
    if let Err(r) = s.enter(Route::ResolveHead, &headers, true).await {
        return r;
    }
    let id = bucket_id(&ns, &name);
    let f = match resolve_lookup(&s, &id, &path) {
        Ok(f) => f,
        Err(r) => return *r,
    };
    let mut resp = Response::new(Body::empty());
    let h = resp.headers_mut();
    resolve_headers(&s, &id, &f, h);
    h.insert(header::CONTENT_LENGTH, HeaderValue::from(f.size));
    h.insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/octet-stream"),
    );
    resp
}

/// Parses a single `bytes=` range against a file of `size` bytes into [start, end).
/// `Ok(None)`: no (usable) Range header, serve everything. `Err(())`: unsatisfiable.
fn parse_range(headers: &HeaderMap, size: u64) -> Result<Option<(u64, u64)>, ()> {
    let Some(v) = headers.get(header::RANGE).and_then(|v| v.to_str().ok()) else {
        return Ok(None);
    };
    let Some(spec) = v.trim().strip_prefix("bytes=") else {
        return Ok(None);
    };
    if spec.contains(',') {
        return Ok(None); // multiple ranges: answer with the whole file, as RFC 9110 allows
    }
    let Some((a, b)) = spec.trim().split_once('-') else {
        return Ok(None);
    };
    let (a, b) = (a.trim(), b.trim());
    let (start, end) = if a.is_empty() {
        let n: u64 = b.parse().map_err(|_| ())?;
        if n == 0 {
            return Err(());
        }
        (size.saturating_sub(n), size)
    } else {
        let start: u64 = a.parse().map_err(|_| ())?;
        let end = if b.is_empty() {
            size
        } else {
            let last: u64 = b.parse().map_err(|_| ())?;
            if last < start {
                return Err(());
            }
            (last + 1).min(size)
        };
        (start, end)
    };
    if start >= size {
        return Err(());
    }
    Ok(Some((start, end)))
}

async fn bridge_bytes(
    State(s): S,
    Path(hash): Path<String>,
    method: Method,
    headers: HeaderMap,
) -> Response {
    if let Err(r) = s.enter(Route::Bytes, &headers, false).await {
        return r;
    }
    let Ok(h) = MerkleHash::from_hex(&hash) else {
        return hub_error(StatusCode::NOT_FOUND, Some("EntryNotFound"), "Invalid hash");
    };
    let Ok(size) = s.cas.get_file_size(&h).await else {
        return hub_error(
            StatusCode::NOT_FOUND,
            Some("EntryNotFound"),
            "Xet file not found",
        );
    };
    let range = match parse_range(&headers, size) {
        Ok(r) => r,
        Err(()) => {
            let mut resp = StatusCode::RANGE_NOT_SATISFIABLE.into_response();
            resp.headers_mut().insert(
                header::CONTENT_RANGE,
                HeaderValue::from_str(&format!("bytes */{size}")).unwrap(),
            );
            return resp;
        }
    };
    let (status, start, end) = match range {
        Some((a, b)) => (StatusCode::PARTIAL_CONTENT, a, b),
        None => (StatusCode::OK, 0, size),
    };
    let body = if method == Method::HEAD || start == end {
        Bytes::new()
    } else {
        match s
            .cas
            .get_file_data(&h, Some(FileRange::new(start, end)))
            .await
        {
            Ok(data) => data,
            Err(e) => {
                return hub_error(
                    StatusCode::INTERNAL_SERVER_ERROR,
                    None,
                    &format!("CAS reconstruction failed: {e}"),
                )
            }
        }
    };
    let mut resp = Response::new(Body::from(body));
    *resp.status_mut() = status;
    let hm = resp.headers_mut();
    hm.insert(header::CONTENT_LENGTH, HeaderValue::from(end - start));
    hm.insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/octet-stream"),
    );
    hm.insert(header::ACCEPT_RANGES, HeaderValue::from_static("bytes"));
    hm.insert(
        header::ETAG,
        HeaderValue::from_str(&format!("\"{hash}\"")).unwrap(),
    );
    if status == StatusCode::PARTIAL_CONTENT {
        hm.insert(
            header::CONTENT_RANGE,
            HeaderValue::from_str(&format!("bytes {}-{}/{size}", start, end - 1)).unwrap(),
        );
    }
    resp
}

// ---- admin routes (no auth, not counted) ----

fn parse_burst(v: &Value, default_status: u16) -> Result<Burst, String> {
    let count = v
        .get("count")
        .and_then(Value::as_u64)
        .ok_or("burst needs \"count\"")?;
    let only = match v.get("route") {
        None | Some(Value::Null) => None,
        Some(r) => Some(
            r.as_str()
                .and_then(Route::parse)
                .ok_or_else(|| format!("unknown route {r}"))?,
        ),
    };
    Ok(Burst {
        remaining: u32::try_from(count).map_err(|_| "count too large")?,
        only,
        status: v
            .get("status")
            .and_then(Value::as_u64)
            .map_or(default_status, |s| s as u16),
        retry_after_secs: v
            .get("retry_after_secs")
            .and_then(Value::as_u64)
            .unwrap_or(1),
    })
}

async fn admin_faults(State(s): S, body: Bytes) -> Response {
    let v: Value = match serde_json::from_slice(&body) {
        Ok(v @ Value::Object(_)) => v,
        _ => return bad_request("Body must be a JSON object"),
    };
    let mut st = s.lock();
    let mut faults = st.faults.clone();
    let mut page_size = st.tree_page_size;
    let mut apply = || -> Result<(), String> {
        if let Some(t) = v.get("throttle") {
            faults.throttle = parse_burst(t, 429)?;
            faults.throttle.status = 429;
        }
        if let Some(e) = v.get("server_errors") {
            faults.errors = parse_burst(e, 500)?;
        }
        if let Some(ms) = v.get("latency_ms") {
            faults.latency = Duration::from_millis(ms.as_u64().ok_or("latency_ms: integer")?);
        }
        if let Some(n) = v.get("fail_batch_line") {
            faults.fail_batch_line = match n {
                Value::Null => None,
                n => Some(n.as_u64().ok_or("fail_batch_line: integer or null")? as usize),
            };
        }
        if let Some(p) = v.get("fail_batch_paths") {
            let arr = p.as_array().ok_or("fail_batch_paths: array of strings")?;
            faults.fail_batch_paths = arr
                .iter()
                .map(|x| x.as_str().map(str::to_string))
                .collect::<Option<_>>()
                .ok_or("fail_batch_paths: array of strings")?;
        }
        if let Some(n) = v.get("tree_page_size") {
            page_size = n.as_u64().ok_or("tree_page_size: integer")?.max(1) as usize;
        }
        Ok(())
    };
    if let Err(e) = apply() {
        return bad_request(&e);
    }
    st.faults = faults;
    st.tree_page_size = page_size;
    json_response(StatusCode::OK, &json!({ "ok": true }))
}

async fn admin_reset(State(s): S) -> Response {
    let mut st = s.lock();
    st.faults = Faults::default();
    st.counts.clear();
    json_response(StatusCode::OK, &json!({ "ok": true }))
}

async fn admin_requests(State(s): S) -> Response {
    let st = s.lock();
    let mut m = serde_json::Map::new();
    let mut total = 0;
    for r in Route::ALL {
        let n = st.counts.get(&r).copied().unwrap_or(0);
        total += n;
        m.insert(r.as_str().to_string(), json!(n));
    }
    m.insert("total".to_string(), json!(total));
    json_response(StatusCode::OK, &Value::Object(m))
}

async fn admin_files(State(s): S, Path((ns, name)): Path<(String, String)>) -> Response {
    let id = bucket_id(&ns, &name);
    let st = s.lock();
    match st.buckets.get(&id) {
        Some(b) => json_response(
            StatusCode::OK,
            &Value::Array(b.files.values().map(file_json).collect()),
        ),
        None => repo_not_found(&id),
    }
}
