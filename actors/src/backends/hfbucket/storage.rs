//! [`HfStorage`]: the [`Storage`] of the `hfbucket` adapter.

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use actix::Addr;
use bytes::{Bytes, BytesMut};
use serde_json::json;

use super::config::HfBucketConfig;
use super::hub::{HubClient, MAX_PER_REQUEST};
use super::xet;
use crate::backends::memory::page_of;
use crate::key::{hf_decode, NameFormat, ObjectKey};
use crate::messages::KeyPage;
use crate::storage::{BackendError, Fetched, Io, Observed, Recovered, Removed, Storage};
use crate::worker_pool::{fan_out, run_on, WorkerPool};

/// What worker jobs share: the Hub client, the name format and the Xet cache directory.
struct Ctx {
    hub: HubClient,
    format: NameFormat,
    xet_dir: PathBuf,
}

impl Ctx {
    fn path(&self, key: &ObjectKey) -> String {
        self.hub.handle().object_path(&key.object_name(self.format))
    }

    /// The key stored at `path`, if it is one of ours.
    fn key_of(&self, path: &str) -> Option<ObjectKey> {
        let name = match &self.hub.handle().prefix {
            Some(p) => path.strip_prefix(p.as_str())?.strip_prefix('/')?,
            None => path,
        };
        if name.contains('/') {
            return None;
        }
        ObjectKey::parse(&hf_decode(name)?, self.format).ok()
    }

    /// Uploads through Xet, registers with `addFile`, and after any failure asks `paths-info`
    /// which objects landed: exactly those count as stored.
    fn put_batch(
        &self,
        items: Vec<(ObjectKey, Bytes)>,
        ensure_bucket: bool,
    ) -> Vec<Result<(), BackendError>> {
        let n = items.len();
        let fail_all = |e: BackendError| vec![Err(e); n];
        if ensure_bucket {
            match self.hub.bucket_exists() {
                Ok(true) => {}
                Ok(false) => {
                    if let Err(e) = self.hub.create_bucket() {
                        return fail_all(e);
                    }
                }
                Err(e) => return fail_all(e),
            }
        }
        let paths: Vec<String> = items.iter().map(|(k, _)| self.path(k)).collect();
        let token = match self.hub.xet_write_token() {
            Ok(t) => t,
            Err(e) => return fail_all(e),
        };
        let named: Vec<(String, Bytes)> = paths
            .iter()
            .cloned()
            .zip(items.iter().map(|(_, b)| b.clone()))
            .collect();
        let uploads = xet::upload(&self.hub, &token, &self.xet_dir, &named);
        let mtime = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0, |d| d.as_millis() as u64);
        let mut results: Vec<Result<(), BackendError>> = Vec::with_capacity(n);
        let mut lines = Vec::new();
        for (path, up) in paths.iter().zip(&uploads) {
            match up {
                Ok(u) => {
                    lines.push(json!({"type": "addFile", "path": path, "xetHash": u.hash, "size": u.size, "mtime": mtime}));
                    results.push(Ok(()));
                }
                Err(e) => results.push(Err(e.clone())),
            }
        }
        let mut doubtful = false;
        let mut failed: HashMap<String, String> = HashMap::new();
        for chunk in lines.chunks(MAX_PER_REQUEST) {
            match self.hub.batch(chunk) {
                Ok(reply) => {
                    doubtful |= !reply.failed.is_empty();
                    failed.extend(reply.failed.into_iter().map(|f| (f.path, f.error)));
                }
                Err(e) => {
                    doubtful = true;
                    for l in chunk {
                        if let Some(p) = l["path"].as_str() {
                            failed.insert(p.to_owned(), e.to_string());
                        }
                    }
                }
            }
        }
        if !doubtful {
            return results;
        }
        // Batch writes are not transactional: confirm what landed.
        let landed = self.hub.paths_info(&paths);
        paths
            .iter()
            .zip(items.iter())
            .zip(results)
            .map(|((path, (_, data)), res)| {
                res?;
                match &landed {
                    Ok(m) if m.get(path) == Some(&(data.len() as u64)) => Ok(()),
                    Ok(_) => Err(BackendError::Io {
                        op: "put",
                        message: failed
                            .get(path)
                            .cloned()
                            .unwrap_or_else(|| "the Hub did not register the file".into()),
                    }),
                    Err(e) => Err(e.clone()),
                }
            })
            .collect()
    }
}

/// Hugging Face bucket storage. Blocking Hub calls and Xet transfers run on its worker pool.
pub struct HfStorage {
    ctx: Arc<Ctx>,
    pool: Addr<WorkerPool>,
    workers: usize,
    ttl: Duration,
    /// Path → (size, or `None` when absent; when it was learnt).
    cache: HashMap<String, (Option<u64>, Instant)>,
    create_if_missing: bool,
    bucket_ready: bool,
    rebuild: bool,
    tmp_root: PathBuf,
    cache_hits: u64,
    cache_misses: u64,
}

impl HfStorage {
    /// Validates the config, resolves the token and endpoint (from the process environment) and
    /// starts the worker pool. Must be called inside a running actix system.
    pub fn open(
        cfg: &HfBucketConfig,
        format: NameFormat,
        capacity_bytes: u64,
    ) -> Result<Self, BackendError> {
        let handle = cfg.validate().map_err(|e| BackendError::Invalid {
            reason: e.to_string(),
        })?;
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
        std::fs::create_dir_all(&tmp_root).map_err(|e| BackendError::Io {
            op: "open",
            message: format!("cannot create download_tmp_dir {}: {e}", tmp_root.display()),
        })?;
        Ok(Self {
            ctx: Arc::new(Ctx {
                hub: HubClient::new(&endpoint, handle, token),
                format,
                xet_dir: tmp_root.join("xet"),
            }),
            pool: WorkerPool::start(cfg.num_workers),
            workers: cfg.num_workers,
            ttl: Duration::from_secs_f64(cfg.metadata_cache_ttl_secs),
            cache: HashMap::new(),
            create_if_missing: cfg.create_bucket_if_missing,
            bucket_ready: false,
            rebuild: cfg.rebuild_index_on_start.unwrap_or(capacity_bytes > 0),
            tmp_root,
            cache_hits: 0,
            cache_misses: 0,
        })
    }

    fn remember(&mut self, path: String, size: Option<u64>) {
        if !self.ttl.is_zero() {
            self.cache.insert(path, (size, Instant::now()));
            if self.cache.len() % 1024 == 0 {
                let ttl = self.ttl;
                self.cache.retain(|_, (_, at)| at.elapsed() < ttl);
            }
        }
    }

    fn job<T: Send + 'static>(
        &self,
        op: &'static str,
        f: impl FnOnce(&Ctx) -> T + Send + 'static,
        failed: impl FnOnce(BackendError) -> T + 'static,
    ) -> Io<T> {
        let (pool, ctx) = (self.pool.clone(), self.ctx.clone());
        Io::pending(async move {
            match run_on(&pool, move || f(&ctx)).await {
                Ok(v) => v,
                Err(e) => failed(e.backend_error(op)),
            }
        })
    }
}

impl Storage for HfStorage {
    fn kind(&self) -> &'static str {
        "hfbucket"
    }

    fn put(&mut self, items: Vec<(ObjectKey, Bytes)>) -> Io<Vec<Result<(), BackendError>>> {
        let n = items.len();
        let ensure = self.create_if_missing && !self.bucket_ready;
        self.job(
            "put",
            move |ctx| ctx.put_batch(items, ensure),
            move |e| vec![Err(e); n],
        )
    }

    fn head(&mut self, keys: Vec<ObjectKey>) -> Io<Vec<Result<Option<u64>, BackendError>>> {
        let mut out: Vec<Option<Result<Option<u64>, BackendError>>> = vec![None; keys.len()];
        let mut ask = Vec::new();
        for (i, k) in keys.iter().enumerate() {
            let path = self.ctx.path(k);
            match self.cache.get(&path) {
                Some((size, at)) if at.elapsed() < self.ttl => {
                    self.cache_hits += 1;
                    out[i] = Some(Ok(*size));
                }
                _ => {
                    self.cache_misses += 1;
                    ask.push((i, path));
                }
            }
        }
        if ask.is_empty() {
            return Io::Ready(out.into_iter().map(|r| r.unwrap_or(Ok(None))).collect());
        }
        let paths: Vec<String> = ask.iter().map(|(_, p)| p.clone()).collect();
        let io = self.job("head", move |ctx| ctx.hub.paths_info(&paths), Err);
        let Io::Pending(fut) = io else {
            unreachable!("job is always pending")
        };
        Io::pending(async move {
            let found = fut.await;
            for (i, path) in ask {
                out[i] = Some(match &found {
                    Ok(m) => Ok(m.get(&path).copied()),
                    Err(e) => Err(e.clone()),
                });
            }
            out.into_iter().map(|r| r.unwrap_or(Ok(None))).collect()
        })
    }

    fn get(
        &mut self,
        items: Vec<(ObjectKey, BytesMut)>,
    ) -> Io<Vec<(BytesMut, Result<Fetched, BackendError>)>> {
        let lens: Vec<usize> = items.iter().map(|(_, b)| b.len()).collect();
        fan_out(
            &self.pool,
            self.workers,
            self.ctx.clone(),
            items,
            |ctx, (key, mut buf)| {
                let res = ctx.hub.download(&ctx.path(&key), &mut buf);
                (buf, res)
            },
            move |i, e| (BytesMut::zeroed(lens[i]), Err(e.backend_error("get"))),
        )
    }

    fn remove(&mut self, keys: Vec<ObjectKey>) -> Io<Vec<Result<Removed, BackendError>>> {
        let n = keys.len();
        self.job(
            "delete",
            move |ctx| {
                let paths: Vec<String> = keys.iter().map(|k| ctx.path(k)).collect();
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
        )
    }

    fn list(
        &mut self,
        model: Option<String>,
        cursor: Option<String>,
        limit: usize,
    ) -> Io<Result<KeyPage, BackendError>> {
        self.job(
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
        )
    }

    fn lookups_trust_ledger(&self) -> bool {
        // Lookups go through the TTL metadata cache, as in LMCache's adapter.
        false
    }

    fn recover(&mut self) -> Option<Io<Result<Vec<Recovered>, BackendError>>> {
        if !self.rebuild {
            return None;
        }
        Some(self.job(
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
        ))
    }

    fn observe(&mut self, what: Observed<'_>) {
        match what {
            Observed::Stored(keys, sizes) => {
                self.bucket_ready = true;
                for (k, s) in keys.iter().zip(sizes) {
                    let p = self.ctx.path(k);
                    self.remember(p, Some(*s));
                }
            }
            Observed::Probed(keys, sizes) => {
                for (k, s) in keys.iter().zip(sizes) {
                    let p = self.ctx.path(k);
                    self.remember(p, *s);
                }
            }
            Observed::Removed(keys) => {
                for k in keys {
                    let p = self.ctx.path(k);
                    self.remember(p, None);
                }
            }
            Observed::Health { .. } => {}
        }
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
            },
            "bucket_ready": self.bucket_ready,
        })
    }

    fn close(&mut self) {
        let _ = std::fs::remove_dir_all(&self.tmp_root);
    }
}

impl Drop for HfStorage {
    fn drop(&mut self) {
        // An arbiter that stops drops its actors without `stopped`; clean up here too.
        self.close();
    }
}
