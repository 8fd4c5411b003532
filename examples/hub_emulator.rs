//! Runs the loopback Hugging Face Hub emulator on its own (test support, see
//! `testkit/src/hub.rs`):
//!
//! ```sh
//! cargo run --release --example hub_emulator -- --port 0 --token T
//! ```
//!
//! Prints the Hub endpoint (`http://127.0.0.1:PORT`) as the only line on stdout, then serves
//! until killed. The Xet CAS endpoint goes to stderr. Faults and request counters are reachable
//! over HTTP under `/_emulator/` (see the module documentation).

use kvtier_testkit::hub;

use std::io::Write;

use clap::Parser;

#[derive(Parser)]
#[command(about = "Loopback emulator of the Hugging Face Hub bucket API, with a local Xet CAS")]
struct Args {
    /// Port on 127.0.0.1 (0 picks a free one).
    #[arg(long, default_value_t = 0)]
    port: u16,
    /// Token accepted in `Authorization: Bearer <token>`.
    #[arg(long)]
    token: String,
    /// Entries per `tree` page.
    #[arg(long, default_value_t = hub::DEFAULT_TREE_PAGE_SIZE)]
    tree_page_size: usize,
    /// Buckets to create at start, as `namespace/name` (repeatable).
    #[arg(long = "bucket")]
    buckets: Vec<String>,
}

fn main() {
    let args = Args::parse();
    let mut options = hub::HubOptions::new(&args.token);
    options.port = args.port;
    options.tree_page_size = args.tree_page_size;
    let emulator = match hub::HubEmulator::start_with(options) {
        Ok(e) => e,
        Err(e) => {
            eprintln!("hub_emulator: cannot start on 127.0.0.1:{}: {e}", args.port);
            std::process::exit(1);
        }
    };
    for b in &args.buckets {
        emulator.create_bucket(b);
    }
    eprintln!("hub_emulator: Xet CAS at {}", emulator.cas_endpoint());
    let mut out = std::io::stdout().lock();
    let _ = writeln!(out, "{}", emulator.endpoint());
    let _ = out.flush();
    drop(out);
    loop {
        std::thread::park();
    }
}
