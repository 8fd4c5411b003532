//! Measuring a phase: wall time, the latency of each request (an HDR histogram), and this
//! process's CPU time, page faults, context switches and large heap allocations over the phase.
//!
//! Invariants: a [`Timer`] measures from its creation to [`Timer::finish`], so a phase creates
//! it right before its first request and finishes it right after its last reply, before any
//! verification (comparing bytes is the bench's work, not the tier's). Counters are process-wide
//! (every thread: the actors', the runtime's and the bench's own).

use std::time::{Duration, Instant};

use hdrhistogram::Histogram;

use super::alloc;
use super::report::PhaseReport;

/// A snapshot of this process's resource counters (all threads), from one `getrusage` call;
/// zeros if it fails.
#[derive(Clone, Copy)]
struct Usage {
    cpu_s: f64,
    peak_rss_bytes: u64,
    minor_faults: u64,
    context_switches: u64,
}

impl Usage {
    fn now() -> Self {
        use nix::sys::resource::{getrusage, UsageWho};
        let Ok(ru) = getrusage(UsageWho::RUSAGE_SELF) else {
            return Self {
                cpu_s: 0.0,
                peak_rss_bytes: 0,
                minor_faults: 0,
                context_switches: 0,
            };
        };
        let tv = |t: nix::sys::time::TimeVal| t.tv_sec() as f64 + t.tv_usec() as f64 / 1e6;
        Self {
            cpu_s: tv(ru.user_time()) + tv(ru.system_time()),
            peak_rss_bytes: ru.max_rss().max(0) as u64 * 1024,
            minor_faults: ru.minor_page_faults().max(0) as u64,
            context_switches: (ru.voluntary_context_switches().max(0)
                + ru.involuntary_context_switches().max(0)) as u64,
        }
    }
}

/// This process's peak resident set size, in bytes.
pub fn peak_rss_bytes() -> u64 {
    Usage::now().peak_rss_bytes
}

pub(crate) struct Timer {
    name: &'static str,
    hist: Histogram<u64>,
    start: Instant,
    usage: Usage,
    large: (u64, u64),
    chunk_allocs: u64,
}

impl Timer {
    pub(crate) fn new(name: &'static str) -> Self {
        Self {
            name,
            hist: Histogram::new_with_bounds(1, 600_000_000, 3).expect("valid histogram bounds"),
            start: Instant::now(),
            usage: Usage::now(),
            large: alloc::large(),
            chunk_allocs: alloc::chunk_sized(),
        }
    }
    pub(crate) fn record(&mut self, d: Duration) {
        let _ = self.hist.record((d.as_micros() as u64).max(1));
    }
    pub(crate) fn finish(self, keys: usize, bytes: u64) -> PhaseReport {
        let secs = self.start.elapsed().as_secs_f64().max(1e-9);
        let now = Usage::now();
        let cpu_s = now.cpu_s - self.usage.cpu_s;
        PhaseReport {
            peak_rss_mib: now.peak_rss_bytes as f64 / (1024.0 * 1024.0),
            cpu_s,
            cpu_s_per_gib: (bytes > 0).then(|| cpu_s / (bytes as f64 / kvtier_actors::config::GIB)),
            phase: self.name.into(),
            keys,
            bytes,
            seconds: secs,
            gbps: bytes as f64 / secs / 1e9,
            keys_per_s: keys as f64 / secs,
            p50_ms: self.hist.value_at_quantile(0.5) as f64 / 1000.0,
            p99_ms: self.hist.value_at_quantile(0.99) as f64 / 1000.0,
            minor_faults: now.minor_faults - self.usage.minor_faults,
            context_switches: now.context_switches - self.usage.context_switches,
            large_allocs: alloc::large().0 - self.large.0,
            large_alloc_mib: (alloc::large().1 - self.large.1) as f64 / (1024.0 * 1024.0),
            chunk_allocs: alloc::chunk_sized() - self.chunk_allocs,
        }
    }
}
