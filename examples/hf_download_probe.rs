//! Measures the two ways the `hfbucket` adapter can load an object, with the adapter's own
//! code for both:
//!
//! - **resolve**: `GET /buckets/{ns}/{name}/resolve/{path}`, follow the 302, stream the body
//!   into the caller's buffer ([`Probe::resolve`]);
//! - **xet**: read the file out of the Xet CAS by its `xetHash` ([`Probe::xet`], on
//!   the adapter's default `xet_load_path = "direct"`).
//!
//! Fairness rules:
//!
//! - both paths read **fresh objects** of the same size: every (round, path) pair gets its own
//!   set of random payloads, uploaded before any timing starts, so neither path can be served
//!   by anything the other (or an earlier round) left behind. The Xet reader has no chunk
//!   cache, and the fresh sets rule out any server-side reuse too;
//! - the same concurrency: `--workers` threads (the adapter's `num_workers`), each taking the
//!   next object;
//! - the same destination: preallocated, pre-faulted buffers of exactly the object size; both
//!   paths check the size and copy into them; every byte is verified after the timed pass;
//! - what is set up once per adapter in the real code is set up once here and not timed: the
//!   `ureq` agent (resolve) and the Xet reader and its read token (xet), both warmed by an
//!   untimed pass. The `xetHash`es come from one `paths-info` call, as a lookup would fetch
//!   them; not timed;
//! - the paths alternate (`resolve, xet` in even rounds, `xet, resolve` in odd ones), and the
//!   summary gives the median and min–max over rounds.
//!
//! ```sh
//! target/release/examples/hub_emulator --port 0 --token hf_local --bucket probe/kv   # prints the endpoint
//! cargo run --release --example hf_download_probe -- --endpoint http://127.0.0.1:PORT \
//!   --token hf_local --bucket probe/kv --chunks 32 --chunk-size 4MiB --workers 4 --rounds 5
//! ```

use std::time::Instant;

use bytes::Bytes;
use clap::Parser;
use kvtier::actors::backends::hfbucket::probe::Probe;
use kvtier::actors::backends::hfbucket::BucketHandle;
use kvtier::actors::config::Secret;
use kvtier::actors::storage::Fetched;
use rand::{RngCore, SeedableRng};
use serde_json::json;

#[derive(Parser)]
#[command(about = "resolve vs Xet-stream downloads through the hfbucket adapter's code")]
struct Args {
    /// Hub endpoint (the emulator prints it).
    #[arg(long)]
    endpoint: String,
    /// Hub token.
    #[arg(long)]
    token: String,
    /// Bucket `namespace/name` (must exist).
    #[arg(long)]
    bucket: String,
    /// Objects per timed pass.
    #[arg(long, default_value_t = 32)]
    chunks: usize,
    /// Object size (`4MiB`, `256KiB`, ...).
    #[arg(long, default_value = "4MiB")]
    chunk_size: String,
    /// Download threads (the adapter's `num_workers`).
    #[arg(long, default_value_t = 4)]
    workers: usize,
    /// Rounds; each times both paths once.
    #[arg(long, default_value_t = 5)]
    rounds: usize,
    /// Print one JSON object instead of the table.
    #[arg(long)]
    json: bool,
}

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Path {
    Resolve,
    Xet,
}

impl Path {
    fn name(self) -> &'static str {
        match self {
            Path::Resolve => "resolve",
            Path::Xet => "xet",
        }
    }
}

/// One uploaded object set.
struct Set {
    paths: Vec<String>,
    hashes: Vec<String>,
    payloads: Vec<Bytes>,
}

fn payload(seed: u64, size: usize) -> Bytes {
    let mut rng = rand::rngs::SmallRng::seed_from_u64(seed);
    let mut v = vec![0u8; size];
    rng.fill_bytes(&mut v);
    Bytes::from(v)
}

/// Uploads `n` fresh random objects under `dir` and registers them.
fn upload_set(probe: &Probe, dir: &str, seed: u64, n: usize, size: usize) -> Set {
    let prefix = probe.prefix();
    let paths: Vec<String> = (0..n)
        .map(|i| format!("{prefix}/{dir}/obj{i:05}"))
        .collect();
    let payloads: Vec<Bytes> = (0..n)
        .map(|i| payload(seed.wrapping_mul(1_000_003).wrapping_add(i as u64), size))
        .collect();
    let named: Vec<(String, Bytes)> = paths
        .iter()
        .cloned()
        .zip(payloads.iter().cloned())
        .collect();
    let hashes = probe.upload(&named).expect("upload");
    Set {
        paths,
        hashes,
        payloads,
    }
}

/// Reads every object of `set` into fresh pre-faulted buffers with `workers` threads; returns
/// (seconds, CPU seconds). Panics on a miss or a wrong byte.
fn pass(probe: &Probe, set: &Set, path: Path, workers: usize, size: usize) -> (f64, f64) {
    let mut bufs: Vec<Vec<u8>> = (0..set.paths.len()).map(|_| vec![0xA5u8; size]).collect();
    // A work queue of (index, buffer): each thread takes the next object.
    let (tx, rx) = flume::unbounded();
    for item in bufs.iter_mut().enumerate() {
        let _ = tx.send(item);
    }
    drop(tx);
    let cpu0 = process_cpu_secs();
    let t0 = Instant::now();
    std::thread::scope(|s| {
        for _ in 0..workers {
            let rx = rx.clone();
            s.spawn(move || {
                while let Ok((i, buf)) = rx.recv() {
                    let res = match path {
                        Path::Resolve => probe.resolve(&set.paths[i], buf),
                        Path::Xet => probe.xet(&set.hashes[i], buf),
                    };
                    assert_eq!(res, Ok(Fetched::Hit), "{} {}", path.name(), set.paths[i]);
                }
            });
        }
    });
    let secs = t0.elapsed().as_secs_f64();
    let cpu = process_cpu_secs() - cpu0;
    drop(rx);
    for (b, p) in bufs.iter().zip(&set.payloads) {
        assert!(b[..] == p[..], "{} returned wrong bytes", path.name());
    }
    (secs, cpu)
}

/// Parses `4MiB`, `256K`, `65536` (binary multiples), like `kvtier bench --chunk-size`.
fn parse_size(s: &str) -> Option<usize> {
    // bytesize parses the number and the unit; kvtier reads K, KB, M, MB, G, GB and T, TB as
    // binary multiples (`4MB` = 4 MiB, as chunk sizes are meant), where bytesize reads them as
    // decimal, so those are spelled as their binary units first.
    let s = s.trim();
    let split = s
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .unwrap_or(s.len());
    let (num, unit) = s.split_at(split);
    let unit = match unit.trim().to_ascii_lowercase().as_str() {
        "k" | "kb" => "KiB",
        "m" | "mb" => "MiB",
        "g" | "gb" => "GiB",
        "t" | "tb" => "TiB",
        _ => unit.trim(),
    };
    let bytes: bytesize::ByteSize = format!("{num}{unit}").parse().ok()?;
    usize::try_from(bytes.as_u64()).ok()
}

/// This process's user + system CPU seconds so far (all threads); 0 if `getrusage` fails.
fn process_cpu_secs() -> f64 {
    use nix::sys::resource::{getrusage, UsageWho};
    let Ok(ru) = getrusage(UsageWho::RUSAGE_SELF) else {
        return 0.0;
    };
    let tv = |t: nix::sys::time::TimeVal| t.tv_sec() as f64 + t.tv_usec() as f64 / 1e6;
    tv(ru.user_time()) + tv(ru.system_time())
}

fn median(v: &mut [f64]) -> f64 {
    v.sort_by(f64::total_cmp);
    let n = v.len();
    if n % 2 == 1 {
        v[n / 2]
    } else {
        (v[n / 2 - 1] + v[n / 2]) / 2.0
    }
}

fn main() {
    let a = Args::parse();
    let size = parse_size(&a.chunk_size).expect("--chunk-size");
    let run = format!("probe-{:08x}", rand::random::<u32>());
    let handle =
        BucketHandle::parse(&format!("hf://buckets/{}/{run}", a.bucket)).expect("--bucket");
    let tmp = tempfile::tempdir().expect("temp dir");
    let cache = tmp.path().join("xet");
    let probe = Probe::connect(
        &a.endpoint,
        handle,
        Secret::new(&a.token),
        a.workers,
        &cache,
    )
    .expect("hub and xet reader");

    let base = u64::from(rand::random::<u32>()) << 20;
    eprintln!(
        "uploading {} sets of {} x {} bytes",
        2 * a.rounds + 2,
        a.chunks,
        size
    );
    let warm: Vec<Set> = (0..2)
        .map(|k| {
            upload_set(
                &probe,
                &format!("warm{k}"),
                base + k,
                a.workers.max(2),
                size,
            )
        })
        .collect();
    let sets: Vec<Vec<Set>> = (0..a.rounds)
        .map(|r| {
            (0..2)
                .map(|k| {
                    let seed = base + 16 + (r * 2 + k) as u64;
                    upload_set(&probe, &format!("r{r}p{k}"), seed, a.chunks, size)
                })
                .collect()
        })
        .collect();
    // Untimed warm-up: connections, token, runtime threads.
    pass(&probe, &warm[0], Path::Resolve, a.workers, size);
    pass(&probe, &warm[1], Path::Xet, a.workers, size);

    let bytes = (a.chunks * size) as f64;
    let mut rows = Vec::new();
    let mut mbps = [Vec::new(), Vec::new()];
    let mut cpu = [Vec::new(), Vec::new()];
    for (r, round) in sets.iter().enumerate() {
        let order = if r.is_multiple_of(2) {
            [Path::Resolve, Path::Xet]
        } else {
            [Path::Xet, Path::Resolve]
        };
        for (k, p) in order.into_iter().enumerate() {
            let (secs, c) = pass(&probe, &round[k], p, a.workers, size);
            let rate = bytes / secs / 1e6;
            let cpu_per_gib = c / (bytes / f64::from(1u32 << 30));
            let idx = usize::from(p == Path::Xet);
            mbps[idx].push(rate);
            cpu[idx].push(cpu_per_gib);
            eprintln!(
                "round {r} {:<8} {rate:8.1} MB/s  client CPU {cpu_per_gib:.2} s/GiB",
                p.name()
            );
            rows.push(json!({"round": r, "path": p.name(), "mb_per_s": rate, "cpu_s_per_gib": cpu_per_gib}));
        }
    }
    let summary = |i: usize| {
        let v = &mut mbps[i].clone();
        let (lo, hi) = (
            v.iter().copied().fold(f64::INFINITY, f64::min),
            v.iter().copied().fold(0.0, f64::max),
        );
        let m = median(v);
        let c = median(&mut cpu[i].clone());
        json!({"median_mb_per_s": m, "min_mb_per_s": lo, "max_mb_per_s": hi, "median_cpu_s_per_gib": c})
    };
    let out = json!({
        "chunks": a.chunks, "chunk_size": size, "workers": a.workers, "rounds": a.rounds,
        "resolve": summary(0), "xet": summary(1), "passes": rows,
    });
    if a.json {
        println!("{out}");
    } else {
        for p in ["resolve", "xet"] {
            let s = &out[p];
            println!(
                "{p:<8} median {:8.1} MB/s  (min {:.1}, max {:.1})  CPU {:.2} s/GiB",
                s["median_mb_per_s"].as_f64().unwrap_or(0.0),
                s["min_mb_per_s"].as_f64().unwrap_or(0.0),
                s["max_mb_per_s"].as_f64().unwrap_or(0.0),
                s["median_cpu_s_per_gib"].as_f64().unwrap_or(0.0)
            );
        }
    }
}
