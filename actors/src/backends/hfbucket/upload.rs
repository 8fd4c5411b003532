//! Direct Xet stores: kvtier cuts, hashes and packs the chunks itself and sends xorbs and one
//! shard per commit through xet-client's CAS client (`xet_store_path = "direct"`).
//!
//! hf-xet's upload commit runs every object through Xet's content-defined chunker (a rolling
//! gear hash over every byte), its deduplication, and a session of its own per commit (with
//! an HTTP client built each time). KV chunks are unique by construction and never shifted,
//! so none of that buys anything. This module keeps the Xet format and the CAS protocol and
//! drops the rest:
//!
//! 1. each object is cut into chunks ([`XetChunking`]: Xet's own content-defined chunker, or
//!    fixed 64 KiB pieces, which skip the rolling hash), as slices of the caller's [`Bytes`];
//! 2. chunk hashes (BLAKE3, Xet's keyed variant) and the file hash come from
//!    xet-core-structures, the same code hf-xet runs;
//! 3. chunks are packed in order into xorbs of at most 64 MiB / 8 192 chunks, each
//!    serialized by xet-core-structures and uploaded by xet-client's `RemoteClient` (its
//!    upload grants, checksum and retries);
//! 4. after every xorb has landed, one shard describes every object's segments (with
//!    verification hashes) and every xorb's chunks, and is uploaded last, as hf-xet does.
//!
//! Invariants: an object's Xet hash depends only on its chunks, so with `cdc` chunking it is
//! exactly the hash hf-xet computes for the same bytes (a test holds this); with `fixed`
//! chunking the hash differs but every reader (hf_xet, `huggingface_hub`, LMCache, kvtier's
//! own) reconstructs the bytes, since readers follow the shard's chunk ranges and never
//! re-chunk; the shard goes up only after all its xorbs did, so the CAS never holds a file
//! whose bytes it lacks; nothing is copied before serialization, which copies each byte once
//! and holds at most two serialized xorbs (128 MiB) per commit at a time, whatever the batch.

use std::sync::Arc;

use bytes::Bytes;
use futures_util::{StreamExt, TryStreamExt};
use xet_client::cas_client::auth::{AuthConfig, AuthError, TokenInfo, TokenRefresher};
use xet_client::cas_client::{Client, RemoteClient};
use xet_core_structures::merklehash::{file_hash, MerkleHash};
use xet_core_structures::metadata_shard::chunk_verification::range_hash_from_chunks;
use xet_core_structures::metadata_shard::file_structs::{
    FileDataSequenceEntry, FileDataSequenceHeader, FileVerificationEntry, MDBFileInfo,
};
use xet_core_structures::metadata_shard::shard_in_memory::MDBInMemoryShard;
use xet_core_structures::xorb_object::constants::{MAX_XORB_BYTES, MAX_XORB_CHUNKS};
use xet_core_structures::xorb_object::{Chunk, RawXorbData, SerializedXorbObject};
use xet_runtime::core::XetContext;

use super::config::XetChunking;
use super::hub::{HubClient, XetToken};
use super::xet::{Committed, Uploaded, WriteSettings};
use crate::storage::BackendError;

/// The operation errors are reported under.
const OP: &str = "xet direct store";

/// Size of a `fixed` chunk: Xet's target chunk size, half its largest.
pub const FIXED_CHUNK: usize = 64 << 10;

/// The CAS prefix of xorbs (Xet's `default_prefix`).
const PREFIX: &str = "default";

/// Serialized xorbs a commit holds at most while uploading (the serialization of the next
/// overlaps the upload of the previous).
const XORBS_IN_FLIGHT: usize = 2;

/// How often the `auto` compression policy re-tests its choice (chunks), as hf-xet's default.
const COMPRESSION_RETEST_INTERVAL: usize = 32;

fn err(e: impl std::fmt::Display) -> BackendError {
    BackendError::io(OP, e)
}

/// Cuts `data` into chunks (slices of it, hashed), the way `chunking` says.
pub fn chunk(data: &Bytes, chunking: XetChunking) -> Vec<Chunk> {
    match chunking {
        XetChunking::Cdc => {
            xet_data::deduplication::Chunker::default().next_block_bytes(data, true)
        }
        XetChunking::Fixed => (0..data.len())
            .step_by(FIXED_CHUNK)
            .map(|at| Chunk::new(data.slice(at..data.len().min(at + FIXED_CHUNK))))
            .collect(),
    }
}

/// One object's place in the commit: its chunks' hashes and sizes, and the xorb segments
/// that hold them.
struct FilePlan {
    chunks: Vec<(MerkleHash, u64)>,
    /// (xorb index in the commit, first chunk in the xorb, end chunk, bytes).
    segments: Vec<(usize, usize, usize, u64)>,
}

/// Packs every object's chunks, in order, into xorbs within Xet's limits.
fn pack(objects: &[Vec<Chunk>]) -> (Vec<Vec<Chunk>>, Vec<FilePlan>) {
    let mut xorbs: Vec<Vec<Chunk>> = vec![Vec::new()];
    let mut xorb_bytes = 0usize;
    let mut plans = Vec::with_capacity(objects.len());
    for chunks in objects {
        let mut plan = FilePlan {
            chunks: chunks
                .iter()
                .map(|c| (c.hash, c.data.len() as u64))
                .collect(),
            segments: Vec::new(),
        };
        for c in chunks {
            let cur = xorbs.last().map_or(0, Vec::len);
            if cur > 0 && (cur >= *MAX_XORB_CHUNKS || xorb_bytes + c.data.len() > *MAX_XORB_BYTES) {
                xorbs.push(Vec::new());
                xorb_bytes = 0;
            }
            let xi = xorbs.len() - 1;
            let at = xorbs[xi].len();
            match plan.segments.last_mut() {
                Some((x, _, end, bytes)) if *x == xi && *end == at => {
                    *end += 1;
                    *bytes += c.data.len() as u64;
                }
                _ => plan.segments.push((xi, at, at + 1, c.data.len() as u64)),
            }
            xorb_bytes += c.data.len();
            xorbs[xi].push(c.clone());
        }
        plans.push(plan);
    }
    xorbs.retain(|x| !x.is_empty());
    (xorbs, plans)
}

/// The shard's description of one object.
fn file_info(plan: &FilePlan, xorb_hashes: &[MerkleHash]) -> (MerkleHash, MDBFileInfo) {
    let hash = file_hash(&plan.chunks);
    let mut first = 0;
    let mut segments = Vec::with_capacity(plan.segments.len());
    let mut verification = Vec::with_capacity(plan.segments.len());
    for &(xi, start, end, bytes) in &plan.segments {
        segments.push(FileDataSequenceEntry::new(
            xorb_hashes[xi],
            bytes,
            start as u64,
            end as u64,
        ));
        let n = end - start;
        let hashes: Vec<MerkleHash> = plan.chunks[first..first + n].iter().map(|c| c.0).collect();
        verification.push(FileVerificationEntry::new(range_hash_from_chunks(&hashes)));
        first += n;
    }
    let info = MDBFileInfo {
        metadata: FileDataSequenceHeader::new(hash, segments.len(), true, false),
        segments,
        verification,
        metadata_ext: None,
    };
    (hash, info)
}

/// Gets write tokens from the Hub when xet-client's CAS client asks for one (the Hub call is
/// blocking, so it runs on the runtime's blocking pool).
struct HubRefresher(HubClient);

#[async_trait::async_trait]
impl TokenRefresher for HubRefresher {
    async fn refresh(&self) -> Result<TokenInfo, AuthError> {
        let hub = self.0.clone();
        let failed = |e: &dyn std::fmt::Display| AuthError::TokenRefreshFailure(e.to_string());
        let t = tokio::task::spawn_blocking(move || hub.xet_write_token())
            .await
            .map_err(|e| failed(&e))?
            .map_err(|e| failed(&e))?;
        Ok((t.access_token.expose().to_owned(), t.exp))
    }
}

/// Uploads with kvtier's own chunking and packing through one xet-client CAS client, which
/// refreshes its write token from the Hub itself.
pub struct DirectWriter {
    ctx: XetContext,
    client: Arc<RemoteClient>,
    chunking: XetChunking,
    compression: &'static str,
}

impl std::fmt::Debug for DirectWriter {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DirectWriter")
            .field("chunking", &self.chunking)
            .field("compression", &self.compression)
            .finish_non_exhaustive()
    }
}

impl DirectWriter {
    /// Opens the CAS client on `token`'s endpoint. Must run on a plain thread (a worker), not
    /// inside a tokio runtime (the context would borrow that runtime instead of owning one).
    pub fn open(
        hub: &HubClient,
        token: &XetToken,
        settings: &WriteSettings,
    ) -> Result<Self, BackendError> {
        let ctx = XetContext::default().map_err(err)?;
        let auth = Some(AuthConfig {
            token: token.access_token.expose().to_owned(),
            token_expiration: token.exp,
            token_refresher: Arc::new(HubRefresher(hub.clone())),
        });
        let client = RemoteClient::new(ctx.clone(), &token.cas_url, &auth, "kvtier", false, None);
        Ok(Self {
            ctx,
            client,
            chunking: settings.chunking,
            compression: settings.compression,
        })
    }

    /// Uploads every object in one commit (xorbs, then one shard); results keep input order.
    /// A failure fails every object.
    pub fn upload(&self, objects: &[(String, Bytes)]) -> Result<Committed, BackendError> {
        let chunked: Vec<Vec<Chunk>> = objects
            .iter()
            .map(|(_, d)| chunk(d, self.chunking))
            .collect();
        let (xorbs, plans) = pack(&chunked);
        drop(chunked);
        // Where objects start in each xorb (its first chunk always counts): the `auto`
        // compression policy chooses a scheme per object from there.
        let mut starts = vec![Vec::new(); xorbs.len()];
        for &(xi, start, _, _) in plans.iter().flat_map(|p| &p.segments) {
            if starts[xi].last() != Some(&start) {
                starts[xi].push(start);
            }
        }
        // The xorbs' descriptions (and hashes) come first, for the shard; serializing them,
        // the copy, waits for the upload pipeline, so a commit holds at most
        // `XORBS_IN_FLIGHT` serialized xorbs, however large its batch.
        let raws: Vec<RawXorbData> = xorbs
            .iter()
            .zip(starts)
            .map(|(x, starts)| RawXorbData::from_chunks(x, starts))
            .collect();
        drop(xorbs);
        let mut shard = MDBInMemoryShard::default();
        for raw in &raws {
            shard.add_xorb_block(raw.xorb_info.clone()).map_err(err)?;
        }
        let xorb_hashes: Vec<MerkleHash> = raws.iter().map(RawXorbData::hash).collect();
        let mut files = Vec::with_capacity(plans.len());
        let mut new_bytes = 0;
        for (plan, (_, data)) in plans.iter().zip(objects) {
            let (hash, info) = file_info(plan, &xorb_hashes);
            shard.add_file_reconstruction_info(info).map_err(err)?;
            files.push(Uploaded {
                hash: hash.hex(),
                size: data.len() as u64,
            });
            new_bytes += data.len() as u64;
        }
        let shard = Bytes::from(shard.to_bytes().map_err(err)?);
        let client = self.client.clone();
        let compression = self.compression;
        let xorb_bytes = self
            .ctx
            .runtime
            .bridge_sync(async move {
                let sent: Vec<u64> = futures_util::stream::iter(raws)
                    .map(|raw| {
                        let client = client.clone();
                        async move {
                            let x = tokio::task::spawn_blocking(move || {
                                SerializedXorbObject::from_xorb(
                                    raw,
                                    false,
                                    compression,
                                    COMPRESSION_RETEST_INTERVAL,
                                )
                            })
                            .await
                            .map_err(err)?
                            .map_err(err)?;
                            let permit = client.acquire_upload_permit().await.map_err(err)?;
                            client
                                .upload_xorb(PREFIX, x, None, permit)
                                .await
                                .map_err(err)
                        }
                    })
                    .buffer_unordered(XORBS_IN_FLIGHT)
                    .try_collect()
                    .await?;
                let permit = client.acquire_upload_permit().await.map_err(err)?;
                client
                    .upload_shard(shard, permit, None)
                    .await
                    .map_err(err)?;
                Ok::<u64, BackendError>(sent.into_iter().sum())
            })
            .map_err(err)??;
        Ok(Committed {
            files,
            new_bytes,
            deduped_bytes: 0,
            xorb_bytes,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn bytes(n: usize) -> Bytes {
        Bytes::from((0..n).map(|i| (i * 7 % 251) as u8).collect::<Vec<u8>>())
    }

    #[test]
    fn fixed_chunks_are_slices_of_the_object() {
        let data = bytes(3 * FIXED_CHUNK + 5);
        let c = chunk(&data, XetChunking::Fixed);
        assert_eq!(
            c.iter().map(|c| c.data.len()).collect::<Vec<_>>(),
            [FIXED_CHUNK, FIXED_CHUNK, FIXED_CHUNK, 5]
        );
        assert_eq!(c[3].data.as_ptr(), data[3 * FIXED_CHUNK..].as_ptr());
        assert!(chunk(&Bytes::new(), XetChunking::Fixed).is_empty());
    }

    #[test]
    fn packing_splits_xorbs_at_the_byte_limit_and_keeps_segments_in_order() {
        // 3 objects of 40 MiB: xorbs of at most 64 MiB, so the second object spans two.
        let objects: Vec<Vec<Chunk>> = (0..3)
            .map(|_| chunk(&bytes(40 << 20), XetChunking::Fixed))
            .collect();
        let (xorbs, plans) = pack(&objects);
        assert_eq!(xorbs.len(), 2);
        assert!(xorbs
            .iter()
            .all(|x| x.iter().map(|c| c.data.len()).sum::<usize>() <= *MAX_XORB_BYTES));
        let per_file: Vec<u64> = plans
            .iter()
            .map(|p| p.segments.iter().map(|s| s.3).sum())
            .collect();
        assert_eq!(per_file, [40 << 20; 3]);
        assert_eq!(plans[1].segments.len(), 2);
        assert_eq!(
            plans[1].segments[1],
            (1, 0, plans[1].segments[1].2, plans[1].segments[1].3)
        );
    }
}
