//! `kvtier bench --metrics-addr` against a real Garage: a scraper reads `/metrics` over HTTP
//! for the whole run and parses every exposition with a Prometheus text parser
//! (`prometheus-parse`); the families a run must move are non-zero, the ones it must not move
//! (breaker opened, failures) stay zero, and every series carries the adapter's labels.

use kvtier_testkit as support;

use std::collections::BTreeMap;
use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};

use support::garage::Garage;

/// A sample: its metric name, labels and value.
type Sample = (String, BTreeMap<String, String>, f64);

/// One scrape, parsed: every sample.
fn scrape(addr: &str) -> Option<Vec<Sample>> {
    let body = ureq::get(&format!("http://{addr}/metrics"))
        .call()
        .ok()?
        .body_mut()
        .read_to_string()
        .ok()?;
    let lines = body.lines().map(|l| Ok(l.to_owned()));
    let parsed = prometheus_parse::Scrape::parse(lines).expect("the exposition parses");
    Some(
        parsed
            .samples
            .into_iter()
            .map(|s| {
                let value = match s.value {
                    prometheus_parse::Value::Counter(v)
                    | prometheus_parse::Value::Gauge(v)
                    | prometheus_parse::Value::Untyped(v) => v,
                    prometheus_parse::Value::Histogram(h) => {
                        h.iter().map(|b| b.count).fold(0.0, f64::max)
                    }
                    prometheus_parse::Value::Summary(_) => 0.0,
                };
                let labels = s
                    .labels
                    .iter()
                    .map(|(k, v)| (k.clone(), v.clone()))
                    .collect();
                (s.metric, labels, value)
            })
            .collect(),
    )
}

#[test]
fn bench_against_garage_exposes_every_family() {
    let garage = Garage::start();
    garage.create_bucket("metrics");
    let adapter = serde_json::json!({
        "type": "s3",
        "s3_endpoint": garage.s3_endpoint,
        "s3_bucket": "metrics",
        "s3_region": garage.region,
        "disable_tls": true,
        "aws_access_key_id": garage.access_key_id,
        "aws_secret_access_key": garage.secret_access_key,
        "name": "garage-test",
        // 128 × 256 KiB = 32 MiB stored; the overfill phase crosses the watermark.
        "max_capacity_gb": 40.0 / 1024.0,
        "eviction": {"eviction_policy": "LRU"},
    });
    let mut child = Command::new(env!("CARGO_BIN_EXE_kvtier"))
        .args([
            "bench",
            "--l2-adapter",
            &adapter.to_string(),
            "--chunks",
            "128",
            "--chunk-size",
            "256KiB",
            "--no-baseline",
            "--cleanup",
            "--json",
            "--metrics-addr",
            "127.0.0.1:0",
        ])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("kvtier runs");
    // The bench prints the bound address first thing on stderr.
    let mut stderr = BufReader::new(child.stderr.take().unwrap());
    let mut addr = None;
    let mut line = String::new();
    while stderr.read_line(&mut line).unwrap() > 0 {
        if let Some(url) = line.trim().strip_prefix("metrics: http://") {
            addr = Some(url.trim_end_matches("/metrics").to_owned());
            break;
        }
        line.clear();
    }
    let addr = addr.expect("the bench announces its metrics address on stderr");
    let drain = std::thread::spawn(move || {
        let mut rest = String::new();
        let _ = std::io::Read::read_to_string(&mut stderr, &mut rest);
        rest
    });
    // Scrape until the server goes away with the process; keep the largest value per series
    // (counters only grow; gauges such as in-flight requests are seen at their peak).
    let mut peak: BTreeMap<(String, BTreeMap<String, String>), f64> = BTreeMap::new();
    let mut scrapes = 0;
    while let Some(samples) = scrape(&addr) {
        scrapes += 1;
        for (name, labels, v) in samples {
            let e = peak.entry((name, labels)).or_insert(v);
            *e = e.max(v);
        }
    }
    let out = child.wait_with_output().unwrap();
    let rest = drain.join().unwrap();
    assert!(out.status.success(), "bench failed: {rest}");
    assert!(scrapes >= 2, "only {scrapes} scrapes during the run");

    let family_max = |family: &str| -> f64 {
        peak.iter()
            .filter(|((n, _), _)| n == family)
            .map(|(_, v)| *v)
            .fold(f64::NAN, f64::max)
    };
    for family in [
        "kvtier_store_tasks_total",
        "kvtier_store_keys_total",
        "kvtier_store_completed_total",
        "kvtier_store_succeeded_keys_total",
        "kvtier_stored_bytes_total",
        "kvtier_lookup_tasks_total",
        "kvtier_lookup_keys_total",
        "kvtier_lookup_hit_keys_total",
        "kvtier_load_tasks_total",
        "kvtier_load_keys_total",
        "kvtier_load_completed_total",
        "kvtier_loaded_keys_total",
        "kvtier_loaded_bytes_total",
        "kvtier_delete_tasks_total",
        "kvtier_deleted_keys_total",
        "kvtier_eviction_rounds_total",
        "kvtier_evicted_keys_total",
        "kvtier_evicted_bytes_total",
        "kvtier_usage_bytes",
        "kvtier_usage_keys",
        "kvtier_capacity_bytes",
        "kvtier_usage_bytes_by_salt",
        "kvtier_healthy",
        "kvtier_inflight_requests",
        "kvtier_request_duration_seconds_count",
    ] {
        let v = family_max(family);
        assert!(
            v > 0.0,
            "{family} never moved (max {v}); scraped {scrapes} times"
        );
    }
    // A healthy run: the breaker never left "closed" and nothing failed.
    for family in ["kvtier_breaker_state", "kvtier_breaker_transitions_total"] {
        assert_eq!(family_max(family), 0.0, "{family}");
    }
    for ((name, labels), v) in &peak {
        if name.ends_with("_failed_keys_total") {
            panic!("{name} {labels:?} = {v}: nothing should fail on a healthy Garage");
        }
        assert_eq!(
            labels.get("adapter").map(String::as_str),
            Some("0"),
            "{name}"
        );
        assert_eq!(
            labels.get("adapter_type").map(String::as_str),
            Some("s3"),
            "{name}"
        );
        assert_eq!(
            labels.get("name").map(String::as_str),
            Some("garage-test"),
            "{name}"
        );
    }
    // The salts the bench uses (none, tenant-a, tenant-b) each got a series.
    let salts: Vec<&str> = peak
        .keys()
        .filter(|(n, _)| n == "kvtier_usage_bytes_by_salt")
        .filter_map(|(_, l)| l.get("cache_salt").map(String::as_str))
        .collect();
    for salt in ["", "tenant-a", "tenant-b"] {
        assert!(
            salts.contains(&salt),
            "no usage series for salt {salt:?}: {salts:?}"
        );
    }
    // The final values are in the JSON report too.
    let report: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let stored = report["metrics"]
        .as_object()
        .unwrap()
        .iter()
        .find(|(k, _)| k.starts_with("kvtier_store_succeeded_keys_total{"))
        .map(|(_, v)| v.as_f64().unwrap());
    assert!(stored.unwrap_or(0.0) >= 128.0, "{stored:?}");
}

/// The Grafana dashboard in `dashboards/kvtier.json` queries only series kvtier exposes (a
/// renamed metric would otherwise leave an empty panel nobody notices).
#[test]
fn dashboard_queries_only_existing_metrics() {
    use kvtier::actors::metrics::{Metrics, Op};
    use kvtier::ErrorKind;
    let mut registry = prometheus_client::registry::Registry::default();
    let m = Metrics::register(&mut registry).adapter(0, "s3", None);
    let s = m.start(Op::Store, 1, 1);
    m.finish(s);
    for op in [Op::Store, Op::Lookup, Op::Load, Op::Delete] {
        m.failed(op, ErrorKind::Other, 1);
    }
    m.retry("throttled");
    m.hub_request("batch");
    m.metadata_cache(true);
    m.set_salt_usage([("a", 1u64)].into_iter(), &mut Vec::new());
    let mut text = String::new();
    prometheus_client::encoding::text::encode(&mut text, &registry).unwrap();
    let exposed: std::collections::BTreeSet<String> = text
        .lines()
        .filter(|l| !l.starts_with('#'))
        .filter_map(|l| l.split(['{', ' ']).next())
        .map(str::to_owned)
        .collect();
    let dashboard: serde_json::Value = serde_json::from_str(
        &std::fs::read_to_string(concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/../dashboards/kvtier.json"
        ))
        .unwrap(),
    )
    .unwrap();
    let mut exprs = Vec::new();
    for panel in dashboard["panels"].as_array().unwrap() {
        for t in panel["targets"].as_array().unwrap() {
            exprs.push(t["expr"].as_str().unwrap().to_owned());
        }
    }
    assert!(exprs.len() >= 15, "{} queries", exprs.len());
    let mut used = 0;
    for e in &exprs {
        let mut rest = e.as_str();
        while let Some(at) = rest.find("kvtier_") {
            let name: String = rest[at..]
                .chars()
                .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
                .collect();
            assert!(
                exposed.contains(&name),
                "{name} in {e:?} is not exposed: {exposed:?}"
            );
            used += 1;
            rest = &rest[at + name.len()..];
        }
    }
    assert!(used >= 20, "{used} metric references");
}
