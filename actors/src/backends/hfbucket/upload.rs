//! Direct Xet stores: kvtier cuts, hashes and packs the chunks itself and sends xorbs and one
//! shard per commit to the CAS itself (`xet_store_path = "direct"`).
//!
//! hf-xet's upload commit runs every object through Xet's content-defined chunker (a rolling
//! gear hash over every byte), its deduplication, and a session of its own per commit (with
//! an HTTP client built each time), and serializes every xorb into a buffer of its own. KV
//! chunks are unique by construction and never shifted, so none of that buys anything. This
//! module keeps the Xet format and the CAS protocol and drops the rest:
//!
//! 1. each object is cut into chunks ([`XetChunking`]: Xet's own content-defined chunker, or
//!    fixed 64 KiB pieces, which skip the rolling hash), as slices of the caller's [`Bytes`];
//! 2. chunk hashes (BLAKE3, Xet's keyed variant) and the file hash come from
//!    xet-core-structures, the same code hf-xet runs;
//! 3. chunks are packed in order into xorbs of at most 64 MiB / 8 192 chunks; an uncompressed
//!    xorb (`xet_compression = "none"`, the default) is sent as its chunks' 8-byte headers
//!    (xet-core-structures' chunk header) interleaved with slices of the caller's memory, a
//!    compressed one is serialized by xet-core-structures;
//! 4. each xorb goes through the CAS's upload grants (a grant for its length and CRC-64/NVME,
//!    the upload to the grant's URL with exactly the grant's headers, the commit), or is
//!    posted to the CAS when it offers no grants (or refused them three times), as xet-client
//!    does; requests go through the adapter's Hub client and its retry policy, two xorbs of a
//!    commit at a time on threads of the commit's own;
//! 5. after every xorb has landed, one shard describes every object's segments (with
//!    verification hashes) and every xorb's chunks, and is posted last, as hf-xet does.
//!
//! Invariants: an object's Xet hash depends only on its chunks, so with `cdc` chunking it is
//! exactly the hash hf-xet computes for the same bytes (a test holds this); with `fixed`
//! chunking the hash differs but every reader (hf_xet, `huggingface_hub`, LMCache, kvtier's
//! own) reconstructs the bytes, since readers follow the shard's chunk ranges and never
//! re-chunk; the bytes sent are exactly xet-core-structures' serialization of the xorb without
//! footer (the CAS checks the xorb hash and the grant's length and checksum); the shard goes up
//! only after all its xorbs did, so the CAS never holds a file whose bytes it lacks; an
//! uncompressed store copies no byte of the caller's memory on its way to the socket (the HTTP
//! client's write buffer aside), and a compressed one holds at most two serialized xorbs
//! (128 MiB) per commit at a time, whatever the batch.

use bytes::Bytes;
use xet_core_structures::merklehash::{file_hash, MerkleHash};
use xet_core_structures::metadata_shard::chunk_verification::range_hash_from_chunks;
use xet_core_structures::metadata_shard::file_structs::{
    FileDataSequenceEntry, FileDataSequenceHeader, FileVerificationEntry, MDBFileInfo,
};
use xet_core_structures::metadata_shard::shard_in_memory::MDBInMemoryShard;
use xet_core_structures::xorb_object::constants::{MAX_XORB_BYTES, MAX_XORB_CHUNKS};
use xet_core_structures::xorb_object::{
    write_chunk_header, Chunk, CompressionScheme, RawXorbData, SerializedXorbObject,
    XorbChunkHeader, XORB_CHUNK_HEADER_LENGTH,
};

use super::config::XetChunking;
use super::hub::{unix_now, GrantAnswer, HubClient, XetToken};
use super::xet::{CommitCounts, Committed, Uploaded, WriteSettings};
use crate::storage::BackendError;

/// The operation errors are reported under.
const OP: &str = "xet direct store";

/// Size of a `fixed` chunk: Xet's target chunk size, half its largest.
pub(super) const FIXED_CHUNK: usize = 64 << 10;

/// The CAS prefix of xorbs (Xet's `default_prefix`).
const PREFIX: &str = "default";

/// Xorbs of one commit uploading at once (each on a thread of the commit's own).
const XORBS_IN_FLIGHT: usize = 2;

/// How often the `auto` compression policy re-tests its choice (chunks), as hf-xet's default.
const COMPRESSION_RETEST_INTERVAL: usize = 32;

fn err(e: impl std::fmt::Display) -> BackendError {
    BackendError::io(OP, e)
}

/// Cuts `data` into chunks (slices of it, hashed), the way `chunking` says.
pub(super) fn chunk(data: &Bytes, chunking: XetChunking) -> Vec<Chunk> {
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

/// Attempts at a xorb through upload grants (a grant refused or not found by the commit asks
/// for a new one) before the xorb is posted to the CAS itself, as xet-client does.
const GRANT_ATTEMPTS: usize = 3;

/// A write token is replaced before a CAS request when it has less than this left (seconds),
/// or half its lifetime if that is shorter: more than any one request takes.
const TOKEN_LEFT: u64 = 30;

/// A commit's write token: the store's, replaced from the Hub before a CAS request when it
/// runs low (a long commit, or a Hub of short-lived tokens). Each upload lane holds its own
/// copy (no lock).
#[derive(Clone)]
struct Token(XetToken);

impl Token {
    fn get(&mut self, hub: &HubClient) -> Result<&XetToken, BackendError> {
        let lifetime = self.0.exp.saturating_sub(self.0.fetched);
        if !self.0.lasts(unix_now(), TOKEN_LEFT.min(lifetime / 2)) {
            self.0 = hub.xet_write_token()?;
        }
        Ok(&self.0)
    }
}

/// A xorb's serialized bytes as pieces sent in order, and their CRC-64/NVME (which the upload
/// grant carries). Uncompressed, the pieces are each chunk's 8-byte header and the chunk
/// itself, a slice of the caller's memory: nothing is copied before the socket. Compressed,
/// xet-core-structures serializes the xorb into one buffer.
fn xorb_body(
    raw: RawXorbData,
    scheme: CompressionScheme,
) -> Result<(Vec<Bytes>, u64, u64), BackendError> {
    let pieces = if scheme == CompressionScheme::None {
        let mut headers = Vec::with_capacity(raw.data.len() * XORB_CHUNK_HEADER_LENGTH);
        for c in &raw.data {
            let len = u32::try_from(c.len()).map_err(err)?;
            let h = XorbChunkHeader::new(CompressionScheme::None, len, len);
            write_chunk_header(&mut headers, &h).map_err(err)?;
        }
        let headers = Bytes::from(headers);
        let mut pieces = Vec::with_capacity(2 * raw.data.len());
        for (i, c) in raw.data.into_iter().enumerate() {
            let at = i * XORB_CHUNK_HEADER_LENGTH;
            pieces.push(headers.slice(at..at + XORB_CHUNK_HEADER_LENGTH));
            pieces.push(c);
        }
        pieces
    } else {
        let x = SerializedXorbObject::from_xorb_with_compression(
            raw,
            scheme,
            false,
            COMPRESSION_RETEST_INTERVAL,
        )
        .map_err(err)?;
        vec![Bytes::from(x.serialized_data)]
    };
    let mut crc = crc_fast::Digest::new(crc_fast::CrcAlgorithm::Crc64Nvme);
    let mut len = 0u64;
    for p in &pieces {
        crc.update(p);
        len += p.len() as u64;
    }
    Ok((pieces, len, crc.finalize()))
}

/// Stores one xorb in the CAS: through upload grants when the CAS offers them (grant, upload
/// to the grant's URL, commit), else posted to the CAS. Counts the bytes sent (none when the
/// CAS held it already) and whether it was posted.
fn send_xorb(
    hub: &HubClient,
    token: &mut Token,
    raw: RawXorbData,
    scheme: CompressionScheme,
) -> Result<CommitCounts, BackendError> {
    let key = format!("{PREFIX}/{}", raw.hash().hex());
    let (pieces, len, crc) = xorb_body(raw, scheme)?;
    let mut sent = CommitCounts::default();
    for _ in 0..GRANT_ATTEMPTS {
        match hub.xet_xorb_grant(token.get(hub)?, &key, len, crc)? {
            GrantAnswer::Exists => return Ok(sent),
            GrantAnswer::NotOffered => break,
            GrantAnswer::Granted(grant) => {
                if !hub.xet_grant_upload(&grant, &pieces)? {
                    continue;
                }
                sent.xorb_bytes += len;
                if hub.xet_xorb_commit(token.get(hub)?, &key, &grant.id)? {
                    return Ok(sent);
                }
            }
        }
    }
    hub.xet_post_xorb(token.get(hub)?, &key, &pieces)?;
    sent.xorb_bytes += len;
    sent.xorbs_posted += 1;
    Ok(sent)
}

/// Sends `raws` one after the other on the calling thread, adding up what they sent.
fn send_lane(
    hub: &HubClient,
    mut token: Token,
    raws: Vec<RawXorbData>,
    scheme: CompressionScheme,
) -> Result<CommitCounts, BackendError> {
    let mut sent = CommitCounts::default();
    for raw in raws {
        sent += send_xorb(hub, &mut token, raw, scheme)?;
    }
    Ok(sent)
}

/// Uploads with kvtier's own chunking and packing, speaking the CAS's write routes itself
/// through the adapter's Hub client (its connections and retry policy) on the calling worker
/// thread: no runtime, no session, nothing held between commits.
#[derive(Debug)]
pub(super) struct DirectWriter {
    chunking: XetChunking,
    /// The xorb compression scheme (`auto`: chosen per object by xet-core-structures).
    scheme: CompressionScheme,
}

impl DirectWriter {
    /// A writer with these settings (no I/O).
    pub(super) fn open(settings: &WriteSettings) -> Result<Self, BackendError> {
        Ok(Self {
            chunking: settings.chunking,
            scheme: settings.compression.parse().map_err(err)?,
        })
    }

    /// Uploads every object in one commit (xorbs, then one shard) with `token` (replaced from
    /// the Hub if it runs low); results keep input order. A failure fails every object.
    pub(super) fn upload(
        &self,
        hub: &HubClient,
        token: &XetToken,
        objects: &[(String, Bytes)],
    ) -> Result<Committed, BackendError> {
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
        // The xorbs go up in `XORBS_IN_FLIGHT` lanes (xorb i in lane i mod lanes), each on a
        // thread of its own for the commit, then the shard.
        let mut token = Token(token.clone());
        let lanes = raws.len().min(XORBS_IN_FLIGHT);
        let mut sent = if lanes <= 1 {
            send_lane(hub, token.clone(), raws, self.scheme)?
        } else {
            let mut by_lane: Vec<Vec<RawXorbData>> = (0..lanes).map(|_| Vec::new()).collect();
            for (i, raw) in raws.into_iter().enumerate() {
                by_lane[i % lanes].push(raw);
            }
            std::thread::scope(|s| {
                let running: Vec<_> = by_lane
                    .into_iter()
                    .map(|lane| {
                        let t = token.clone();
                        s.spawn(move || send_lane(hub, t, lane, self.scheme))
                    })
                    .collect();
                let mut sent = CommitCounts::default();
                for lane in running {
                    sent += lane
                        .join()
                        .unwrap_or_else(|_| Err(err("an upload lane panicked")))?;
                }
                Ok::<_, BackendError>(sent)
            })?
        };
        hub.xet_post_shard(token.get(hub)?, shard)?;
        sent.new_bytes = new_bytes;
        Ok(Committed {
            files,
            counts: sent,
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
