//! `kvtier bench`: the main job. It plays a serving process against the configured adapters.
//!
//! Phases: **store** N chunks of random KV data spread over several models, ranks and cache
//! salts; **lookup** (and lock) them; **load** them into caller-owned buffers and verify every
//! byte; **unlock**. With an `fs` adapter it also times a plain read loop over the same files
//! (before and after the load phase) and reports the ratio. With a capacity and an LRU policy it
//! then **overfills** the capacity so eviction runs, and reports what was evicted and the final
//! usage. With no adapter configured it runs on the embedded default: an `fs` adapter in a fresh
//! temporary directory with a capacity just above the data set.
//!
//! Files, one concern each: [`args`] (the command line and the validated [`BenchOptions`]),
//! [`setup`] (the embedded default, `/metrics`, the plot sampler), [`workload`] (keys, payloads,
//! the host arena), [`phases`] (the phases above, in order) with [`load`] (the load phase's
//! buffers and the plain-read baseline), [`timer`] (what a phase measures), [`report`] (the
//! report, its JSON and its table), [`trace_cmd`] with [`trace`] and [`simulate`] (`--trace`),
//! `raw_s3` (the raw aws-sdk-s3 baseline, feature `s3`), [`plot`] (`--plot`) and [`alloc`] (the
//! counting allocator).

use std::path::PathBuf;

use kvtier::config::TierConfig;
use kvtier::Tier;

use crate::common::EXIT_FAILURE;

mod alloc;
mod args;
mod index_load;
mod load;
mod phases;
mod plot;
#[cfg(feature = "s3")]
mod raw_s3;
mod report;
mod setup;
pub mod simulate;
mod timer;
pub mod trace;
mod trace_cmd;
mod workload;

pub use args::{BenchArgs, BenchClient, BenchOptions};
pub use report::BenchReport;
pub use trace_cmd::trace_cli;

use phases::Phases;
use report::Measured;
use workload::Workload;

#[global_allocator]
static ALLOCATOR: alloc::Counting = alloc::Counting;

/// Runs the bench for the CLI and prints the report; returns the exit code.
pub async fn run_cli(config: TierConfig, opts: BenchOptions, plot: Option<PathBuf>) -> i32 {
    match run(config, opts, plot).await {
        Ok(report) => {
            report::print(&report, opts.json);
            report::exit_code(&report)
        }
        Err(e) => {
            eprintln!("error: {e}");
            EXIT_FAILURE
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
    let _tmp = setup::embedded_default(&mut config, data_bytes)?;
    let adapters = config.to_redacted_json()["adapters"].clone();
    let tier = Tier::start(&config).await.map_err(|e| e.to_string())?;
    let _metrics_server = setup::metrics_server(&tier, opts.metrics_addr)?;
    let sampler = setup::sampler(&tier, plot.as_deref())?;
    let nonce: u64 = rand::random();
    let work = Workload::new(0, opts.chunks, opts.chunk_size, nonce, !opts.stream);

    let mut run = Phases::new(&tier, &config, &work, opts);
    run.store().await;
    let locked = run.lookup().await;
    let load = run.load(&locked).await;
    run.unlock().await;
    run.lookup_again().await;
    let status = run.status().await;
    #[cfg(feature = "s3")]
    let s3_baseline =
        raw_s3::after_pipeline(&config, opts, nonce, &run.phases, &load.phase).await?;
    #[cfg(not(feature = "s3"))]
    let s3_baseline = None;
    let overfill_keys = run.overfill(nonce, data_bytes).await;
    let (evicted_keys, usage) = run.eviction_and_usage().await;
    if opts.cleanup {
        run.cleanup(nonce, overfill_keys).await;
    }
    let metrics = tier
        .metrics_text()
        .map(|t| crate::metrics_server::samples(&t));
    if let (Some(sampler), Some(path)) = (sampler, &plot) {
        setup::draw(sampler, path, &config, opts)?;
    }
    let (phases, errors) = (run.phases, run.errors);
    tier.close().await;

    Ok(BenchReport::new(
        opts,
        Measured {
            phases,
            load,
            lookup_hits: locked.iter().filter(|b| **b).count(),
            errors,
            evicted_keys,
            overfill_keys,
            usage,
            status,
            s3_baseline,
            metrics,
            adapters,
        },
    ))
}
