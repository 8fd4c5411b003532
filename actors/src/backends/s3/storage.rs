//! [`S3Storage`]: the [`Storage`] of the `s3` adapter, and what its request futures share.
//!
//! Requests run on a small multi-threaded tokio runtime owned by the storage, never on the
//! backend actor's arbiter, each its own task, bounded to `s3_num_io_threads` in flight. What
//! the storage shares with them, exactly ([`Shared`], behind an `Arc`): the SDK plane and the
//! settings (immutable), the in-flight [`Semaphore`], and the bucket sighting (one atomic, see
//! [`super::bucket`]); plus, on the direct path, the signer each request holds and the
//! credentials channel back to the storage ([`super::credentials`]). The breaker and the
//! direct path's refresh state are the storage's alone: the breaker follows results on the
//! actor's thread ([`Io::then`]). No lock.

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use aws_credential_types::provider::SharedCredentialsProvider;
use bytes::Bytes;
use tokio::sync::Semaphore;

use super::bucket::BucketCheck;
use super::client::{build_clients, current_credentials, io_runtime};
use super::credentials::DirectPath;
use super::direct::Direct;
use super::plane::DataPlane;
use super::sdk::{list_page, Sdk};
use super::{DataPath, ResolvedEndpoint, S3Config};
use crate::breaker::Breaker;
use crate::buffer::LoadBuf;
use crate::key::{NameFormat, ObjectKey};
use crate::messages::KeyPage;
use crate::storage::{
    answer_known, BackendError, ErrorKind, Fetched, Io, Recovered, Removed, Storage, Verdict,
};

/// Keys per `DeleteObjects` request (the S3 maximum).
const DELETE_BATCH: usize = 1000;

/// How long closing the adapter waits for its I/O runtime's threads to exit.
const CLOSE_WAIT: Duration = Duration::from_secs(5);

/// What request futures share (see the module docs).
pub(super) struct Shared {
    /// The SDK plane: data requests when the direct path is off, listing and deletes always.
    sdk: Arc<Sdk>,
    prefix: String,
    format: NameFormat,
    /// Bounds the requests in flight.
    permits: Semaphore,
    /// When the bucket was last seen to exist.
    bucket: BucketCheck,
}

impl Shared {
    fn object_key(&self, key: &ObjectKey) -> String {
        let mut s = self.prefix.clone();
        s.push_str(&key.object_name(self.format));
        s
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
    pub(crate) async fn open_with(
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
                sdk: Arc::new(Sdk {
                    client,
                    credentials: source,
                    bucket: endpoint.bucket.clone(),
                    sign_payload: cfg.signs_payload(&endpoint),
                    put_crc32c: cfg.put_crc32c(&endpoint),
                    get_crc32c: cfg.get_crc32c(),
                }),
                prefix: cfg.key_prefix(),
                format,
                permits: Semaphore::new(cfg.s3_num_io_threads),
                bucket: BucketCheck::new(Duration::from_secs_f64(cfg.s3_bucket_check_secs)),
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

    /// The data plane for the next batch of requests: the direct path's signer, or the SDK
    /// (configured so, or the direct path's credentials are about to expire). The one place
    /// the choice is made; requests call the [`DataPlane`] they are given.
    fn plane(&mut self) -> Arc<dyn DataPlane> {
        match self.signer() {
            Some(direct) => direct,
            None => self.shared.sdk.clone(),
        }
    }

    /// The bucket requests go to.
    pub fn bucket(&self) -> &str {
        &self.shared.sdk.bucket
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
pub(crate) const PROBE_OBJECT: &str = ".kvtier-health-check";

/// How long a health check may take before the endpoint counts as unreachable.
pub(crate) const PROBE_TIMEOUT: Duration = Duration::from_secs(10);

/// The health check: a GET of [`PROBE_OBJECT`] on the data path, the cheapest request that
/// exercises what loads need. `NoSuchKey` (or the object itself) means the store serves;
/// `NoSuchBucket` is a missing bucket; refused credentials, other errors and no connection are
/// failures. A plain `AccessDenied` is taken as serving: AWS answers it instead of 404 for a
/// missing object when the credentials lack `s3:ListBucket`, which kvtier does not need.
async fn probe_once(shared: &Shared, plane: &dyn DataPlane) -> Result<(), BackendError> {
    let object = format!("{}{PROBE_OBJECT}", shared.prefix);
    let r = plane.probe(&object).await;
    match r {
        Err(e) if e.kind() == ErrorKind::Permission && e.to_string().contains(": AccessDenied") => {
            Ok(())
        }
        // A failure (a missing bucket) is noted for the bucket check; an answer is not taken
        // as having seen the bucket, so health checks never change what a HEAD 404 means.
        Ok(()) => Ok(()),
        r => {
            shared.bucket.follow(&r);
            r
        }
    }
}

impl Storage for S3Storage {
    fn kind(&self) -> &'static str {
        "s3"
    }

    fn put(&mut self, items: Vec<(ObjectKey, Bytes)>) -> Io<Vec<Result<(), BackendError>>> {
        let plane = self.plane();
        self.per_item(
            "put",
            items,
            move |shared, (key, data): (ObjectKey, Bytes)| {
                let plane = plane.clone();
                async move {
                    let r = plane.put(&shared.object_key(&key), data).await;
                    shared.bucket.follow(&r);
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
            let plane = self.plane();
            self.per_item("head", unknown, move |shared, key: ObjectKey| {
                let plane = plane.clone();
                async move {
                    match plane.head(&shared.object_key(&key)).await {
                        Ok(None) => {
                            let bucket = &shared.sdk.bucket;
                            shared.bucket.confirm_absent(&*plane, bucket).await
                        }
                        Ok(Some(size)) => {
                            shared.bucket.exists_now();
                            Ok(Some(size))
                        }
                        Err(e) => {
                            let r = Err(e);
                            shared.bucket.follow(&r);
                            r
                        }
                    }
                }
            })
        })
    }

    fn get(&mut self, items: Vec<(ObjectKey, LoadBuf)>) -> Io<Vec<Result<Fetched, BackendError>>> {
        let plane = self.plane();
        self.per_item(
            "get",
            items,
            move |shared, (key, mut buf): (ObjectKey, LoadBuf)| {
                let plane = plane.clone();
                async move {
                    let r = plane.get(&shared.object_key(&key), &mut buf).await;
                    if !matches!(r, Ok(Fetched::Absent)) {
                        shared.bucket.follow(&r);
                    }
                    r
                }
            },
        )
    }

    fn verify(&mut self, keys: Vec<ObjectKey>) -> Io<Vec<Result<Verdict, BackendError>>> {
        // Always through the SDK (a scrub is not the data path): it asks for the stored
        // checksum and validates it as the body streams.
        self.per_item("verify", keys, |shared, key: ObjectKey| async move {
            shared.sdk.verify(&shared.object_key(&key)).await
        })
    }

    fn remove(&mut self, keys: Vec<ObjectKey>) -> Io<Vec<Result<Removed, BackendError>>> {
        let batches: Vec<Vec<ObjectKey>> = keys.chunks(DELETE_BATCH).map(|c| c.to_vec()).collect();
        let io = self.per_item(
            "delete",
            batches,
            |shared, batch: Vec<ObjectKey>| async move {
                let names: Vec<String> = batch.iter().map(|k| shared.object_key(k)).collect();
                shared.sdk.delete_batch(&names).await
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
                list_page(
                    &shared.sdk,
                    &shared.prefix,
                    shared.format,
                    model.as_deref(),
                    cursor.as_deref(),
                    limit,
                )
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
                match list_page(
                    &shared.sdk,
                    &shared.prefix,
                    shared.format,
                    None,
                    cursor.as_deref(),
                    1000,
                )
                .await
                {
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

    /// One GET of `PROBE_OBJECT` under the prefix, bounded by `PROBE_TIMEOUT` (or the
    /// attempt timeout if shorter), while the
    /// breaker is closed. See `probe_once`.
    fn probe(&mut self) -> Io<()> {
        if !self.breaker.wants_probe() {
            return Io::ready(());
        }
        let plane = self.plane();
        let shared = self.shared.clone();
        let limit = self.probe_timeout;
        let task = self.handle.spawn(async move {
            tokio::time::timeout(limit, probe_once(&shared, &*plane))
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
            "bucket": self.shared.sdk.bucket,
            "endpoint": self.endpoint.endpoint_url.clone().unwrap_or_else(|| format!("aws ({})", self.region)),
            "path_style": self.endpoint.force_path_style,
            "key_prefix": self.shared.prefix,
            "in_flight_bound": self.in_flight_bound,
            "payload_signed": self.shared.sdk.sign_payload,
            "checksum": match (self.shared.sdk.put_crc32c, self.shared.sdk.get_crc32c) {
                (_, true) => "crc32c",
                (true, false) => "crc32c (put)",
                (false, false) => "none",
            },
            "data_path": data_path_name(&self.direct),
            "direct_credentials": self.direct.as_ref().ok().map(DirectPath::status),
            "circuit_breaker": self.breaker.status(),
        })
    }

    /// Shuts the adapter's I/O runtime down and returns once its threads have exited, so its
    /// sockets are closed when the actor has stopped (what `Tier::close` promises). A runtime
    /// cannot be shut down with a wait from inside another runtime (the actor's), so a plain
    /// thread waits, at most 5 s (a request stuck in a blocking call, such as a
    /// DNS lookup, is left to end on its own after that).
    fn close(&mut self) {
        let Some(rt) = self.runtime.take() else {
            return;
        };
        // The runtime goes to the thread once it runs: should no thread start, it is still
        // here to be shut down without the wait (dropping it here would panic).
        let (give, take) = std::sync::mpsc::channel::<tokio::runtime::Runtime>();
        let waiter = std::thread::Builder::new()
            .name("kvtier-s3-close".into())
            .spawn(move || {
                if let Ok(rt) = take.recv() {
                    rt.shutdown_timeout(CLOSE_WAIT);
                }
            });
        match waiter {
            Ok(w) => {
                let _ = give.send(rt);
                let _ = w.join();
            }
            Err(e) => {
                tracing::warn!("s3: no thread to wait for the I/O runtime, not waiting: {e}");
                rt.shutdown_background();
            }
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
    use std::time::SystemTime;

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

    /// `close` returns once the I/O runtime's tasks are gone, and with them their sockets (the
    /// soak counts descriptors right after `Tier::close`). Fails with the runtime shut down
    /// in the background.
    #[test]
    fn close_returns_once_the_io_runtime_has_dropped_its_tasks() {
        block_on(async {
            let (port, _seen) = recording_server();
            let mut st = storage(port, Credentials::new("akid", "secret", None, None, "t")).await;
            /// Lets go of its `Arc` slowly, so a close that does not wait returns first.
            struct SlowDrop {
                _held: Arc<()>,
            }
            impl Drop for SlowDrop {
                fn drop(&mut self) {
                    std::thread::sleep(Duration::from_millis(100));
                }
            }
            let held = Arc::new(());
            let (started, running) = tokio::sync::oneshot::channel();
            let task_holds = SlowDrop {
                _held: held.clone(),
            };
            st.handle.spawn(async move {
                let _held = task_holds;
                let _ = started.send(());
                std::future::pending::<()>().await
            });
            running.await.unwrap();
            assert_eq!(Arc::strong_count(&held), 2);
            st.close();
            assert_eq!(
                Arc::strong_count(&held),
                1,
                "a task of the I/O runtime outlived close"
            );
        });
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
