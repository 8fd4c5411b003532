//! The tier a pipeline run measures, and what watches it: the embedded default when no adapter
//! is configured, the `/metrics` endpoint (`--metrics-addr`) and the metrics sampler that draws
//! `--plot`.
//!
//! Invariants: the embedded default is an `fs` adapter in a fresh temporary directory, removed
//! when the returned guard drops (after the tier has closed), with LRU eviction and a capacity
//! of 1.375 × the data set, so the data set stays below the watermark and only the overfill
//! phase evicts. `--metrics-addr` and `--plot` need the tier's own registry (`metrics = true`):
//! without it they are errors before any phase runs.

use std::path::Path;

use kvtier::config::{AdapterConfig, TierConfig};
use kvtier::Tier;
use kvtier_actors::config::EvictionConfig;

use super::args::BenchOptions;
use super::plot;

/// With no adapter configured, adds the embedded default for `data_bytes` of chunks and returns
/// its directory's guard.
pub(super) fn embedded_default(
    config: &mut TierConfig,
    data_bytes: u64,
) -> Result<Option<tempfile::TempDir>, String> {
    if !config.adapters.is_empty() {
        return Ok(None);
    }
    let dir = tempfile::Builder::new()
        .prefix("kvtier-bench-")
        .tempdir()
        .map_err(|e| format!("cannot create a temporary directory: {e}"))?;
    let mut a = AdapterConfig::fs(dir.path());
    // Room for the data set below the watermark, so the overfill phase is what evicts.
    a.common.max_capacity_gb = data_bytes as f64 * 1.375 / kvtier_actors::config::GIB;
    a.common.eviction = Some(EvictionConfig::default());
    config.adapters.push(a);
    Ok(Some(dir))
}

/// Serves the tier's metrics at `addr` while the returned server lives (`None`: no server).
pub(super) fn metrics_server(
    tier: &Tier,
    addr: Option<std::net::SocketAddr>,
) -> Result<Option<crate::metrics_server::MetricsServer>, String> {
    let Some(addr) = addr else {
        return Ok(None);
    };
    let registry = tier.registry().cloned().ok_or_else(|| {
        "--metrics-addr: metrics are off in this configuration (metrics = false)".to_owned()
    })?;
    let server = crate::metrics_server::serve(addr, registry)?;
    eprintln!("metrics: http://{}/metrics", server.addr);
    Ok(Some(server))
}

/// Starts sampling the tier's metrics for `--plot` (`None` without it).
pub(super) fn sampler(tier: &Tier, plot: Option<&Path>) -> Result<Option<plot::Sampler>, String> {
    match (plot, tier.registry()) {
        (None, _) => Ok(None),
        (Some(_), None) => {
            Err("--plot: metrics are off in this configuration (metrics = false)".into())
        }
        (Some(_), Some(r)) => Ok(Some(plot::Sampler::start(r.clone()))),
    }
}

/// Draws the sampled run into `path`.
pub(super) fn draw(
    sampler: plot::Sampler,
    path: &Path,
    config: &TierConfig,
    opts: BenchOptions,
) -> Result<(), String> {
    let kind = config.adapters.first().map_or("?", |a| a.spec.kind());
    let title = format!(
        "kvtier bench: {} × {} on {kind}, batch {}, concurrency {}",
        opts.chunks,
        crate::common::human_bytes(opts.chunk_size as u64),
        opts.batch,
        opts.concurrency
    );
    sampler.finish(&path.to_path_buf(), &title)?;
    eprintln!("plot: {}", path.display());
    Ok(())
}
