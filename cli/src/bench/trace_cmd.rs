//! `kvtier bench --trace FILE`: checks the trace options, then runs a replay on the configured
//! adapters ([`super::trace`]) or, with `--simulate`, the offline simulation of every policy
//! ([`super::simulate`]), and prints either as a table or one JSON object.
//!
//! Invariants: a bad option or an unreadable trace is an `Err` (the caller exits with the
//! configuration error code) before any tier starts; once the replay has started, a failure is
//! the store's and exits 1, as the other bench runs do.

use kvtier::config::TierConfig;

use super::args::BenchArgs;
use super::index_load::{self, IndexLoadOptions};
use super::{simulate, trace};
use crate::common::{parse_size, EXIT_FAILURE, EXIT_OK};

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
    let node = match &args.node {
        None => None,
        Some(text) => {
            let parsed = text
                .split_once('/')
                .and_then(|(i, n)| Some((i.parse::<usize>().ok()?, n.parse::<usize>().ok()?)));
            match parsed {
                Some((i, n)) if n > 0 && i < n => Some((i, n)),
                _ => {
                    return Err(format!(
                        "--node {text:?}: expected I/N with 0 <= I < N, like 0/3"
                    ))
                }
            }
        }
    };
    if args.requests == Some(0) {
        return Err("--requests must be > 0".into());
    }
    let mut trace = trace::Trace::load(path)?;
    if let Some(n) = args.requests {
        trace = trace.first(n);
    }
    if let Some((i, n)) = node {
        trace = trace.node(i, n);
        if trace.requests.is_empty() {
            return Err(format!(
                "--node {i}/{n}: no request of the trace falls to this node"
            ));
        }
    }
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
    if let Some(urls) = &args.fleet_index {
        return index_load_cli(args, &config, &trace, urls, block_size);
    }
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

/// `kvtier bench --trace --fleet-index`: the index alone under simulated nodes.
fn index_load_cli(
    args: &BenchArgs,
    config: &TierConfig,
    trace: &trace::Trace,
    urls: &str,
    block_size: usize,
) -> Result<i32, String> {
    let urls: Vec<String> = urls
        .split(',')
        .map(str::trim)
        .filter(|u| !u.is_empty())
        .map(String::from)
        .collect();
    if urls.is_empty() {
        return Err("--fleet-index: expected redis:// URLs, comma-separated".into());
    }
    if args.nodes == 0 {
        return Err("--nodes must be > 0".into());
    }
    if !(args.rate.is_finite() && args.rate >= 0.0) {
        return Err(format!("--rate must be >= 0, got {}", args.rate));
    }
    let opts = IndexLoadOptions {
        urls,
        nodes: args.nodes,
        rate: args.rate,
        block_size,
        capacity_fraction: args.capacity_fraction.unwrap_or(0.1),
        concurrency: args.concurrency.max(1),
    };
    let report = match actix::System::new()
        .block_on(async { index_load::index_load(config, trace, opts).await })
    {
        Ok(r) => r,
        Err(msg) => {
            eprintln!("error: {msg}");
            return Ok(EXIT_FAILURE);
        }
    };
    if args.json {
        println!("{}", serde_json::to_string(&report).unwrap_or_default());
    } else {
        index_load::print_index_load(&report);
    }
    Ok(if report.errors == 0 {
        EXIT_OK
    } else {
        EXIT_FAILURE
    })
}
