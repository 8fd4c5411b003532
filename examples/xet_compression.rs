//! How much Xet's xorb compression schemes shrink KV-cache-like data, and what they cost.
//!
//! The `hfbucket` adapter's `xet_compression` default rests on these figures (docs/benchmarks.md,
//! "hfbucket"). Each data kind is cut into 64 KiB pieces (Xet's average chunk size) and every
//! piece is compressed as Xet does when it serializes a xorb: a chunk whose compressed form is
//! not smaller is stored raw, and `auto` picks `lz4` or `bg4-lz4` from the first chunk of every
//! 32. Single-threaded; the time is this thread's wall time over the compression calls only.
//!
//! The data kinds stand in for KV tensors (no model weights are needed): uniformly random
//! bytes (what the benchmarks store), fp16 and bf16 values drawn from a standard normal
//! distribution, and bf16 values whose 128 channels each have their own scale (log-normal, as
//! the outlier channels of real keys).
//!
//! Usage: `cargo run --release --example xet_compression [-- MiB]` (default 64 MiB per kind).

use half::{bf16, f16};
use rand::{Rng, SeedableRng};
use xet_core_structures::xorb_object::CompressionScheme;

const CHUNK: usize = 64 << 10;
/// Xet re-chooses the scheme of `auto` every this many chunks.
const RETEST: usize = 32;
const HEAD_DIM: usize = 128;

/// CPU seconds this thread has used.
fn thread_cpu_s() -> f64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: `ts` is a valid, writable timespec; the clock id is a constant the kernel knows.
    let rc = unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut ts) };
    assert_eq!(rc, 0, "clock_gettime(CLOCK_THREAD_CPUTIME_ID)");
    ts.tv_sec as f64 + ts.tv_nsec as f64 * 1e-9
}

/// A standard normal sample (Box–Muller).
fn normal(rng: &mut impl Rng) -> f32 {
    let u1: f32 = rng.gen_range(f32::EPSILON..1.0);
    let u2: f32 = rng.gen();
    (-2.0 * u1.ln()).sqrt() * (std::f32::consts::TAU * u2).cos()
}

fn data(kind: &str, bytes: usize, rng: &mut impl Rng) -> Vec<u8> {
    let values = bytes / 2;
    match kind {
        "random" => {
            let mut v = vec![0u8; bytes];
            rng.fill(&mut v[..]);
            v
        }
        "fp16-normal" => (0..values)
            .flat_map(|_| f16::from_f32(normal(rng)).to_le_bytes())
            .collect(),
        "bf16-normal" => (0..values)
            .flat_map(|_| bf16::from_f32(normal(rng)).to_le_bytes())
            .collect(),
        "bf16-channels" => {
            let scales: Vec<f32> = (0..HEAD_DIM).map(|_| normal(rng).exp()).collect();
            (0..values)
                .flat_map(|i| bf16::from_f32(scales[i % HEAD_DIM] * normal(rng)).to_le_bytes())
                .collect()
        }
        _ => unreachable!(),
    }
}

/// (stored bytes, seconds) of `data` under `scheme`, chunk by chunk as a xorb stores it.
fn measure(data: &[u8], scheme: CompressionScheme) -> (usize, f64) {
    let t0 = thread_cpu_s();
    let mut stored = 0;
    for (i, block) in data.chunks(CHUNK * RETEST).enumerate() {
        let s = if scheme == CompressionScheme::Auto {
            CompressionScheme::choose_from_data(&block[..CHUNK.min(block.len())])
        } else {
            scheme
        };
        for chunk in block.chunks(CHUNK) {
            let c = s
                .compress_from_slice(chunk)
                .unwrap_or_else(|e| panic!("block {i}: {e}"));
            stored += c.len().min(chunk.len());
        }
    }
    (stored, thread_cpu_s() - t0)
}

fn main() {
    let mib: usize = std::env::args()
        .nth(1)
        .map(|a| a.parse().expect("MiB per data kind"))
        .unwrap_or(64);
    let bytes = mib << 20;
    let mut rng = rand::rngs::StdRng::seed_from_u64(16);
    println!("| data | scheme | stored ÷ raw | CPU-s/GiB |");
    println!("|---|---|---|---|");
    for kind in ["random", "fp16-normal", "bf16-normal", "bf16-channels"] {
        let d = data(kind, bytes, &mut rng);
        for (name, scheme) in [
            ("none", CompressionScheme::None),
            ("lz4", CompressionScheme::LZ4),
            ("bg4-lz4", CompressionScheme::ByteGrouping4LZ4),
            ("auto", CompressionScheme::Auto),
        ] {
            let (stored, secs) = measure(&d, scheme);
            let gib = bytes as f64 / f64::from(1u32 << 30);
            println!(
                "| {kind} | {name} | {:.3} | {:.3} |",
                stored as f64 / bytes as f64,
                secs / gib
            );
        }
    }
}
