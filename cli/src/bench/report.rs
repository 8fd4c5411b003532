//! What `kvtier bench` reports: one [`PhaseReport`] per timed phase, the [`BenchReport`] that
//! `--json` prints as one object, and the table printed otherwise.
//!
//! Invariants: the JSON field names and the table's lines are an interface (`scripts/compare/compare.sh`,
//! the CLI tests and the docs read them): change them only together with their readers.
//! `verified` is true only when at least one chunk loaded and every loaded byte matched; the
//! exit code is 0 only when it is true and `errors` is 0 ([`exit_code`]).

use serde::Serialize;

use super::args::{BenchClient, BenchOptions};
use super::phases::LoadOutcome;
use super::timer::peak_rss_bytes;
use crate::common::{human_bytes, EXIT_FAILURE, EXIT_OK};

/// Timing of one phase.
#[derive(Debug, Clone, Serialize)]
pub struct PhaseReport {
    /// Phase name.
    pub phase: String,
    /// Keys handled.
    pub keys: usize,
    /// Payload bytes moved.
    pub bytes: u64,
    /// Wall time in seconds.
    pub seconds: f64,
    /// Gigabytes (10^9 bytes) per second.
    pub gbps: f64,
    /// Keys per second.
    pub keys_per_s: f64,
    /// Median request latency, milliseconds.
    pub p50_ms: f64,
    /// 99th-percentile request latency, milliseconds.
    pub p99_ms: f64,
    /// Client CPU (user + system, every thread of this process) spent in the phase, seconds.
    pub cpu_s: f64,
    /// `cpu_s` per GiB moved (phases that move bytes).
    pub cpu_s_per_gib: Option<f64>,
    /// The process's peak RSS so far, at the end of the phase, MiB.
    pub peak_rss_mib: f64,
    /// Minor page faults the process took in the phase (fresh memory being touched).
    pub minor_faults: u64,
    /// Context switches of the process's threads in the phase (voluntary + involuntary):
    /// mostly threads parking and waking between requests.
    pub context_switches: u64,
    /// Heap blocks of at least 64 KiB allocated in the phase (anywhere in the process): a
    /// chunk-sized staging buffer on the data path would show up here.
    pub large_allocs: u64,
    /// Their bytes, MiB.
    pub large_alloc_mib: f64,
    /// Heap blocks at least one chunk large allocated in the phase: each would be a staging
    /// copy of a chunk (receive buffers of the HTTP client are smaller).
    pub chunk_allocs: u64,
}

/// The raw aws-sdk-s3 baseline of an `s3` adapter: the same objects and concurrency through a
/// plain client, no actors.
#[derive(Debug, Clone, Serialize)]
pub struct S3Baseline {
    /// Plain concurrent PUTs.
    pub put: PhaseReport,
    /// Plain concurrent GETs (body collected into memory).
    pub get: PhaseReport,
    /// kvtier store GB/s ÷ raw PUT GB/s.
    pub store_vs_raw: f64,
    /// kvtier load GB/s ÷ raw GET GB/s.
    pub load_vs_raw: f64,
}

/// Everything `kvtier bench --json` prints.
#[derive(Debug, Clone, Serialize)]
pub struct BenchReport {
    /// The client measured.
    pub client: BenchClient,
    /// Store throughput, GB/s (10^9 bytes).
    pub store_gbps: f64,
    /// Load throughput, GB/s (10^9 bytes).
    pub load_gbps: f64,
    /// Lookup-and-lock rate.
    pub lookup_keys_per_s: f64,
    /// True only if every loaded byte matched what was stored.
    pub verified: bool,
    /// Keys removed by the eviction actor.
    pub evicted_keys: u64,
    /// Failed stores, failed requests, and locked keys that did not load.
    pub errors: u64,
    /// Chunks and their size.
    pub chunks: usize,
    /// Bytes per chunk.
    pub chunk_size: usize,
    /// Keys per request.
    pub batch: usize,
    /// Requests in flight.
    pub concurrency: usize,
    /// Lookup hits in the lookup phase.
    pub lookup_hits: usize,
    /// Keys loaded in the load phase.
    pub load_hits: usize,
    /// Per phase timings.
    pub phases: Vec<PhaseReport>,
    /// Plain read loop over the same files (fs only), GB/s, best of two runs around the load.
    pub baseline_read_gbps: Option<f64>,
    /// `load_gbps / baseline_read_gbps`.
    pub load_vs_baseline: Option<f64>,
    /// Keys stored by the overfill phase.
    pub overfill_keys: usize,
    /// Final usage per adapter.
    pub usage: Vec<kvtier_actors::Usage>,
    /// Each adapter's status after the lookups (backend details such as cache and request
    /// counters, circuit-breaker state).
    pub status: serde_json::Value,
    /// With an `s3` adapter: the raw aws-sdk-s3 baseline from the same run.
    pub s3_baseline: Option<S3Baseline>,
    /// Peak resident memory of the process, MiB (includes the bench's own payloads and buffers
    /// unless `stream` is set).
    pub peak_rss_mib: f64,
    /// Streaming mode: payloads and buffers exist only while in flight.
    pub stream: bool,
    /// Host-arena mode: stores and loads used regions of one host arena, in place.
    pub host_arena: bool,
    /// Bytes a host that owns its memory no longer copies in arena mode: each stored chunk
    /// into a `Bytes`, and each loaded chunk out of a `BytesMut` into its arena (0 without
    /// `--host-arena`).
    pub host_copies_saved_bytes: u64,
    /// Payload bytes the pipeline can hold in flight: `concurrency × batch × chunk_size`.
    pub bytes_in_flight_mib: f64,
    /// The adapters, secrets redacted.
    pub adapters: serde_json::Value,
    /// The tier's metrics at the end of the run, `series → value` (`None` with metrics off).
    pub metrics: Option<std::collections::BTreeMap<String, f64>>,
}

/// What a pipeline run measured, as [`super::run`] gathers it.
pub(super) struct Measured {
    /// Every timed phase, in run order.
    pub(super) phases: Vec<PhaseReport>,
    /// The load phase's findings.
    pub(super) load: LoadOutcome,
    /// Keys the lookup phase locked.
    pub(super) lookup_hits: usize,
    /// Failed stores, failed requests, and locked keys that did not load.
    pub(super) errors: u64,
    /// Keys removed by the eviction actor.
    pub(super) evicted_keys: u64,
    /// Keys stored by the overfill phase.
    pub(super) overfill_keys: usize,
    /// Final usage per adapter.
    pub(super) usage: Vec<kvtier_actors::Usage>,
    /// Each adapter's status after the lookups.
    pub(super) status: serde_json::Value,
    /// The raw aws-sdk-s3 baseline, with an `s3` adapter.
    pub(super) s3_baseline: Option<S3Baseline>,
    /// The tier's metrics at the end, `series → value`.
    pub(super) metrics: Option<std::collections::BTreeMap<String, f64>>,
    /// The adapters, secrets redacted.
    pub(super) adapters: serde_json::Value,
}

impl BenchReport {
    /// The report of a pipeline run with `opts`.
    pub(super) fn new(opts: BenchOptions, m: Measured) -> Self {
        let load = m.load;
        let store = m.phases.iter().find(|p| p.phase == "store").cloned();
        let store = store.expect("store phase ran");
        let lookup = m.phases.iter().find(|p| p.phase == "lookup").cloned();
        let lookup = lookup.expect("lookup phase ran");
        let baseline = load.baseline_read_gbps;
        BenchReport {
            client: opts.client,
            store_gbps: store.gbps,
            load_gbps: load.phase.gbps,
            lookup_keys_per_s: lookup.keys_per_s,
            verified: load.mismatched == 0 && load.hits > 0,
            evicted_keys: m.evicted_keys,
            errors: m.errors,
            chunks: opts.chunks,
            chunk_size: opts.chunk_size,
            batch: opts.batch,
            concurrency: opts.concurrency,
            lookup_hits: m.lookup_hits,
            load_hits: load.hits,
            baseline_read_gbps: baseline,
            load_vs_baseline: baseline.map(|b| load.phase.gbps / b),
            overfill_keys: m.overfill_keys,
            s3_baseline: m.s3_baseline,
            status: m.status,
            peak_rss_mib: peak_rss_bytes() as f64 / (1024.0 * 1024.0),
            stream: opts.stream,
            host_arena: opts.host_arena,
            host_copies_saved_bytes: if opts.host_arena {
                store.bytes + load.phase.bytes
            } else {
                0
            },
            bytes_in_flight_mib: (opts.concurrency * opts.batch * opts.chunk_size) as f64
                / (1024.0 * 1024.0),
            phases: m.phases,
            usage: m.usage,
            metrics: m.metrics,
            adapters: m.adapters,
        }
    }
}

/// Prints the report: one JSON object with `json`, else the table.
pub(super) fn print(r: &BenchReport, json: bool) {
    if json {
        println!("{}", serde_json::to_string(r).unwrap_or_default());
    } else {
        print_table(r);
    }
}

/// The process exit code for a finished run: success only if every byte verified and nothing
/// failed.
pub(super) fn exit_code(r: &BenchReport) -> i32 {
    if r.verified && r.errors == 0 {
        EXIT_OK
    } else {
        EXIT_FAILURE
    }
}

fn print_table(r: &BenchReport) {
    println!(
        "kvtier bench: {} chunks x {} ({}), batch {}, concurrency {}",
        r.chunks,
        human_bytes(r.chunk_size as u64),
        human_bytes((r.chunks * r.chunk_size) as u64),
        r.batch,
        r.concurrency
    );
    if let Some(adapters) = r.adapters.as_array() {
        for (i, a) in adapters.iter().enumerate() {
            println!("  adapter #{i}: {a}");
        }
    }
    println!(
        "{:<9} {:>7} {:>12} {:>14} {:>10} {:>10}",
        "phase", "keys", "GB/s", "keys/s", "p50 ms", "p99 ms"
    );
    for p in &r.phases {
        println!(
            "{:<9} {:>7} {:>12.3} {:>14.0} {:>10.3} {:>10.3}",
            p.phase, p.keys, p.gbps, p.keys_per_s, p.p50_ms, p.p99_ms
        );
    }
    if let Some(b) = &r.s3_baseline {
        for p in [&b.put, &b.get] {
            println!(
                "{:<9} {:>7} {:>12.3} {:>14.0} {:>10.3} {:>10.3}",
                p.phase, p.keys, p.gbps, p.keys_per_s, p.p50_ms, p.p99_ms
            );
        }
        println!(
            "vs raw aws-sdk-s3: store {:.2}x, load {:.2}x",
            b.store_vs_raw, b.load_vs_raw
        );
    }
    println!("client CPU s/GiB (minor page faults, context switches in the phase):");
    for p in r
        .phases
        .iter()
        .chain(r.s3_baseline.iter().flat_map(|b| [&b.put, &b.get]))
    {
        if let Some(c) = p.cpu_s_per_gib {
            println!(
                "  {:<9} {c:.3} ({} faults, {} switches)",
                p.phase, p.minor_faults, p.context_switches
            );
        }
    }
    println!("peak RSS: {:.0} MiB", r.peak_rss_mib);
    if let (Some(b), Some(ratio)) = (r.baseline_read_gbps, r.load_vs_baseline) {
        println!("plain read loop over the same files: {b:.3} GB/s; load / plain = {ratio:.2}");
    }
    println!(
        "lookup hits {}/{}, loads {}/{}, evicted {} keys (overfill {} keys)",
        r.lookup_hits, r.chunks, r.load_hits, r.chunks, r.evicted_keys, r.overfill_keys
    );
    for u in &r.usage {
        println!(
            "usage #{}: {} keys, {} of {} ({})",
            u.adapter,
            u.keys,
            human_bytes(u.used_bytes),
            human_bytes(u.capacity_bytes),
            if u.fraction < 0.0 {
                "no capacity".to_owned()
            } else {
                format!("{:.1}%", u.fraction * 100.0)
            }
        );
    }
    println!(
        "verified: {}, errors: {}",
        if r.verified { "yes" } else { "NO" },
        r.errors
    );
}
