//! The `kvtier` binary: the command line (`cli`) and the bench (`bench`), on top of the `kvtier`
//! library. Nothing here is library API.
//!
//! Module dependencies run one way: `main` → `cli` → `bench` → `common`, and `cli` → `common`.
//! The raw aws-sdk-s3 baseline of the bench (`bench::raw_s3`, feature `s3`) builds its own
//! plain SDK client; the library exports no S3 client internals for it.

#![warn(missing_docs)]

mod bench;
mod cli;
mod common;
mod metrics_server;
mod quota;
mod top;

use clap::Parser;

fn main() {
    tracing_subscriber::fmt()
        .with_env_filter(
            // Dependencies that print credentials at DEBUG/TRACE stay capped (kvtier::logging).
            std::env::var("KVTIER_LOG")
                .ok()
                .and_then(|spec| kvtier::logging::env_filter(&spec).ok())
                .unwrap_or_else(|| tracing_subscriber::EnvFilter::new("warn")),
        )
        .with_writer(std::io::stderr)
        .init();
    let cli = cli::Cli::parse();
    std::process::exit(cli::run(cli));
}
