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
mod scrub;
mod top;

use clap::Parser;

/// Exit code when stdout's reader has gone (`kvtier ls | head -5`): 128 + SIGPIPE, what a shell
/// reports for a Unix tool that a closed pipe ended.
const EXIT_BROKEN_PIPE: i32 = 141;

/// Whether a panic is `print!`'s on a closed stdout ("failed printing to stdout: Broken pipe").
/// Every subcommand prints through `print!`/`println!`, which panic when the write fails; a
/// reader that closed its end is not a bug, so that one panic ends the command quietly.
fn is_broken_pipe(payload: &(dyn std::any::Any + Send)) -> bool {
    let text = payload
        .downcast_ref::<String>()
        .map(String::as_str)
        .or_else(|| payload.downcast_ref::<&str>().copied())
        .unwrap_or_default();
    text.starts_with("failed printing to stdout") && text.contains("Broken pipe")
}

fn main() {
    // A closed stdout unwinds the command quietly (its temporary directories and the tier
    // are dropped on the way out), then exits with EXIT_BROKEN_PIPE; every other panic is
    // reported as usual.
    let report = std::panic::take_hook();
    std::panic::set_hook(Box::new(move |info| {
        if !is_broken_pipe(info.payload()) {
            report(info);
        }
    }));
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
    let code = match std::panic::catch_unwind(move || cli::run(cli)) {
        Ok(code) => code,
        Err(payload) if is_broken_pipe(payload.as_ref()) => EXIT_BROKEN_PIPE,
        Err(payload) => std::panic::resume_unwind(payload),
    };
    std::process::exit(code);
}
