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
mod tests;
