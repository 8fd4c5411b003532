//! `kvtier bench --trace FILE --simulate`: replays a trace offline (no I/O) against every
//! eviction policy at once, plus Belady's optimum, at several capacities.
//!
//! Each policy runs as the runtime runs it: the same [`PolicyState`] the eviction actor holds
//! (the policy trait object and its size book), fed with the events a backend would publish
//! (lookup hits as `accessed`, the stored misses as `stored`, removals as `removed`), planning
//! rounds with the backend's usage, and rounds applied with the backend's own selection rule
//! ([`Evict::select`]): locked keys (the found blocks of the request in progress) are skipped.
//! A round is planned after every request's store and again after every round that removed
//! something, as the actor does. Only the ledger is a model: a resident set and a byte total.
//!
//! Belady's optimum (`Belady`) evicts, after each request, the resident blocks whose next use
//! is farthest (never-used-again first) until the capacity holds: the upper bound of any policy
//! at that capacity. `noop` never evicts: the infinite-cache bound.

use std::collections::BinaryHeap;

use kvtier_actors::config::{EvictionConfig, EvictionPolicy};
use kvtier_actors::eviction::PolicyState;
use kvtier_actors::{Evict, ObjectKey};
use serde::Serialize;

use super::trace::{dense_ids, Trace};

/// Capacities simulated when none is given, as fractions of the trace's unique blocks.
pub const DEFAULT_CAPACITIES: [f64; 5] = [0.02, 0.05, 0.1, 0.2, 0.4];

/// One row of the simulation.
#[derive(Debug, Clone, Serialize)]
pub struct SimRow {
    /// Policy name (`LRU` is LMCache's default: watermark 0.8, ratio 0.2), or `Belady`.
    pub policy: String,
    /// Capacity as a fraction of the unique blocks.
    pub capacity_fraction: f64,
    /// Blocks in the longest contiguous prefix found / blocks requested.
    pub block_hit_ratio: f64,
    /// Prompt tokens covered by those prefixes / prompt tokens.
    pub token_hit_ratio: f64,
}

/// The policies simulated, with their settings: each at its defaults (the LMCache policies at
/// LMCache's 0.8 / 0.2; `IsolatedLRU` with one quota, the capacity, for the trace's unsalted
/// keys).
fn configs(capacity_bytes: u64) -> Vec<EvictionConfig> {
    EvictionPolicy::ALL
        .iter()
        .map(|p| {
            let mut c = EvictionConfig::with_policy(*p);
            if *p == EvictionPolicy::IsolatedLru {
                c.quotas.0.insert(String::new(), capacity_bytes);
            }
            c
        })
        .collect()
}

fn dense_key(id: u32) -> ObjectKey {
    ObjectKey::new("trace", 0, id.to_be_bytes().to_vec()).expect("a valid key")
}

fn key_id(k: &ObjectKey) -> usize {
    let h = k.chunk_hash();
    u32::from_be_bytes([h[0], h[1], h[2], h[3]]) as usize
}

struct Tally {
    hit_blocks: u64,
    hit_tokens: u64,
}

fn run_policy(
    trace: &Trace,
    ids: &[Vec<u32>],
    keys: &[ObjectKey],
    config: EvictionConfig,
    capacity_bytes: u64,
    block: u64,
) -> Tally {
    let mut state = PolicyState::new(config);
    let mut resident = vec![false; keys.len()];
    let mut locked = vec![false; keys.len()];
    let mut used = 0u64;
    let mut t = Tally {
        hit_blocks: 0,
        hit_tokens: 0,
    };
    for (r, chain) in trace.requests.iter().zip(ids) {
        let prefix = chain
            .iter()
            .take_while(|id| resident[**id as usize])
            .count();
        t.hit_blocks += prefix as u64;
        t.hit_tokens += r.prefix_tokens(prefix);
        let (mut found, mut missing) = (Vec::new(), Vec::new());
        for id in chain {
            let i = *id as usize;
            if resident[i] {
                locked[i] = true;
                found.push(keys[i].clone());
            } else if !missing.iter().any(|k| *k == keys[i]) {
                missing.push(keys[i].clone());
            }
        }
        if !found.is_empty() {
            state.accessed(&found);
        }
        if !missing.is_empty() {
            for k in &missing {
                resident[key_id(k)] = true;
                used += block;
            }
            state.stored(&missing, &vec![block; missing.len()]);
        }
        loop {
            let groups = state.plan(used, capacity_bytes);
            if groups.is_empty() {
                break;
            }
            let removed = Evict { groups }.select(|k| {
                let i = key_id(k);
                (resident[i] && !locked[i]).then_some(block)
            });
            if removed.is_empty() {
                break;
            }
            for k in &removed {
                resident[key_id(k)] = false;
                used -= block;
            }
            state.removed(&removed, kvtier::actors::DeleteCause::Evicted);
        }
        for k in &found {
            locked[key_id(k)] = false;
        }
    }
    t
}

fn run_belady(trace: &Trace, ids: &[Vec<u32>], unique: usize, capacity_blocks: u64) -> Tally {
    // next[j][i]: the request index of the next use of ids[j][i] (usize::MAX: never).
    let mut next: Vec<Vec<usize>> = ids.iter().map(|c| vec![usize::MAX; c.len()]).collect();
    let mut seen = vec![usize::MAX; unique];
    for (j, chain) in ids.iter().enumerate().rev() {
        for (i, id) in chain.iter().enumerate() {
            next[j][i] = seen[*id as usize];
        }
        for id in chain {
            seen[*id as usize] = j;
        }
    }
    let mut resident = vec![false; unique];
    let mut next_use = vec![usize::MAX; unique];
    let mut heap: BinaryHeap<(usize, u32)> = BinaryHeap::new();
    let mut count = 0u64;
    let mut t = Tally {
        hit_blocks: 0,
        hit_tokens: 0,
    };
    for (j, (r, chain)) in trace.requests.iter().zip(ids).enumerate() {
        let prefix = chain
            .iter()
            .take_while(|id| resident[**id as usize])
            .count();
        t.hit_blocks += prefix as u64;
        t.hit_tokens += r.prefix_tokens(prefix);
        for (i, id) in chain.iter().enumerate() {
            let u = *id as usize;
            if !resident[u] {
                resident[u] = true;
                count += 1;
            }
            next_use[u] = next[j][i];
            heap.push((next_use[u], *id));
        }
        while count > capacity_blocks {
            let Some((nu, id)) = heap.pop() else {
                break;
            };
            let u = id as usize;
            if resident[u] && next_use[u] == nu {
                resident[u] = false;
                count -= 1;
            }
        }
    }
    t
}

/// The row name of a configured policy whose settings are not its defaults.
pub fn configured_name(c: &EvictionConfig) -> String {
    format!("{} (configured)", c.eviction_policy.as_str())
}

/// Simulates every policy and Belady at each capacity fraction. `block` is the block size in
/// bytes (every block has it). `configured`, an adapter's `eviction` table whose settings are
/// not its policy's defaults, adds a row of its own ([`configured_name`]).
pub fn simulate(
    trace: &Trace,
    capacities: &[f64],
    block: u64,
    configured: Option<&EvictionConfig>,
) -> Vec<SimRow> {
    let configured = configured.filter(|c| **c != EvictionConfig::with_policy(c.eviction_policy));
    let ids = dense_ids(trace);
    let keys: Vec<ObjectKey> = (0..trace.unique_blocks as u32).map(dense_key).collect();
    let blocks: u64 = ids.iter().map(|c| c.len() as u64).sum();
    let tokens: u64 = trace.requests.iter().map(|r| r.tokens()).sum();
    let ratio = |a: u64, b: u64| if b == 0 { 0.0 } else { a as f64 / b as f64 };
    let mut rows = Vec::new();
    for &f in capacities {
        let cap_blocks = trace.capacity_blocks(f);
        let capacity_bytes = cap_blocks * block;
        let own = configured.map(|c| (configured_name(c), c.clone()));
        let named = configs(capacity_bytes)
            .into_iter()
            .map(|c| (c.eviction_policy.as_str().to_owned(), c));
        for (name, c) in named.chain(own) {
            let t = run_policy(trace, &ids, &keys, c, capacity_bytes, block);
            rows.push(SimRow {
                policy: name,
                capacity_fraction: f,
                block_hit_ratio: ratio(t.hit_blocks, blocks),
                token_hit_ratio: ratio(t.hit_tokens, tokens),
            });
        }
        let t = run_belady(trace, &ids, keys.len(), cap_blocks);
        rows.push(SimRow {
            policy: "Belady".into(),
            capacity_fraction: f,
            block_hit_ratio: ratio(t.hit_blocks, blocks),
            token_hit_ratio: ratio(t.hit_tokens, tokens),
        });
    }
    rows
}

/// Prints the rows as two tables (block and token hit ratio), one line per capacity.
pub fn print_rows(rows: &[SimRow]) {
    let mut policies: Vec<&str> = Vec::new();
    let mut caps: Vec<f64> = Vec::new();
    for r in rows {
        if !policies.contains(&r.policy.as_str()) {
            policies.push(&r.policy);
        }
        if !caps.contains(&r.capacity_fraction) {
            caps.push(r.capacity_fraction);
        }
    }
    // A column is as wide as its name plus two (at least 12), so `POLICY (configured)` fits.
    let widths: Vec<usize> = policies.iter().map(|p| (p.len() + 2).max(12)).collect();
    for (title, tokens) in [("block hit ratio", false), ("token hit ratio", true)] {
        print!("{title:<16}");
        for (p, w) in policies.iter().zip(&widths) {
            print!("{p:>w$}");
        }
        println!();
        for c in &caps {
            // 2 %, 0.5 %: percent to one decimal, without a trailing `.0`.
            print!("{:<16}", format!("{} %", (c * 1000.0).round() / 10.0));
            for (p, w) in policies.iter().zip(&widths) {
                let v = rows
                    .iter()
                    .find(|r| r.policy == *p && r.capacity_fraction == *c)
                    .map(|r| {
                        if tokens {
                            r.token_hit_ratio
                        } else {
                            r.block_hit_ratio
                        }
                    });
                match v {
                    Some(v) => print!("{v:>w$.3}"),
                    None => print!("{:>w$}", "-"),
                }
            }
            println!();
        }
        println!();
    }
}
