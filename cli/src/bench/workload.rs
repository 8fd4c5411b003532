//! The bench's data: [`Workload`], the keys and payloads of N chunks, and [`Arena`], the host
//! memory of `--host-arena` mode.
//!
//! Invariants: chunk `i`'s key and payload are functions of the run's nonce and `i` alone, so a
//! payload can be regenerated for verification instead of kept (streaming mode), and two runs
//! (or the raw baseline, with another nonce) never share an object. Keys spread over three
//! models, four KV ranks and three cache salts (one of them: no salt). Payloads are random bytes:
//! Garage deduplicates identical blocks, which would flatter the store phase.

use bytes::Bytes;
use kvtier_actors::{HostRegion, LoadBuf, ObjectKey};
use rand::{RngCore, SeedableRng};

use super::args::BenchOptions;

const MODELS: [&str; 3] = ["llama-3.1-8b", "mistral-7b", "qwen2.5-72b"];
const SALTS: [Option<&str>; 3] = [None, Some("tenant-a"), Some("tenant-b")];
const RANKS: u32 = 4;

/// N chunks of the bench: keys, and payloads pre-generated or generated on demand.
pub(crate) struct Workload {
    pub(crate) keys: Vec<ObjectKey>,
    /// Pre-generated payloads; empty in streaming mode, where each is generated when needed.
    payloads: Vec<Bytes>,
    start: usize,
    pub(crate) size: usize,
    nonce: u64,
}

impl Workload {
    pub(crate) fn new(start: usize, n: usize, size: usize, nonce: u64, eager: bool) -> Self {
        let keys = (start..start + n)
            .map(|i| {
                let mut hash = Vec::with_capacity(16);
                hash.extend_from_slice(&nonce.to_be_bytes());
                hash.extend_from_slice(&(i as u64).to_be_bytes());
                let key = ObjectKey::new(MODELS[i % MODELS.len()], (i as u32 / 3) % RANKS, hash)
                    .expect("bench keys are valid");
                match SALTS[(i / 12) % SALTS.len()] {
                    Some(salt) => key.with_salt(salt).expect("bench salts are valid"),
                    None => key,
                }
            })
            .collect();
        let mut w = Self {
            keys,
            payloads: Vec::new(),
            start,
            size,
            nonce,
        };
        if eager {
            w.payloads = (start..start + n).map(|i| w.generate(i)).collect();
        }
        w
    }

    /// Distinct random bytes for chunk `i` (Garage deduplicates identical blocks).
    fn generate(&self, i: usize) -> Bytes {
        let mut rng = rand::rngs::SmallRng::seed_from_u64(
            self.nonce ^ (i as u64).wrapping_mul(0x9E37_79B9_7F4A_7C15),
        );
        let mut data = vec![0u8; self.size];
        rng.fill_bytes(&mut data);
        Bytes::from(data)
    }

    /// Whether `buf` holds chunk `j`'s payload (0-based, like `keys`), regenerated 64 KiB at a
    /// time (no chunk-sized allocation, so streaming mode's memory stays at the bytes in flight).
    pub(crate) fn matches(&self, j: usize, buf: &[u8]) -> bool {
        if let Some(b) = self.payloads.get(j) {
            return b[..] == buf[..];
        }
        let i = self.start + j;
        if buf.len() != self.size {
            return false;
        }
        let mut rng = rand::rngs::SmallRng::seed_from_u64(
            self.nonce ^ (i as u64).wrapping_mul(0x9E37_79B9_7F4A_7C15),
        );
        let mut block = [0u8; 64 * 1024];
        buf.chunks(block.len()).all(|part| {
            let want = &mut block[..part.len()];
            rng.fill_bytes(want);
            want == part
        })
    }

    /// The payload of this workload's chunk `j` (0-based, like `keys`).
    pub(crate) fn payload(&self, j: usize) -> Bytes {
        match self.payloads.get(j) {
            Some(b) => b.clone(),
            None => self.generate(self.start + j),
        }
    }
}

/// The host's own KV memory in `--host-arena` mode: one allocation, pre-faulted, carved into
/// chunk-sized regions (chunk `i` at `i × chunk_size`), filled with the workload's payloads.
pub(super) struct Arena {
    /// Every chunk, back to back.
    pub(super) mem: Vec<u8>,
    chunk: usize,
}

impl Arena {
    /// The arena of `opts.chunks` chunks, filled with `work`'s payloads.
    pub(super) fn new(work: &Workload, opts: BenchOptions) -> Self {
        let mut mem = vec![0u8; opts.chunks * opts.chunk_size];
        for (i, c) in mem.chunks_mut(opts.chunk_size).enumerate() {
            c.copy_from_slice(&work.payload(i));
        }
        Self {
            mem,
            chunk: opts.chunk_size,
        }
    }

    /// Regions of chunks `r`, as load buffers.
    pub(super) fn regions(&mut self, r: std::ops::Range<usize>) -> Vec<LoadBuf> {
        self.sources(r).into_iter().map(LoadBuf::from).collect()
    }

    /// Regions of chunks `r`.
    pub(super) fn sources(&self, r: std::ops::Range<usize>) -> Vec<HostRegion> {
        let base = self.mem.as_ptr() as *mut u8;
        r.map(|i| {
            assert!((i + 1) * self.chunk <= self.mem.len());
            // SAFETY: disjoint chunk-sized regions inside `mem`, which is neither freed nor
            // resized while the bench runs; the bench reads or writes the arena only between
            // phases, when no region is in kvtier's hands (stores wait for their release,
            // loads for their buffers).
            unsafe { HostRegion::new(base.add(i * self.chunk), self.chunk) }
        })
        .collect()
    }

    /// The chunks, to read into directly (the plain-read baseline).
    pub(super) fn chunks_mut(&mut self) -> impl Iterator<Item = &mut [u8]> {
        self.mem.chunks_mut(self.chunk)
    }
}
