//! The `fs` backend: one file per object in a local directory.
//!
//! File names follow LMCache's `fs` adapter, so either can read the other's directory:
//! `<model, '/' as "-SEP-">@0x<kv_rank:08x>[@<group:x>]@<hash hex>[@<salt>].data` (the group
//! field only with `object_name_format = "grouped"`). A model name that LMCache's spelling
//! cannot carry (it contains `-SEP-`) gets an escaped spelling of kvtier's own, so every name
//! parses back to its key (see [`name`]). No key can name a path outside the directory: `/`
//! never survives in a name and every name ends in `.data`. Writes go to a temporary file
//! that is renamed into place, so a crash never leaves a torn object; the backend actor sends
//! one write of a key at a time, so the last write to reach the directory is the one the
//! ledger records. All file I/O runs on a `WorkerPool`; batches are spread over its threads.
//!
//! # Integrity
//! With `checksum = "crc32c"` (the default) every object is written with the CRC32C of its
//! bytes in the extended attribute [`CRC_XATTR`], set on the temporary file **before** the
//! rename: an object is never visible under its name without its checksum. Every load reads
//! the attribute from the open file (the same inode as the bytes, whatever renames happen
//! meanwhile), reads the bytes, and compares: a mismatch is [`Fetched::Corrupt`], a miss (the
//! backend actor then removes the file, see [`crate::BackendActor`]). A file without the
//! attribute (written by LMCache, or with checksums off) loads as before, checked by size
//! only. The CRC runs on the worker thread that read the bytes, never on an arbiter. At
//! start, a file system that refuses `user.*` attributes is reported as an error naming the
//! `checksum` field.

mod config;
pub mod name;

use std::fs::{self, File, OpenOptions};
use std::io::{Read, Write};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use bytes::Bytes;

pub use config::{FsChecksum, FsConfig};
pub use name::{file_name, parse_file_name};

use super::memory::page_of;
use crate::buffer::LoadBuf;
use crate::key::{NameFormat, ObjectKey};
use crate::messages::KeyPage;
use crate::storage::{
    answer_known, BackendError, ErrorKind, Fetched, Io, Recovered, Removed, Storage, Verdict,
};
use crate::worker_pool::{run_on, JobFailed, WorkerPool};

const TMP_SUFFIX: &str = ".tmp";
/// Temporary files older than this are leftovers of a crash and are removed at start-up.
const STALE_TMP: Duration = Duration::from_secs(60);

/// The extended attribute holding an object's CRC32C (4 bytes, big endian).
pub const CRC_XATTR: &str = "user.kvtier.crc32c";

/// The CRC32C (Castagnoli) of `data`, as stored in [`CRC_XATTR`].
pub fn crc32c(data: &[u8]) -> u32 {
    crc_fast::checksum(crc_fast::CrcAlgorithm::Crc32Iscsi, data) as u32
}

/// The CRC32C stored with an open object: `None` when it has none (or not a 4-byte one).
fn stored_crc(f: &File) -> std::io::Result<Option<u32>> {
    use xattr::FileExt;
    Ok(f.get_xattr(CRC_XATTR)?
        .and_then(|v| <[u8; 4]>::try_from(v.as_slice()).ok())
        .map(u32::from_be_bytes))
}

/// Immutable paths and settings shared with worker jobs (and one counter, an atomic).
#[derive(Debug)]
struct Paths {
    base: PathBuf,
    tmp: Option<PathBuf>,
    format: NameFormat,
    fsync: bool,
    checksum: FsChecksum,
    counter: AtomicU64,
    /// Objects found corrupt (loads and verifications), for `status`.
    corrupt: AtomicU64,
}

impl Paths {
    fn object(&self, key: &ObjectKey) -> PathBuf {
        self.base.join(file_name(key, self.format))
    }

    fn write(&self, key: &ObjectKey, data: &[u8]) -> std::io::Result<()> {
        let name = file_name(key, self.format);
        let unique = format!(
            "{name}.{}-{}{TMP_SUFFIX}",
            std::process::id(),
            self.counter.fetch_add(1, Ordering::Relaxed)
        );
        let tmp = self.tmp.as_deref().unwrap_or(&self.base).join(unique);
        let result = (|| {
            let mut f = OpenOptions::new().write(true).create_new(true).open(&tmp)?;
            f.write_all(data)?;
            if self.checksum == FsChecksum::Crc32c {
                use xattr::FileExt;
                // Before the rename: the object never shows under its name without it.
                f.set_xattr(CRC_XATTR, &crc32c(data).to_be_bytes())?;
            }
            if self.fsync {
                f.sync_data()?;
            }
            fs::rename(&tmp, self.base.join(&name))
        })();
        if result.is_err() {
            let _ = fs::remove_file(&tmp);
        }
        result
    }

    /// Reads the object straight into the caller's memory (`read_exact`, no staging buffer).
    fn read(&self, key: &ObjectKey, buf: &mut LoadBuf) -> Result<Fetched, BackendError> {
        let mut f = match File::open(self.object(key)) {
            Ok(f) => f,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Fetched::Absent),
            Err(e) => return Err(BackendError::from_io("get", e)),
        };
        let len = f
            .metadata()
            .map_err(|e| BackendError::from_io("get", e))?
            .len();
        if len != buf.len() as u64 {
            return Ok(Fetched::SizeMismatch { actual: len });
        }
        let expected = if self.checksum == FsChecksum::Crc32c {
            stored_crc(&f).map_err(|e| BackendError::from_io("get", e))?
        } else {
            None
        };
        match f.read_exact(&mut buf[..]) {
            Ok(()) => {}
            // Truncated while we read: report a miss, never a partial object.
            Err(e) if e.kind() == std::io::ErrorKind::UnexpectedEof => {
                return Ok(Fetched::SizeMismatch { actual: 0 })
            }
            Err(e) => return Err(BackendError::from_io("get", e)),
        }
        // Between the read and the check: where a body changed in flight would be.
        buf.apply_injected_flip();
        match expected {
            Some(expected) => {
                let actual = crc32c(&buf[..]);
                if actual == expected {
                    Ok(Fetched::Hit)
                } else {
                    self.corrupt.fetch_add(1, Ordering::Relaxed);
                    Ok(Fetched::Corrupt { expected, actual })
                }
            }
            None => Ok(Fetched::Hit),
        }
    }

    /// Reads one object whole and checks it against its stored CRC32C.
    fn verify(&self, key: &ObjectKey) -> Result<Verdict, BackendError> {
        let mut f = match File::open(self.object(key)) {
            Ok(f) => f,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Verdict::Absent),
            Err(e) => return Err(BackendError::from_io("verify", e)),
        };
        let expected = stored_crc(&f).map_err(|e| BackendError::from_io("verify", e))?;
        let mut digest = crc_fast::Digest::new(crc_fast::CrcAlgorithm::Crc32Iscsi);
        let mut chunk = vec![0u8; 1 << 20];
        loop {
            match f.read(&mut chunk) {
                Ok(0) => break,
                Ok(n) => digest.update(&chunk[..n]),
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
                Err(e) => return Err(BackendError::from_io("verify", e)),
            }
        }
        let actual = digest.finalize() as u32;
        Ok(match expected {
            None => Verdict::Unverifiable,
            Some(e) if e == actual => Verdict::Intact,
            Some(e) => {
                self.corrupt.fetch_add(1, Ordering::Relaxed);
                Verdict::Corrupt(format!(
                    "CRC32C mismatch: {CRC_XATTR} holds {e:08x}, the bytes have {actual:08x}"
                ))
            }
        })
    }

    /// Whether the temporary directory takes `user.*` extended attributes (written, read
    /// back and removed on a probe file).
    fn probe_xattr(&self) -> std::io::Result<()> {
        use xattr::FileExt;
        let dir = self.tmp.as_deref().unwrap_or(&self.base);
        let probe = dir.join(format!(
            ".kvtier-xattr-probe.{}-{}{TMP_SUFFIX}",
            std::process::id(),
            self.counter.fetch_add(1, Ordering::Relaxed)
        ));
        let result = (|| {
            let f = OpenOptions::new()
                .write(true)
                .create_new(true)
                .open(&probe)?;
            f.set_xattr(CRC_XATTR, &0u32.to_be_bytes())?;
            match f.get_xattr(CRC_XATTR)? {
                Some(v) if v == [0u8; 4] => Ok(()),
                _ => Err(std::io::Error::other("the attribute did not read back")),
            }
        })();
        let _ = fs::remove_file(&probe);
        result
    }

    fn scan(
        &self,
        model: Option<&str>,
    ) -> Result<Vec<(String, ObjectKey, u64, u64)>, BackendError> {
        let mut out = Vec::new();
        let dir = fs::read_dir(&self.base).map_err(|e| BackendError::from_io("list", e))?;
        for entry in dir {
            let entry = entry.map_err(|e| BackendError::from_io("list", e))?;
            let name = entry.file_name();
            let Some(name) = name.to_str() else { continue };
            let Some(key) = parse_file_name(name, self.format) else {
                continue;
            };
            if model.is_some_and(|m| key.model_name() != m) {
                continue;
            }
            let Ok(meta) = entry.metadata() else { continue };
            if !meta.is_file() {
                continue;
            }
            let modified = meta
                .modified()
                .ok()
                .and_then(|t| t.duration_since(UNIX_EPOCH).ok())
                .map_or(0, |d| d.as_secs());
            out.push((key.object_name(self.format), key, meta.len(), modified));
        }
        Ok(out)
    }

    fn remove_stale_tmp(&self) {
        let dir = self.tmp.as_deref().unwrap_or(&self.base);
        let Ok(entries) = fs::read_dir(dir) else {
            return;
        };
        let now = SystemTime::now();
        for entry in entries.flatten() {
            let name = entry.file_name();
            if !name.to_string_lossy().ends_with(TMP_SUFFIX) {
                continue;
            }
            let stale = entry
                .metadata()
                .and_then(|m| m.modified())
                .map(|t| now.duration_since(t).unwrap_or_default() >= STALE_TMP)
                .unwrap_or(false);
            if stale {
                let _ = fs::remove_file(entry.path());
            }
        }
    }
}

/// Directory storage. See the module docs.
pub struct FsStorage {
    paths: Arc<Paths>,
    pool: WorkerPool,
    workers: usize,
    recover: bool,
}

impl FsStorage {
    /// Opens (creating if needed) the directory and starts its worker pool. Must be called inside
    /// a running actix system.
    pub fn open(cfg: &FsConfig, format: NameFormat) -> Result<Self, BackendError> {
        fs::create_dir_all(&cfg.base_path).map_err(|e| {
            let what = format!("cannot create base_path {}", cfg.base_path.display());
            BackendError::from_io("open", e).context(what)
        })?;
        let tmp = cfg.relative_tmp_dir.as_ref().map(|t| cfg.base_path.join(t));
        if let Some(t) = &tmp {
            fs::create_dir_all(t).map_err(|e| {
                let what = format!("cannot create relative_tmp_dir {}", t.display());
                BackendError::from_io("open", e).context(what)
            })?;
        }
        let paths = Arc::new(Paths {
            base: cfg.base_path.clone(),
            tmp,
            format,
            fsync: cfg.fsync,
            checksum: cfg.checksum,
            counter: AtomicU64::new(0),
            corrupt: AtomicU64::new(0),
        });
        if cfg.checksum == FsChecksum::Crc32c {
            paths.probe_xattr().map_err(|e| {
                BackendError::new(
                    ErrorKind::Other,
                    "open",
                    format!(
                        "checksum = \"crc32c\" keeps each object's CRC32C in the extended \
                         attribute {CRC_XATTR}, which the file system of {} does not support \
                         ({e}); use a file system with user xattrs, or set checksum = \"off\" \
                         (objects are then checked by size only)",
                        cfg.base_path.display()
                    ),
                )
                .with_source(e)
            })?;
        }
        Ok(Self {
            paths,
            pool: WorkerPool::start(cfg.num_workers),
            workers: cfg.num_workers,
            recover: cfg.recover_on_start,
        })
    }

    /// The directory holding the objects.
    pub fn base_path(&self) -> &Path {
        &self.paths.base
    }

    /// Spreads `work` over the pool's threads (see [`crate::worker_pool::fan_out`]).
    fn fan_out<I: Send + 'static, O: Send + 'static>(
        &self,
        items: Vec<I>,
        work: fn(&Paths, I) -> O,
        failed: impl Fn(usize, &JobFailed) -> O + 'static,
    ) -> Io<Vec<O>> {
        Io::pending(crate::worker_pool::fan_out(
            &self.pool,
            self.workers,
            self.paths.clone(),
            items,
            work,
            failed,
        ))
    }
}

impl Storage for FsStorage {
    fn kind(&self) -> &'static str {
        "fs"
    }

    fn put(&mut self, items: Vec<(ObjectKey, Bytes)>) -> Io<Vec<Result<(), BackendError>>> {
        self.fan_out(
            items,
            |p, (k, data)| {
                p.write(&k, &data)
                    .map_err(|e| BackendError::from_io("put", e))
            },
            |_, e| Err(e.backend_error("put")),
        )
    }

    /// The directory has one writer, this actor: the ledger's sizes are the files' sizes.
    fn head(
        &mut self,
        keys: &[ObjectKey],
        known: &[Option<u64>],
    ) -> Io<Vec<Result<Option<u64>, BackendError>>> {
        answer_known(keys, known, |unknown| {
            self.fan_out(
                unknown,
                |p, k| match fs::metadata(p.object(&k)) {
                    Ok(m) => Ok(Some(m.len())),
                    Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
                    Err(e) => Err(BackendError::from_io("head", e)),
                },
                |_, e| Err(e.backend_error("head")),
            )
        })
    }

    fn get(&mut self, items: Vec<(ObjectKey, LoadBuf)>) -> Io<Vec<Result<Fetched, BackendError>>> {
        self.fan_out(
            items,
            |p, (k, mut buf)| p.read(&k, &mut buf),
            move |_, e| Err(e.backend_error("get")),
        )
    }

    fn verify(&mut self, keys: Vec<ObjectKey>) -> Io<Vec<Result<Verdict, BackendError>>> {
        self.fan_out(
            keys,
            |p, k| p.verify(&k),
            |_, e| Err(e.backend_error("verify")),
        )
    }

    fn remove(&mut self, keys: Vec<ObjectKey>) -> Io<Vec<Result<Removed, BackendError>>> {
        self.fan_out(
            keys,
            |p, k| match fs::remove_file(p.object(&k)) {
                Ok(()) => Ok(Removed::Yes),
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(Removed::Absent),
                Err(e) => Err(BackendError::from_io("delete", e)),
            },
            |_, e| Err(e.backend_error("delete")),
        )
    }

    fn list(
        &mut self,
        model: Option<String>,
        cursor: Option<String>,
        limit: usize,
    ) -> Io<Result<KeyPage, BackendError>> {
        let paths = self.paths.clone();
        let pool = self.pool.clone();
        Io::pending(async move {
            let scanned = run_on(&pool, move || paths.scan(model.as_deref()))
                .await
                .map_err(|e| e.backend_error("list"))??;
            let entries = scanned.into_iter().map(|(n, k, s, _)| (n, k, s)).collect();
            Ok(page_of(entries, cursor.as_deref(), limit))
        })
    }

    fn recover(&mut self) -> Option<Io<Result<Vec<Recovered>, BackendError>>> {
        if !self.recover {
            return None;
        }
        let paths = self.paths.clone();
        let pool = self.pool.clone();
        Some(Io::pending(async move {
            let scanned = run_on(&pool, move || {
                paths.remove_stale_tmp();
                paths.scan(None)
            })
            .await
            .map_err(|e| e.backend_error("recover"))??;
            Ok(scanned
                .into_iter()
                .map(|(_, key, size, modified)| Recovered {
                    key,
                    size,
                    modified,
                })
                .collect())
        }))
    }

    fn details(&self) -> serde_json::Value {
        serde_json::json!({
            "base_path": self.paths.base.display().to_string(),
            "num_workers": self.workers,
            "fsync": self.paths.fsync,
            "checksum": self.paths.checksum,
            "corrupt_objects": self.paths.corrupt.load(Ordering::Relaxed),
        })
    }
}
