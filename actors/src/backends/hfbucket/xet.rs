//! Transfers through the Xet content-addressed store with `hf-xet`: uploads, and streamed
//! downloads straight into the caller's buffer. The blocking API is called only from
//! worker-pool threads, never inside a tokio runtime.

use std::path::Path;

use bytes::Bytes;
use xet::xet_session::{
    HeaderMap, HeaderValue, Sha256Policy, XetDownloadStreamGroup, XetFileInfo, XetSession,
    XetSessionBuilder,
};

use super::hub::{HubClient, XetToken};
use crate::storage::{BackendError, Fetched};

/// The Xet hash and size of one uploaded object.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Uploaded {
    /// The Xet Merkle hash to register with `addFile`.
    pub hash: String,
    /// Its size in bytes.
    pub size: u64,
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

/// Streams objects out of the Xet CAS. One session and one download-stream group serve every
/// load of an adapter: they share the CAS connection pool, and the group refreshes its read
/// token from the bucket's `xet-read-token` route when it expires. No chunk cache is involved
/// (a stream group has none), so every load reads from the CAS.
pub struct XetReader {
    // Kept so the session's runtime outlives the group.
    _session: XetSession,
    group: XetDownloadStreamGroup,
}

impl std::fmt::Debug for XetReader {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("XetReader")
    }
}

impl XetReader {
    /// Fetches a read token (one `xet-read-token` request) and opens the session and stream
    /// group. Must run on a plain thread (a worker), not inside a tokio runtime.
    pub fn connect(hub: &HubClient, cache_dir: &Path) -> Result<Self, BackendError> {
        let token = hub.xet_read_token()?;
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
            _session: session,
            group,
        })
    }

    /// Streams the Xet file `hash` of `size` bytes into `buf`. A `size` other than
    /// `buf.len()` is a mismatch and leaves the buffer unwritten. A stream that yields more or
    /// fewer bytes than `size` is an error (the caller falls back to `resolve`, which decides
    /// between hit, mismatch and absent).
    pub fn read_into(
        &self,
        hash: &str,
        size: u64,
        buf: &mut [u8],
    ) -> Result<Fetched, BackendError> {
        if size != buf.len() as u64 {
            return Ok(Fetched::SizeMismatch { actual: size });
        }
        let mut stream = self
            .group
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

/// Uploads every object in one Xet commit; results keep input order. A failure of the whole
/// commit fails every object.
pub fn upload(
    hub: &HubClient,
    token: &XetToken,
    cache_dir: &Path,
    objects: &[(String, Bytes)],
) -> Vec<Result<Uploaded, BackendError>> {
    let run = || -> Result<Vec<Result<Uploaded, BackendError>>, BackendError> {
        let session = XetSessionBuilder::new()
            .with_cache_dir(cache_dir)
            .build()
            .map_err(xet_err)?;
        let headers = refresh_headers(hub)?;
        let commit = session
            .new_upload_commit()
            .map_err(xet_err)?
            .with_endpoint(token.cas_url.clone())
            .with_token_info(token.access_token.expose(), token.exp)
            .with_token_refresh_url(hub.xet_write_token_url(), headers)
            .build_blocking()
            .map_err(xet_err)?;
        let handles: Vec<_> = objects
            .iter()
            .map(|(name, data)| {
                commit.upload_bytes_blocking(data.to_vec(), Sha256Policy::Skip, Some(name.clone()))
            })
            .collect();
        commit.commit_blocking().map_err(xet_err)?;
        Ok(handles
            .into_iter()
            .zip(objects)
            .map(|(h, (_, data))| {
                let meta = h
                    .map_err(xet_err)?
                    .finalize_ingestion_blocking()
                    .map_err(xet_err)?;
                Ok(Uploaded {
                    hash: meta.xet_info.hash,
                    size: meta.xet_info.file_size.unwrap_or(data.len() as u64),
                })
            })
            .collect())
    };
    match run() {
        Ok(v) => v,
        Err(e) => objects.iter().map(|_| Err(e.clone())).collect(),
    }
}
