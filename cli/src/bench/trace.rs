//! `kvtier bench --trace FILE`: replays a request trace the way a serving engine uses the tier.
//!
//! The trace is JSON lines, one request each, as in the Mooncake traces:
//! `{"timestamp": ms, "input_length": tokens, "hash_ids": [...]}`. `hash_ids` are the request's
//! prefix blocks in order (equal ids are the same block, reusable by a later request). Each block
//! becomes one object of `--block-size` bytes under the model `trace`.
//!
//! Per request: lookup-and-lock the whole block chain; the hit is the longest contiguous prefix
//! found (LMCache's prefetch counts the same); load that prefix into caller buffers; store the
//! blocks that were not found; unlock what was locked. Requests start in trace order, at most
//! `--concurrency` at a time, and with `--time-scale X` > 0 no earlier than `timestamp × X`
//! after the start. Eviction runs as configured; every adapter's capacity is set to
//! `--capacity-fraction` of the trace's unique blocks.

use std::collections::{HashMap, HashSet};
use std::path::Path;
use std::time::{Duration, Instant};

use bytes::{Bytes, BytesMut};
use futures_util::stream::{self, StreamExt};
use hdrhistogram::Histogram;
use kvtier::config::{AdapterConfig, TierConfig};
use kvtier::Tier;
use kvtier_actors::config::{EvictionConfig, GIB};
use kvtier_actors::ObjectKey;
use serde::{Deserialize, Serialize};

/// Tokens per block in the Mooncake traces.
pub const BLOCK_TOKENS: u64 = 512;

/// One request of a trace.
#[derive(Debug, Clone, Deserialize)]
pub struct Request {
    /// Arrival, in milliseconds from the start of the trace.
    #[serde(default)]
    pub timestamp: u64,
    /// Prompt tokens (0: `hash_ids.len() × 512`).
    #[serde(default)]
    pub input_length: u64,
    /// The prompt's prefix blocks, in order.
    pub hash_ids: Vec<u64>,
}

impl Request {
    /// Tokens in the first `n` blocks (the last block may be partial).
    pub fn prefix_tokens(&self, n: usize) -> u64 {
        let full = n as u64 * BLOCK_TOKENS;
        if self.input_length == 0 {
            full
        } else {
            full.min(self.input_length)
        }
    }

    /// Tokens of the whole prompt.
    pub fn tokens(&self) -> u64 {
        self.prefix_tokens(self.hash_ids.len())
    }
}

/// A parsed trace.
#[derive(Debug, Clone)]
pub struct Trace {
    /// Requests in file order.
    pub requests: Vec<Request>,
    /// Distinct block ids.
    pub unique_blocks: usize,
}

impl Trace {
    /// Reads a JSON-lines trace (blank lines are skipped).
    pub fn load(path: &Path) -> Result<Self, String> {
        let text = std::fs::read_to_string(path)
            .map_err(|e| format!("--trace {}: {e}", path.display()))?;
        let mut requests = Vec::new();
        for (i, line) in text.lines().enumerate() {
            if line.trim().is_empty() {
                continue;
            }
            let r: Request = serde_json::from_str(line)
                .map_err(|e| format!("--trace {} line {}: {e}", path.display(), i + 1))?;
            requests.push(r);
        }
        if requests.is_empty() {
            return Err(format!("--trace {}: no requests", path.display()));
        }
        let unique_blocks = requests
            .iter()
            .flat_map(|r| r.hash_ids.iter())
            .collect::<HashSet<_>>()
            .len();
        Ok(Self {
            requests,
            unique_blocks,
        })
    }

    /// Keeps the first `n` requests (the unique blocks are counted again).
    pub fn first(mut self, n: usize) -> Self {
        self.requests.truncate(n);
        self.unique_blocks = self
            .requests
            .iter()
            .flat_map(|r| r.hash_ids.iter())
            .collect::<HashSet<_>>()
            .len();
        self
    }

    /// Node `i` of `n`: every `n`-th request from the `i`-th. The unique blocks stay the
    /// whole trace's, so each node's capacity is the bucket's.
    pub fn node(mut self, i: usize, n: usize) -> Self {
        self.requests = std::mem::take(&mut self.requests)
            .into_iter()
            .enumerate()
            .filter(|(k, _)| k % n == i)
            .map(|(_, r)| r)
            .collect();
        self
    }

    /// Capacity in whole blocks for a fraction of the unique blocks (at least 1).
    pub fn capacity_blocks(&self, fraction: f64) -> u64 {
        ((self.unique_blocks as f64 * fraction).floor() as u64).max(1)
    }
}

/// The object key of a block id.
pub fn block_key(id: u64) -> ObjectKey {
    ObjectKey::new("trace", 0, id.to_be_bytes().to_vec()).expect("a valid key")
}

/// Options of a replay.
#[derive(Debug, Clone, Copy)]
pub struct ReplayOptions {
    /// Bytes per block.
    pub block_size: usize,
    /// Capacity as a fraction of the unique blocks.
    pub capacity_fraction: f64,
    /// Milliseconds of wall time per trace millisecond (0: as fast as possible).
    pub time_scale: f64,
    /// Requests in flight.
    pub concurrency: usize,
}

/// What a replay measured.
#[derive(Debug, Clone, Serialize)]
pub struct ReplayReport {
    /// Requests replayed.
    pub requests: usize,
    /// Blocks requested (sum of the chains' lengths).
    pub blocks: u64,
    /// Distinct blocks in the trace.
    pub unique_blocks: usize,
    /// Blocks in the longest contiguous prefix found, summed.
    pub prefix_hit_blocks: u64,
    /// `prefix_hit_blocks / blocks`.
    pub block_hit_ratio: f64,
    /// Prompt tokens covered by the prefixes found / all prompt tokens.
    pub token_hit_ratio: f64,
    /// Bytes loaded (the prefixes).
    pub bytes_loaded: u64,
    /// Bytes stored (the blocks not found).
    pub bytes_stored: u64,
    /// `bytes_loaded / bytes_stored`.
    pub loaded_vs_stored: f64,
    /// Wall time in seconds.
    pub elapsed_s: f64,
    /// Requests per second.
    pub requests_per_s: f64,
    /// Bytes moved (loaded + stored) per second, in GB/s (10⁹).
    pub gbps: f64,
    /// Per-request latency (lookup, load, store, unlock), milliseconds.
    pub p50_ms: f64,
    /// Per-request latency, 99th percentile, milliseconds.
    pub p99_ms: f64,
    /// Keys evicted (all adapters).
    pub evicted_keys: u64,
    /// Eviction rounds (all adapters).
    pub eviction_rounds: u64,
    /// The highest usage seen after a request's store, as a fraction of the capacity (the
    /// fullest adapter): above 1 when stores outran eviction, as a replay far faster than a
    /// serving engine can make them.
    pub peak_usage_fraction: f64,
    /// Failed stores and loads of found blocks.
    pub errors: u64,
    /// The block size in bytes and the capacity in bytes of each adapter.
    pub block_size: usize,
    /// Capacity of each adapter in bytes.
    pub capacity_bytes: u64,
    /// The eviction policy of each adapter.
    pub policies: Vec<String>,
    /// Fleet mode: this node's writes that found the bucket full, waited for room and were
    /// made within the capacity (all adapters; `None` without a fleet).
    pub fleet_writes_waited: Option<u64>,
    /// Fleet mode: this node's writes made past the capacity because their wait
    /// (`fleet.write_wait_ms`) ran out.
    pub fleet_writes_over: Option<u64>,
}

/// What one request of a replay did.
#[derive(Default)]
pub(super) struct Outcome {
    pub(super) blocks: u64,
    pub(super) hit_blocks: u64,
    tokens: u64,
    hit_tokens: u64,
    loaded: u64,
    stored: u64,
    pub(super) errors: u64,
    pub(super) micros: u64,
    /// Usage / capacity of the fullest adapter after this request's store.
    usage_fraction: f64,
}

/// One request: lookup-and-lock, load the prefix found, store the rest, unlock; then, with
/// `read_usage`, the usage (for the replay's peak; the index load leaves it out, as a serving
/// node does not ask per request).
pub(super) async fn one_request(
    tier: &Tier,
    r: &Request,
    block: &Bytes,
    block_size: usize,
    read_usage: bool,
) -> Outcome {
    let started = Instant::now();
    let keys: Vec<ObjectKey> = r.hash_ids.iter().map(|id| block_key(*id)).collect();
    let mut o = Outcome {
        blocks: keys.len() as u64,
        tokens: r.tokens(),
        ..Outcome::default()
    };
    let Ok(hits) = tier.lookup_and_lock(keys.clone()).await else {
        o.errors += 1;
        return o;
    };
    let found: Vec<bool> = (0..keys.len()).map(|i| hits.get(i)).collect();
    let prefix = found.iter().take_while(|f| **f).count();
    if prefix > 0 {
        let bufs = (0..prefix).map(|_| BytesMut::zeroed(block_size)).collect();
        let rep = tier.load(keys[..prefix].to_vec(), bufs).await;
        let loaded = (0..prefix).take_while(|i| rep.hits.get(*i)).count();
        o.errors += (prefix - loaded) as u64;
        o.loaded = (loaded * block_size) as u64;
        o.hit_blocks = loaded as u64;
        o.hit_tokens = r.prefix_tokens(loaded);
    }
    let missing: Vec<ObjectKey> = keys
        .iter()
        .zip(&found)
        .filter(|(_, f)| !**f)
        .map(|(k, _)| k.clone())
        .collect();
    if !missing.is_empty() {
        let n = missing.len();
        match tier.store(missing, vec![block.clone(); n]).await {
            Ok(rep) => {
                for (_, a) in &rep.adapters {
                    o.errors += a.failed.len() as u64;
                }
                o.stored = (n * block_size) as u64;
            }
            Err(_) => o.errors += n as u64,
        }
    }
    let locked: Vec<ObjectKey> = keys
        .into_iter()
        .zip(&found)
        .filter(|(_, f)| **f)
        .map(|(k, _)| k)
        .collect();
    tier.unlock(locked);
    o.micros = started.elapsed().as_micros() as u64;
    if !read_usage {
        return o;
    }
    if let Ok(u) = tier.usage().await {
        o.usage_fraction = u.adapters.iter().map(|a| a.fraction).fold(0.0, f64::max);
    }
    o
}

/// Sets every adapter's capacity to the fraction of the trace (and `LRU` where no eviction is
/// configured).
pub fn configure(config: &mut TierConfig, trace: &Trace, opts: ReplayOptions) -> u64 {
    let capacity = trace.capacity_blocks(opts.capacity_fraction) * opts.block_size as u64;
    for a in &mut config.adapters {
        a.common.max_capacity_gb = capacity as f64 / GIB;
        if a.common.eviction.is_none() {
            a.common.eviction = Some(EvictionConfig::default());
        }
    }
    capacity
}

/// Replays `trace` on a tier started from `config` (an `fs` adapter in a temporary directory
/// when it has none).
pub async fn replay(
    mut config: TierConfig,
    trace: &Trace,
    opts: ReplayOptions,
) -> Result<ReplayReport, String> {
    let _tmp = if config.adapters.is_empty() {
        let dir = tempfile::Builder::new()
            .prefix("kvtier-trace-")
            .tempdir()
            .map_err(|e| format!("cannot create a temporary directory: {e}"))?;
        config.adapters.push(AdapterConfig::fs(dir.path()));
        Some(dir)
    } else {
        None
    };
    let capacity_bytes = configure(&mut config, trace, opts);
    let policies = config
        .adapters
        .iter()
        .map(|a| {
            a.common
                .eviction
                .as_ref()
                .map_or("none", |e| e.eviction_policy.as_str())
                .to_owned()
        })
        .collect();
    let tier = Tier::start(&config).await.map_err(|e| e.to_string())?;
    let block = Bytes::from(vec![0x5au8; opts.block_size]);
    let start = Instant::now();
    let t0 = trace.requests.first().map_or(0, |r| r.timestamp);
    let outcomes: Vec<Outcome> = stream::iter(trace.requests.iter())
        .map(|r| {
            let (tier, block) = (&tier, block.clone());
            async move {
                if opts.time_scale > 0.0 {
                    let at = Duration::from_secs_f64(
                        r.timestamp.saturating_sub(t0) as f64 * opts.time_scale / 1000.0,
                    );
                    if let Some(wait) = at.checked_sub(start.elapsed()) {
                        actix_rt::time::sleep(wait).await;
                    }
                }
                one_request(tier, r, &block, opts.block_size, true).await
            }
        })
        .buffered(opts.concurrency)
        .collect()
        .await;
    let elapsed = start.elapsed().as_secs_f64();
    // Eviction runs beside the requests: let it finish the rounds the replay started, so the
    // report counts every key the replay's stores caused to be evicted (a short replay could
    // otherwise end with a round started and nothing evicted yet). The requests' unlocks were
    // sent without a reply (`Tier::unlock`); a usage read passes the controller and each
    // backend after them, so the checks below run with those keys unlocked.
    let _ = tier.usage().await;
    for adapter in 0..config.adapters.len() {
        let _ = tier.when_idle(adapter).await;
    }
    let stats = tier.eviction_stats().await.unwrap_or_default();
    let fleet: Vec<_> = match tier.status().await {
        Ok(s) => s.adapters.into_iter().filter_map(|a| a.fleet).collect(),
        Err(_) => Vec::new(),
    };
    let fleet_sum = |f: fn(&kvtier::FleetStatus) -> u64| {
        (!fleet.is_empty()).then(|| fleet.iter().map(f).sum::<u64>())
    };
    tier.close().await;
    let mut hist = Histogram::<u64>::new(3).expect("histogram");
    let mut sum = Outcome::default();
    for o in &outcomes {
        let _ = hist.record(o.micros.max(1));
        sum.blocks += o.blocks;
        sum.hit_blocks += o.hit_blocks;
        sum.tokens += o.tokens;
        sum.hit_tokens += o.hit_tokens;
        sum.loaded += o.loaded;
        sum.stored += o.stored;
        sum.errors += o.errors;
        sum.usage_fraction = sum.usage_fraction.max(o.usage_fraction);
    }
    let ratio = |a: u64, b: u64| if b == 0 { 0.0 } else { a as f64 / b as f64 };
    Ok(ReplayReport {
        requests: outcomes.len(),
        blocks: sum.blocks,
        unique_blocks: trace.unique_blocks,
        prefix_hit_blocks: sum.hit_blocks,
        block_hit_ratio: ratio(sum.hit_blocks, sum.blocks),
        token_hit_ratio: ratio(sum.hit_tokens, sum.tokens),
        bytes_loaded: sum.loaded,
        bytes_stored: sum.stored,
        loaded_vs_stored: ratio(sum.loaded, sum.stored),
        elapsed_s: elapsed,
        requests_per_s: outcomes.len() as f64 / elapsed.max(1e-9),
        gbps: (sum.loaded + sum.stored) as f64 / elapsed.max(1e-9) / 1e9,
        p50_ms: hist.value_at_quantile(0.5) as f64 / 1000.0,
        p99_ms: hist.value_at_quantile(0.99) as f64 / 1000.0,
        evicted_keys: stats.iter().map(|(_, s)| s.evicted_keys).sum(),
        eviction_rounds: stats.iter().map(|(_, s)| s.rounds).sum(),
        peak_usage_fraction: sum.usage_fraction,
        errors: sum.errors,
        block_size: opts.block_size,
        capacity_bytes,
        policies,
        fleet_writes_waited: fleet_sum(|f| f.writes_waited),
        fleet_writes_over: fleet_sum(|f| f.writes_over),
    })
}

/// Prints a replay report as a table.
pub fn print_replay(r: &ReplayReport) {
    println!(
        "trace replay: {} requests, {} blocks ({} unique), block {} B, capacity {} B, policy {}",
        r.requests,
        r.blocks,
        r.unique_blocks,
        r.block_size,
        r.capacity_bytes,
        r.policies.join(",")
    );
    println!(
        "prefix hit ratio: {:.3} of blocks, {:.3} of tokens",
        r.block_hit_ratio, r.token_hit_ratio
    );
    println!(
        "loaded {} B, stored {} B (loaded/stored {:.3})",
        r.bytes_loaded, r.bytes_stored, r.loaded_vs_stored
    );
    println!(
        "{:.2} s, {:.1} requests/s, {:.3} GB/s, per request p50 {:.2} ms p99 {:.2} ms",
        r.elapsed_s, r.requests_per_s, r.gbps, r.p50_ms, r.p99_ms
    );
    println!(
        "evicted {} keys in {} rounds, peak usage {:.3} of the capacity, {} errors",
        r.evicted_keys, r.eviction_rounds, r.peak_usage_fraction, r.errors
    );
    if let (Some(waited), Some(over)) = (r.fleet_writes_waited, r.fleet_writes_over) {
        println!(
            "fleet: {waited} writes waited for room in the full bucket, {over} went over the \
             capacity when the wait ran out"
        );
    }
}

/// Dense ids `0..unique` for the trace's block ids, in order of first appearance.
pub fn dense_ids(trace: &Trace) -> Vec<Vec<u32>> {
    let mut map: HashMap<u64, u32> = HashMap::new();
    trace
        .requests
        .iter()
        .map(|r| {
            r.hash_ids
                .iter()
                .map(|id| {
                    let n = map.len() as u32;
                    *map.entry(*id).or_insert(n)
                })
                .collect()
        })
        .collect()
}
