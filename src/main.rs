//! The `kvtier` binary. See [`kvtier::cli`].

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
    let cli = kvtier::cli::Cli::parse();
    std::process::exit(kvtier::cli::run(cli));
}
