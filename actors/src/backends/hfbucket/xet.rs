//! Transfers through the Xet content-addressed store: uploads from the caller's memory,
//! either with kvtier's own writer (module `upload`, the default) or with `hf-xet` through one
//! session per adapter (`xet_store_path = "hf-xet"`), and loads into the caller's buffer,
//! either with kvtier's own reconstruction reader (module `cas`, the default) or through one
//! hf-xet download-stream group per adapter (`xet_load_path = "hf-xet"`). The blocking API is
//! called only from worker-pool threads, never inside a tokio runtime.
//!
//! Invariants: an upload never copies the object first (its chunks, or hf-xet's stream, hold
//! slices of the store's [`Bytes`], whose owner, possibly a host region, lives until the last
//! slice is dropped at the end of the commit); the compression scheme changes only how xorbs
//! are stored, never the Xet hashes, so every reader (hf_xet, `huggingface_hub`, LMCache)
//! reads whatever was chosen; an hf-xet commit runs without Xet's token refresher only when
//! its token has at least the reserve (`xet_token_reserve_secs`) left, so a commit shorter
//! than the reserve never meets an expired token.

use std::path::Path;

use bytes::Bytes;
use xet::xet_session::{
    HeaderMap, HeaderValue, Sha256Policy, XetConfig, XetDownloadStreamGroup, XetFileInfo,
    XetSession, XetSessionBuilder,
};

use super::config::{XetChunking, XetLoadPath, XetStorePath};
use super::hub::{HubClient, XetToken};
use super::upload::DirectWriter;
use crate::storage::{BackendError, Fetched};

/// The Xet hash and size of one uploaded object.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Uploaded {
    /// The Xet Merkle hash to register with `addFile`.
    pub(crate) hash: String,
    /// Its size in bytes.
    pub(crate) size: u64,
}

impl Uploaded {
    /// The `batch` line that registers this upload at `path`, modified at `mtime` (ms since
    /// the epoch).
    pub(crate) fn add_file(&self, path: &str, mtime: u64) -> serde_json::Value {
        serde_json::json!({
            "type": "addFile",
            "path": path,
            "xetHash": self.hash,
            "size": self.size,
            "mtime": mtime,
        })
    }
}

fn xet_err(e: impl std::fmt::Display) -> BackendError {
    BackendError::io("xet upload", e)
}

fn read_err(e: impl std::fmt::Display) -> BackendError {
    BackendError::io("xet download", e)
}

/// The headers Xet's token refresher sends to the Hub's token routes.
fn refresh_headers(hub: &HubClient) -> Result<HeaderMap, BackendError> {
    let mut headers = HeaderMap::new();
    if let Some(b) = hub.bearer() {
        headers.insert(
            "authorization",
            HeaderValue::from_str(&b)
                .map_err(|_| BackendError::invalid("the Hub token is not a valid header value"))?,
        );
    }
    Ok(headers)
}

/// How loads read the Xet CAS (`xet_load_path`).
enum ReadPath {
    /// kvtier's own reconstruction reader ([`super::cas`]) with this read token; the storage
    /// opens a new reader when the token runs low.
    Direct(XetToken),
    /// hf-xet's download stream group, which refreshes its read token itself.
    Stream {
        // Kept so the session's runtime outlives the group.
        _session: XetSession,
        group: XetDownloadStreamGroup,
    },
}

/// Reads objects out of the Xet CAS into the caller's buffer, along one read path shared by
/// every load of an adapter. No chunk cache is involved, so every load reads from the CAS.
pub(crate) struct XetReader {
    path: ReadPath,
    /// The direct reader checks every load against its Xet hash (`xet_verify_loads`).
    verify: bool,
}

impl std::fmt::Debug for XetReader {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self.path {
            ReadPath::Direct(_) => "XetReader(direct)",
            ReadPath::Stream { .. } => "XetReader(hf-xet stream)",
        })
    }
}

impl XetReader {
    /// Fetches a read token (one `xet-read-token` request) and, for the hf-xet path, opens the
    /// session and stream group. Must run on a plain thread (a worker), not inside a tokio
    /// runtime.
    pub(crate) fn connect(
        hub: &HubClient,
        cache_dir: &Path,
        path: XetLoadPath,
    ) -> Result<Self, BackendError> {
        let token = hub.xet_read_token()?;
        if path == XetLoadPath::Direct {
            return Ok(Self {
                path: ReadPath::Direct(token),
                verify: false,
            });
        }
        let session = XetSessionBuilder::new()
            .with_cache_dir(cache_dir)
            .build()
            .map_err(read_err)?;
        let group = session
            .new_download_stream_group()
            .map_err(read_err)?
            .with_endpoint(token.cas_url.clone())
            .with_token_info(token.access_token.expose(), token.exp)
            .with_token_refresh_url(hub.xet_read_token_url(), refresh_headers(hub)?)
            .build_blocking()
            .map_err(read_err)?;
        Ok(Self {
            path: ReadPath::Stream {
                _session: session,
                group,
            },
            verify: false,
        })
    }

    /// The same reader, checking (on the direct path) that every load hashes to its Xet hash
    /// (`xet_verify_loads`); see `cas::read_direct`.
    pub(crate) fn with_verify(mut self, verify: bool) -> Self {
        self.verify = verify;
        self
    }

    /// Whether the reader can serve loads started at `now` (seconds since the epoch): a direct
    /// reader's token must have a minute left; the hf-xet path refreshes its own.
    pub(crate) fn fresh(&self, now: u64) -> bool {
        match &self.path {
            ReadPath::Direct(token) => token.lasts(now, TOKEN_MARGIN),
            ReadPath::Stream { .. } => true,
        }
    }

    /// Reads the Xet file `hash` of `size` bytes into `buf`. A `size` other than `buf.len()`
    /// is a mismatch and leaves the buffer unwritten. A file that yields more or fewer bytes
    /// than `size` is an error (the caller falls back to `resolve`, which decides between
    /// hit, mismatch and absent).
    pub(crate) fn read_into(
        &self,
        hub: &HubClient,
        hash: &str,
        size: u64,
        buf: &mut [u8],
    ) -> Result<Fetched, BackendError> {
        if size != buf.len() as u64 {
            return Ok(Fetched::SizeMismatch { actual: size });
        }
        let group = match &self.path {
            ReadPath::Direct(token) => {
                return super::cas::read_direct(hub, token, hash, buf, self.verify)
                    .map(|()| Fetched::Hit)
            }
            ReadPath::Stream { group, .. } => group,
        };
        let mut stream = group
            .download_stream_blocking(XetFileInfo::new(hash.to_owned(), size), None)
            .map_err(read_err)?;
        let mut off = 0usize;
        while let Some(chunk) = stream.blocking_next().map_err(read_err)? {
            let end = off + chunk.len();
            if end > buf.len() {
                stream.cancel();
                return Err(read_err(format!(
                    "the Xet stream of {hash} is longer than its {size} bytes"
                )));
            }
            buf[off..end].copy_from_slice(&chunk);
            off = end;
        }
        if off != buf.len() {
            return Err(read_err(format!(
                "the Xet stream of {hash} ended after {off} of {size} bytes"
            )));
        }
        Ok(Fetched::Hit)
    }
}

/// What one upload commit did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Committed {
    /// Every object's hash and size, in input order.
    pub(crate) files: Vec<Uploaded>,
    /// What the commit sent.
    pub(crate) counts: CommitCounts,
}

/// What commits sent, added up in the adapter's `status`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct CommitCounts {
    /// Bytes of chunks the CAS did not hold yet.
    pub(crate) new_bytes: u64,
    /// Bytes of chunks deduplicated (already in this commit, the session or the CAS).
    pub(crate) deduped_bytes: u64,
    /// Bytes of xorbs sent to the CAS (the new chunks after compression, with headers).
    pub(crate) xorb_bytes: u64,
    /// Xorbs kvtier's own writer posted to the CAS because it offered no upload grant (or
    /// kept refusing them); 0 on the hf-xet path, which does not report it.
    pub(crate) xorbs_posted: u64,
}

impl std::ops::AddAssign for CommitCounts {
    fn add_assign(&mut self, o: Self) {
        self.new_bytes += o.new_bytes;
        self.deduped_bytes += o.deduped_bytes;
        self.xorb_bytes += o.xorb_bytes;
        self.xorbs_posted += o.xorbs_posted;
    }
}

/// How Xet writes xorbs: the knobs of [`XetWriter`], from the adapter's config.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct WriteSettings {
    /// The xorb compression scheme (`"none"`, `"lz4"`, `"bg4-lz4"` or `"auto"`).
    pub(crate) compression: &'static str,
    /// Whether to ask the CAS about chunks it may already hold (global deduplication).
    pub(crate) global_dedup: bool,
    /// Seconds a write token must have left for a commit to run without Xet's token
    /// refresher (`xet_token_reserve_secs`; 0: every commit has one).
    pub(crate) token_reserve: u64,
    /// Whether commits go through hf-xet or kvtier's own writer (`xet_store_path`).
    pub(crate) store_path: XetStorePath,
    /// How kvtier's own writer cuts objects into chunks (`xet_chunking`).
    pub(crate) chunking: XetChunking,
}

/// A cached token (a write token, or a direct reader's read token) is replaced when it has
/// less than this left (seconds), whatever the reserve.
const TOKEN_MARGIN: u64 = 60;

impl WriteSettings {
    /// Whether `token` may start a commit at `now` (seconds since the epoch). It must leave
    /// the commit its reserve, so that the commit needs no refresher; a Hub whose tokens live
    /// no longer than the reserve would make that impossible, and then the fixed 60-second margin
    /// is enough (the commit carries a refresher).
    pub(crate) fn token_usable(&self, token: &XetToken, now: u64) -> bool {
        let lifetime = token.exp.saturating_sub(token.fetched);
        let need = if self.token_reserve > 0 && lifetime > self.token_reserve {
            self.token_reserve.max(TOKEN_MARGIN)
        } else {
            TOKEN_MARGIN
        };
        token.lasts(now, need)
    }

    /// Whether a commit started at `now` with `token` needs Xet's token refresher: when the
    /// token has less than the reserve left, or the reserve is 0.
    pub(crate) fn needs_refresher(&self, token: &XetToken, now: u64) -> bool {
        self.token_reserve == 0 || !token.lasts(now, self.token_reserve)
    }
}

/// Uploads to the Xet CAS, along the adapter's store path (`xet_store_path`). With hf-xet,
/// one session (with its runtime and connection pool) serves every store of an adapter; each
/// batch is one upload commit on it (a commit is single-use), and each object is a stream fed
/// the caller's [`Bytes`] without a copy. With `direct`, kvtier's own writer
/// (module `upload`) does the commit through one CAS client.
pub(crate) struct XetWriter {
    path: WritePath,
}

enum WritePath {
    HfXet(XetSession),
    Direct(DirectWriter),
}

impl std::fmt::Debug for XetWriter {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match &self.path {
            WritePath::HfXet(_) => f.write_str("XetWriter(hf-xet)"),
            WritePath::Direct(d) => write!(f, "XetWriter({d:?})"),
        }
    }
}

impl XetWriter {
    /// Opens the writer `settings` asks for: an hf-xet session, or kvtier's own writer (which
    /// holds only its settings). Must run on a plain thread (a worker), not inside a tokio
    /// runtime (the session would borrow that runtime instead of owning one).
    pub(crate) fn open(cache_dir: &Path, settings: &WriteSettings) -> Result<Self, BackendError> {
        if settings.store_path == XetStorePath::Direct {
            return Ok(Self {
                path: WritePath::Direct(DirectWriter::open(settings)?),
            });
        }
        let config = XetConfig::new()
            .with_config("xorb.compression_policy", settings.compression)
            .and_then(|c| {
                c.with_config(
                    "deduplication.global_dedup_query_enabled",
                    settings.global_dedup,
                )
            })
            .map_err(xet_err)?;
        let session = XetSessionBuilder::new_with_config(config)
            .with_cache_dir(cache_dir)
            .build()
            .map_err(xet_err)?;
        Ok(Self {
            path: WritePath::HfXet(session),
        })
    }

    /// Uploads every object in one Xet commit; results keep input order. A failure of the
    /// whole commit fails every object. On the hf-xet path the commit gets Xet's token
    /// refresher only with `refresher` (see [`WriteSettings::needs_refresher`]): hf-xet builds
    /// two HTTP clients for one (its client cache holds one client, and the refresher's
    /// headers differ from the CAS's). The direct writer sends its requests through `hub`
    /// with `token`, and replaces the token from the Hub itself when it runs low during a long
    /// commit (it ignores `refresher`).
    pub(crate) fn upload(
        &self,
        hub: &HubClient,
        token: &XetToken,
        refresher: bool,
        objects: &[(String, Bytes)],
    ) -> Result<Committed, BackendError> {
        let session = match &self.path {
            WritePath::HfXet(s) => s,
            WritePath::Direct(d) => return d.upload(hub, token, objects),
        };
        let mut builder = session
            .new_upload_commit()
            .map_err(xet_err)?
            .with_endpoint(token.cas_url.clone())
            .with_token_info(token.access_token.expose(), token.exp);
        if refresher {
            builder =
                builder.with_token_refresh_url(hub.xet_write_token_url(), refresh_headers(hub)?);
        }
        let commit = builder.build_blocking().map_err(xet_err)?;
        let run = || -> Result<Committed, BackendError> {
            // Every object is chunked (on Xet's runtime) as it is written; deduplication and
            // xorb uploads go on in the background while the next object is written, so the
            // streams are finished only once all are written.
            let mut streams = Vec::with_capacity(objects.len());
            for (name, data) in objects {
                let s = commit
                    .upload_stream_blocking(Some(name.clone()), Sha256Policy::Skip)
                    .map_err(xet_err)?;
                s.write_blocking(data.clone()).map_err(xet_err)?;
                streams.push(s);
            }
            let uploaded = streams
                .iter()
                .zip(objects)
                .map(|(s, (_, data))| {
                    let meta = s.finish_blocking().map_err(xet_err)?;
                    Ok(Uploaded {
                        hash: meta.xet_info.hash,
                        size: meta.xet_info.file_size.unwrap_or(data.len() as u64),
                    })
                })
                .collect::<Result<Vec<_>, BackendError>>()?;
            let m = commit.commit_blocking().map_err(xet_err)?.dedup_metrics;
            Ok(Committed {
                files: uploaded,
                counts: CommitCounts {
                    new_bytes: m.new_bytes,
                    deduped_bytes: m.deduped_bytes,
                    xorb_bytes: m.xorb_bytes_uploaded,
                    xorbs_posted: 0,
                },
            })
        };
        run().inspect_err(|_| {
            // Stops what is still running (xorb uploads of streams that did finish).
            let _ = commit.abort();
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::Secret;

    fn token(fetched: u64, lifetime: u64) -> XetToken {
        XetToken {
            access_token: Secret::new("t"),
            exp: fetched + lifetime,
            cas_url: "http://127.0.0.1:1".into(),
            fetched,
        }
    }

    fn settings(token_reserve: u64) -> WriteSettings {
        WriteSettings {
            compression: "none",
            global_dedup: false,
            token_reserve,
            store_path: XetStorePath::HfXet,
            chunking: XetChunking::Cdc,
        }
    }

    /// An hour-long token (the Hub's) serves commits without a refresher until 10 minutes
    /// are left, then is replaced; no commit it starts needs a refresher.
    #[test]
    fn long_tokens_leave_commits_their_reserve() {
        let s = settings(600);
        let t = token(1000, 3600);
        for now in [1000, 2000, 3999] {
            assert!(s.token_usable(&t, now), "at {now}");
            assert!(!s.needs_refresher(&t, now), "at {now}");
        }
        assert!(!s.token_usable(&t, 4000), "10 minutes left: replace it");
        assert!(s.needs_refresher(&t, 4000));
    }

    /// Tokens that live no longer than the reserve are still reused down to the margin (not
    /// fetched again for every batch), and their commits carry the refresher.
    #[test]
    fn short_tokens_are_reused_with_a_refresher() {
        let s = settings(600);
        let t = token(1000, 300);
        assert!(s.token_usable(&t, 1000));
        assert!(s.token_usable(&t, 1000 + 300 - TOKEN_MARGIN - 1));
        assert!(!s.token_usable(&t, 1000 + 300 - TOKEN_MARGIN));
        assert!(s.needs_refresher(&t, 1000));
    }

    /// A reserve of 0 is hf_xet's behaviour: every commit has a refresher, and a token is
    /// replaced only a margin before it lapses.
    #[test]
    fn a_zero_reserve_gives_every_commit_a_refresher() {
        let s = settings(0);
        let t = token(1000, 3600);
        assert!(s.needs_refresher(&t, 1000));
        assert!(s.token_usable(&t, 4600 - TOKEN_MARGIN - 1));
        assert!(!s.token_usable(&t, 4600 - TOKEN_MARGIN));
    }
}
