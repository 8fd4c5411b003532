//! The `kvtier` command line: `bench`, `check-config`, `ls`, `usage`, `status`, `top`, `quota`,
//! `scrub`.
//!
//! Exit codes: 0 success; 1 a runtime failure (a store could not be opened, the bench found
//! errors or wrong bytes); 2 a configuration or usage error.

use clap::{Parser, Subcommand};
use kvtier::actors::key::KeyView;
use kvtier::actors::ListKeys;
use kvtier::config::ConfigError;
use kvtier::Tier;

use crate::bench::{self, BenchOptions};
use crate::common::{human_bytes, ConfigArgs, EXIT_CONFIG, EXIT_FAILURE, EXIT_OK};

/// kvtier: the L2 tier of an LLM KV cache, in S3, Hugging Face buckets or a local directory.
#[derive(Debug, Parser)]
#[command(name = "kvtier", version, about, long_about = None)]
pub struct Cli {
    /// What to do.
    #[command(subcommand)]
    pub command: Command,
}

/// The subcommands.
#[derive(Debug, Subcommand)]
pub enum Command {
    /// Play a serving process: store, look up, load and verify, unlock, overfill to evict.
    Bench(Box<bench::BenchArgs>),
    /// Print the resolved configuration (secrets redacted), or the error.
    CheckConfig {
        /// Configuration.
        #[command(flatten)]
        cfg: ConfigArgs,
    },
    /// List stored keys with their sizes.
    Ls {
        /// Configuration.
        #[command(flatten)]
        cfg: ConfigArgs,
        /// Only keys of this model.
        #[arg(long)]
        model: Option<String>,
        /// Which adapter to list (0-based).
        #[arg(long, default_value_t = 0)]
        adapter: usize,
        /// One JSON object per line.
        #[arg(long)]
        json: bool,
    },
    /// Show usage per adapter.
    Usage {
        /// Configuration.
        #[command(flatten)]
        cfg: ConfigArgs,
        /// Print JSON.
        #[arg(long)]
        json: bool,
    },
    /// Show health per adapter.
    Status {
        /// Configuration.
        #[command(flatten)]
        cfg: ConfigArgs,
    },
    /// Watch a running tier live: rates, latencies, usage and health from its `/metrics`.
    Top(crate::top::TopArgs),
    /// Read or change the `IsolatedLRU` quotas of an adapter in a configuration file.
    Quota(crate::quota::QuotaArgs),
    /// Read every object of an adapter and check it against its stored checksum; exit 1 when
    /// one is corrupt.
    Scrub(crate::scrub::ScrubArgs),
}

/// Runs a parsed command line; returns the process exit code.
pub fn run(cli: Cli) -> i32 {
    match cli.command {
        Command::Bench(args) => {
            let config = match args.cfg.load() {
                Ok(c) => c,
                Err(e) => return config_error(&e),
            };
            if args.trace.is_some() {
                return match bench::trace_cli(&args, config) {
                    Ok(code) => code,
                    Err(msg) => {
                        eprintln!("error: {msg}");
                        EXIT_CONFIG
                    }
                };
            }
            let opts = match BenchOptions::try_from(&*args) {
                Ok(o) => o,
                Err(msg) => {
                    eprintln!("error: {msg}");
                    return EXIT_CONFIG;
                }
            };
            actix::System::new().block_on(bench::run_cli(config, opts, args.plot.clone()))
        }
        Command::Top(args) => crate::top::run(&args),
        Command::Quota(args) => crate::quota::run(&args),
        Command::Scrub(args) => {
            let cfg = args.cfg.clone();
            with_tier(&cfg, move |tier| crate::scrub::run(tier, args))
        }
        Command::CheckConfig { cfg } => match cfg.load_with_notes() {
            Ok((c, notes)) => {
                for note in notes {
                    eprintln!("note: {note}");
                }
                println!(
                    "{}",
                    serde_json::to_string_pretty(&c.to_redacted_json()).unwrap_or_default()
                );
                EXIT_OK
            }
            Err(e) => config_error(&e),
        },
        Command::Ls {
            cfg,
            model,
            adapter,
            json,
        } => with_tier(&cfg, move |tier| async move {
            let mut cursor = None;
            let mut total = 0usize;
            loop {
                let page = tier
                    .controller()
                    .send(ListKeys {
                        model: model.clone(),
                        cursor: cursor.clone(),
                        page_size: 1000,
                        adapter,
                    })
                    .await;
                let page = match page {
                    Ok(Ok(p)) => p,
                    Ok(Err(e)) => return Err(format!("adapter #{adapter}: {e}")),
                    Err(e) => return Err(e.to_string()),
                };
                for (key, size) in &page.entries {
                    total += 1;
                    if json {
                        let mut v = serde_json::to_value(KeyView::from(key)).unwrap_or_default();
                        v["size"] = (*size).into();
                        println!("{v}");
                    } else {
                        println!("{key}\t{size}");
                    }
                }
                match page.next {
                    Some(n) => cursor = Some(n),
                    None => break,
                }
            }
            if !json {
                eprintln!("{total} keys");
            }
            Ok(())
        }),
        Command::Usage { cfg, json } => with_tier(&cfg, move |tier| async move {
            let usage = tier.usage().await.map_err(|e| e.to_string())?;
            if json {
                println!(
                    "{}",
                    serde_json::to_string_pretty(&usage).unwrap_or_default()
                );
            } else {
                for u in &usage.adapters {
                    println!(
                        "adapter #{}: {} keys, {} used of {} ({})",
                        u.adapter,
                        u.keys,
                        human_bytes(u.used_bytes),
                        if u.capacity_bytes == 0 {
                            "unbounded".to_owned()
                        } else {
                            human_bytes(u.capacity_bytes)
                        },
                        if u.fraction < 0.0 {
                            "no capacity: eviction off".to_owned()
                        } else {
                            format!("{:.1}%", u.fraction * 100.0)
                        }
                    );
                    for (salt, b) in &u.bytes_by_cache_salt {
                        let salt = if salt.is_empty() { "(no salt)" } else { salt };
                        println!("  {salt}: {}", human_bytes(*b));
                    }
                }
            }
            Ok(())
        }),
        Command::Status { cfg } => with_tier(&cfg, |tier| async move {
            let status = tier.status().await.map_err(|e| e.to_string())?;
            println!(
                "{}",
                serde_json::to_string_pretty(&status).unwrap_or_default()
            );
            if status.is_healthy() {
                Ok(())
            } else {
                Err("an adapter is unhealthy".into())
            }
        }),
    }
}

fn config_error(e: &ConfigError) -> i32 {
    eprintln!("error: {e}");
    EXIT_CONFIG
}

/// Loads the config, starts a tier, runs `f`, shuts down.
fn with_tier<F, Fut>(cfg: &ConfigArgs, f: F) -> i32
where
    F: FnOnce(std::rc::Rc<Tier>) -> Fut,
    Fut: std::future::Future<Output = Result<(), String>>,
{
    let config = match cfg.load() {
        Ok(c) => c,
        Err(e) => return config_error(&e),
    };
    if config.adapters.is_empty() {
        return config_error(&ConfigError::NoAdapters);
    }
    actix::System::new().block_on(async move {
        let tier = match Tier::start(&config).await {
            Ok(t) => std::rc::Rc::new(t),
            Err(e) => {
                eprintln!("error: {e}");
                return EXIT_FAILURE;
            }
        };
        let res = f(tier.clone()).await;
        if let Ok(t) = std::rc::Rc::try_unwrap(tier) {
            t.close().await;
        }
        match res {
            Ok(()) => EXIT_OK,
            Err(e) => {
                eprintln!("error: {e}");
                EXIT_FAILURE
            }
        }
    })
}
