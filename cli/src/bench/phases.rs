//! The phases of a pipeline run, in the order [`super::run`] calls them: **store** the chunks,
//! **lookup** (and lock) them, **load** them into caller buffers and verify every byte (on an
//! `fs` adapter with a plain read loop over the same files before and after, as a baseline),
//! **unlock**, a second lookup (**lookup2**, served from caches where a backend has one),
//! **overfill** past the smallest LRU capacity so eviction runs, and the optional **cleanup**.
//!
//! Invariants:
//! * Each phase's clock covers only the tier's work: payloads are generated before it starts
//!   (except in streaming mode, where generation and verification run inside the phase by
//!   design) and loaded bytes are verified after it stops.
//! * [`Phases`] keeps the run's failures (`errors`) and one [`PhaseReport`] per timed phase
//!   (`phases`, in run order: store, lookup, load, lookup2, overfill).
//! * Every key `lookup` locked is unlocked by `unlock`, and `lookup2` unlocks its own hits,
//!   before the overfill: locked keys cannot be evicted.
//! * The host arena is read or written only between phases, when kvtier holds none of its
//!   regions (stores wait for their release, loads for their buffers).

use std::ops::Range;
use std::path::PathBuf;
use std::time::{Duration, Instant};

use bytes::Bytes;
use futures_util::stream::{self, StreamExt};
use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};
use kvtier::config::{AdapterSpec, TierConfig};
use kvtier::Tier;
use kvtier_actors::backends::fs::file_name;

use super::args::BenchOptions;
use super::load::{plain_read_loop, retained_load, stream_load};
use super::report::PhaseReport;
use super::timer::Timer;
use super::workload::{Arena, Workload};

/// A pipeline run in progress: the tier, the workload, and what the phases measured so far.
pub(super) struct Phases<'a> {
    tier: &'a Tier,
    config: &'a TierConfig,
    work: &'a Workload,
    opts: BenchOptions,
    /// The workload's requests: `batch` consecutive chunks each.
    batches: Vec<Range<usize>>,
    /// Progress over store, lookup and load (cleared by `unlock`).
    bar: ProgressBar,
    /// The host's memory in `--host-arena` mode.
    arena: Option<Arena>,
    /// Failed stores, failed requests, and locked keys that did not load.
    pub(super) errors: u64,
    /// One report per timed phase, in run order.
    pub(super) phases: Vec<PhaseReport>,
}

/// What the load phase found.
pub(super) struct LoadOutcome {
    /// Its timing.
    pub(super) phase: PhaseReport,
    /// Keys loaded.
    pub(super) hits: usize,
    /// Loaded keys whose bytes differ from what was stored.
    pub(super) mismatched: usize,
    /// The plain read loop over the same files (fs only), GB/s, best of the runs around the
    /// load.
    pub(super) baseline_read_gbps: Option<f64>,
}

impl<'a> Phases<'a> {
    /// A run of `work` on `tier`; in `--host-arena` mode this fills the arena.
    pub(super) fn new(
        tier: &'a Tier,
        config: &'a TierConfig,
        work: &'a Workload,
        opts: BenchOptions,
    ) -> Self {
        let batches = batches(opts.chunks, opts.batch);
        let bar = progress_bar(opts, opts.chunks as u64 * 3);
        let arena = opts.host_arena.then(|| Arena::new(work, opts));
        Self {
            tier,
            config,
            work,
            opts,
            batches,
            bar,
            arena,
            errors: 0,
            phases: Vec::new(),
        }
    }

    /// Store: every chunk, `concurrency` batches in flight.
    pub(super) async fn store(&mut self) {
        let (phase, failed) = store_phase(
            self.tier,
            self.work,
            &self.batches,
            self.opts,
            &self.bar,
            self.arena.as_ref(),
        )
        .await;
        self.errors += failed;
        self.phases.push(phase);
    }

    /// Lookup and lock every chunk; returns which are locked.
    pub(super) async fn lookup(&mut self) -> Vec<bool> {
        let (tier, work, opts, bar) = (self.tier, self.work, self.opts, &self.bar);
        let mut timer = Timer::new("lookup");
        let hits: Vec<(
            Range<usize>,
            Result<kvtier_actors::Bitmap, String>,
            Duration,
        )> = stream::iter(self.batches.iter().cloned())
            .map(|r| {
                let keys = work.keys[r.clone()].to_vec();
                async move {
                    let t = Instant::now();
                    let res = tier.lookup_and_lock(keys).await.map_err(|e| e.to_string());
                    (r, res, t.elapsed())
                }
            })
            .buffer_unordered(opts.concurrency)
            .inspect(|(r, _, _)| bar.inc(r.len() as u64))
            .collect()
            .await;
        let mut locked = vec![false; opts.chunks];
        for (r, res, d) in &hits {
            timer.record(*d);
            match res {
                Ok(bits) => {
                    for (i, b) in r.clone().zip(bits.iter()) {
                        locked[i] = b;
                    }
                }
                Err(_) => self.errors += r.len() as u64,
            }
        }
        self.phases.push(timer.finish(opts.chunks, 0));
        locked
    }

    /// Load the locked chunks into caller buffers (owned, arena regions, or per batch in
    /// streaming mode) and verify them; on an `fs` adapter, time a plain read loop over the
    /// same files before and after.
    pub(super) async fn load(&mut self, locked: &[bool]) -> LoadOutcome {
        let (tier, work, opts) = (self.tier, self.work, self.opts);
        let fs_dir = self.config.adapters.iter().find_map(|a| match &a.spec {
            AdapterSpec::Fs(c) => Some((c.base_path.clone(), a.common.object_name_format)),
            _ => None,
        });
        let paths: Option<Vec<PathBuf>> = fs_dir.filter(|_| !opts.stream).map(|(dir, fmt)| {
            work.keys
                .iter()
                .zip(locked)
                .filter(|(_, l)| **l)
                .map(|(k, _)| dir.join(file_name(k, fmt)))
                .collect()
        });
        let mut baselines = Vec::new();
        let (load_phase, load_hits, mismatched, missed_locked, mut buffers) = if opts.stream {
            let (phase, hits, mismatched, missed) =
                stream_load(tier, work, &self.batches, locked, opts, &self.bar).await;
            (phase, hits, mismatched, missed, Vec::new())
        } else {
            retained_load(
                tier,
                work,
                &self.batches,
                locked,
                opts,
                &self.bar,
                paths.as_deref(),
                &mut baselines,
                self.arena.as_mut(),
            )
            .await
        };
        self.errors += missed_locked;
        if let Some(p) = &paths {
            baselines.push(match self.arena.as_mut() {
                Some(a) => plain_read_loop(p, a.chunks_mut()),
                None => plain_read_loop(p, buffers.iter_mut().flatten().map(|b| &mut b[..])),
            });
        }
        drop(buffers);
        self.phases.push(load_phase.clone());
        LoadOutcome {
            phase: load_phase,
            hits: load_hits,
            mismatched,
            baseline_read_gbps: baselines
                .iter()
                .copied()
                .fold(None, |m: Option<f64>, b| Some(m.map_or(b, |m| m.max(b)))),
        }
    }

    /// Unlock every chunk, then a round trip so every unlock has been applied.
    pub(super) async fn unlock(&mut self) {
        for r in &self.batches {
            self.tier.unlock(self.work.keys[r.clone()].to_vec());
        }
        let _ = self.tier.usage().await;
        self.bar.finish_and_clear();
    }

    /// A second lookup of the same keys (unlocking its hits): served from caches where a
    /// backend has one (the hfbucket metadata cache); `status` shows the cache's hit and
    /// request counters.
    pub(super) async fn lookup_again(&mut self) {
        let (tier, work) = (self.tier, self.work);
        let mut timer = Timer::new("lookup2");
        let again: Vec<Duration> = stream::iter(self.batches.iter().cloned())
            .map(|r| {
                let keys = work.keys[r].to_vec();
                async move {
                    let t = Instant::now();
                    if let Ok(bits) = tier.lookup_and_lock(keys.clone()).await {
                        let hit: Vec<_> = keys
                            .into_iter()
                            .zip(bits.iter())
                            .filter(|(_, b)| *b)
                            .map(|(k, _)| k)
                            .collect();
                        tier.unlock(hit);
                    }
                    t.elapsed()
                }
            })
            .buffer_unordered(self.opts.concurrency)
            .collect()
            .await;
        again.iter().for_each(|d| timer.record(*d));
        self.phases.push(timer.finish(self.opts.chunks, 0));
    }

    /// Each adapter's status (backend details such as cache and request counters,
    /// circuit-breaker state), as JSON.
    pub(super) async fn status(&self) -> serde_json::Value {
        self.tier
            .status()
            .await
            .map(|s| serde_json::to_value(s.adapters).unwrap_or_default())
            .unwrap_or_default()
    }

    /// Overfill past the smallest LRU capacity so eviction runs, and wait (up to 10 s) until
    /// it has brought usage below the watermark; returns the chunks added (0 without such an
    /// adapter).
    pub(super) async fn overfill(&mut self, nonce: u64, stored: u64) -> usize {
        let opts = self.opts;
        let overfill = overfill_target(self.config, stored, opts.chunk_size);
        if overfill > 0 {
            let extra = Workload::new(opts.chunks, overfill, opts.chunk_size, nonce, !opts.stream);
            let bar = progress_bar(opts, overfill as u64);
            let (mut phase, failed) = store_phase(
                self.tier,
                &extra,
                &batches(overfill, opts.batch),
                opts,
                &bar,
                None,
            )
            .await;
            bar.finish_and_clear();
            phase.phase = "overfill".into();
            self.errors += failed;
            self.phases.push(phase);
            settle_eviction(self.tier, self.config).await;
        }
        overfill
    }

    /// Keys evicted so far (all adapters) and each adapter's usage.
    pub(super) async fn eviction_and_usage(&self) -> (u64, Vec<kvtier_actors::Usage>) {
        let evicted_keys = self
            .tier
            .eviction_stats()
            .await
            .map(|s| s.iter().map(|(_, s)| s.evicted_keys).sum())
            .unwrap_or(0);
        let usage = self
            .tier
            .usage()
            .await
            .map(|u| u.adapters)
            .unwrap_or_default();
        (evicted_keys, usage)
    }

    /// Delete the run's keys, the overfill's included (`--cleanup`).
    pub(super) async fn cleanup(&self, nonce: u64, overfill: usize) {
        let opts = self.opts;
        let mut keys = self.work.keys.clone();
        keys.extend(Workload::new(opts.chunks, overfill, opts.chunk_size, nonce, false).keys);
        for chunk in keys.chunks(1000) {
            if let Err(e) = self.tier.delete(chunk.to_vec()).await {
                tracing::warn!(error = %e, "bench cleanup failed");
            }
        }
    }
}

/// Requests of `batch` consecutive chunks covering `0..chunks`.
fn batches(chunks: usize, batch: usize) -> Vec<Range<usize>> {
    (0..chunks)
        .step_by(batch)
        .map(|s| s..(s + batch).min(chunks))
        .collect()
}

/// Stores `work`'s chunks in `batches` (from the arena's regions when there is one); returns
/// the phase and the keys that failed.
async fn store_phase(
    tier: &Tier,
    work: &Workload,
    batches: &[Range<usize>],
    opts: BenchOptions,
    bar: &ProgressBar,
    arena: Option<&Arena>,
) -> (PhaseReport, u64) {
    let mut timer = Timer::new("store");
    let results: Vec<(usize, u64, Duration)> = stream::iter(batches.iter().cloned())
        .map(|r| {
            let keys = work.keys[r.clone()].to_vec();
            let sources = arena.map(|a| a.sources(r.clone()));
            let objects: Vec<Bytes> = match sources {
                Some(_) => Vec::new(),
                None => r.clone().map(|i| work.payload(i)).collect(),
            };
            async move {
                let t = Instant::now();
                let stored = match sources {
                    Some(regions) => tier.store_from(keys, regions).await,
                    None => tier.store(keys, objects).await,
                };
                let failed = match stored {
                    Ok(rep) => {
                        let mut bad = std::collections::HashSet::new();
                        for (_, o) in &rep.adapters {
                            for f in &o.failed {
                                tracing::warn!(error = %f.error, "bench store failed");
                                bad.insert(f.key.clone());
                            }
                        }
                        bad.len() as u64
                    }
                    Err(_) => r.len() as u64,
                };
                (r.len(), failed, t.elapsed())
            }
        })
        .buffer_unordered(opts.concurrency)
        .inspect(|(n, _, _)| bar.inc(*n as u64))
        .collect()
        .await;
    let mut failed = 0;
    for (_, f, d) in &results {
        timer.record(*d);
        failed += f;
    }
    let keys = batches.iter().map(|r| r.len()).sum::<usize>();
    let stored = keys as u64 - failed;
    (timer.finish(keys, stored * opts.chunk_size as u64), failed)
}

/// Chunks to add so the smallest LRU-evicting adapter ends at 1.2× its capacity (0 if none).
fn overfill_target(config: &TierConfig, stored: u64, chunk_size: usize) -> usize {
    config
        .adapters
        .iter()
        .filter(|a| {
            a.common.capacity_bytes() > 0
                && a.common.eviction.as_ref().is_some_and(|e| {
                    use kvtier_actors::config::EvictionPolicy as P;
                    matches!(e.eviction_policy, P::Lru | P::Arc | P::Flru)
                })
        })
        .map(|a| {
            let target = (a.common.capacity_bytes() as f64 * 1.2) as u64;
            (target.saturating_sub(stored)).div_ceil(chunk_size as u64) as usize
        })
        .min()
        .unwrap_or(0)
}

/// Waits (up to 10 s) until every evicting adapter is below its watermark.
async fn settle_eviction(tier: &Tier, config: &TierConfig) {
    let deadline = Instant::now() + Duration::from_secs(10);
    while Instant::now() < deadline {
        let Ok(usage) = tier.usage().await else {
            return;
        };
        let settled = usage.adapters.iter().all(|u| {
            let a = &config.adapters[u.adapter];
            match &a.common.eviction {
                Some(e) if u.capacity_bytes > 0 => u.fraction < e.trigger_watermark,
                _ => true,
            }
        });
        if settled {
            return;
        }
        actix_rt::time::sleep(Duration::from_millis(20)).await;
    }
}

/// A progress bar on stderr over `len` keys (hidden with `--json`).
fn progress_bar(opts: BenchOptions, len: u64) -> ProgressBar {
    if !opts.progress {
        return ProgressBar::hidden();
    }
    let bar = ProgressBar::with_draw_target(Some(len), ProgressDrawTarget::stderr());
    bar.set_style(
        ProgressStyle::with_template("{spinner} [{elapsed_precise}] {bar:40} {pos}/{len} keys")
            .unwrap_or_else(|_| ProgressStyle::default_bar()),
    );
    bar
}
