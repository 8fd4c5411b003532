//! Direct Xet loads: an object's reconstruction, fetched from the CAS and decoded in place in
//! the caller's buffer (`xet_load_path = "direct"`, the default).
//!
//! hf-xet's download stream decodes each term of a file into a new buffer the size of the term
//! (for a KV chunk, the whole object: a fresh `mmap` and its page faults on every load), copies
//! every chunk twice on the way, and hands the result out as `Bytes` that the adapter copies
//! once more. This module speaks the Xet protocol's first reconstruction version, which every
//! CAS serves (hf-xet falls back to it too):
//!
//! 1. `GET {cas}/v1/reconstructions/{hash}` with the read token: the file's terms (a chunk
//!    range of one xorb each, in file order) and, per xorb, fetch URLs with byte ranges;
//! 2. per term, a `Range` GET of the fetch entry that covers its chunks;
//! 3. the chunks of the body are decoded one by one into their place in the caller's buffer:
//!    an uncompressed chunk (kvtier's default `xet_compression = "none"`) is read from the
//!    response straight into place; LZ4 and BG4-LZ4 chunks (`huggingface_hub`'s and LMCache's
//!    writes) are decoded by xet-core-structures into place.
//!
//! Invariants: nothing is written outside `buf`, and nothing at all when the terms' lengths do
//! not add up to `buf.len()`; a load is a hit only when the terms decoded to exactly
//! `buf.len()` bytes, each term to its declared length and each chunk to its header's; every
//! other outcome is an error, and the adapter then falls back to `resolve` (which decides
//! between hit, size mismatch and absent). Requests go through the Hub client, so they share
//! its connection pool and its retry policy.

use std::io::{BufRead, BufReader, Cursor, Read};

use xet_client::cas_types::{QueryReconstructionResponse, XorbReconstructionTerm};
use xet_core_structures::xorb_object::{deserialize_chunk_header, CompressionScheme};

use xet_core_structures::merklehash::{compute_data_hash, file_hash, MerkleHash};

use super::hub::{HubClient, XetToken};
use crate::storage::{BackendError, ErrorKind};

/// The operation errors are reported under.
const OP: &str = "xet direct load";

/// Buffer of the response reader: chunk headers come from it, and uncompressed chunks larger
/// than it are read from the connection straight into place.
const READ_BUFFER: usize = 16 << 10;

fn malformed(hash: &str, what: impl std::fmt::Display) -> BackendError {
    BackendError::io(OP, format!("Xet file {hash}: {what}"))
}

/// Loads the Xet file `hash` into `buf`, whose length is the file's size as the Hub reports
/// it. Errors when the reconstruction does not decode to exactly that many bytes, and, with
/// `verify`, when the decoded chunks' Merkle file hash (each chunk's BLAKE3 data hash, as
/// Xet computes it on upload) is not `hash`: what the CAS sent is then not what was stored.
pub(super) fn read_direct(
    hub: &HubClient,
    token: &XetToken,
    hash: &str,
    buf: &mut [u8],
    verify: bool,
) -> Result<(), BackendError> {
    let recon = hub.xet_reconstruction(token, hash)?;
    if recon.offset_into_first_range != 0 {
        // Only ranged reconstructions start inside their first term; this one asked for the
        // whole file.
        return Err(malformed(
            hash,
            format_args!(
                "the reconstruction starts {} bytes into its first term",
                recon.offset_into_first_range
            ),
        ));
    }
    // The terms give the file's size: check it before a byte moves, so that a file whose
    // size is not the buffer's (a stale hash, a Hub that disagrees with its CAS) is never
    // partly copied.
    let total: u64 = recon
        .terms
        .iter()
        .map(|t| u64::from(t.unpacked_length))
        .sum();
    if total != buf.len() as u64 {
        return Err(malformed(
            hash,
            format_args!("it holds {total} bytes, not the {} expected", buf.len()),
        ));
    }
    // The terms tile `buf` exactly (their lengths add up to it).
    let mut off = 0usize;
    let mut chunks = verify.then(Vec::new);
    for term in &recon.terms {
        let len = term.unpacked_length as usize;
        read_term(hub, &recon, term, &mut buf[off..off + len], chunks.as_mut()).map_err(
            |e| match e {
                TermError::Backend(e) => e,
                TermError::Format(what) => malformed(hash, what),
            },
        )?;
        off += len;
    }
    if let Some(chunks) = chunks {
        let got = file_hash(&chunks).hex();
        if got != hash {
            return Err(BackendError::new(
                ErrorKind::Corrupt,
                OP,
                format!("Xet file {hash}: the loaded bytes hash to {got}"),
            ));
        }
    }
    Ok(())
}

/// Why a term could not be read.
enum TermError {
    /// The request failed.
    Backend(BackendError),
    /// The reconstruction or the xorb bytes are not what the protocol says.
    Format(String),
}

impl From<std::io::Error> for TermError {
    fn from(e: std::io::Error) -> Self {
        Self::Format(format!("reading a xorb range: {e}"))
    }
}

impl From<xet_core_structures::error::CoreError> for TermError {
    fn from(e: xet_core_structures::error::CoreError) -> Self {
        Self::Format(format!("decoding a chunk: {e}"))
    }
}

/// Fetches the xorb range that covers `term` and decodes the term's chunks into `dest`
/// (exactly the term's length).
fn read_term(
    hub: &HubClient,
    recon: &QueryReconstructionResponse,
    term: &XorbReconstructionTerm,
    dest: &mut [u8],
    mut chunks: Option<&mut Vec<(MerkleHash, u64)>>,
) -> Result<(), TermError> {
    let fetch = recon
        .fetch_info
        .get(&term.hash)
        .and_then(|infos| {
            infos
                .iter()
                .find(|f| f.range.start <= term.range.start && term.range.end <= f.range.end)
        })
        .ok_or_else(|| {
            TermError::Format(format!(
                "no fetch entry covers chunks {}..{} of xorb {}",
                term.range.start,
                term.range.end,
                term.hash.0.hex()
            ))
        })?;
    let mut response = hub
        .xet_range(&fetch.url, &fetch.url_range)
        .map_err(TermError::Backend)?;
    let body = response
        .body_mut()
        .with_config()
        .limit(fetch.url_range.length())
        .reader();
    let mut reader = BufReader::with_capacity(READ_BUFFER, body);
    for _ in fetch.range.start..term.range.start {
        skip_chunk(&mut reader)?;
    }
    let mut at = 0usize;
    for _ in term.range.start..term.range.end {
        let n = decode_chunk(&mut reader, &mut dest[at..])?;
        if let Some(chunks) = chunks.as_deref_mut() {
            chunks.push((compute_data_hash(&dest[at..at + n]), n as u64));
        }
        at += n;
    }
    if at != dest.len() {
        return Err(TermError::Format(format!(
            "a term of {} bytes decoded to {at}",
            dest.len()
        )));
    }
    Ok(())
}

/// Reads past one chunk.
fn skip_chunk(reader: &mut impl BufRead) -> Result<(), TermError> {
    let header = deserialize_chunk_header(reader)?;
    let len = u64::from(header.get_compressed_length());
    let skipped = std::io::copy(&mut reader.take(len), &mut std::io::sink())?;
    if skipped != len {
        return Err(TermError::Format(
            "a xorb range ended inside a chunk".into(),
        ));
    }
    Ok(())
}

/// Decodes one chunk into the start of `dest`; returns its length.
fn decode_chunk(reader: &mut impl BufRead, dest: &mut [u8]) -> Result<usize, TermError> {
    let header = deserialize_chunk_header(reader)?;
    let len = header.get_uncompressed_length() as usize;
    let compressed = header.get_compressed_length();
    let Some(slot) = dest.get_mut(..len) else {
        return Err(TermError::Format(format!(
            "a chunk of {len} bytes overruns its term ({} bytes left)",
            dest.len()
        )));
    };
    match header.get_compression_scheme()? {
        CompressionScheme::None => {
            if compressed as usize != len {
                return Err(TermError::Format(format!(
                    "an uncompressed chunk declares {compressed} stored bytes for {len}"
                )));
            }
            reader.read_exact(slot)?;
        }
        scheme => {
            let mut out = Cursor::new(&mut *slot);
            let n = scheme.decompress_from_reader(&mut reader.take(compressed.into()), &mut out)?;
            if n != len as u64 {
                return Err(TermError::Format(format!(
                    "a chunk decoded to {n} bytes, its header says {len}"
                )));
            }
        }
    }
    Ok(len)
}

#[cfg(test)]
mod tests {
    use super::*;
    use xet_core_structures::xorb_object::serialize_chunk;

    /// Serialises `chunks` as a xorb range would hold them, each under `scheme`.
    fn range_of(chunks: &[Vec<u8>], scheme: CompressionScheme) -> Vec<u8> {
        let mut out = Vec::new();
        for c in chunks {
            serialize_chunk(c, &mut out, scheme).unwrap();
        }
        out
    }

    fn chunks() -> Vec<Vec<u8>> {
        // Float-like data (compressible by both LZ4 schemes) and incompressible bytes.
        let floats: Vec<u8> = (0..4096u32)
            .flat_map(|i| (i as f32 * 0.25).to_le_bytes())
            .collect();
        let noise: Vec<u8> = (0..9000u32)
            .map(|i| (i.wrapping_mul(2_654_435_761) >> 13) as u8)
            .collect();
        vec![floats, noise, vec![7u8; 100]]
    }

    #[test]
    fn every_scheme_decodes_in_place() {
        let chunks = chunks();
        let want: Vec<u8> = chunks.concat();
        for scheme in [
            CompressionScheme::None,
            CompressionScheme::LZ4,
            CompressionScheme::ByteGrouping4LZ4,
        ] {
            let bytes = range_of(&chunks, scheme);
            let mut reader = BufReader::with_capacity(64, Cursor::new(bytes));
            let mut got = vec![0u8; want.len()];
            let mut at = 0;
            for _ in 0..chunks.len() {
                at += decode_chunk(&mut reader, &mut got[at..]).ok().unwrap();
            }
            assert_eq!(at, want.len(), "{scheme:?}");
            assert!(got == want, "{scheme:?}: decoded bytes differ");
        }
    }

    #[test]
    fn skipped_chunks_leave_the_reader_at_the_next_one() {
        let chunks = chunks();
        let bytes = range_of(&chunks, CompressionScheme::LZ4);
        let mut reader = BufReader::new(Cursor::new(bytes));
        skip_chunk(&mut reader).ok().unwrap();
        let mut got = vec![0u8; chunks[1].len()];
        assert_eq!(
            decode_chunk(&mut reader, &mut got).ok().unwrap(),
            chunks[1].len()
        );
        assert!(got == chunks[1]);
    }

    #[test]
    fn a_chunk_longer_than_its_place_is_refused_without_writing() {
        let chunks = chunks();
        let bytes = range_of(&chunks[..1], CompressionScheme::None);
        let mut reader = BufReader::new(Cursor::new(bytes));
        let mut got = vec![0u8; chunks[0].len() - 1];
        let err = decode_chunk(&mut reader, &mut got).err().unwrap();
        assert!(matches!(err, TermError::Format(m) if m.contains("overruns")));
        assert!(got.iter().all(|&b| b == 0));
    }

    #[test]
    fn a_truncated_range_is_an_error() {
        let chunks = chunks();
        let mut bytes = range_of(&chunks[..1], CompressionScheme::None);
        bytes.truncate(bytes.len() - 10);
        let mut reader = BufReader::new(Cursor::new(bytes));
        let mut got = vec![0u8; chunks[0].len()];
        assert!(matches!(
            decode_chunk(&mut reader, &mut got),
            Err(TermError::Format(_))
        ));
    }

    /// The check `xet_verify_loads` makes: chunk data hashes folded into the file hash equal
    /// the hash kvtier's writer registers for the same chunks, and one changed byte changes it.
    #[test]
    fn verified_loads_hash_like_the_writer() {
        let data: Vec<u8> = (0..200_000u32).map(|i| (i * 7 % 251) as u8).collect();
        let cut = |d: &[u8]| -> Vec<(MerkleHash, u64)> {
            d.chunks(64 << 10)
                .map(|c| (compute_data_hash(c), c.len() as u64))
                .collect()
        };
        let stored = file_hash(&cut(&data)).hex();
        assert_eq!(file_hash(&cut(&data)).hex(), stored);
        let mut bad = data.clone();
        bad[100_000] ^= 1;
        assert_ne!(file_hash(&cut(&bad)).hex(), stored);
    }

    /// The cost of `xet_verify_loads` on this machine: BLAKE3 chunk hashes over 64 KiB chunks
    /// and the file hash, in GB/s on one core. Run in release:
    /// `cargo test --release -p kvtier-actors --lib -- --ignored xet_verify_cost --nocapture`.
    #[test]
    #[ignore = "a measurement, not a check"]
    fn xet_verify_cost() {
        let data: Vec<u8> = (0..(4u32 << 20)).map(|i| (i * 7 % 251) as u8).collect();
        let rounds = 64;
        let t = std::time::Instant::now();
        let mut last = String::new();
        for _ in 0..rounds {
            let chunks: Vec<(MerkleHash, u64)> = data
                .chunks(64 << 10)
                .map(|c| (compute_data_hash(c), c.len() as u64))
                .collect();
            last = file_hash(&chunks).hex();
        }
        let secs = t.elapsed().as_secs_f64();
        let gb = (rounds * data.len()) as f64 / 1e9;
        eprintln!(
            "xet_verify_loads: {:.2} GB/s on one core ({last})",
            gb / secs
        );
    }
}
