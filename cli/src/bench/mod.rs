//! `kvtier bench`: the main job. It plays a serving process against the configured adapters.
//!
//! Phases: **store** N chunks of random KV data spread over several models, ranks and cache
//! salts; **lookup** (and lock) them; **load** them into caller-owned buffers and verify every
//! byte; **unlock**. With an `fs` adapter it also times a plain read loop over the same files
//! (before and after the load phase) and reports the ratio. With a capacity and an LRU policy it
//! then **overfills** the capacity so eviction runs, and reports what was evicted and the final
//! usage. With no adapter configured it runs on the embedded default: an `fs` adapter in a fresh
//! temporary directory with a capacity just above the data set.

use std::io::Read;
use std::path::PathBuf;
use std::time::{Duration, Instant};

use bytes::{Bytes, BytesMut};
use futures_util::stream::{self, StreamExt};
use hdrhistogram::Histogram;
use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};
use kvtier_actors::backends::fs::file_name;
use kvtier_actors::config::EvictionConfig;
use kvtier_actors::{HostRegion, LoadBuf, ObjectKey};
use rand::{RngCore, SeedableRng};
use serde::Serialize;

use kvtier::config::{AdapterConfig, AdapterSpec, TierConfig};
use kvtier::Tier;

use crate::common::{human_bytes, parse_size, ConfigArgs, EXIT_FAILURE, EXIT_OK};

mod alloc;
mod plot;
#[cfg(feature = "s3")]
mod raw_s3;
pub mod simulate;
pub mod trace;

#[global_allocator]
static ALLOCATOR: alloc::Counting = alloc::Counting;

const MODELS: [&str; 3] = ["llama-3.1-8b", "mistral-7b", "qwen2.5-72b"];
const SALTS: [Option<&str>; 3] = [None, Some("tenant-a"), Some("tenant-b")];
const RANKS: u32 = 4;

/// Command-line arguments of `kvtier bench`.
#[derive(Debug, Clone, clap::Args)]
pub struct BenchArgs {
    /// Configuration.
    #[command(flatten)]
    pub cfg: ConfigArgs,
    /// Number of chunks.
    #[arg(long, default_value_t = 256)]
    pub chunks: usize,
    /// Bytes per chunk (suffixes K, KiB, M, MiB, G, GiB are binary).
    #[arg(long, default_value = "4MiB")]
    pub chunk_size: String,
    /// Keys per request.
    #[arg(long, default_value_t = 16)]
    pub batch: usize,
    /// Requests in flight.
    #[arg(long, default_value_t = 4)]
    pub concurrency: usize,
    /// Print one JSON object instead of the table.
    #[arg(long)]
    pub json: bool,
    /// Streaming mode, to measure memory: payloads are generated per batch and buffers exist
    /// only while their batch is in flight, so peak RSS can be compared with the bytes in flight.
    /// Generation and verification then run inside the timed phases, and the baselines are
    /// skipped.
    #[arg(long)]
    pub stream: bool,
    /// Which client moves the bytes: the full kvtier pipeline, or (with an `s3` adapter) only
    /// the raw aws-sdk-s3 loop, for `scripts/compare/compare.sh`.
    #[arg(long, value_enum, default_value_t = BenchClient::Pipeline)]
    pub client: BenchClient,
    /// Skip the raw aws-sdk-s3 baseline that follows the pipeline with an `s3` adapter.
    #[arg(long)]
    pub no_baseline: bool,
    /// Delete the bench's objects at the end (the pipeline's keys; the raw loop always cleans up).
    #[arg(long)]
    pub cleanup: bool,
    /// Play a host that owns its KV memory: one preallocated arena carved into chunk-sized
    /// regions; stores read from the regions and loads write into them, with no copy on
    /// either side (`HostRegion`). Without it, the bench hands kvtier owned `Bytes` and
    /// `BytesMut`, as a host with no arena would.
    #[arg(long)]
    pub host_arena: bool,
    /// Replay a request trace (JSON lines with `hash_ids`, as the Mooncake traces) instead of
    /// the phases: per request, lookup-and-lock the block chain, load the longest prefix found,
    /// store the missing blocks, unlock. See docs/cli.md, "Trace replay".
    #[arg(long, value_name = "FILE")]
    pub trace: Option<PathBuf>,
    /// With `--trace`: bytes per block (required for a replay; the simulation ignores sizes).
    #[arg(long, value_name = "BYTES")]
    pub block_size: Option<String>,
    /// With `--trace`: capacity as a fraction of the trace's unique blocks (replay default 0.1;
    /// with `--simulate` the only capacity simulated instead of 2, 5, 10, 20 and 40 %).
    #[arg(long, value_name = "F")]
    pub capacity_fraction: Option<f64>,
    /// With `--trace`: wall milliseconds per trace millisecond (0, the default: no waiting).
    #[arg(long, value_name = "X", default_value_t = 0.0)]
    pub time_scale: f64,
    /// With `--trace`: simulate offline (no I/O) every policy and Belady's optimum instead of
    /// replaying on the configured adapters (plus the first adapter's own `eviction` settings,
    /// when they are not its policy's defaults, as a row named `POLICY (configured)`).
    #[arg(long)]
    pub simulate: bool,
    /// Serve the tier's Prometheus metrics at `http://ADDR/metrics` while the bench runs
    /// (port 0: a free port; the address is printed on stderr).
    #[arg(long, value_name = "ADDR")]
    pub metrics_addr: Option<std::net::SocketAddr>,
    /// Draw the run's metrics over time (throughput, requests, usage, in flight) into this
    /// SVG file.
    #[arg(long, value_name = "FILE.svg")]
    pub plot: Option<PathBuf>,
}

/// `kvtier bench --trace`: a replay, or with `--simulate` the offline simulation.
pub fn trace_cli(args: &BenchArgs, config: TierConfig) -> Result<i32, String> {
    let path = args.trace.as_ref().expect("--trace");
    if let Some(f) = args.capacity_fraction {
        if !(f.is_finite() && f > 0.0) {
            return Err(format!("--capacity-fraction must be > 0, got {f}"));
        }
    }
    if !(args.time_scale.is_finite() && args.time_scale >= 0.0) {
        return Err(format!(
            "--time-scale must be >= 0, got {}",
            args.time_scale
        ));
    }
    let block_size = match &args.block_size {
        Some(b) => match parse_size(b) {
            Some(n) if n > 0 => Some(n),
            _ => {
                return Err(format!(
                    "--block-size {b:?}: expected bytes > 0, like 256KiB"
                ))
            }
        },
        None => None,
    };
    let trace = trace::Trace::load(path)?;
    if args.simulate {
        let caps: Vec<f64> = match args.capacity_fraction {
            Some(f) => vec![f],
            None => simulate::DEFAULT_CAPACITIES.to_vec(),
        };
        // The first adapter's own eviction settings, when they are not a policy's defaults,
        // get a row of their own: what a user is about to deploy.
        let configured = config
            .adapters
            .first()
            .and_then(|a| a.common.eviction.as_ref());
        let rows = simulate::simulate(
            &trace,
            &caps,
            block_size.unwrap_or(1 << 20) as u64,
            configured,
        );
        if args.json {
            println!("{}", serde_json::to_string(&rows).unwrap_or_default());
        } else {
            println!(
                "{} requests, {} unique blocks; capacity as a share of the unique blocks",
                trace.requests.len(),
                trace.unique_blocks
            );
            simulate::print_rows(&rows);
        }
        return Ok(EXIT_OK);
    }
    let block_size = block_size.ok_or("--trace needs --block-size (or --simulate)")?;
    let opts = trace::ReplayOptions {
        block_size,
        capacity_fraction: args.capacity_fraction.unwrap_or(0.1),
        time_scale: args.time_scale,
        concurrency: args.concurrency.max(1),
    };
    // From here on a failure is the store's (it could not be opened, say), not the command
    // line's: exit code 1, as the other bench runs.
    let report =
        match actix::System::new().block_on(async { trace::replay(config, &trace, opts).await }) {
            Ok(r) => r,
            Err(msg) => {
                eprintln!("error: {msg}");
                return Ok(EXIT_FAILURE);
            }
        };
    if args.json {
        println!("{}", serde_json::to_string(&report).unwrap_or_default());
    } else {
        trace::print_replay(&report);
    }
    Ok(if report.errors == 0 {
        EXIT_OK
    } else {
        EXIT_FAILURE
    })
}

/// The client a bench run measures.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum BenchClient {
    /// Controller → backend actors → storage: store, lookup and lock, load, unlock.
    Pipeline,
    /// Plain concurrent aws-sdk-s3 PUT/GET with no actors (needs an `s3` adapter), bounded by
    /// the adapter's `s3_num_io_threads` requests in flight.
    RawS3,
}

/// Validated bench parameters.
#[derive(Debug, Clone, Copy)]
pub struct BenchOptions {
    /// Number of chunks.
    pub chunks: usize,
    /// Bytes per chunk.
    pub chunk_size: usize,
    /// Keys per request.
    pub batch: usize,
    /// Requests in flight.
    pub concurrency: usize,
    /// JSON output.
    pub json: bool,
    /// Draw a progress bar (on a terminal).
    pub progress: bool,
    /// Streaming mode (see [`BenchArgs::stream`]).
    pub stream: bool,
    /// The client measured.
    pub client: BenchClient,
    /// Skip the raw baseline after the pipeline (read only by the `s3` feature's baseline).
    #[cfg_attr(not(feature = "s3"), allow(dead_code))]
    pub no_baseline: bool,
    /// Delete the pipeline's objects at the end.
    pub cleanup: bool,
    /// Host-arena mode (see [`BenchArgs::host_arena`]).
    pub host_arena: bool,
    /// Where to serve `/metrics` (see [`BenchArgs::metrics_addr`]).
    pub metrics_addr: Option<std::net::SocketAddr>,
}

impl TryFrom<&BenchArgs> for BenchOptions {
    type Error = String;

    fn try_from(a: &BenchArgs) -> Result<Self, String> {
        let chunk_size = parse_size(&a.chunk_size).ok_or_else(|| {
            format!(
                "--chunk-size {:?}: expected bytes like 4MiB or 262144",
                a.chunk_size
            )
        })?;
        if chunk_size == 0 {
            return Err("--chunk-size must be > 0".into());
        }
        for (name, v) in [
            ("--chunks", a.chunks),
            ("--batch", a.batch),
            ("--concurrency", a.concurrency),
        ] {
            if v == 0 {
                return Err(format!("{name} must be > 0"));
            }
        }
        if a.host_arena && a.stream {
            return Err(
                "--host-arena and --stream cannot be combined: the arena holds every chunk".into(),
            );
        }
        Ok(Self {
            host_arena: a.host_arena,
            metrics_addr: a.metrics_addr,
            chunks: a.chunks,
            chunk_size,
            batch: a.batch,
            concurrency: a.concurrency,
            json: a.json,
            progress: !a.json,
            stream: a.stream,
            client: a.client,
            no_baseline: a.no_baseline,
            cleanup: a.cleanup,
        })
    }
}

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

/// Runs the bench for the CLI and prints the report; returns the exit code.
pub async fn run_cli(config: TierConfig, opts: BenchOptions, plot: Option<PathBuf>) -> i32 {
    match run(config, opts, plot).await {
        Ok(report) => {
            if opts.json {
                println!("{}", serde_json::to_string(&report).unwrap_or_default());
            } else {
                print_table(&report);
            }
            if report.verified && report.errors == 0 {
                EXIT_OK
            } else {
                EXIT_FAILURE
            }
        }
        Err(e) => {
            eprintln!("error: {e}");
            EXIT_FAILURE
        }
    }
}

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

/// A snapshot of this process's resource counters (all threads), from one `getrusage` call;
/// zeros if it fails.
#[derive(Clone, Copy)]
struct Usage {
    cpu_s: f64,
    peak_rss_bytes: u64,
    minor_faults: u64,
    context_switches: u64,
}

impl Usage {
    fn now() -> Self {
        use nix::sys::resource::{getrusage, UsageWho};
        let Ok(ru) = getrusage(UsageWho::RUSAGE_SELF) else {
            return Self {
                cpu_s: 0.0,
                peak_rss_bytes: 0,
                minor_faults: 0,
                context_switches: 0,
            };
        };
        let tv = |t: nix::sys::time::TimeVal| t.tv_sec() as f64 + t.tv_usec() as f64 / 1e6;
        Self {
            cpu_s: tv(ru.user_time()) + tv(ru.system_time()),
            peak_rss_bytes: ru.max_rss().max(0) as u64 * 1024,
            minor_faults: ru.minor_page_faults().max(0) as u64,
            context_switches: (ru.voluntary_context_switches().max(0)
                + ru.involuntary_context_switches().max(0)) as u64,
        }
    }
}

/// This process's peak resident set size, in bytes.
pub fn peak_rss_bytes() -> u64 {
    Usage::now().peak_rss_bytes
}

pub(crate) struct Timer {
    name: &'static str,
    hist: Histogram<u64>,
    start: Instant,
    usage: Usage,
    large: (u64, u64),
    chunk_allocs: u64,
}

impl Timer {
    pub(crate) fn new(name: &'static str) -> Self {
        Self {
            name,
            hist: Histogram::new_with_bounds(1, 600_000_000, 3).expect("valid histogram bounds"),
            start: Instant::now(),
            usage: Usage::now(),
            large: alloc::large(),
            chunk_allocs: alloc::chunk_sized(),
        }
    }
    pub(crate) fn record(&mut self, d: Duration) {
        let _ = self.hist.record((d.as_micros() as u64).max(1));
    }
    pub(crate) fn finish(self, keys: usize, bytes: u64) -> PhaseReport {
        let secs = self.start.elapsed().as_secs_f64().max(1e-9);
        let now = Usage::now();
        let cpu_s = now.cpu_s - self.usage.cpu_s;
        PhaseReport {
            peak_rss_mib: now.peak_rss_bytes as f64 / (1024.0 * 1024.0),
            cpu_s,
            cpu_s_per_gib: (bytes > 0).then(|| cpu_s / (bytes as f64 / kvtier_actors::config::GIB)),
            phase: self.name.into(),
            keys,
            bytes,
            seconds: secs,
            gbps: bytes as f64 / secs / 1e9,
            keys_per_s: keys as f64 / secs,
            p50_ms: self.hist.value_at_quantile(0.5) as f64 / 1000.0,
            p99_ms: self.hist.value_at_quantile(0.99) as f64 / 1000.0,
            minor_faults: now.minor_faults - self.usage.minor_faults,
            context_switches: now.context_switches - self.usage.context_switches,
            large_allocs: alloc::large().0 - self.large.0,
            large_alloc_mib: (alloc::large().1 - self.large.1) as f64 / (1024.0 * 1024.0),
            chunk_allocs: alloc::chunk_sized() - self.chunk_allocs,
        }
    }
}

/// Runs the bench and returns its report.
pub async fn run(
    mut config: TierConfig,
    opts: BenchOptions,
    plot: Option<PathBuf>,
) -> Result<BenchReport, String> {
    alloc::set_chunk_size(opts.chunk_size);
    if opts.client == BenchClient::RawS3 {
        #[cfg(feature = "s3")]
        return raw_s3::raw_only(&config, opts).await;
        #[cfg(not(feature = "s3"))]
        return Err("--client raw-s3: this kvtier was built without the `s3` feature".into());
    }
    let data_bytes = (opts.chunks * opts.chunk_size) as u64;
    let _tmp = if config.adapters.is_empty() {
        let dir = tempfile::Builder::new()
            .prefix("kvtier-bench-")
            .tempdir()
            .map_err(|e| format!("cannot create a temporary directory: {e}"))?;
        let mut a = AdapterConfig::fs(dir.path());
        // Room for the data set below the watermark, so the overfill phase is what evicts.
        a.common.max_capacity_gb = data_bytes as f64 * 1.375 / kvtier_actors::config::GIB;
        a.common.eviction = Some(EvictionConfig::default());
        config.adapters.push(a);
        Some(dir)
    } else {
        None
    };
    let adapters_json = config.to_redacted_json()["adapters"].clone();
    let tier = Tier::start(&config).await.map_err(|e| e.to_string())?;
    let _metrics_server = match opts.metrics_addr {
        None => None,
        Some(addr) => {
            let registry = tier.registry().cloned().ok_or_else(|| {
                "--metrics-addr: metrics are off in this configuration (metrics = false)".to_owned()
            })?;
            let server = crate::metrics_server::serve(addr, registry)?;
            eprintln!("metrics: http://{}/metrics", server.addr);
            Some(server)
        }
    };
    let sampler = match (&plot, tier.registry()) {
        (None, _) => None,
        (Some(_), None) => {
            return Err("--plot: metrics are off in this configuration (metrics = false)".into())
        }
        (Some(_), Some(r)) => Some(plot::Sampler::start(r.clone())),
    };
    let nonce: u64 = rand::random();
    let work = Workload::new(0, opts.chunks, opts.chunk_size, nonce, !opts.stream);
    let batches: Vec<std::ops::Range<usize>> = (0..opts.chunks)
        .step_by(opts.batch)
        .map(|s| s..(s + opts.batch).min(opts.chunks))
        .collect();
    let bar = progress_bar(opts, opts.chunks as u64 * 3);
    let mut errors = 0u64;
    let mut phases = Vec::new();
    let mut arena = opts.host_arena.then(|| Arena::new(&work, opts));

    // Store.
    let (phase, failed) = store_phase(&tier, &work, &batches, opts, &bar, arena.as_ref()).await;
    errors += failed;
    phases.push(phase);

    // Lookup and lock.
    let mut timer = Timer::new("lookup");
    let hits: Vec<(
        std::ops::Range<usize>,
        Result<kvtier_actors::Bitmap, String>,
        Duration,
    )> = stream::iter(batches.iter().cloned())
        .map(|r| {
            let keys = work.keys[r.clone()].to_vec();
            let tier = &tier;
            async move {
                let t = Instant::now();
                let res = tier.lookup_and_lock(keys).await.map_err(|e| e.to_string());
                (r, res, t.elapsed())
            }
        })
        .buffer_unordered(opts.concurrency)
        .inspect(|(r, _, _)| bar.inc(r.len() as u64))
        .collect()
        .await;
    let mut locked = vec![false; opts.chunks];
    for (r, res, d) in &hits {
        timer.record(*d);
        match res {
            Ok(bits) => {
                for (i, b) in r.clone().zip(bits.iter()) {
                    locked[i] = b;
                }
            }
            Err(_) => errors += r.len() as u64,
        }
    }
    let lookup_hits = locked.iter().filter(|b| **b).count();
    phases.push(timer.finish(opts.chunks, 0));

    // Plain read loop over the same files, around the load phase.
    let fs_dir = config.adapters.iter().find_map(|a| match &a.spec {
        AdapterSpec::Fs(c) => Some((c.base_path.clone(), a.common.object_name_format)),
        _ => None,
    });
    let paths: Option<Vec<PathBuf>> = fs_dir.filter(|_| !opts.stream).map(|(dir, fmt)| {
        work.keys
            .iter()
            .zip(&locked)
            .filter(|(_, l)| **l)
            .map(|(k, _)| dir.join(file_name(k, fmt)))
            .collect()
    });
    let mut baselines = Vec::new();
    let (load_phase, load_hits, mismatched, missed_locked, mut buffers) = if opts.stream {
        let (phase, hits, mismatched, missed) =
            stream_load(&tier, &work, &batches, &locked, opts, &bar).await;
        (phase, hits, mismatched, missed, Vec::new())
    } else {
        retained_load(
            &tier,
            &work,
            &batches,
            &locked,
            opts,
            &bar,
            paths.as_deref(),
            &mut baselines,
            arena.as_mut(),
        )
        .await
    };
    errors += missed_locked;
    if let Some(p) = &paths {
        baselines.push(match arena.as_mut() {
            Some(a) => plain_read_loop(p, a.chunks_mut()),
            None => plain_read_loop(p, buffers.iter_mut().flatten().map(|b| &mut b[..])),
        });
    }
    drop(buffers);
    phases.push(load_phase.clone());

    // Unlock, then a round trip so every unlock has been applied.
    for r in &batches {
        tier.unlock(work.keys[r.clone()].to_vec());
    }
    let _ = tier.usage().await;
    bar.finish_and_clear();

    // A second lookup of the same keys: served from caches where a backend has one (the
    // hfbucket metadata cache); `status` shows the cache's hit and request counters.
    let mut timer = Timer::new("lookup2");
    let again: Vec<Duration> = stream::iter(batches.iter().cloned())
        .map(|r| {
            let keys = work.keys[r].to_vec();
            let tier = &tier;
            async move {
                let t = Instant::now();
                if let Ok(bits) = tier.lookup_and_lock(keys.clone()).await {
                    let hit: Vec<_> = keys
                        .into_iter()
                        .zip(bits.iter())
                        .filter(|(_, b)| *b)
                        .map(|(k, _)| k)
                        .collect();
                    tier.unlock(hit);
                }
                t.elapsed()
            }
        })
        .buffer_unordered(opts.concurrency)
        .collect()
        .await;
    again.iter().for_each(|d| timer.record(*d));
    phases.push(timer.finish(opts.chunks, 0));
    let status = tier
        .status()
        .await
        .map(|s| serde_json::to_value(s.adapters).unwrap_or_default())
        .unwrap_or_default();

    // The raw aws-sdk-s3 baseline, same objects and requests in flight.
    #[cfg(feature = "s3")]
    let s3_baseline = raw_s3::after_pipeline(&config, opts, nonce, &phases, &load_phase).await?;
    #[cfg(not(feature = "s3"))]
    let s3_baseline = None;

    // Overfill past the smallest LRU capacity so eviction runs.
    let overfill = overfill_target(&config, data_bytes, opts.chunk_size);
    if overfill > 0 {
        let extra = Workload::new(opts.chunks, overfill, opts.chunk_size, nonce, !opts.stream);
        let extra_batches: Vec<std::ops::Range<usize>> = (0..overfill)
            .step_by(opts.batch)
            .map(|s| s..(s + opts.batch).min(overfill))
            .collect();
        let bar = progress_bar(opts, overfill as u64);
        let (mut phase, failed) =
            store_phase(&tier, &extra, &extra_batches, opts, &bar, None).await;
        bar.finish_and_clear();
        phase.phase = "overfill".into();
        errors += failed;
        phases.push(phase);
        settle_eviction(&tier, &config).await;
    }
    let evicted_keys = tier
        .eviction_stats()
        .await
        .map(|s| s.iter().map(|(_, s)| s.evicted_keys).sum())
        .unwrap_or(0);
    let usage = tier.usage().await.map(|u| u.adapters).unwrap_or_default();
    if opts.cleanup {
        let mut keys = work.keys.clone();
        keys.extend(Workload::new(opts.chunks, overfill, opts.chunk_size, nonce, false).keys);
        for chunk in keys.chunks(1000) {
            if let Err(e) = tier.delete(chunk.to_vec()).await {
                tracing::warn!(error = %e, "bench cleanup failed");
            }
        }
    }
    let metrics = tier
        .metrics_text()
        .map(|t| crate::metrics_server::samples(&t));
    if let (Some(sampler), Some(path)) = (sampler, &plot) {
        let kind = config.adapters.first().map_or("?", |a| a.spec.kind());
        let title = format!(
            "kvtier bench: {} × {} on {kind}, batch {}, concurrency {}",
            opts.chunks,
            crate::common::human_bytes(opts.chunk_size as u64),
            opts.batch,
            opts.concurrency
        );
        sampler.finish(path, &title)?;
        eprintln!("plot: {}", path.display());
    }
    tier.close().await;

    let baseline = baselines
        .iter()
        .copied()
        .fold(None, |m: Option<f64>, b| Some(m.map_or(b, |m| m.max(b))));
    let get = |name: &str| phases.iter().find(|p| p.phase == name).cloned();
    let store = get("store").expect("store phase ran");
    let lookup = get("lookup").expect("lookup phase ran");
    Ok(BenchReport {
        client: opts.client,
        store_gbps: store.gbps,
        load_gbps: load_phase.gbps,
        lookup_keys_per_s: lookup.keys_per_s,
        verified: mismatched == 0 && load_hits > 0,
        evicted_keys,
        errors,
        chunks: opts.chunks,
        chunk_size: opts.chunk_size,
        batch: opts.batch,
        concurrency: opts.concurrency,
        lookup_hits,
        load_hits,
        baseline_read_gbps: baseline,
        load_vs_baseline: baseline.map(|b| load_phase.gbps / b),
        overfill_keys: overfill,
        s3_baseline,
        status,
        peak_rss_mib: peak_rss_bytes() as f64 / (1024.0 * 1024.0),
        stream: opts.stream,
        host_arena: opts.host_arena,
        host_copies_saved_bytes: if opts.host_arena {
            store.bytes + load_phase.bytes
        } else {
            0
        },
        bytes_in_flight_mib: (opts.concurrency * opts.batch * opts.chunk_size) as f64
            / (1024.0 * 1024.0),
        phases,
        usage,
        metrics,
        adapters: adapters_json,
    })
}

type Loaded = (
    std::ops::Range<usize>,
    Result<kvtier_actors::LoadReport, String>,
    Duration,
);

/// The load phase with every buffer allocated and pre-faulted up front and kept for
/// verification after the clock stops (and for the plain-read baseline, run before it).
#[allow(clippy::too_many_arguments)]
async fn retained_load(
    tier: &Tier,
    work: &Workload,
    batches: &[std::ops::Range<usize>],
    locked: &[bool],
    opts: BenchOptions,
    bar: &ProgressBar,
    paths: Option<&[PathBuf]>,
    baselines: &mut Vec<f64>,
    arena: Option<&mut Arena>,
) -> (PhaseReport, usize, usize, u64, Vec<Vec<BytesMut>>) {
    // Caller buffers, pre-faulted so no phase pays for page faults: owned `BytesMut`, or
    // regions of the host arena.
    let mut buffers: Vec<Vec<LoadBuf>> = match arena {
        Some(a) => {
            if let Some(p) = paths {
                baselines.push(plain_read_loop(p, a.chunks_mut()));
            }
            a.mem.fill(0xA5);
            batches.iter().map(|r| a.regions(r.clone())).collect()
        }
        None => {
            let mut owned: Vec<Vec<BytesMut>> = batches
                .iter()
                .map(|r| {
                    r.clone()
                        .map(|_| {
                            let mut b = BytesMut::zeroed(opts.chunk_size);
                            b.fill(0xA5);
                            b
                        })
                        .collect()
                })
                .collect();
            if let Some(p) = paths {
                baselines.push(plain_read_loop(
                    p,
                    owned.iter_mut().flatten().map(|b| &mut b[..]),
                ));
            }
            owned
                .into_iter()
                .map(|v| v.into_iter().map(LoadBuf::from).collect())
                .collect()
        }
    };

    // Load into the caller buffers, then verify.
    let mut timer = Timer::new("load");
    let loaded: Vec<Loaded> = stream::iter(batches.iter().cloned().zip(buffers.drain(..)))
        .map(|(r, bufs)| {
            let keys = work.keys[r.clone()].to_vec();

            async move {
                let t = Instant::now();
                let res: Result<_, String> = Ok(tier.load_bufs(keys, bufs).await);
                (r, res, t.elapsed())
            }
        })
        .buffer_unordered(opts.concurrency)
        .inspect(|(r, _, _)| bar.inc(r.len() as u64))
        .collect()
        .await;
    // Stop the clock before verifying: comparing bytes is the bench's work, not the tier's.
    for (_, _, d) in &loaded {
        timer.record(*d);
    }
    let load_hits: usize = loaded
        .iter()
        .filter_map(|(_, res, _)| res.as_ref().ok())
        .map(|rep| rep.hits.count_ones())
        .sum();
    let load_phase = timer.finish(opts.chunks, (load_hits * opts.chunk_size) as u64);
    let mut mismatched = 0usize;
    let mut missed_locked = 0u64;
    for (r, res, _) in &loaded {
        match res {
            Ok(rep) => {
                for ((i, hit), buf) in r.clone().zip(rep.hits.iter()).zip(&rep.buffers) {
                    if hit && !work.matches(i, buf) {
                        mismatched += 1;
                    } else if !hit && locked[i] {
                        missed_locked += 1;
                    }
                }
            }
            Err(_) => missed_locked += r.len() as u64,
        }
    }
    let buffers = loaded
        .into_iter()
        .filter_map(|(_, res, _)| res.ok()?.into_parts::<BytesMut>().ok().map(|(_, b)| b))
        .collect();
    (load_phase, load_hits, mismatched, missed_locked, buffers)
}

/// The load phase in streaming mode: each batch allocates its buffers when it starts and
/// verifies and drops them when it ends.
async fn stream_load(
    tier: &Tier,
    work: &Workload,
    batches: &[std::ops::Range<usize>],
    locked: &[bool],
    opts: BenchOptions,
    bar: &ProgressBar,
) -> (PhaseReport, usize, usize, u64) {
    let mut timer = Timer::new("load");
    let results: Vec<(usize, usize, u64, Duration)> = stream::iter(batches.iter().cloned())
        .map(|r| async move {
            let keys = work.keys[r.clone()].to_vec();
            let bufs = r
                .clone()
                .map(|_| BytesMut::zeroed(opts.chunk_size))
                .collect();
            let t = Instant::now();
            let res: Result<_, String> = Ok(tier.load::<BytesMut>(keys, bufs).await);
            let d = t.elapsed();
            let (mut hits, mut bad, mut missed) = (0, 0, 0);
            match res {
                Ok(rep) => {
                    for ((i, hit), buf) in r.clone().zip(rep.hits.iter()).zip(&rep.buffers) {
                        if hit {
                            hits += 1;
                            if !work.matches(i, buf) {
                                bad += 1;
                            }
                        } else if locked[i] {
                            missed += 1;
                        }
                    }
                }
                Err(_) => missed += r.len() as u64,
            }
            (hits, bad, missed, d)
        })
        .buffer_unordered(opts.concurrency)
        .inspect(|(h, _, m, _)| bar.inc(*h as u64 + *m))
        .collect()
        .await;
    let (mut hits, mut bad, mut missed) = (0, 0, 0);
    for (h, b, m, d) in &results {
        timer.record(*d);
        hits += h;
        bad += b;
        missed += m;
    }
    (
        timer.finish(opts.chunks, (hits * opts.chunk_size) as u64),
        hits,
        bad,
        missed,
    )
}

async fn store_phase(
    tier: &Tier,
    work: &Workload,
    batches: &[std::ops::Range<usize>],
    opts: BenchOptions,
    bar: &ProgressBar,
    arena: Option<&Arena>,
) -> (PhaseReport, u64) {
    let mut timer = Timer::new("store");
    let results: Vec<(usize, u64, Duration)> = stream::iter(batches.iter().cloned())
        .map(|r| {
            let keys = work.keys[r.clone()].to_vec();
            let sources = arena.map(|a| a.sources(r.clone()));
            let objects: Vec<Bytes> = match sources {
                Some(_) => Vec::new(),
                None => r.clone().map(|i| work.payload(i)).collect(),
            };
            async move {
                let t = Instant::now();
                let stored = match sources {
                    Some(regions) => tier.store_from(keys, regions).await,
                    None => tier.store(keys, objects).await,
                };
                let failed = match stored {
                    Ok(rep) => {
                        let mut bad = std::collections::HashSet::new();
                        for (_, o) in &rep.adapters {
                            for f in &o.failed {
                                tracing::warn!(error = %f.error, "bench store failed");
                                bad.insert(f.key.clone());
                            }
                        }
                        bad.len() as u64
                    }
                    Err(_) => r.len() as u64,
                };
                (r.len(), failed, t.elapsed())
            }
        })
        .buffer_unordered(opts.concurrency)
        .inspect(|(n, _, _)| bar.inc(*n as u64))
        .collect()
        .await;
    let mut failed = 0;
    for (_, f, d) in &results {
        timer.record(*d);
        failed += f;
    }
    let keys = batches.iter().map(|r| r.len()).sum::<usize>();
    let stored = keys as u64 - failed;
    (timer.finish(keys, stored * opts.chunk_size as u64), failed)
}

/// Reads every file once, sequentially, into the same caller buffers the load phase uses; GB/s.
fn plain_read_loop<'a>(paths: &[PathBuf], buffers: impl Iterator<Item = &'a mut [u8]>) -> f64 {
    let start = Instant::now();
    let mut bytes = 0u64;
    for (p, buf) in paths.iter().zip(buffers) {
        if let Ok(mut f) = std::fs::File::open(p) {
            if f.read_exact(buf).is_ok() {
                bytes += buf.len() as u64;
            }
        }
    }
    bytes as f64 / start.elapsed().as_secs_f64().max(1e-9) / 1e9
}

/// The host's own KV memory in `--host-arena` mode: one allocation, pre-faulted, carved into
/// chunk-sized regions (chunk `i` at `i × chunk_size`), filled with the workload's payloads.
struct Arena {
    mem: Vec<u8>,
    chunk: usize,
}

impl Arena {
    fn new(work: &Workload, opts: BenchOptions) -> Self {
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
    fn regions(&mut self, r: std::ops::Range<usize>) -> Vec<LoadBuf> {
        self.sources(r).into_iter().map(LoadBuf::from).collect()
    }

    /// Regions of chunks `r`.
    fn sources(&self, r: std::ops::Range<usize>) -> Vec<HostRegion> {
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

    fn chunks_mut(&mut self) -> impl Iterator<Item = &mut [u8]> {
        self.mem.chunks_mut(self.chunk)
    }
}

/// Chunks to add so the smallest LRU-evicting adapter ends at 1.2× its capacity (0 if none).
fn overfill_target(config: &TierConfig, stored: u64, chunk_size: usize) -> usize {
    config
        .adapters
        .iter()
        .filter(|a| {
            a.common.capacity_bytes() > 0
                && a.common.eviction.as_ref().is_some_and(|e| {
                    use kvtier_actors::config::EvictionPolicy as P;
                    matches!(e.eviction_policy, P::Lru | P::Arc | P::Flru)
                })
        })
        .map(|a| {
            let target = (a.common.capacity_bytes() as f64 * 1.2) as u64;
            (target.saturating_sub(stored)).div_ceil(chunk_size as u64) as usize
        })
        .min()
        .unwrap_or(0)
}

/// Waits (up to 10 s) until every evicting adapter is below its watermark.
async fn settle_eviction(tier: &Tier, config: &TierConfig) {
    let deadline = Instant::now() + Duration::from_secs(10);
    while Instant::now() < deadline {
        let Ok(usage) = tier.usage().await else {
            return;
        };
        let settled = usage.adapters.iter().all(|u| {
            let a = &config.adapters[u.adapter];
            match &a.common.eviction {
                Some(e) if u.capacity_bytes > 0 => u.fraction < e.trigger_watermark,
                _ => true,
            }
        });
        if settled {
            return;
        }
        actix_rt::time::sleep(Duration::from_millis(20)).await;
    }
}

fn progress_bar(opts: BenchOptions, len: u64) -> ProgressBar {
    if !opts.progress {
        return ProgressBar::hidden();
    }
    let bar = ProgressBar::with_draw_target(Some(len), ProgressDrawTarget::stderr());
    bar.set_style(
        ProgressStyle::with_template("{spinner} [{elapsed_precise}] {bar:40} {pos}/{len} keys")
            .unwrap_or_else(|_| ProgressStyle::default_bar()),
    );
    bar
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
