//! `kvtier bench --trace FILE --fleet-index URL --nodes N [--rate R]`: the fleet index alone,
//! under the load of N nodes replaying a trace, with no store.
//!
//! Each simulated node is a whole tier (controller, backend actor, fleet index actor: the code
//! a serving node runs) on a [`NullStore`]: writes succeed at once and keep nothing, a load of
//! an object the index knows hits, a probe finds nothing. So every request costs the index what
//! it costs a real node (lookup-and-lock, the write's announcement, its end, unlock, eviction
//! rounds and their releases), and nothing else waits. Request `k` of the trace goes to node
//! `k mod N`; with `--rate R` request `k` starts `k / R` seconds after the start (open loop:
//! a late request does not delay the next), else as soon as one of `--concurrency` slots is
//! free. The server's own counters (`INFO cpu`, `INFO commandstats`) are read before and after
//! from every URL given (comma-separated: the masters of a cluster), so the report's CPU and
//! calls per request are the server's, whatever the client's machine does.
//!
//! Invariants: every node joins the index before the first request starts (a node that does
//! not join within 30 s fails the run); the bucket's identity is new per run
//! (`bench-index-RANDOM`), so runs on one server never share state; the capacity is the
//! trace's (`--capacity-fraction` of its unique blocks), shared by the nodes as a fleet's.

use std::time::{Duration, Instant};

use bytes::Bytes;
use futures_util::stream::{self, StreamExt};
use hdrhistogram::Histogram;
use kvtier::config::TierConfig;
use kvtier::Tier;
use kvtier_actors::config::{CommonConfig, FleetConfig, GIB};
use kvtier_actors::storage::{BackendError, Fetched, Io, Removed, Storage};
use kvtier_actors::{KeyPage, LoadBuf, ObjectKey};
use serde::Serialize;

use super::trace::{one_request, Outcome, Trace};

/// What an index load run takes (checked by [`super::trace_cmd`]).
#[derive(Debug, Clone)]
pub struct IndexLoadOptions {
    /// The index URLs: one server, or every master of a cluster (their counters are summed).
    pub urls: Vec<String>,
    /// Simulated nodes.
    pub nodes: usize,
    /// Requests started per second (0: as fast as `concurrency` allows).
    pub rate: f64,
    /// Bytes per block (the sizes the index counts; nothing is stored).
    pub block_size: usize,
    /// Capacity as a fraction of the trace's unique blocks.
    pub capacity_fraction: f64,
    /// Requests in flight at most, over all nodes.
    pub concurrency: usize,
}

/// What an index load run measured.
#[derive(Debug, Clone, Serialize)]
pub struct IndexLoadReport {
    /// Requests replayed.
    pub requests: usize,
    /// Simulated nodes.
    pub nodes: usize,
    /// The eviction policy.
    pub policy: String,
    /// Hash tags the bucket's index is split over (`fleet.shards`).
    pub shards: u32,
    /// Blocks per request, on average.
    pub blocks_per_request: f64,
    /// Requests offered per second (`--rate`; 0: closed loop).
    pub offered_per_s: f64,
    /// Requests completed per second.
    pub requests_per_s: f64,
    /// Per-request latency (lookup, load, store, unlock), milliseconds.
    pub p50_ms: f64,
    /// Per-request latency, 99th percentile, milliseconds.
    pub p99_ms: f64,
    /// Server CPU (user + system, every server summed) per request, milliseconds.
    pub server_cpu_ms_per_request: f64,
    /// Server CPU over the run's wall time: 1.0 is one core busy.
    pub server_cpu_share: f64,
    /// Calls from clients (scripts and functions: `EVALSHA`, `EVAL`, `FCALL`) per request:
    /// the round trips a request costs.
    pub calls_per_request: f64,
    /// Commands the scripts ran, per request.
    pub commands_per_request: f64,
    /// `prefix_hit_blocks / blocks`.
    pub block_hit_ratio: f64,
    /// Requests with an error (a failed store, or a load that missed a found block).
    pub errors: u64,
    /// Wall time of the replay, seconds.
    pub elapsed_s: f64,
}

/// A store that keeps nothing (see the module docs).
struct NullStore {
    identity: String,
}

impl Storage for NullStore {
    fn kind(&self) -> &'static str {
        "null"
    }

    fn put(&mut self, items: Vec<(ObjectKey, Bytes)>) -> Io<Vec<Result<(), BackendError>>> {
        Io::ready(items.iter().map(|_| Ok(())).collect())
    }

    fn head(
        &mut self,
        keys: &[ObjectKey],
        known: &[Option<u64>],
    ) -> Io<Vec<Result<Option<u64>, BackendError>>> {
        Io::ready(keys.iter().zip(known).map(|(_, k)| Ok(*k)).collect())
    }

    fn get(&mut self, items: Vec<(ObjectKey, LoadBuf)>) -> Io<Vec<Result<Fetched, BackendError>>> {
        Io::ready(items.iter().map(|_| Ok(Fetched::Hit)).collect())
    }

    fn remove(&mut self, keys: Vec<ObjectKey>) -> Io<Vec<Result<Removed, BackendError>>> {
        Io::ready(keys.iter().map(|_| Ok(Removed::Yes)).collect())
    }

    fn list(
        &mut self,
        _model: Option<String>,
        _cursor: Option<String>,
        _limit: usize,
    ) -> Io<Result<KeyPage, BackendError>> {
        Io::ready(Ok(KeyPage::default()))
    }

    fn details(&self) -> serde_json::Value {
        serde_json::json!({ "type": "null", "identity": self.identity })
    }

    fn fleet_identity(&self) -> Option<String> {
        Some(self.identity.clone())
    }
}

/// The server counters a run reads before and after.
#[derive(Debug, Default, Clone, Copy)]
struct ServerCounters {
    cpu_s: f64,
    calls: u64,
    commands: u64,
}

impl std::ops::Sub for ServerCounters {
    type Output = Self;

    fn sub(self, o: Self) -> Self {
        Self {
            cpu_s: self.cpu_s - o.cpu_s,
            calls: self.calls.saturating_sub(o.calls),
            commands: self.commands.saturating_sub(o.commands),
        }
    }
}

/// The script calls and other commands of `INFO commandstats` (`cmdstat_NAME:calls=N,...`).
fn parse_commandstats(text: &str) -> (u64, u64) {
    let (mut calls, mut commands) = (0, 0);
    for line in text.lines() {
        let Some((name, rest)) = line
            .strip_prefix("cmdstat_")
            .and_then(|l| l.split_once(':'))
        else {
            continue;
        };
        let n: u64 = rest
            .split(',')
            .find_map(|f| f.strip_prefix("calls="))
            .and_then(|v| v.parse().ok())
            .unwrap_or(0);
        match name {
            "evalsha" | "eval" | "evalsha_ro" | "eval_ro" | "fcall" | "fcall_ro" => calls += n,
            "info" | "ping" | "client|setname" | "script|load" | "function|load" => {}
            _ => commands += n,
        }
    }
    (calls, commands)
}

/// `used_cpu_sys + used_cpu_user` of `INFO cpu`, in seconds.
fn parse_cpu(text: &str) -> f64 {
    text.lines()
        .filter_map(|l| {
            l.strip_prefix("used_cpu_sys:")
                .or_else(|| l.strip_prefix("used_cpu_user:"))
        })
        .filter_map(|v| v.trim().parse::<f64>().ok())
        .sum()
}

fn read_counters(urls: &[String]) -> Result<ServerCounters, String> {
    let mut total = ServerCounters::default();
    for url in urls {
        let mut conn = redis::Client::open(url.as_str())
            .and_then(|c| c.get_connection_with_timeout(Duration::from_secs(5)))
            .map_err(|e| format!("--fleet-index: cannot reach the index server: {e}"))?;
        let info = |section: &str, conn: &mut redis::Connection| -> Result<String, String> {
            redis::cmd("INFO")
                .arg(section)
                .query::<String>(conn)
                .map_err(|e| format!("--fleet-index: INFO {section} failed: {e}"))
        };
        total.cpu_s += parse_cpu(&info("cpu", &mut conn)?);
        let (calls, commands) = parse_commandstats(&info("commandstats", &mut conn)?);
        total.calls += calls;
        total.commands += commands;
    }
    Ok(total)
}

/// Runs the load: starts the nodes, replays `trace` across them, reads the servers' counters.
/// `config` gives the eviction policy (its first adapter's `eviction`, else LRU's defaults)
/// and the fleet's settings (`[fleet]`, whose index is replaced by the first URL).
pub async fn index_load(
    config: &TierConfig,
    trace: &Trace,
    opts: IndexLoadOptions,
) -> Result<IndexLoadReport, String> {
    let capacity = trace.capacity_blocks(opts.capacity_fraction) * opts.block_size as u64;
    let eviction = config
        .adapters
        .first()
        .and_then(|a| a.common.eviction.clone())
        .unwrap_or_default();
    let policy = eviction.eviction_policy.as_str().to_owned();
    let identity = format!("bench-index-{:08x}", rand::random::<u32>());
    let url = opts.urls.first().ok_or("--fleet-index: no URL")?.clone();
    let mut tiers = Vec::with_capacity(opts.nodes);
    for i in 0..opts.nodes {
        let mut fleet = config
            .fleet
            .clone()
            .unwrap_or_else(|| FleetConfig::new(&url));
        fleet.index = kvtier_actors::config::Secret::new(url.clone());
        fleet.node_id = Some(format!("{identity}-node-{i}"));
        let mut tier_config = TierConfig::default();
        tier_config.eviction_interval_ms = config.eviction_interval_ms;
        tier_config.fleet = Some(fleet);
        let mut common = CommonConfig::default();
        common.max_capacity_gb = capacity as f64 / GIB;
        common.eviction = Some(eviction.clone());
        let store = NullStore {
            identity: identity.clone(),
        };
        let tier = Tier::builder(tier_config)
            .storage(Box::new(store), common)
            .start()
            .await
            .map_err(|e| e.to_string())?;
        tiers.push(tier);
    }
    for (i, tier) in tiers.iter().enumerate() {
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            let status = tier.status().await.map_err(|e| e.to_string())?;
            let fleet = status.adapters.first().and_then(|a| a.fleet.clone());
            if fleet.as_ref().is_some_and(|f| f.joined) {
                break;
            }
            if Instant::now() >= deadline {
                let reason = fleet.and_then(|f| f.reason).unwrap_or_default();
                return Err(format!(
                    "--fleet-index: node {i} did not join the index in 30 s: {reason}"
                ));
            }
            actix_rt::time::sleep(Duration::from_millis(50)).await;
        }
    }
    let before = read_counters(&opts.urls)?;
    let block = Bytes::from(vec![0x5au8; opts.block_size]);
    let start = Instant::now();
    let slots = if opts.rate > 0.0 {
        // Open loop: enough slots that pacing, not the bound, decides when requests start.
        opts.concurrency.max(4096)
    } else {
        opts.concurrency
    };
    let outcomes: Vec<Outcome> = stream::iter(trace.requests.iter().enumerate())
        .map(|(k, r)| {
            let (tier, block) = (&tiers[k % opts.nodes], block.clone());
            async move {
                if opts.rate > 0.0 {
                    let at = Duration::from_secs_f64(k as f64 / opts.rate);
                    if let Some(wait) = at.checked_sub(start.elapsed()) {
                        actix_rt::time::sleep(wait).await;
                    }
                }
                one_request(tier, r, &block, opts.block_size, false).await
            }
        })
        .buffer_unordered(slots)
        .collect()
        .await;
    let elapsed = start.elapsed().as_secs_f64();
    for tier in &tiers {
        let _ = tier.when_idle(0).await;
    }
    let used = read_counters(&opts.urls)? - before;
    for tier in tiers {
        tier.close().await;
    }
    let mut hist = Histogram::<u64>::new(3).expect("histogram");
    let (mut blocks, mut hits, mut errors) = (0u64, 0u64, 0u64);
    for o in &outcomes {
        let _ = hist.record(o.micros.max(1));
        blocks += o.blocks;
        hits += o.hit_blocks;
        errors += u64::from(o.errors > 0);
    }
    let n = outcomes.len().max(1) as f64;
    Ok(IndexLoadReport {
        requests: outcomes.len(),
        nodes: opts.nodes,
        policy,
        shards: config.fleet.as_ref().map_or(1, |f| f.shards),
        blocks_per_request: blocks as f64 / n,
        offered_per_s: opts.rate,
        requests_per_s: outcomes.len() as f64 / elapsed.max(1e-9),
        p50_ms: hist.value_at_quantile(0.5) as f64 / 1000.0,
        p99_ms: hist.value_at_quantile(0.99) as f64 / 1000.0,
        server_cpu_ms_per_request: used.cpu_s * 1000.0 / n,
        server_cpu_share: used.cpu_s / elapsed.max(1e-9),
        calls_per_request: used.calls as f64 / n,
        commands_per_request: used.commands as f64 / n,
        block_hit_ratio: if blocks == 0 {
            0.0
        } else {
            hits as f64 / blocks as f64
        },
        errors,
        elapsed_s: elapsed,
    })
}

/// Prints an index load report as a table.
pub fn print_index_load(r: &IndexLoadReport) {
    println!(
        "fleet index load: {} requests over {} nodes ({:.1} blocks each), policy {}, {} hash \
         tag(s)",
        r.requests, r.nodes, r.blocks_per_request, r.policy, r.shards
    );
    let offered = if r.offered_per_s > 0.0 {
        format!("{:.0} offered", r.offered_per_s)
    } else {
        "closed loop".to_string()
    };
    println!(
        "{:.1} requests/s ({offered}), per request p50 {:.2} ms p99 {:.2} ms, {:.2} s",
        r.requests_per_s, r.p50_ms, r.p99_ms, r.elapsed_s
    );
    println!(
        "server: {:.3} ms CPU per request ({:.2} of a core), {:.2} calls and {:.1} commands per request",
        r.server_cpu_ms_per_request, r.server_cpu_share, r.calls_per_request, r.commands_per_request
    );
    println!(
        "prefix hit ratio {:.3} of blocks, {} requests with errors",
        r.block_hit_ratio, r.errors
    );
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn commandstats_split_script_calls_from_their_commands() {
        let text = "# Commandstats\r\n\
            cmdstat_evalsha:calls=10,usec=100,usec_per_call=10.00\r\n\
            cmdstat_eval:calls=2,usec=1,usec_per_call=0.5\r\n\
            cmdstat_hset:calls=30,usec=3,usec_per_call=0.1\r\n\
            cmdstat_info:calls=4,usec=3,usec_per_call=0.1\r\n\
            cmdstat_zadd:calls=5,usec=3,usec_per_call=0.1\r\n";
        assert_eq!(parse_commandstats(text), (12, 35));
    }

    #[test]
    fn cpu_is_user_plus_system() {
        let text =
            "# CPU\r\nused_cpu_sys:1.50\r\nused_cpu_user:2.25\r\nused_cpu_sys_children:9\r\n";
        assert!((parse_cpu(text) - 3.75).abs() < 1e-9);
    }
}
