//! `kvtier top`: a live view of a running tier, from its `/metrics` endpoint.
//!
//! It scrapes the endpoint (a `kvtier bench --metrics-addr`, or any host that serves
//! [`kvtier::Tier::metrics_text`]) every interval, parses the exposition with
//! `prometheus-parse`, and redraws one table per adapter: request and byte rates over the
//! last interval, lookup hit ratio, p50 / p99 latency per operation from the histogram
//! buckets that moved in the interval, in-flight requests, locked keys, usage against
//! capacity, evictions and the breaker. Drawing is a plain full-screen redraw (no terminal
//! library: one frame is a few lines of text); [`render`] is a pure function of two scrapes,
//! which the tests pin with a snapshot.

use std::collections::BTreeMap;
use std::fmt::Write;
use std::time::{Duration, Instant};

use crate::common::{human_bytes, EXIT_FAILURE, EXIT_OK};

/// Command-line arguments of `kvtier top`.
#[derive(Debug, Clone, clap::Args)]
pub struct TopArgs {
    /// The metrics endpoint to watch, e.g. `http://127.0.0.1:9464/metrics`.
    #[arg(long, value_name = "URL")]
    pub metrics_url: String,
    /// Refresh period, milliseconds.
    #[arg(long, default_value_t = 1000)]
    pub interval_ms: u64,
    /// Print one frame (after two scrapes one interval apart) and exit, without clearing the
    /// screen: for scripts and tests.
    #[arg(long)]
    pub once: bool,
}

/// One scrape: `(metric name, sorted labels) → value`; histogram buckets as
/// `name_bucket` with an `le` label.
#[derive(Debug, Default, Clone)]
pub struct Scrape {
    samples: BTreeMap<(String, Vec<(String, String)>), f64>,
}

impl Scrape {
    /// Parses an exposition.
    pub fn parse(text: &str) -> Result<Self, String> {
        let lines = text.lines().map(|l| Ok(l.to_owned()));
        let parsed = prometheus_parse::Scrape::parse(lines)
            .map_err(|e| format!("the exposition does not parse: {e}"))?;
        let mut samples = BTreeMap::new();
        for s in parsed.samples {
            let labels: Vec<(String, String)> = s
                .labels
                .iter()
                .map(|(k, v)| (k.clone(), v.clone()))
                .collect::<BTreeMap<_, _>>()
                .into_iter()
                .collect();
            match s.value {
                prometheus_parse::Value::Counter(v)
                | prometheus_parse::Value::Gauge(v)
                | prometheus_parse::Value::Untyped(v) => {
                    samples.insert((s.metric, labels), v);
                }
                prometheus_parse::Value::Histogram(buckets) => {
                    for b in buckets {
                        let mut l = labels.clone();
                        l.push(("le".into(), format!("{}", b.less_than)));
                        samples.insert((format!("{}_bucket", s.metric), l), b.count);
                    }
                }
                prometheus_parse::Value::Summary(_) => {}
            }
        }
        Ok(Self { samples })
    }

    /// The adapters seen: `(index, type, name)`.
    fn adapters(&self) -> Vec<(String, String, String)> {
        let mut out: Vec<(String, String, String)> = self
            .samples
            .keys()
            .filter_map(|(_, l)| {
                let get = |k: &str| l.iter().find(|(n, _)| n == k).map(|(_, v)| v.clone());
                Some((get("adapter")?, get("adapter_type")?, get("name")?))
            })
            .collect();
        out.sort_by_key(|a| a.0.parse::<usize>().unwrap_or(usize::MAX));
        out.dedup();
        out
    }

    /// Sum of `metric` over the adapter's series whose extra labels include `extra`.
    fn sum(&self, metric: &str, adapter: &str, extra: &[(&str, &str)]) -> f64 {
        self.samples
            .iter()
            .filter(|((m, l), _)| {
                m == metric
                    && l.iter().any(|(k, v)| k == "adapter" && v == adapter)
                    && extra
                        .iter()
                        .all(|(ek, ev)| l.iter().any(|(k, v)| k == ek && v == ev))
            })
            .map(|(_, v)| *v)
            .sum::<f64>()
            + 0.0 // an empty sum is -0.0
    }

    /// The cumulative buckets `(le, count)` of the adapter's latency histogram for `op`.
    fn buckets(&self, adapter: &str, op: &str) -> Vec<(f64, f64)> {
        let mut out: Vec<(f64, f64)> = self
            .samples
            .iter()
            .filter(|((m, l), _)| {
                m == "kvtier_request_duration_seconds_bucket"
                    && l.iter().any(|(k, v)| k == "adapter" && v == adapter)
                    && l.iter().any(|(k, v)| k == "op" && v == op)
            })
            .filter_map(|((_, l), v)| {
                let le = l.iter().find(|(k, _)| k == "le")?.1.parse::<f64>().ok()?;
                Some((le, *v))
            })
            .collect();
        out.sort_by(|a, b| a.0.total_cmp(&b.0));
        out
    }
}

/// The upper bound of the bucket holding quantile `q` of the observations between two
/// scrapes (`None` when nothing was observed).
fn quantile(prev: &[(f64, f64)], cur: &[(f64, f64)], q: f64) -> Option<f64> {
    let delta: Vec<(f64, f64)> = cur
        .iter()
        .map(|(le, c)| {
            let before = prev.iter().find(|(p, _)| p == le).map_or(0.0, |(_, v)| *v);
            (*le, c - before)
        })
        .collect();
    let total = delta.last()?.1;
    if total <= 0.0 {
        return None;
    }
    let want = total * q;
    delta.iter().find(|(_, c)| *c >= want).map(|(le, _)| *le)
}

fn ms(v: Option<f64>) -> String {
    match v {
        None => "-".into(),
        Some(s) if s.is_infinite() => "slow".into(),
        Some(s) if s < 0.001 => format!("{:.2}ms", s * 1e3),
        Some(s) if s < 1.0 => format!("{:.1}ms", s * 1e3),
        Some(s) => format!("{s:.2}s"),
    }
}

/// One frame: the change from `prev` to `cur` over `secs` seconds.
pub fn render(prev: &Scrape, cur: &Scrape, secs: f64, source: &str) -> String {
    let secs = secs.max(1e-3);
    let mut out = String::new();
    let _ = writeln!(out, "kvtier top — {source} — every {secs:.1} s");
    let adapters = cur.adapters();
    if adapters.is_empty() {
        let _ = writeln!(out, "(no kvtier series yet)");
        return out;
    }
    for (index, kind, name) in adapters {
        let rate = |m: &str| (cur.sum(m, &index, &[]) - prev.sum(m, &index, &[])).max(0.0) / secs;
        let now = |m: &str| cur.sum(m, &index, &[]);
        let breaker = match now("kvtier_breaker_state") as i64 {
            0 => "closed",
            1 => "OPEN",
            _ => "half-open",
        };
        let health = if now("kvtier_healthy") >= 1.0 {
            "healthy"
        } else {
            "UNHEALTHY"
        };
        let used = now("kvtier_usage_bytes") as u64;
        let cap = now("kvtier_capacity_bytes") as u64;
        let usage = if cap > 0 {
            format!(
                "{} / {} ({:.0} %)",
                human_bytes(used),
                human_bytes(cap),
                used as f64 * 100.0 / cap as f64
            )
        } else {
            format!("{} (no capacity set)", human_bytes(used))
        };
        let _ = writeln!(
            out,
            "\nadapter #{index} {name} ({kind}): {health}, breaker {breaker}"
        );
        let _ = writeln!(
            out,
            "  usage {usage}, {} keys, {} locked, evicted {:.0} keys/s",
            now("kvtier_usage_keys") as u64,
            now("kvtier_locked_keys") as u64,
            rate("kvtier_evicted_keys_total"),
        );
        let _ = writeln!(
            out,
            "  {:<7} {:>9} {:>10} {:>11} {:>9} {:>9} {:>9}",
            "op", "req/s", "keys/s", "MiB/s", "p50", "p99", "inflight"
        );
        let failed = |family: &str| {
            (cur.sum(family, &index, &[]) - prev.sum(family, &index, &[])).max(0.0) / secs
        };
        for (op, tasks, keys, bytes, fail) in [
            (
                "store",
                "kvtier_store_tasks_total",
                "kvtier_store_succeeded_keys_total",
                Some("kvtier_stored_bytes_total"),
                "kvtier_store_failed_keys_total",
            ),
            (
                "lookup",
                "kvtier_lookup_tasks_total",
                "kvtier_lookup_hit_keys_total",
                None,
                "kvtier_lookup_failed_keys_total",
            ),
            (
                "load",
                "kvtier_load_tasks_total",
                "kvtier_loaded_keys_total",
                Some("kvtier_loaded_bytes_total"),
                "kvtier_load_failed_keys_total",
            ),
            (
                "delete",
                "kvtier_delete_tasks_total",
                "kvtier_deleted_keys_total",
                None,
                "kvtier_delete_failed_keys_total",
            ),
        ] {
            let (p, c) = (prev.buckets(&index, op), cur.buckets(&index, op));
            let mib = bytes.map_or("-".to_owned(), |b| {
                format!("{:.1}", rate(b) / (1024.0 * 1024.0))
            });
            let inflight = cur.sum("kvtier_inflight_requests", &index, &[("op", op)]);
            let mut line = format!(
                "  {op:<7} {:>9.1} {:>10.1} {mib:>11} {:>9} {:>9} {inflight:>9.0}",
                rate(tasks),
                rate(keys),
                ms(quantile(&p, &c, 0.5)),
                ms(quantile(&p, &c, 0.99)),
            );
            let f = failed(fail);
            if f > 0.0 {
                let _ = write!(line, "  FAILED {f:.1} keys/s");
            }
            let _ = writeln!(out, "{line}");
        }
        let looked = rate("kvtier_lookup_keys_total");
        if looked > 0.0 {
            let _ = writeln!(
                out,
                "  lookup hit ratio {:.1} %",
                rate("kvtier_lookup_hit_keys_total") * 100.0 / looked
            );
        }
        let retries = rate("kvtier_retries_total");
        if retries > 0.0 {
            let _ = writeln!(out, "  retries {retries:.1}/s");
        }
    }
    out
}

fn fetch(url: &str) -> Result<Scrape, String> {
    let mut res = ureq::get(url).call().map_err(|e| format!("{url}: {e}"))?;
    let text = res
        .body_mut()
        .read_to_string()
        .map_err(|e| format!("{url}: {e}"))?;
    Scrape::parse(&text)
}

/// Runs `kvtier top`; returns the exit code.
pub fn run(args: &TopArgs) -> i32 {
    let interval = Duration::from_millis(args.interval_ms.max(100));
    let mut prev = match fetch(&args.metrics_url) {
        Ok(s) => s,
        Err(e) => {
            eprintln!("error: {e}");
            return EXIT_FAILURE;
        }
    };
    let mut at = Instant::now();
    loop {
        std::thread::sleep(interval.saturating_sub(at.elapsed()));
        let cur = match fetch(&args.metrics_url) {
            Ok(s) => s,
            Err(e) if args.once => {
                eprintln!("error: {e}");
                return EXIT_FAILURE;
            }
            Err(e) => {
                // The endpoint went away (the bench ended): say so and keep trying.
                println!("\x1b[2J\x1b[Hkvtier top — {e}; retrying");
                at = Instant::now();
                continue;
            }
        };
        let frame = render(&prev, &cur, at.elapsed().as_secs_f64(), &args.metrics_url);
        if args.once {
            print!("{frame}");
            return EXIT_OK;
        }
        print!("\x1b[2J\x1b[H{frame}");
        prev = cur;
        at = Instant::now();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const LABELS: &str = r#"adapter="0",adapter_type="s3",name="garage""#;

    fn exposition(stores: u64, bytes: u64, fast: u64, slow: u64, breaker: u8) -> String {
        let mut t = String::new();
        let l = LABELS;
        for (m, v) in [
            ("kvtier_store_tasks_total", stores),
            ("kvtier_store_succeeded_keys_total", stores * 16),
            ("kvtier_stored_bytes_total", bytes),
            ("kvtier_lookup_tasks_total", stores),
            ("kvtier_lookup_keys_total", stores * 16),
            ("kvtier_lookup_hit_keys_total", stores * 12),
            ("kvtier_usage_bytes", 3 << 30),
            ("kvtier_capacity_bytes", 4 << 30),
            ("kvtier_usage_keys", 768),
            ("kvtier_locked_keys", 32),
            ("kvtier_healthy", u64::from(breaker != 1)),
            ("kvtier_breaker_state", u64::from(breaker)),
        ] {
            let _ = writeln!(t, "{m}{{{l}}} {v}");
        }
        let _ = writeln!(t, "kvtier_inflight_requests{{{l},op=\"store\"}} 3");
        let _ = writeln!(t, "# TYPE kvtier_request_duration_seconds histogram");
        for (le, c) in [
            ("0.001", fast),
            ("0.01", fast + slow),
            ("+Inf", fast + slow),
        ] {
            let _ = writeln!(
                t,
                "kvtier_request_duration_seconds_bucket{{{l},op=\"store\",le=\"{le}\"}} {c}"
            );
        }
        let _ = writeln!(
            t,
            "kvtier_request_duration_seconds_count{{{l},op=\"store\"}} {}",
            fast + slow
        );
        let _ = writeln!(
            t,
            "kvtier_request_duration_seconds_sum{{{l},op=\"store\"}} 0.5"
        );
        t
    }

    /// The frame for a known change, pinned (a snapshot of the rendering).
    #[test]
    fn frame_snapshot() {
        let prev = Scrape::parse(&exposition(100, 100 << 20, 90, 10, 0)).unwrap();
        let cur = Scrape::parse(&exposition(200, 300 << 20, 180, 20, 0)).unwrap();
        let frame = render(&prev, &cur, 2.0, "http://127.0.0.1:9464/metrics");
        let expected = "\
kvtier top — http://127.0.0.1:9464/metrics — every 2.0 s

adapter #0 garage (s3): healthy, breaker closed
  usage 3.00 GiB / 4.00 GiB (75 %), 768 keys, 32 locked, evicted 0 keys/s
  op          req/s     keys/s       MiB/s       p50       p99  inflight
  store        50.0      800.0       100.0     1.0ms    10.0ms         3
  lookup       50.0      600.0           -         -         -         0
  load          0.0        0.0         0.0         -         -         0
  delete        0.0        0.0           -         -         -         0
  lookup hit ratio 75.0 %
";
        assert_eq!(frame, expected, "\n{frame}");
    }

    #[test]
    fn an_open_breaker_shows() {
        let prev = Scrape::parse(&exposition(1, 1, 1, 0, 1)).unwrap();
        let frame = render(&prev, &prev, 1.0, "x");
        assert!(frame.contains("UNHEALTHY, breaker OPEN"), "{frame}");
    }

    #[test]
    fn quantiles_use_only_the_interval() {
        // Before: 1000 fast observations; in the interval: 10 slow ones only.
        let prev = [(0.001, 1000.0), (0.01, 1000.0), (f64::INFINITY, 1000.0)];
        let cur = [(0.001, 1000.0), (0.01, 1010.0), (f64::INFINITY, 1010.0)];
        assert_eq!(quantile(&prev, &cur, 0.5), Some(0.01));
        assert_eq!(quantile(&cur, &cur, 0.5), None);
    }
}
