//! The load phase's two shapes, and the plain-read baseline beside it.
//!
//! * [`retained_load`]: every buffer (owned `BytesMut`, or regions of the host arena) is
//!   allocated and pre-faulted before the clock starts, and verified after it stops; the owned
//!   buffers come back for the plain read loop that follows.
//! * [`stream_load`] (`--stream`): each batch allocates its buffers when it starts and verifies
//!   and drops them when it ends, so memory stays at the bytes in flight.
//!
//! Invariants: both count a locked key that did not load as an error (`missed`) and a loaded key
//! whose bytes differ from its payload as `mismatched`; a buffer is read only once its load has
//! returned it. [`plain_read_loop`] reads the same files into the same buffers, so the two
//! compare the tier with a loop that does nothing else.

use std::io::Read;
use std::ops::Range;
use std::path::PathBuf;
use std::time::{Duration, Instant};

use bytes::BytesMut;
use futures_util::stream::{self, StreamExt};
use indicatif::ProgressBar;
use kvtier::Tier;
use kvtier_actors::LoadBuf;

use super::args::BenchOptions;
use super::report::PhaseReport;
use super::timer::Timer;
use super::workload::{Arena, Workload};

type Loaded = (
    Range<usize>,
    Result<kvtier_actors::LoadReport, String>,
    Duration,
);

/// The load phase with every buffer allocated and pre-faulted up front and kept for
/// verification after the clock stops (and for the plain-read baseline, run before it).
#[allow(clippy::too_many_arguments)]
pub(super) async fn retained_load(
    tier: &Tier,
    work: &Workload,
    batches: &[Range<usize>],
    locked: &[bool],
    opts: BenchOptions,
    bar: &ProgressBar,
    paths: Option<&[PathBuf]>,
    baselines: &mut Vec<f64>,
    arena: Option<&mut Arena>,
) -> (PhaseReport, usize, usize, u64, Vec<Vec<BytesMut>>) {
    // Caller buffers, pre-faulted so no phase pays for page faults: owned `BytesMut`, or
    // regions of the host arena.
    let mut buffers: Vec<Vec<LoadBuf>> = match arena {
        Some(a) => {
            if let Some(p) = paths {
                baselines.push(plain_read_loop(p, a.chunks_mut()));
            }
            a.mem.fill(0xA5);
            batches.iter().map(|r| a.regions(r.clone())).collect()
        }
        None => {
            let mut owned: Vec<Vec<BytesMut>> = batches
                .iter()
                .map(|r| {
                    r.clone()
                        .map(|_| {
                            let mut b = BytesMut::zeroed(opts.chunk_size);
                            b.fill(0xA5);
                            b
                        })
                        .collect()
                })
                .collect();
            if let Some(p) = paths {
                baselines.push(plain_read_loop(
                    p,
                    owned.iter_mut().flatten().map(|b| &mut b[..]),
                ));
            }
            owned
                .into_iter()
                .map(|v| v.into_iter().map(LoadBuf::from).collect())
                .collect()
        }
    };

    // Load into the caller buffers, then verify.
    let mut timer = Timer::new("load");
    let loaded: Vec<Loaded> = stream::iter(batches.iter().cloned().zip(buffers.drain(..)))
        .map(|(r, bufs)| {
            let keys = work.keys[r.clone()].to_vec();

            async move {
                let t = Instant::now();
                let res: Result<_, String> = Ok(tier.load_bufs(keys, bufs).await);
                (r, res, t.elapsed())
            }
        })
        .buffer_unordered(opts.concurrency)
        .inspect(|(r, _, _)| bar.inc(r.len() as u64))
        .collect()
        .await;
    // Stop the clock before verifying: comparing bytes is the bench's work, not the tier's.
    for (_, _, d) in &loaded {
        timer.record(*d);
    }
    let load_hits: usize = loaded
        .iter()
        .filter_map(|(_, res, _)| res.as_ref().ok())
        .map(|rep| rep.hits.count_ones())
        .sum();
    let load_phase = timer.finish(opts.chunks, (load_hits * opts.chunk_size) as u64);
    let mut mismatched = 0usize;
    let mut missed_locked = 0u64;
    for (r, res, _) in &loaded {
        match res {
            Ok(rep) => {
                for ((i, hit), buf) in r.clone().zip(rep.hits.iter()).zip(&rep.buffers) {
                    if hit && !work.matches(i, buf) {
                        mismatched += 1;
                    } else if !hit && locked[i] {
                        missed_locked += 1;
                    }
                }
            }
            Err(_) => missed_locked += r.len() as u64,
        }
    }
    let buffers = loaded
        .into_iter()
        .filter_map(|(_, res, _)| res.ok()?.into_parts::<BytesMut>().ok().map(|(_, b)| b))
        .collect();
    (load_phase, load_hits, mismatched, missed_locked, buffers)
}

/// The load phase in streaming mode: each batch allocates its buffers when it starts and
/// verifies and drops them when it ends.
pub(super) async fn stream_load(
    tier: &Tier,
    work: &Workload,
    batches: &[Range<usize>],
    locked: &[bool],
    opts: BenchOptions,
    bar: &ProgressBar,
) -> (PhaseReport, usize, usize, u64) {
    let mut timer = Timer::new("load");
    let results: Vec<(usize, usize, u64, Duration)> = stream::iter(batches.iter().cloned())
        .map(|r| async move {
            let keys = work.keys[r.clone()].to_vec();
            let bufs = r
                .clone()
                .map(|_| BytesMut::zeroed(opts.chunk_size))
                .collect();
            let t = Instant::now();
            let res: Result<_, String> = Ok(tier.load::<BytesMut>(keys, bufs).await);
            let d = t.elapsed();
            let (mut hits, mut bad, mut missed) = (0, 0, 0);
            match res {
                Ok(rep) => {
                    for ((i, hit), buf) in r.clone().zip(rep.hits.iter()).zip(&rep.buffers) {
                        if hit {
                            hits += 1;
                            if !work.matches(i, buf) {
                                bad += 1;
                            }
                        } else if locked[i] {
                            missed += 1;
                        }
                    }
                }
                Err(_) => missed += r.len() as u64,
            }
            (hits, bad, missed, d)
        })
        .buffer_unordered(opts.concurrency)
        .inspect(|(h, _, m, _)| bar.inc(*h as u64 + *m))
        .collect()
        .await;
    let (mut hits, mut bad, mut missed) = (0, 0, 0);
    for (h, b, m, d) in &results {
        timer.record(*d);
        hits += h;
        bad += b;
        missed += m;
    }
    (
        timer.finish(opts.chunks, (hits * opts.chunk_size) as u64),
        hits,
        bad,
        missed,
    )
}

/// Reads every file once, sequentially, into the same caller buffers the load phase uses; GB/s.
pub(super) fn plain_read_loop<'a>(
    paths: &[PathBuf],
    buffers: impl Iterator<Item = &'a mut [u8]>,
) -> f64 {
    let start = Instant::now();
    let mut bytes = 0u64;
    for (p, buf) in paths.iter().zip(buffers) {
        if let Ok(mut f) = std::fs::File::open(p) {
            if f.read_exact(buf).is_ok() {
                bytes += buf.len() as u64;
            }
        }
    }
    bytes as f64 / start.elapsed().as_secs_f64().max(1e-9) / 1e9
}
