//! `kvtier bench --plot FILE.svg`: the run's own metrics over time, drawn with `plotters`.
//!
//! A sampler thread reads the tier's registry (the same text `/metrics` serves) every
//! [`PERIOD`] while the bench runs; at the end the samples become four panels: bytes per
//! second stored and loaded, requests per second by operation, usage against capacity (with
//! evicted keys), and requests in flight by operation. Rates are differences of counters
//! between samples, summed over adapters. It is the picture in docs/metrics.md: rendered from a
//! real run, by the same series a Grafana dashboard would query.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

use plotters::prelude::*;
use prometheus_client::registry::Registry;

/// Time between samples.
pub const PERIOD: Duration = Duration::from_millis(200);

/// One sample: seconds since the start, and every series' value.
type Sample = (f64, BTreeMap<String, f64>);

/// Samples the registry on a thread of its own until stopped.
pub struct Sampler {
    stop: flume::Sender<()>,
    thread: std::thread::JoinHandle<Vec<Sample>>,
}

impl Sampler {
    /// Starts sampling `registry`.
    pub fn start(registry: Arc<Registry>) -> Self {
        let (stop, stopped) = flume::bounded::<()>(1);
        let thread = std::thread::spawn(move || {
            let t0 = Instant::now();
            let sample = || {
                let text = kvtier::actors::metrics::encode(&registry);
                (
                    t0.elapsed().as_secs_f64(),
                    crate::metrics_server::samples(&text),
                )
            };
            let mut out = vec![sample()];
            // Wakes at once when stopped: the last sample is taken after the run.
            while matches!(
                stopped.recv_timeout(PERIOD),
                Err(flume::RecvTimeoutError::Timeout)
            ) {
                out.push(sample());
            }
            out.push(sample());
            out
        });
        Self { stop, thread }
    }

    /// Stops sampling and draws the panels into `path` (SVG).
    pub fn finish(self, path: &PathBuf, title: &str) -> Result<(), String> {
        let _ = self.stop.send(());
        let samples = self
            .thread
            .join()
            .map_err(|_| "the metrics sampler panicked".to_owned())?;
        draw(&samples, path, title)
    }
}

/// The sum over every series of `family` whose labels contain `filter` (e.g. `op="load"`).
fn total(sample: &BTreeMap<String, f64>, family: &str, filter: &str) -> f64 {
    sample
        .iter()
        .filter(|(k, _)| {
            k.strip_prefix(family)
                .is_some_and(|rest| rest.starts_with('{') && rest.contains(filter))
        })
        .map(|(_, v)| *v)
        .sum()
}

/// `(t, rate)` of a counter family between consecutive samples, scaled by `scale`.
fn rate(samples: &[Sample], family: &str, filter: &str, scale: f64) -> Vec<(f64, f64)> {
    samples
        .windows(2)
        .map(|w| {
            let dt = (w[1].0 - w[0].0).max(1e-6);
            let dv = total(&w[1].1, family, filter) - total(&w[0].1, family, filter);
            (w[1].0, dv.max(0.0) / dt * scale)
        })
        .collect()
}

/// `(t, value)` of a gauge family, scaled.
fn level(samples: &[Sample], family: &str, filter: &str, scale: f64) -> Vec<(f64, f64)> {
    samples
        .iter()
        .map(|(t, s)| (*t, total(s, family, filter) * scale))
        .collect()
}

type Lines = Vec<(&'static str, RGBColor, Vec<(f64, f64)>)>;

fn panel(
    area: &DrawingArea<SVGBackend<'_>, plotters::coord::Shift>,
    caption: &str,
    y_desc: &str,
    t_max: f64,
    lines: Lines,
) -> Result<(), String> {
    let err = |e: &dyn std::fmt::Display| format!("plot: {e}");
    let y_max = lines
        .iter()
        .flat_map(|(_, _, p)| p.iter().map(|(_, y)| *y))
        .fold(0.0f64, f64::max)
        .max(1e-9)
        * 1.1;
    let mut chart = ChartBuilder::on(area)
        .caption(caption, ("sans-serif", 18))
        .margin(8)
        .x_label_area_size(28)
        .y_label_area_size(60)
        .build_cartesian_2d(0f64..t_max.max(1e-3), 0f64..y_max)
        .map_err(|e| err(&e))?;
    chart
        .configure_mesh()
        .x_desc("seconds")
        .y_desc(y_desc)
        .draw()
        .map_err(|e| err(&e))?;
    for (name, color, points) in lines {
        chart
            .draw_series(LineSeries::new(points, color.stroke_width(2)))
            .map_err(|e| err(&e))?
            .label(name)
            .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 18, y)], color));
    }
    chart
        .configure_series_labels()
        .background_style(WHITE.mix(0.8))
        .border_style(BLACK)
        .position(SeriesLabelPosition::UpperRight)
        .draw()
        .map_err(|e| err(&e))
}

fn draw(samples: &[Sample], path: &PathBuf, title: &str) -> Result<(), String> {
    if samples.len() < 2 {
        return Err("plot: the run was too short to sample".into());
    }
    let t_max = samples.last().map_or(1.0, |s| s.0);
    let mib = 1.0 / (1024.0 * 1024.0);
    let root = SVGBackend::new(path, (1000, 1100)).into_drawing_area();
    root.fill(&WHITE).map_err(|e| format!("plot: {e}"))?;
    let root = root
        .titled(title, ("sans-serif", 22))
        .map_err(|e| format!("plot: {e}"))?;
    let areas = root.split_evenly((4, 1));
    // Per operation: name, colour, its request counter, its `op` label filter.
    let ops: [(&'static str, RGBColor, &str, &str); 4] = [
        (
            "store",
            RGBColor(31, 119, 180),
            "kvtier_store_tasks_total",
            "op=\"store\"",
        ),
        (
            "lookup",
            RGBColor(44, 160, 44),
            "kvtier_lookup_tasks_total",
            "op=\"lookup\"",
        ),
        (
            "load",
            RGBColor(255, 127, 14),
            "kvtier_load_tasks_total",
            "op=\"load\"",
        ),
        (
            "delete",
            RGBColor(214, 39, 40),
            "kvtier_delete_tasks_total",
            "op=\"delete\"",
        ),
    ];
    panel(
        &areas[0],
        "Throughput (kvtier_stored_bytes_total, kvtier_loaded_bytes_total)",
        "MiB/s",
        t_max,
        vec![
            (
                "stored",
                ops[0].1,
                rate(samples, "kvtier_stored_bytes_total", "", mib),
            ),
            (
                "loaded",
                ops[2].1,
                rate(samples, "kvtier_loaded_bytes_total", "", mib),
            ),
        ],
    )?;
    panel(
        &areas[1],
        "Requests (kvtier_*_tasks_total)",
        "requests/s",
        t_max,
        ops.iter()
            .map(|(op, c, family, _)| (*op, *c, rate(samples, family, "", 1.0)))
            .collect(),
    )?;
    panel(
        &areas[2],
        "Usage (kvtier_usage_bytes, kvtier_capacity_bytes) and evictions",
        "MiB / keys",
        t_max,
        vec![
            (
                "usage MiB",
                ops[0].1,
                level(samples, "kvtier_usage_bytes", "", mib),
            ),
            (
                "capacity MiB",
                BLACK,
                level(samples, "kvtier_capacity_bytes", "", mib),
            ),
            (
                "evicted keys (total)",
                ops[3].1,
                level(samples, "kvtier_evicted_keys_total", "", 1.0),
            ),
        ],
    )?;
    panel(
        &areas[3],
        "In flight (kvtier_inflight_requests)",
        "requests",
        t_max,
        ops.iter()
            .map(|(op, c, _, filter)| {
                let inflight = level(samples, "kvtier_inflight_requests", filter, 1.0);
                (*op, *c, inflight)
            })
            .collect(),
    )?;
    root.present().map_err(|e| format!("plot: {e}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rates_are_counter_differences() {
        let s = |t: f64, v: f64| {
            (
                t,
                BTreeMap::from([
                    (r#"kvtier_stored_bytes_total{adapter="0"}"#.to_owned(), v),
                    (r#"kvtier_stored_bytes_total{adapter="1"}"#.to_owned(), v),
                    (
                        r#"kvtier_stored_bytes_total_other{adapter="0"}"#.to_owned(),
                        1e9,
                    ),
                ]),
            )
        };
        let samples = vec![s(0.0, 0.0), s(0.5, 100.0), s(1.0, 100.0)];
        assert_eq!(
            rate(&samples, "kvtier_stored_bytes_total", "", 1.0),
            vec![(0.5, 400.0), (1.0, 0.0)]
        );
    }

    #[test]
    fn draws_an_svg() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("p.svg");
        let samples: Vec<Sample> = (0..5)
            .map(|i| {
                let v = f64::from(i) * 1e6;
                let m = BTreeMap::from([
                    (r#"kvtier_stored_bytes_total{adapter="0"}"#.to_owned(), v),
                    (r#"kvtier_usage_bytes{adapter="0"}"#.to_owned(), v),
                    (
                        r#"kvtier_inflight_requests{adapter="0",op="load"}"#.to_owned(),
                        2.0,
                    ),
                ]);
                (f64::from(i) * 0.2, m)
            })
            .collect();
        draw(&samples, &path, "test").unwrap();
        let svg = std::fs::read_to_string(&path).unwrap();
        assert!(svg.starts_with("<svg"), "{}", &svg[..100]);
        assert!(svg.contains("kvtier_inflight_requests"));
    }
}
