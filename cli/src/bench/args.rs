//! `kvtier bench`'s command line: [`BenchArgs`] as clap parses them, and [`BenchOptions`], the
//! validated parameters a pipeline run takes.
//!
//! Invariants: a [`BenchOptions`] exists only through [`BenchOptions::try_from`], so every run
//! has `chunks`, `chunk_size`, `batch` and `concurrency` > 0 and never both `stream` and
//! `host_arena` (the arena holds every chunk, which streaming mode exists to avoid). The
//! `--trace` options are checked by [`super::trace_cmd`], not here: a replay takes no
//! [`BenchOptions`].

use std::path::PathBuf;

use serde::Serialize;

use crate::common::{parse_size, ConfigArgs};

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
    /// With `--trace`: replay only the first N requests of the trace (before `--node` splits
    /// them).
    #[arg(long, value_name = "N")]
    pub requests: Option<usize>,
    /// With `--trace`: replay as node I of N of a fleet (`[fleet]`): every N-th request,
    /// starting at request I (0-based), with the capacity of the whole trace (the bucket's). Run
    /// N processes, one per node, on one bucket and one fleet index.
    #[arg(long, value_name = "I/N")]
    pub node: Option<String>,
    /// With `--trace`: load the fleet index alone at this URL (comma-separated: every master
    /// of a cluster, whose counters are summed) with `--nodes` simulated nodes on a store that
    /// keeps nothing, and report requests/s, latency, and the server's CPU and calls per
    /// request. See docs/cli.md, "Fleet index load".
    #[arg(long, value_name = "URL[,URL...]")]
    pub fleet_index: Option<String>,
    /// With `--fleet-index`: simulated nodes (request k goes to node k mod N).
    #[arg(long, value_name = "N", default_value_t = 3)]
    pub nodes: usize,
    /// With `--fleet-index`: requests started per second, open loop (0, the default: as fast
    /// as `--concurrency` requests in flight allow).
    #[arg(long, value_name = "R", default_value_t = 0.0)]
    pub rate: f64,
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
