//! A serving process in miniature: the host kvtier is built for, as actix actors.
//!
//! Run: `cargo run --release --example serving` (200 requests of a synthetic multi-turn trace,
//! on the embedded default: an `fs` adapter in a temporary directory), or replay a trace in
//! the Mooncake format (such as `FAST25-release/traces/synthetic_trace.jsonl` of
//! kvcache-ai/Mooncake): `cargo run --release --example serving -- TRACE.jsonl --requests
//! 1000`. `--help` lists the options.
//!
//! # Who owns what
//! * `main` owns the [`Tier`] (behind an `Rc`): it starts it, and closes it once the scheduler
//!   has reported. Workers hold only a `Weak` and borrow the tier for one request at a time.
//! * The **scheduler** actor owns the request queue (JSON lines with `hash_ids`, one id per
//!   512-token block, as the Mooncake traces; each id is one KV chunk) and the totals. It keeps
//!   every worker busy with exactly one request: when a worker answers, it gets the next one.
//! * Each **engine worker** actor owns an arena: one preallocated buffer of `--slots` fixed-size
//!   slots, the stand-in for a GPU or pinned-host KV pool. While it serves a request, chunk `i`
//!   of the request lives in slot `i`.
//!
//! # Messages
//! `main → scheduler`: [`Run`], answered with the [`Totals`]. `scheduler → worker`: [`Serve`]
//! (one request), answered with its [`Totals`]. `worker → tier`, through the `Tier` methods that
//! send them to the controller: `LookupAndLock` (the request's chunk keys), `Load` (the found
//! prefix, written in place into arena slots through `HostRegion`s), `Store` (the prefilled
//! chunks that were missing, read from the slots without a copy), `Unlock`.
//!
//! # Per request
//! Lookup-and-lock every chunk key; the hit is the longest found prefix (later chunks cannot be
//! reused without the ones before them, as in LMCache). Load the prefix into slots `0..prefix`;
//! "prefill" the rest (write the chunk's deterministic bytes, where a real engine would run the
//! model); store the chunks the lookup did not find; unlock what it locked.
//!
//! # Invariants
//! * A worker serves one request at a time ([`AtomicResponse`]): its arena moves into the
//!   request's future and back into the actor when the request is done.
//! * kvtier touches arena memory only while `Tier::load` or `Tier::store_from` is awaited: both
//!   return once kvtier holds no reference to any region (see `kvtier::actors::buffer`).
//! * A chunk's bytes are a function of its id alone. Two workers that miss the same chunk at
//!   once store the same bytes, and every loaded byte can be checked: before a load the slot is
//!   filled with the complement of the expected bytes, so a byte the load did not write counts
//!   as wrong. The example exits with status 1 on any wrong byte, error or unserved request.
//!
//! Every actor here runs on the `System`'s arbiter, with the tier's controller; the backends
//! run on arbiters of their own. An engine that computes on this thread would start each worker
//! on an `Arbiter` of its own and share the tier through an `Arc`.

use std::collections::VecDeque;
use std::io::BufRead;
use std::path::PathBuf;
use std::rc::{Rc, Weak};
use std::time::Instant;

use actix::prelude::*;
use clap::Parser;
use kvtier::{AdapterConfig, EvictionConfig, HostRegion, ObjectKey, Tier, TierConfig};

/// Options of the example.
#[derive(Debug, Parser)]
#[command(about = "A scheduler and engine workers that keep their KV cache in kvtier")]
struct Args {
    /// A Mooncake-format trace (JSON lines with `hash_ids`); default: a synthetic trace.
    trace: Option<PathBuf>,
    /// Requests to serve (the first N of the trace).
    #[arg(long, default_value_t = 200)]
    requests: usize,
    /// Engine workers.
    #[arg(long, default_value_t = 4)]
    workers: usize,
    /// Arena slots per worker: the most chunks of a request a worker holds (longer requests
    /// are served up to the arena's size).
    #[arg(long, default_value_t = 512)]
    slots: usize,
    /// Bytes per chunk, in KiB.
    #[arg(long, default_value_t = 16)]
    chunk_kib: usize,
    /// Directory of the `fs` adapter (default: a temporary directory). A second run on the same
    /// directory finds the first run's chunks.
    #[arg(long)]
    dir: Option<PathBuf>,
    /// Capacity of the adapter in MiB, with LRU eviction (default 0: no capacity, no eviction).
    #[arg(long, default_value_t = 0)]
    capacity_mib: u64,
}

/// One request: its prompt's chunk ids, in order (other fields of a trace line are ignored).
#[derive(Debug, Clone, serde::Deserialize)]
struct Request {
    hash_ids: Vec<u64>,
}

/// Counts of served requests; the scheduler sums the workers' answers.
#[derive(Debug, Default, Clone)]
struct Totals {
    requests: u64,
    /// Chunks looked up.
    chunks: u64,
    /// Chunks found by the lookup (anywhere in the request).
    found: u64,
    /// Chunks of the found prefixes that loaded: the hits.
    loaded: u64,
    loaded_bytes: u64,
    /// Chunks prefilled (everything after the prefix, and prefix chunks that did not load).
    prefilled: u64,
    /// Chunks stored (the ones the lookup did not find).
    stored: u64,
    stored_bytes: u64,
    /// Loaded bytes that differ from the chunk's bytes.
    wrong_bytes: u64,
    /// Chunks beyond a worker's arena, not served.
    truncated: u64,
    /// Failed lookups, loads of locked chunks, and stores.
    errors: u64,
    /// Requests served, per worker.
    per_worker: Vec<u64>,
}

impl Totals {
    fn add(&mut self, worker: usize, t: &Totals) {
        self.requests += t.requests;
        self.chunks += t.chunks;
        self.found += t.found;
        self.loaded += t.loaded;
        self.loaded_bytes += t.loaded_bytes;
        self.prefilled += t.prefilled;
        self.stored += t.stored;
        self.stored_bytes += t.stored_bytes;
        self.wrong_bytes += t.wrong_bytes;
        self.truncated += t.truncated;
        self.errors += t.errors;
        if self.per_worker.len() <= worker {
            self.per_worker.resize(worker + 1, 0);
        }
        self.per_worker[worker] += t.requests;
    }
}

// ---- The engine worker ---------------------------------------------------------------------

/// A worker's KV memory: one allocation of fixed-size slots, made once.
struct Arena {
    mem: Box<[u8]>,
    slot_bytes: usize,
}

impl Arena {
    fn new(slots: usize, slot_bytes: usize) -> Self {
        Self {
            mem: vec![0u8; slots * slot_bytes].into_boxed_slice(),
            slot_bytes,
        }
    }

    fn slots(&self) -> usize {
        self.mem.len() / self.slot_bytes
    }

    fn slot(&self, i: usize) -> &[u8] {
        &self.mem[i * self.slot_bytes..][..self.slot_bytes]
    }

    fn slot_mut(&mut self, i: usize) -> &mut [u8] {
        &mut self.mem[i * self.slot_bytes..][..self.slot_bytes]
    }

    /// Handles to distinct slots, for kvtier to load into or store from in place. Taking
    /// `&mut self` ends every slice borrowed from the arena; the caller must not read or write
    /// these slots until the tier call they are passed to has returned.
    fn regions(&mut self, slots: impl IntoIterator<Item = usize>) -> Vec<HostRegion> {
        let base = self.mem.as_mut_ptr();
        slots
            .into_iter()
            .map(|i| {
                assert!((i + 1) * self.slot_bytes <= self.mem.len(), "slot {i}");
                // SAFETY: distinct slot-sized regions inside `mem`, which is neither freed nor
                // resized while a request is served (the arena lives in the request's future);
                // the worker does not touch these slots until `Tier::load` / `Tier::store_from`
                // returns, and both return once kvtier holds no reference to them.
                unsafe { HostRegion::new(base.add(i * self.slot_bytes), self.slot_bytes) }
            })
            .collect()
    }
}

/// `scheduler → worker`: serve this request. The answer counts what it did.
#[derive(Message)]
#[rtype(result = "Totals")]
struct Serve(Request);

/// An engine worker: serves one request at a time with its own arena.
struct Worker {
    tier: Weak<Tier>,
    /// `None` only while a request is being served (the arena travels with it).
    arena: Option<Arena>,
}

impl Actor for Worker {
    type Context = Context<Self>;
}

impl Handler<Serve> for Worker {
    // Atomic: the worker takes no other message until this request is done, so one arena is
    // enough and is never in two requests at once.
    type Result = AtomicResponse<Self, Totals>;

    fn handle(&mut self, Serve(request): Serve, _: &mut Context<Self>) -> Self::Result {
        let mut arena = self.arena.take().expect("one request at a time");
        let tier = self.tier.clone();
        let work = async move {
            let totals = match tier.upgrade() {
                Some(tier) => serve(&tier, &mut arena, &request).await,
                // The host closed the tier: nothing to serve with.
                None => Totals {
                    errors: 1,
                    ..Totals::default()
                },
            };
            (arena, totals)
        };
        AtomicResponse::new(Box::pin(work.into_actor(self).map(
            |(arena, totals), worker, _| {
                worker.arena = Some(arena);
                totals
            },
        )))
    }
}

/// One request, as an engine drives the tier: lookup-and-lock, load the prefix, prefill the
/// rest, store what was missing, unlock.
async fn serve(tier: &Tier, arena: &mut Arena, request: &Request) -> Totals {
    let ids = &request.hash_ids[..request.hash_ids.len().min(arena.slots())];
    let size = arena.slot_bytes as u64;
    let mut t = Totals {
        requests: 1,
        chunks: ids.len() as u64,
        truncated: (request.hash_ids.len() - ids.len()) as u64,
        ..Totals::default()
    };
    let keys: Vec<ObjectKey> = ids.iter().map(|id| chunk_key(*id)).collect();

    // 1. Lookup and lock: found chunks cannot be evicted until we unlock them.
    let Ok(found) = tier.lookup_and_lock(keys.clone()).await else {
        t.errors += 1;
        return t;
    };
    t.found = found.count_ones() as u64;
    let prefix = found.iter().take_while(|f| *f).count();

    // 2. Load the prefix into slots 0..prefix, in place. Each slot first holds the complement
    //    of the chunk's bytes, so any byte the load did not write shows up as wrong.
    let mut ready = vec![false; ids.len()];
    if prefix > 0 {
        for (i, id) in ids[..prefix].iter().enumerate() {
            fill(arena.slot_mut(i), *id, true);
        }
        let regions = arena.regions(0..prefix);
        // The report's buffers are the regions' handles, dropped here: once `load` has
        // returned, kvtier holds none of them and the slots are the worker's to read again.
        let hits = tier.load(keys[..prefix].to_vec(), regions).await.hits;
        for (i, id) in ids[..prefix].iter().enumerate() {
            if hits.get(i) {
                ready[i] = true;
                t.loaded += 1;
                t.wrong_bytes += wrong_bytes(arena.slot(i), *id);
            } else {
                t.errors += 1; // locked, yet it did not load
            }
        }
        t.loaded_bytes = t.loaded * size;
    }

    // 3. Prefill every chunk that did not load.
    for (i, id) in ids.iter().enumerate().filter(|(i, _)| !ready[*i]) {
        fill(arena.slot_mut(i), *id, false);
        t.prefilled += 1;
    }

    // 4. Store the chunks the lookup did not find, straight from their slots.
    let missing: Vec<usize> = (0..ids.len()).filter(|i| !found.get(*i)).collect();
    if !missing.is_empty() {
        let keys_missing = missing.iter().map(|i| keys[*i].clone()).collect();
        match tier
            .store_from(keys_missing, arena.regions(missing.iter().copied()))
            .await
        {
            Ok(report) => {
                let failed = report
                    .adapters
                    .iter()
                    .map(|(_, o)| o.failed.len() as u64)
                    .max()
                    .unwrap_or(0);
                t.errors += failed;
                t.stored = missing.len() as u64 - failed;
                t.stored_bytes = t.stored * size;
            }
            Err(_) => t.errors += missing.len() as u64,
        }
    }

    // 5. Unlock what the lookup locked.
    let locked = keys
        .into_iter()
        .zip(found.iter())
        .filter(|(_, f)| *f)
        .map(|(k, _)| k)
        .collect();
    tier.unlock(locked);
    t
}

/// The object key of chunk `id`. Every worker uses the same keys: a prefix one worker stored
/// is a hit for all.
fn chunk_key(id: u64) -> ObjectKey {
    ObjectKey::new("serving-example", 0, id.to_be_bytes().to_vec()).expect("a valid key")
}

/// Word `j` (bytes `8j..8j + 8`) of chunk `id`: what a prefill computes for it, here
/// SplitMix64 of the id and the position.
fn chunk_word(id: u64, j: usize) -> [u8; 8] {
    let mut z = id
        .wrapping_mul(0x9E37_79B9_7F4A_7C15)
        .wrapping_add((j as u64).wrapping_mul(0xBF58_476D_1CE4_E5B9));
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    (z ^ (z >> 31)).to_le_bytes()
}

/// Writes chunk `id`'s bytes into `slot` (their complement with `inverted`).
fn fill(slot: &mut [u8], id: u64, inverted: bool) {
    let mask = if inverted { 0xFF } else { 0 };
    for (j, part) in slot.chunks_mut(8).enumerate() {
        let word = chunk_word(id, j);
        for (b, w) in part.iter_mut().zip(word) {
            *b = w ^ mask;
        }
    }
}

/// Bytes of `slot` that differ from chunk `id`'s.
fn wrong_bytes(slot: &[u8], id: u64) -> u64 {
    let mut wrong = 0;
    for (j, part) in slot.chunks(8).enumerate() {
        let word = chunk_word(id, j);
        if part != &word[..part.len()] {
            wrong += part
                .iter()
                .zip(word)
                .filter(|(got, want)| **got != *want)
                .count() as u64;
        }
    }
    wrong
}

// ---- The scheduler -------------------------------------------------------------------------

/// `main → scheduler`: serve the whole queue. The answer comes when every request is done.
#[derive(Message)]
#[rtype(result = "Totals")]
struct Run;

/// Hands requests to workers, one in flight per worker, and sums their answers.
struct Scheduler {
    workers: Vec<Addr<Worker>>,
    queue: VecDeque<Request>,
    in_flight: usize,
    totals: Totals,
    done: Option<tokio::sync::oneshot::Sender<Totals>>,
}

impl Actor for Scheduler {
    type Context = Context<Self>;
}

impl Scheduler {
    /// Gives worker `w` the next request, or, when the queue is empty and no request is in
    /// flight, answers [`Run`].
    fn dispatch(&mut self, w: usize, ctx: &mut Context<Self>) {
        let Some(request) = self.queue.pop_front() else {
            if self.in_flight == 0 {
                if let Some(done) = self.done.take() {
                    let _ = done.send(std::mem::take(&mut self.totals));
                }
            }
            return;
        };
        self.in_flight += 1;
        let served = self.workers[w].send(Serve(request));
        ctx.spawn(served.into_actor(self).map(move |answer, s, ctx| {
            s.in_flight -= 1;
            match answer {
                Ok(t) => s.totals.add(w, &t),
                Err(_) => s.totals.errors += 1, // the worker stopped
            }
            s.dispatch(w, ctx);
        }));
    }
}

impl Handler<Run> for Scheduler {
    type Result = ResponseFuture<Totals>;

    fn handle(&mut self, _: Run, ctx: &mut Context<Self>) -> Self::Result {
        let (tx, rx) = tokio::sync::oneshot::channel();
        self.done = Some(tx);
        self.totals.per_worker = vec![0; self.workers.len()];
        for w in 0..self.workers.len() {
            self.dispatch(w, ctx);
        }
        Box::pin(async move { rx.await.unwrap_or_default() })
    }
}

// ---- The trace -----------------------------------------------------------------------------

/// The first `n` requests of a Mooncake-format trace (blank lines skipped).
fn read_trace(path: &PathBuf, n: usize) -> Result<Vec<Request>, String> {
    let file = std::fs::File::open(path).map_err(|e| format!("{}: {e}", path.display()))?;
    let mut requests = Vec::new();
    for (i, line) in std::io::BufReader::new(file).lines().enumerate() {
        if requests.len() == n {
            break;
        }
        let line = line.map_err(|e| format!("{}: {e}", path.display()))?;
        if line.trim().is_empty() {
            continue;
        }
        let request = serde_json::from_str(&line)
            .map_err(|e| format!("{} line {}: {e}", path.display(), i + 1))?;
        requests.push(request);
    }
    Ok(requests)
}

/// `n` requests of a multi-turn chat: 16 conversations share a 4-chunk system prompt; each
/// request continues one conversation (its whole history is a reusable prefix) with 1 to 4
/// new chunks. A conversation past 64 chunks starts over. Deterministic (a fixed xorshift).
fn synthetic_trace(n: usize) -> Vec<Request> {
    const SYSTEM: u64 = 4;
    let mut rng = 0x2545_F491_4F6C_DD1Du64;
    let mut next = || {
        rng ^= rng << 13;
        rng ^= rng >> 7;
        rng ^= rng << 17;
        rng
    };
    let mut conversations: Vec<Vec<u64>> = vec![(0..SYSTEM).collect(); 16];
    let mut next_id = SYSTEM;
    (0..n)
        .map(|_| {
            let c = (next() % 16) as usize;
            if conversations[c].len() > 64 {
                conversations[c].truncate(SYSTEM as usize);
            }
            for _ in 0..1 + next() % 4 {
                conversations[c].push(next_id);
                next_id += 1;
            }
            Request {
                hash_ids: conversations[c].clone(),
            }
        })
        .collect()
}

// ---- The host ------------------------------------------------------------------------------

#[actix::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args = Args::parse();
    if args.workers == 0 || args.slots == 0 || args.chunk_kib == 0 {
        return Err("--workers, --slots and --chunk-kib must be > 0".into());
    }
    let chunk_bytes = args.chunk_kib * 1024;
    let (requests, source) = match &args.trace {
        Some(path) => (read_trace(path, args.requests)?, path.display().to_string()),
        None => (synthetic_trace(args.requests), "synthetic trace".to_owned()),
    };

    // The tier: the embedded default, an `fs` adapter in a temporary directory.
    let tmp = tempfile::Builder::new()
        .prefix("kvtier-serving-")
        .tempdir()?;
    let dir = args.dir.clone().unwrap_or_else(|| tmp.path().to_owned());
    let mut adapter = AdapterConfig::fs(&dir);
    if args.capacity_mib > 0 {
        adapter = adapter
            .capacity_gb(args.capacity_mib as f64 / 1024.0)
            .eviction(EvictionConfig::lru()); // watermark 0.8, ratio 0.2 of the keys
    }
    let tier = Rc::new(Tier::start(&TierConfig::default().adapter(adapter)).await?);

    // The engine: workers with their arenas, and the scheduler that feeds them.
    let workers: Vec<Addr<Worker>> = (0..args.workers)
        .map(|_| {
            Worker {
                tier: Rc::downgrade(&tier),
                arena: Some(Arena::new(args.slots, chunk_bytes)),
            }
            .start()
        })
        .collect();
    let expected = requests.len() as u64;
    let scheduler = Scheduler {
        workers,
        queue: requests.into(),
        in_flight: 0,
        totals: Totals::default(),
        done: None,
    }
    .start();

    let started = Instant::now();
    let t = scheduler.send(Run).await?;
    let elapsed = started.elapsed().as_secs_f64();

    // Every request has finished, so no worker borrows the tier any more: close it.
    let tier = Rc::try_unwrap(tier).map_err(|_| "a worker still holds the tier")?;
    tier.close().await;

    let mib = |b: u64| b as f64 / (1024.0 * 1024.0);
    let ratio = |a: u64, b: u64| if b == 0 { 0.0 } else { a as f64 / b as f64 };
    println!(
        "serving: {} of {expected} requests from {source}, {} workers x {} slots x {} KiB, fs adapter in {}",
        t.requests,
        args.workers,
        args.slots,
        args.chunk_kib,
        dir.display()
    );
    println!(
        "chunks looked up  {} (found {}, beyond the arena {})",
        t.chunks, t.found, t.truncated
    );
    println!(
        "prefix hits       {} (hit ratio {:.3})",
        t.loaded,
        ratio(t.loaded, t.chunks)
    );
    println!(
        "loaded            {:.1} MiB into arena slots, {} wrong bytes",
        mib(t.loaded_bytes),
        t.wrong_bytes
    );
    println!(
        "prefilled         {} chunks; stored {} ({:.1} MiB)",
        t.prefilled,
        t.stored,
        mib(t.stored_bytes)
    );
    println!("requests / worker {:?}", t.per_worker);
    println!(
        "elapsed           {elapsed:.2} s ({:.0} requests/s), errors {}",
        t.requests as f64 / elapsed.max(1e-9),
        t.errors
    );
    if t.wrong_bytes > 0 || t.errors > 0 || t.requests != expected {
        std::process::exit(1);
    }
    Ok(())
}
