//! The `kvtier` binary. See [`kvtier::cli`].

use clap::Parser;

fn main() {
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_env("KVTIER_LOG")
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("warn")),
        )
        .with_writer(std::io::stderr)
        .init();
    let cli = kvtier::cli::Cli::parse();
    std::process::exit(kvtier::cli::run(cli));
}
