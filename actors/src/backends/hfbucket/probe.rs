//! The adapter's own load paths, opened up for `examples/hf_download_probe.rs` (only with the
//! `internals` feature, which no host turns on): a [`Probe`] uploads fresh objects the way a
//! store does and reads each one back by either path a load can take, `resolve` (the Hub's
//! 302 to the bytes) or the Xet CAS (by the object's `xetHash`, on `xet_load_path =
//! "direct"`), with exactly the code the adapter runs.
//!
//! Invariants: nothing here has a rule of its own. Every call goes straight to the adapter's
//! Hub client or Xet reader/writer, so what the probe times is what a load does, and the
//! internals themselves stay crate-private.

use std::path::Path;
use std::time::{SystemTime, UNIX_EPOCH};

use bytes::Bytes;

use super::config::{BucketHandle, XetChunking, XetLoadPath, XetStorePath};
use super::hub::{HubClient, MAX_PER_REQUEST};
use super::xet::{WriteSettings, XetReader, XetWriter};
use crate::config::Secret;
use crate::storage::{BackendError, Fetched};

/// The Hub client and Xet reader of one bucket, as the adapter opens them. See the module docs.
pub struct Probe {
    hub: HubClient,
    reader: XetReader,
    cache: std::path::PathBuf,
}

impl Probe {
    /// Opens the bucket `handle` at `endpoint` with `workers` connections, and a Xet reader
    /// (its read token fetched now) whose cache lives under `cache`.
    pub fn connect(
        endpoint: &str,
        handle: BucketHandle,
        token: Secret,
        workers: usize,
        cache: &Path,
    ) -> Result<Self, BackendError> {
        let hub = HubClient::new(endpoint, handle, Some(token), workers);
        let reader = XetReader::connect(&hub, cache, XetLoadPath::Direct)?;
        Ok(Self {
            hub,
            reader,
            cache: cache.to_path_buf(),
        })
    }

    /// The bucket's path prefix (empty without one).
    pub fn prefix(&self) -> String {
        self.hub.handle().prefix.clone().unwrap_or_default()
    }

    /// Uploads `objects` (path, bytes) through Xet (kvtier's own writer, no compression, no
    /// global deduplication, content-defined chunks), registers them with `addFile` lines, 16
    /// a batch, and returns each one's `xetHash` from `paths-info`, in order. Fails if the Hub
    /// refuses a line or reports another size.
    pub fn upload(&self, objects: &[(String, Bytes)]) -> Result<Vec<String>, BackendError> {
        let settings = WriteSettings {
            compression: "none",
            global_dedup: false,
            token_reserve: 600,
            store_path: XetStorePath::Direct,
            chunking: XetChunking::Cdc,
        };
        let token = self.hub.xet_write_token()?;
        let writer = XetWriter::open(&self.cache, &settings)?;
        for batch in objects.chunks(16) {
            let ups = writer.upload(&self.hub, &token, true, batch)?;
            let mtime = SystemTime::now()
                .duration_since(UNIX_EPOCH)
                .map_or(0, |d| d.as_millis() as u64);
            let lines: Vec<_> = batch
                .iter()
                .zip(ups.files)
                .map(|((p, _), u)| u.add_file(p, mtime))
                .collect();
            let reply = self.hub.batch(&lines)?;
            if !reply.failed.is_empty() {
                return Err(BackendError::invalid(format!(
                    "hfbucket probe: addFile refused {:?}",
                    reply.failed
                )));
            }
        }
        let mut hashes = Vec::with_capacity(objects.len());
        for batch in objects.chunks(MAX_PER_REQUEST) {
            let paths: Vec<String> = batch.iter().map(|(p, _)| p.clone()).collect();
            let meta = self.hub.paths_meta(&paths)?;
            for (p, bytes) in batch {
                let m = meta.get(p).filter(|m| m.size == bytes.len() as u64);
                let hash = m.and_then(|m| m.xet_hash.clone()).ok_or_else(|| {
                    BackendError::invalid(format!(
                        "hfbucket probe: no xetHash of {} bytes for `{p}`",
                        bytes.len()
                    ))
                })?;
                hashes.push(hash);
            }
        }
        Ok(hashes)
    }

    /// Loads `path` into `buf` by `resolve`, as the adapter's fallback does.
    pub fn resolve(&self, path: &str, buf: &mut [u8]) -> Result<Fetched, BackendError> {
        self.hub.download(path, buf)
    }

    /// Loads the object with Xet hash `hash` into `buf` (its size) out of the CAS, as the
    /// adapter's default load path does.
    pub fn xet(&self, hash: &str, buf: &mut [u8]) -> Result<Fetched, BackendError> {
        self.reader
            .read_into(&self.hub, hash, buf.len() as u64, buf)
    }
}
