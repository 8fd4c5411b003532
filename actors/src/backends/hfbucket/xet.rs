//! Uploads through the Xet content-addressed store with `hf-xet` (blocking API; called only
//! from worker-pool threads, never inside a tokio runtime).

use std::path::Path;

use bytes::Bytes;
use xet::xet_session::{HeaderMap, HeaderValue, Sha256Policy, XetSessionBuilder};

use super::hub::{HubClient, XetToken};
use crate::storage::BackendError;

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
        let mut headers = HeaderMap::new();
        if let Some(b) = hub.bearer() {
            headers.insert(
                "authorization",
                HeaderValue::from_str(&b).map_err(|_| BackendError::Invalid {
                    reason: "the Hub token is not a valid header value".into(),
                })?,
            );
        }
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
