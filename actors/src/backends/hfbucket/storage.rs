//! [`HfStorage`]: the [`Storage`] of the `hfbucket` adapter.
//!
//! The storage is owned by its backend actor, and so is all its state: the metadata cache
//! (size and Xet hash per path), the shared Xet reader and the load counters. Worker jobs do not
//! touch that state; they return what they learnt (hashes of stored files, `paths-info`
//! answers, a newly opened reader, which path served each load) with their results, and the
//! storage takes it in its completion step ([`Io::then`]), on the actor's thread.
//!
//! A half-open circuit breaker ([`crate::breaker`], the one the `s3` adapter uses) guards the
//! Hub: every operation asks it first, and its results are shown to it when they are in. While
//! it is not closed, lookups skip the metadata cache (a cached hit would lock a key whose load
//! cannot succeed).

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use bytes::Bytes;
use serde_json::json;

use super::config::{HfBucketConfig, XetLoadPath};
use super::hub::{unix_now, FileMeta, HubClient, XetToken, MAX_PER_REQUEST};
use super::xet::{CommitCounts, Committed, WriteSettings, XetReader, XetWriter};
use crate::backends::memory::page_of;
use crate::breaker::Breaker;
use crate::buffer::LoadBuf;
use crate::key::{hf_decode, NameFormat, ObjectKey};
use crate::messages::KeyPage;
use crate::storage::{BackendError, ErrorKind, Fetched, Io, Recovered, Removed, Storage};
use crate::worker_pool::{fan_out, run_on, WorkerPool};

/// The metadata cache is first swept of expired entries when it holds this many.
const MIN_SWEEP_AT: usize = 1024;

/// How long to wait before trying to open a Xet reader again after it failed.
const XET_RETRY_AFTER: Duration = Duration::from_secs(30);

mod jobs;
use jobs::*;

/// Hugging Face bucket storage. Blocking Hub calls and Xet transfers run on its worker pool.
pub struct HfStorage {
    ctx: Arc<Ctx>,
    pool: WorkerPool,
    workers: usize,
    ttl: Duration,
    /// Path → what is known about it (the TTL metadata cache).
    cache: HashMap<String, Known>,
    /// Cache size that triggers the next sweep of expired entries.
    sweep_at: usize,
    /// Sweeps so far.
    cache_sweeps: u64,
    create_if_missing: bool,
    bucket_ready: bool,
    rebuild: bool,
    tmp_root: PathBuf,
    cache_hits: u64,
    cache_misses: u64,
    /// The Xet reader every load shares, once a load has opened it.
    reader: Option<Arc<XetReader>>,
    /// When opening a reader last failed (loads use `resolve` until [`XET_RETRY_AFTER`]).
    reader_failed: Option<Instant>,
    loads_xet: u64,
    loads_resolve: u64,
    xet_fallbacks: u64,
    /// The Xet writer every store shares, once a store has opened it.
    writer: Option<Arc<XetWriter>>,
    /// The last Xet write token, reused by stores until it is about to expire.
    write_token: Option<XetToken>,
    /// What stores did through Xet (for `status`).
    stores: StoreCounters,
    /// Metadata cache results as metrics (off until attached).
    metrics: crate::metrics::AdapterMetrics,
    /// Fails requests fast while the Hub is unreachable.
    breaker: Breaker,
}

/// What stores did through Xet, as shown in `status`.
#[derive(Debug, Default)]
struct StoreCounters {
    writers_opened: u64,
    write_tokens: u64,
    commits: u64,
    failed_commits: u64,
    sent: CommitCounts,
}

/// One entry of the metadata cache.
#[derive(Debug, Clone)]
struct Known {
    /// The size, or `None` when the path is absent.
    size: Option<u64>,
    /// The Xet hash of the content, when known.
    xet_hash: Option<Arc<str>>,
    /// When it was learnt.
    at: Instant,
}

impl HfStorage {
    /// Validates the config, resolves the token and endpoint (from the process environment) and
    /// starts the worker pool. Must be called inside a running actix system.
    pub fn open(
        cfg: &HfBucketConfig,
        format: NameFormat,
        capacity_bytes: u64,
    ) -> Result<Self, BackendError> {
        let handle = cfg
            .validate()
            .map_err(|e| BackendError::invalid(e.to_string()))?;
        let env = |k: &str| std::env::var(k).ok();
        let token = cfg.resolve_token(env);
        let endpoint = cfg.resolve_endpoint(env);
        let root = cfg
            .download_tmp_dir
            .clone()
            .unwrap_or_else(std::env::temp_dir);
        let tmp_root = root.join(format!(
            "kvtier-hfbucket-{}-{:08x}",
            std::process::id(),
            rand::random::<u32>()
        ));
        std::fs::create_dir_all(&tmp_root).map_err(|e| {
            BackendError::io(
                "open",
                format!("cannot create download_tmp_dir {}: {e}", tmp_root.display()),
            )
        })?;
        Ok(Self {
            ctx: Arc::new(Ctx {
                hub: HubClient::new(&endpoint, handle, token, cfg.num_workers)
                    .with_retry_timeout(Duration::from_secs_f64(cfg.retry_timeout_secs)),
                format,
                xet_dir: tmp_root.join("xet"),
                write: WriteSettings {
                    compression: cfg.xet_compression.as_str(),
                    global_dedup: cfg.xet_global_dedup,
                    token_reserve: cfg.xet_token_reserve_secs,
                    store_path: cfg.xet_store_path,
                    chunking: cfg.xet_chunking,
                },
                load_path: cfg.xet_load_path,
                verify_loads: cfg.xet_verify_loads,
            }),
            pool: WorkerPool::start(cfg.num_workers),
            workers: cfg.num_workers,
            ttl: Duration::from_secs_f64(cfg.metadata_cache_ttl_secs),
            cache: HashMap::new(),
            sweep_at: MIN_SWEEP_AT,
            cache_sweeps: 0,
            create_if_missing: cfg.create_bucket_if_missing,
            bucket_ready: false,
            rebuild: cfg.rebuild_index_on_start.unwrap_or(capacity_bytes > 0),
            tmp_root,
            cache_hits: 0,
            cache_misses: 0,
            reader: None,
            reader_failed: None,
            loads_xet: 0,
            loads_resolve: 0,
            xet_fallbacks: 0,
            writer: None,
            write_token: None,
            stores: StoreCounters::default(),
            metrics: crate::metrics::AdapterMetrics::off(),
            breaker: Breaker::new(
                "hfbucket",
                Duration::from_secs_f64(cfg.circuit_breaker_cooldown_secs),
            ),
        })
    }

    /// `n` refusals when the breaker turns the operation away.
    fn refused<T>(&mut self, n: usize) -> Option<Vec<Result<T, BackendError>>> {
        self.breaker
            .admit()
            .err()
            .map(|e| (0..n).map(|_| Err(e.clone())).collect())
    }

    /// Caches `size` for `path`, with `xet_hash` when given; otherwise a hash already known
    /// for the same size is kept.
    fn remember_meta(&mut self, path: String, size: Option<u64>, xet_hash: Option<Arc<str>>) {
        if self.ttl.is_zero() {
            return;
        }
        let xet_hash = xet_hash.or_else(|| match self.cache.get(&path) {
            Some(k) if k.size == size && size.is_some() => k.xet_hash.clone(),
            _ => None,
        });
        self.cache.insert(
            path,
            Known {
                size,
                xet_hash,
                at: Instant::now(),
            },
        );
        // Expired entries are dropped when the cache has doubled since the last sweep, so a
        // sweep costs O(1) per insert on average. (Sweeping whenever the size was a multiple
        // of 1024 swept on *every* refresh of a cache holding 1024·k entries.)
        if self.cache.len() >= self.sweep_at {
            let (ttl, now) = (self.ttl, Instant::now());
            self.cache.retain(|_, k| now.duration_since(k.at) < ttl);
            self.sweep_at = (2 * self.cache.len()).max(MIN_SWEEP_AT);
            self.cache_sweeps += 1;
        }
    }

    fn remember(&mut self, path: String, size: Option<u64>) {
        self.remember_meta(path, size, None);
    }

    /// The cache entry of `path`, if it is younger than the TTL.
    fn fresh(&self, path: &str) -> Option<&Known> {
        self.cache.get(path).filter(|k| k.at.elapsed() < self.ttl)
    }

    /// Takes in what a worker job learnt.
    fn learn(&mut self, learnt: Vec<Learnt>) {
        for l in learnt {
            match l {
                Learnt::Stored(v) => {
                    if !v.is_empty() {
                        self.bucket_ready = true;
                    }
                    for (path, size, hash) in v {
                        self.remember_meta(path, Some(size), Some(hash.into()));
                    }
                }
                Learnt::Meta(v) => {
                    for (path, meta) in v {
                        match meta {
                            Some(m) => {
                                self.remember_meta(path, Some(m.size), m.xet_hash.map(Into::into))
                            }
                            None => self.remember(path, None),
                        }
                    }
                }
                Learnt::Reader(Ok(r)) => {
                    self.reader = Some(r);
                    self.reader_failed = None;
                }
                Learnt::Reader(Err(at)) => self.reader_failed = Some(at),
                Learnt::ReaderFailed(r) => {
                    if self.reader.as_ref().is_some_and(|cur| Arc::ptr_eq(cur, &r)) {
                        self.reader = None;
                    }
                }
                Learnt::Loads {
                    xet,
                    resolve,
                    fallbacks,
                } => {
                    self.loads_xet += xet;
                    self.loads_resolve += resolve;
                    self.xet_fallbacks += fallbacks;
                }
                Learnt::Writer(w) => {
                    // Two stores that started before the first writer arrived each open one;
                    // the first is kept and the other is dropped when its job ends.
                    self.stores.writers_opened += 1;
                    self.writer.get_or_insert(w);
                }
                Learnt::WriteToken(t) => {
                    self.stores.write_tokens += 1;
                    self.write_token = Some(t);
                }
                Learnt::WriteFailed => {
                    self.stores.failed_commits += 1;
                    self.writer = None;
                    self.write_token = None;
                }
                Learnt::Committed(counts) => {
                    self.stores.commits += 1;
                    self.stores.sent += counts;
                }
            }
        }
    }

    /// Runs `f` on a worker; `failed` stands in for its value if the job dies.
    fn job<T: Send + 'static>(
        &self,
        op: &'static str,
        f: impl FnOnce(&Ctx) -> T + Send + 'static,
        failed: impl FnOnce(BackendError) -> T + 'static,
    ) -> impl std::future::Future<Output = T> + 'static {
        let (pool, ctx) = (self.pool.clone(), self.ctx.clone());
        async move {
            match run_on(&pool, move || f(&ctx)).await {
                Ok(v) => v,
                Err(e) => failed(e.backend_error(op)),
            }
        }
    }

    /// Forgets `paths` in the metadata cache's favour of "absent" (after a delete, or a load
    /// that found nothing).
    fn remember_absent<'a>(&mut self, paths: impl IntoIterator<Item = &'a String>) {
        for p in paths {
            self.remember(p.clone(), None);
        }
    }
}

impl Storage for HfStorage {
    fn kind(&self) -> &'static str {
        "hfbucket"
    }

    fn put(&mut self, items: Vec<(ObjectKey, Bytes)>) -> Io<Vec<Result<(), BackendError>>> {
        let n = items.len();
        if let Some(refused) = self.refused(n) {
            return Io::ready(refused);
        }
        let sc = StoreCtx {
            writer: self.writer.clone(),
            token: self.write_token.clone(),
            ensure_bucket: self.create_if_missing && !self.bucket_ready,
        };
        let job = self.job(
            "put",
            move |ctx| ctx.put_batch(items, sc),
            move |e| (vec![Err(e); n], Vec::new()),
        );
        Io::pending_then(job, |s: &mut HfStorage, (results, learnt)| {
            s.learn(learnt);
            // One batch: it counts once toward the breaker, not once per key.
            s.breaker.observe_request(&results);
            results
        })
    }

    /// Lookups go through the TTL metadata cache, as in LMCache's adapter (the ledger's sizes
    /// are not trusted: other writers share the bucket).
    fn head(
        &mut self,
        keys: &[ObjectKey],
        _known: &[Option<u64>],
    ) -> Io<Vec<Result<Option<u64>, BackendError>>> {
        let trust_cache = self.breaker.is_closed();
        if let Some(refused) = self.refused(keys.len()) {
            return Io::ready(refused);
        }
        let mut out: Vec<Option<Result<Option<u64>, BackendError>>> = vec![None; keys.len()];
        let mut ask = Vec::new();
        for (i, k) in keys.iter().enumerate() {
            let path = self.ctx.path(k);
            let cached = trust_cache.then(|| self.fresh(&path)).flatten();
            match cached.map(|k| k.size) {
                Some(size) => {
                    self.cache_hits += 1;
                    self.metrics.metadata_cache(true);
                    out[i] = Some(Ok(size));
                }
                None => {
                    self.cache_misses += 1;
                    self.metrics.metadata_cache(false);
                    ask.push((i, path));
                }
            }
        }
        if ask.is_empty() {
            return Io::ready(out.into_iter().map(|r| r.unwrap_or(Ok(None))).collect());
        }
        let paths: Vec<String> = ask.iter().map(|(_, p)| p.clone()).collect();
        let job = self.job(
            "head",
            move |ctx| {
                let found = ctx.hub.paths_meta(&paths)?;
                Ok(paths
                    .into_iter()
                    .map(|p| {
                        let meta = found.get(&p).cloned();
                        (p, meta)
                    })
                    .collect::<Vec<_>>())
            },
            Err,
        );
        Io::pending_then(job, move |s: &mut HfStorage, found| {
            if let Ok(meta) = &found {
                s.learn(vec![Learnt::Meta(meta.clone())]);
            }
            s.breaker.observe(std::iter::once(&found));
            for (n, (i, _)) in ask.into_iter().enumerate() {
                out[i] = Some(match &found {
                    Ok(m) => Ok(m[n].1.as_ref().map(|m| m.size)),
                    Err(e) => Err(e.clone()),
                });
            }
            out.into_iter().map(|r| r.unwrap_or(Ok(None))).collect()
        })
    }

    fn get(&mut self, items: Vec<(ObjectKey, LoadBuf)>) -> Io<Vec<Result<Fetched, BackendError>>> {
        if let Some(refused) = self.refused(items.len()) {
            return Io::ready(refused);
        }
        let mut work: Vec<(String, Plan, LoadBuf)> = Vec::with_capacity(items.len());
        for (key, buf) in items {
            let path = self.ctx.path(&key);
            let plan = match self.fresh(&path) {
                Some(Known {
                    size: Some(size),
                    xet_hash: Some(hash),
                    ..
                }) => Plan::Xet {
                    size: *size,
                    hash: hash.clone(),
                },
                _ => Plan::Ask,
            };
            work.push((path, plan, buf));
        }
        let paths: Vec<String> = work.iter().map(|(p, _, _)| p.clone()).collect();
        let reader = self.reader.clone();
        // A direct reader whose token runs low is replaced (it serves on if that fails).
        let stale = reader.as_ref().is_some_and(|r| !r.fresh(unix_now()));
        let try_open = stale
            || (reader.is_none()
                && self
                    .reader_failed
                    .is_none_or(|at| at.elapsed() >= XET_RETRY_AFTER));
        let (pool, ctx, workers) = (self.pool.clone(), self.ctx.clone(), self.workers);
        let fut = async move {
            let mut learnt = Vec::new();
            let ask: Vec<String> = work
                .iter()
                .filter(|(_, p, _)| matches!(p, Plan::Ask))
                .map(|(path, _, _)| path.clone())
                .collect();
            let mut reader = reader;
            if !ask.is_empty() || try_open {
                // One job first: the hashes of uncached paths, and the Xet reader if none is open.
                let ctx2 = ctx.clone();
                let prep = run_on(&pool, move || {
                    let meta = (!ask.is_empty()).then(|| ctx2.hub.paths_meta(&ask));
                    let opened = try_open.then(|| match XetReader::connect(&ctx2.hub, &ctx2.xet_dir, ctx2.load_path) {
                        Ok(r) => Ok(Arc::new(r.with_verify(ctx2.verify_loads))),
                        Err(e) => {
                            tracing::warn!(error = %e, "cannot open a Xet reader; loads use resolve");
                            Err(Instant::now())
                        }
                    });
                    let asked = meta.as_ref().and_then(|m| m.as_ref().ok()).map(|m| {
                        ask.iter().map(|p| (p.clone(), m.get(p).cloned())).collect()
                    });
                    (meta, opened, asked)
                })
                .await;
                let (meta, opened) = match prep {
                    Ok((meta, opened, asked)) => {
                        if let Some(a) = asked {
                            learnt.push(Learnt::Meta(a));
                        }
                        if let Some(o) = &opened {
                            learnt.push(Learnt::Reader(o.clone()));
                        }
                        (meta, opened.and_then(Result::ok))
                    }
                    Err(e) => {
                        tracing::warn!(error = %e, "load preparation failed; loads use resolve");
                        (None, None)
                    }
                };
                if let Some(r) = opened {
                    reader = Some(r);
                }
                for (path, plan, _) in &mut work {
                    if !matches!(plan, Plan::Ask) {
                        continue;
                    }
                    *plan = match &meta {
                        Some(Ok(m)) => match m.get(path.as_str()) {
                            None => Plan::Absent,
                            Some(FileMeta {
                                size,
                                xet_hash: Some(h),
                            }) => Plan::Xet {
                                size: *size,
                                hash: h.as_str().into(),
                            },
                            Some(_) => Plan::Resolve,
                        },
                        _ => Plan::Resolve,
                    };
                }
            }
            let used = reader.clone();
            let lc = Arc::new(LoadCtx {
                ctx: ctx.clone(),
                reader,
            });
            let done = fan_out(&pool, workers, lc, work, load_one, move |_, e| {
                (Err(e.backend_error("get")), Served::Nothing)
            })
            .await;
            let count = |s: Served| done.iter().filter(|(_, x)| *x == s).count() as u64;
            let fallbacks = count(Served::Fallback);
            let direct = ctx.load_path == XetLoadPath::Direct;
            if let Some(r) = used.filter(|_| fallbacks > 0 && direct) {
                learnt.push(Learnt::ReaderFailed(r));
            }
            learnt.push(Learnt::Loads {
                xet: count(Served::Xet),
                resolve: count(Served::Resolve) + fallbacks,
                fallbacks,
            });
            let results: Vec<_> = done.into_iter().map(|(r, _)| r).collect();
            (results, learnt)
        };
        Io::pending_then(fut, move |s: &mut HfStorage, (results, learnt)| {
            s.learn(learnt);
            s.breaker.observe(&results);
            let absent = paths
                .iter()
                .zip(&results)
                .filter(|(_, r)| matches!(r, Ok(Fetched::Absent)))
                .map(|(p, _)| p);
            s.remember_absent(absent);
            results
        })
    }

    fn remove(&mut self, keys: Vec<ObjectKey>) -> Io<Vec<Result<Removed, BackendError>>> {
        let n = keys.len();
        if let Some(refused) = self.refused(n) {
            return Io::ready(refused);
        }
        let paths: Vec<String> = keys.iter().map(|k| self.ctx.path(k)).collect();
        let batch_paths = paths.clone();
        let job = self.job(
            "delete",
            move |ctx| {
                let paths = batch_paths;
                let mut out = Vec::with_capacity(paths.len());
                for chunk in paths.chunks(MAX_PER_REQUEST) {
                    let lines: Vec<_> = chunk
                        .iter()
                        .map(|p| json!({"type": "deleteFile", "path": p}))
                        .collect();
                    match ctx.hub.batch(&lines) {
                        Ok(reply) => {
                            let failed: HashMap<&str, &str> = reply
                                .failed
                                .iter()
                                .map(|f| (f.path.as_str(), f.error.as_str()))
                                .collect();
                            out.extend(chunk.iter().map(|p| match failed.get(p.as_str()) {
                                None => Ok(Removed::Yes),
                                Some(err) if err.to_ascii_lowercase().contains("not found") => {
                                    Ok(Removed::Absent)
                                }
                                Some(err) => Err(BackendError::io("delete", err)),
                            }));
                        }
                        Err(e) => out.extend(chunk.iter().map(|_| Err(e.clone()))),
                    }
                }
                out
            },
            move |e| vec![Err(e); n],
        );
        Io::pending_then(job, move |s: &mut HfStorage, results| {
            s.breaker.observe_request(&results);
            let gone = paths
                .iter()
                .zip(&results)
                .filter(|(_, r)| r.is_ok())
                .map(|(p, _)| p);
            s.remember_absent(gone);
            results
        })
    }

    fn list(
        &mut self,
        model: Option<String>,
        cursor: Option<String>,
        limit: usize,
    ) -> Io<Result<KeyPage, BackendError>> {
        if let Some(mut refused) = self.refused(1) {
            return Io::ready(refused.remove(0));
        }
        let job = self.job(
            "list",
            move |ctx| {
                let entries = ctx
                    .hub
                    .tree()?
                    .into_iter()
                    .filter_map(|e| {
                        let key = ctx.key_of(&e.path)?;
                        model
                            .as_deref()
                            .is_none_or(|m| key.model_name() == m)
                            .then(|| (key.object_name(ctx.format), key, e.size))
                    })
                    .collect();
                Ok(page_of(entries, cursor.as_deref(), limit))
            },
            Err,
        );
        Io::pending_then(job, |s: &mut HfStorage, page| {
            s.breaker.observe(std::iter::once(&page));
            page
        })
    }

    fn recover(&mut self) -> Option<Io<Result<Vec<Recovered>, BackendError>>> {
        if !self.rebuild {
            return None;
        }
        Some(Io::pending(self.job(
            "recover",
            |ctx| {
                Ok(ctx
                    .hub
                    .tree()?
                    .into_iter()
                    .filter_map(|e| {
                        Some(Recovered {
                            key: ctx.key_of(&e.path)?,
                            size: e.size,
                            modified: 0,
                        })
                    })
                    .collect())
            },
            Err,
        )))
    }

    fn details(&self) -> serde_json::Value {
        let h = self.ctx.hub.handle();
        serde_json::json!({
            "bucket": h.id(),
            "prefix": h.prefix,
            "num_workers": self.workers,
            "metadata_cache": {
                "ttl_secs": self.ttl.as_secs_f64(),
                "entries": self.cache.len(),
                "hits": self.cache_hits,
                "misses": self.cache_misses,
                "sweeps": self.cache_sweeps,
            },
            "bucket_ready": self.bucket_ready,
            "circuit_breaker": self.breaker.status(),
            "loads": {
                "xet": self.loads_xet,
                "resolve": self.loads_resolve,
                "xet_fallbacks": self.xet_fallbacks,
                "xet_reader_open": self.reader.is_some(),
                "xet_load_path": self.ctx.load_path.as_str(),
                "xet_verify_loads": self.ctx.verify_loads,
            },
            "stores": {
                "xet_store_path": self.ctx.write.store_path.as_str(),
                "xet_chunking": self.ctx.write.chunking.as_str(),
                "xet_compression": self.ctx.write.compression,
                "xet_global_dedup": self.ctx.write.global_dedup,
                "xet_token_reserve_secs": self.ctx.write.token_reserve,
                "xet_writer_open": self.writer.is_some(),
                "xet_writers_opened": self.stores.writers_opened,
                "xet_write_tokens": self.stores.write_tokens,
                "xet_commits": self.stores.commits,
                "xet_failed_commits": self.stores.failed_commits,
                "xet_new_bytes": self.stores.sent.new_bytes,
                "xet_deduped_bytes": self.stores.sent.deduped_bytes,
                "xet_xorb_bytes": self.stores.sent.xorb_bytes,
                "xet_xorbs_posted": self.stores.sent.xorbs_posted,
            },
        })
    }

    fn close(&mut self) {
        let _ = std::fs::remove_dir_all(&self.tmp_root);
    }

    fn attach_metrics(&mut self, metrics: crate::metrics::AdapterMetrics) {
        match Arc::get_mut(&mut self.ctx) {
            Some(ctx) => ctx.hub.set_metrics(metrics.clone()),
            // Shared already (a request started before the metrics arrived): the Hub
            // client's routes stay uncounted.
            None => tracing::debug!("hfbucket: Hub client shared; its requests are not counted"),
        }
        self.breaker.attach_metrics(metrics.clone());
        self.metrics = metrics;
    }

    fn unhealthy(&self) -> Option<String> {
        self.breaker.unhealthy()
    }

    /// The bucket's info route (`GET /api/buckets/{ns}/{name}`) on a worker, while the breaker
    /// is closed: an answer means the Hub is reachable and takes the token; 404 is a missing
    /// bucket, unless `create_bucket_if_missing` will create it on the first store; 401/403
    /// a refused token. Bounded by the Hub client's retry deadline (`retry_timeout_secs`).
    fn probe(&mut self) -> Io<()> {
        if !self.breaker.wants_probe() {
            return Io::ready(());
        }
        let create = self.create_if_missing;
        let fut = self.job(
            "health check",
            move |ctx| match ctx.hub.bucket_exists() {
                Ok(true) => Ok(()),
                Ok(false) if create => Ok(()),
                Ok(false) => Err(BackendError::new(
                    ErrorKind::BucketMissing,
                    "health check",
                    format!(
                        "bucket {:?} does not exist (the Hub answered 404) and create_bucket_if_missing is false",
                        ctx.hub.handle().id()
                    ),
                )),
                Err(e) => Err(e),
            },
            Err,
        );
        Io::pending_then(fut, |s: &mut HfStorage, r: Result<(), BackendError>| {
            s.breaker.probed(&r)
        })
    }
}

impl Drop for HfStorage {
    fn drop(&mut self) {
        // An arbiter that stops drops its actors without `stopped`; clean up here too.
        self.close();
    }
}
