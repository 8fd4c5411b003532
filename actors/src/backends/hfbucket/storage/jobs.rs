//! The `hfbucket` storage's worker jobs: what a store, a lookup and a load do off the actor's
//! thread, and what they learn ([`Learnt`]) and hand back with their results.
//!
//! Invariants: a job reads only its context ([`Ctx`], [`StoreCtx`], [`LoadCtx`]: the Hub
//! client, settings and the inputs it was given, shared read-only) and never the storage's
//! state; everything it finds out (hashes, `paths-info` answers, a reader opened or failed,
//! which path served a load) comes back as [`Learnt`] and is taken in on the actor's thread.

use super::*;

/// What worker jobs learn and hand back with their results (the storage takes it in on the
/// actor's thread: state stays in the actor).
pub(super) enum Learnt {
    /// Paths a store registered, with their sizes and Xet hashes.
    Stored(Vec<(String, u64, String)>),
    /// `paths-info` answers (`None`: absent).
    Meta(Vec<(String, Option<FileMeta>)>),
    /// A Xet reader opened by a load, or the time opening one failed.
    Reader(Result<Arc<XetReader>, Instant>),
    /// Direct loads through this reader failed and fell back: the next load batch opens a new
    /// one (with a new read token).
    ReaderFailed(Arc<XetReader>),
    /// Loads served through Xet and through `resolve`, and Xet failures that fell back.
    Loads {
        xet: u64,
        resolve: u64,
        fallbacks: u64,
    },
    /// A Xet writer opened by a store.
    Writer(Arc<XetWriter>),
    /// A write token fetched by a store.
    WriteToken(XetToken),
    /// A store's Xet upload failed: the next one opens a new writer with a new token.
    WriteFailed,
    /// What a commit sent.
    Committed(CommitCounts),
}

/// What worker jobs share: the Hub client, the name format, the Xet cache directory, how Xet
/// writes and how it reads.
pub(super) struct Ctx {
    pub(super) hub: HubClient,
    pub(super) format: NameFormat,
    pub(super) xet_dir: PathBuf,
    pub(super) write: WriteSettings,
    /// How loads read the Xet CAS.
    pub(super) load_path: XetLoadPath,
    /// Direct loads check the bytes against the file's Xet hash (`xet_verify_loads`).
    pub(super) verify_loads: bool,
}

/// A store job's share of the actor's state: the Xet writer and write token, if it has them.
pub(super) struct StoreCtx {
    pub(super) writer: Option<Arc<XetWriter>>,
    pub(super) token: Option<XetToken>,
    pub(super) ensure_bucket: bool,
}

/// How one load is served.
#[derive(Debug, Clone)]
pub(super) enum Plan {
    /// Stream from the Xet CAS (size and hash known).
    Xet { size: u64, hash: Arc<str> },
    /// Follow `resolve`.
    Resolve,
    /// `paths-info` says there is no such file.
    Absent,
    /// Not known yet: ask `paths-info` first.
    Ask,
}

/// A load job's share: the context and the Xet reader, if there is one.
pub(super) struct LoadCtx {
    pub(super) ctx: Arc<Ctx>,
    pub(super) reader: Option<Arc<XetReader>>,
}

/// Which path served one load.
#[derive(Clone, Copy, PartialEq, Eq)]
pub(super) enum Served {
    Xet,
    Resolve,
    Fallback,
    Nothing,
}

/// Loads one object along its plan; a Xet failure falls back to `resolve`.
/// Loads one object along its plan, straight into the caller's buffer; a Xet failure falls
/// back to `resolve`.
pub(super) fn load_one(
    lc: &LoadCtx,
    (path, plan, mut buf): (String, Plan, LoadBuf),
) -> (Result<Fetched, BackendError>, Served) {
    match (plan, lc.reader.as_deref()) {
        (Plan::Absent, _) => (Ok(Fetched::Absent), Served::Nothing),
        (Plan::Xet { size, hash }, Some(reader)) => {
            match reader.read_into(&lc.ctx.hub, &hash, size, &mut buf) {
                Ok(f) => (Ok(f), Served::Xet),
                Err(e) => {
                    tracing::debug!(error = %e, path, "Xet load failed; falling back to resolve");
                    (lc.ctx.hub.download(&path, &mut buf), Served::Fallback)
                }
            }
        }
        _ => (lc.ctx.hub.download(&path, &mut buf), Served::Resolve),
    }
}

impl Ctx {
    pub(super) fn path(&self, key: &ObjectKey) -> String {
        self.hub.handle().object_path(&key.object_name(self.format))
    }

    /// The key stored at `path`, if it is one of ours.
    pub(super) fn key_of(&self, path: &str) -> Option<ObjectKey> {
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
    pub(super) fn put_batch(
        &self,
        items: Vec<(ObjectKey, Bytes)>,
        sc: StoreCtx,
    ) -> (Vec<Result<(), BackendError>>, Vec<Learnt>) {
        let n = items.len();
        let mut learnt = Vec::new();
        let fail_all = |e: BackendError, learnt: Vec<Learnt>| (vec![Err(e); n], learnt);
        if sc.ensure_bucket {
            match self.hub.bucket_exists() {
                Ok(true) => {}
                Ok(false) => {
                    if let Err(e) = self.hub.create_bucket() {
                        return fail_all(e, learnt);
                    }
                }
                Err(e) => return fail_all(e, learnt),
            }
        }
        let paths: Vec<String> = items.iter().map(|(k, _)| self.path(k)).collect();
        let token = match sc.token.filter(|t| self.write.token_usable(t, unix_now())) {
            Some(t) => t,
            None => match self.hub.xet_write_token() {
                Ok(t) => {
                    learnt.push(Learnt::WriteToken(t.clone()));
                    t
                }
                Err(e) => return fail_all(e, learnt),
            },
        };
        let writer = match sc.writer {
            Some(w) => w,
            None => match XetWriter::open(&self.xet_dir, &self.write) {
                Ok(w) => {
                    let w = Arc::new(w);
                    learnt.push(Learnt::Writer(w.clone()));
                    w
                }
                Err(e) => return fail_all(e, learnt),
            },
        };
        // Names and bytes by reference count: the objects are not copied.
        let named: Vec<(String, Bytes)> = paths
            .iter()
            .cloned()
            .zip(items.iter().map(|(_, b)| b.clone()))
            .collect();
        let uploads: Vec<Result<_, BackendError>> = match writer.upload(
            &self.hub,
            &token,
            self.write.needs_refresher(&token, unix_now()),
            &named,
        ) {
            Ok(Committed { files, counts }) => {
                learnt.push(Learnt::Committed(counts));
                files.into_iter().map(Ok).collect()
            }
            Err(e) => {
                learnt.push(Learnt::WriteFailed);
                vec![Err(e); n]
            }
        };
        drop(named);
        let mtime = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0, |d| d.as_millis() as u64);
        let mut results: Vec<Result<(), BackendError>> = Vec::with_capacity(n);
        let mut lines = Vec::new();
        for (path, up) in paths.iter().zip(&uploads) {
            match up {
                Ok(u) => {
                    lines.push(u.add_file(path, mtime));
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
        let results = if doubtful {
            self.confirm(&paths, &items, results, &failed)
        } else {
            results
        };
        let stored: Vec<(String, u64, String)> = paths
            .iter()
            .zip(&uploads)
            .zip(&results)
            .filter_map(|((p, up), res)| match (up, res) {
                (Ok(u), Ok(())) => Some((p.clone(), u.size, u.hash.clone())),
                _ => None,
            })
            .collect();
        learnt.push(Learnt::Stored(stored));
        (results, learnt)
    }

    /// Batch writes are not transactional: asks `paths-info` what landed after a failure.
    pub(super) fn confirm(
        &self,
        paths: &[String],
        items: &[(ObjectKey, Bytes)],
        results: Vec<Result<(), BackendError>>,
        failed: &HashMap<String, String>,
    ) -> Vec<Result<(), BackendError>> {
        let landed = self.hub.paths_info(paths);
        paths
            .iter()
            .zip(items.iter())
            .zip(results)
            .map(|((path, (_, data)), res)| {
                res?;
                match &landed {
                    Ok(m) if m.get(path) == Some(&(data.len() as u64)) => Ok(()),
                    Ok(_) => Err(BackendError::io(
                        "put",
                        failed
                            .get(path)
                            .cloned()
                            .unwrap_or_else(|| "the Hub did not register the file".into()),
                    )),
                    Err(e) => Err(e.clone()),
                }
            })
            .collect()
    }
}
