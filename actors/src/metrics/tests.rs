//! Tests of the metrics: what each recorder writes to the registry, in Prometheus' text form.

use super::*;
use prometheus_client::encoding::text::encode;

/// Every family's exposed name, type and label names, pinned: a rename breaks dashboards.
#[test]
fn metrics_names() {
    let mut registry = Registry::default();
    let metrics = Metrics::register(&mut registry);
    let a = metrics.adapter(0, "s3", Some("primary"));
    let s = a.start(Op::Store, 2, 10);
    a.finish(s);
    a.stored(1, 5);
    a.failed(Op::Store, ErrorKind::Throttled, 1);
    a.failed(Op::Load, ErrorKind::Timeout, 1);
    a.failed(Op::Lookup, ErrorKind::Connection, 1);
    a.failed(Op::Delete, ErrorKind::Permission, 1);
    a.retry("throttled");
    a.hub_request("xet_read_token");
    a.metadata_cache(true);
    a.fleet_write_waited(false);
    a.set_salt_usage([("tenant-a", 7u64)].into_iter(), &mut Vec::new());
    let mut text = String::new();
    encode(&mut text, &registry).unwrap();
    let mut types: Vec<String> = text
        .lines()
        .filter_map(|l| l.strip_prefix("# TYPE "))
        .map(str::to_owned)
        .collect();
    types.sort();
    let expected = [
        "kvtier_breaker_state gauge",
        "kvtier_breaker_transitions counter",
        "kvtier_capacity_bytes gauge",
        "kvtier_corrupt_objects counter",
        "kvtier_delete_failed_keys counter",
        "kvtier_delete_tasks counter",
        "kvtier_deleted_keys counter",
        "kvtier_evicted_bytes counter",
        "kvtier_evicted_keys counter",
        "kvtier_eviction_rounds counter",
        "kvtier_fleet_joined gauge",
        "kvtier_fleet_usage_bytes gauge",
        "kvtier_fleet_write_waits counter",
        "kvtier_healthy gauge",
        "kvtier_hf_metadata_cache counter",
        "kvtier_hub_requests counter",
        "kvtier_inflight_bytes gauge",
        "kvtier_inflight_requests gauge",
        "kvtier_load_completed counter",
        "kvtier_load_failed_keys counter",
        "kvtier_load_keys counter",
        "kvtier_load_missed_keys counter",
        "kvtier_load_tasks counter",
        "kvtier_loaded_bytes counter",
        "kvtier_loaded_keys counter",
        "kvtier_locked_keys gauge",
        "kvtier_lookup_failed_keys counter",
        "kvtier_lookup_hit_keys counter",
        "kvtier_lookup_keys counter",
        "kvtier_lookup_tasks counter",
        "kvtier_request_duration_seconds histogram",
        "kvtier_retries counter",
        "kvtier_store_completed counter",
        "kvtier_store_failed_keys counter",
        "kvtier_store_keys counter",
        "kvtier_store_succeeded_keys counter",
        "kvtier_store_tasks counter",
        "kvtier_stored_bytes counter",
        "kvtier_usage_bytes gauge",
        "kvtier_usage_bytes_by_salt gauge",
        "kvtier_usage_keys gauge",
    ];
    assert_eq!(types, expected);
    // Label sets, one sample line each.
    for line in [
        r#"kvtier_store_tasks_total{adapter="0",adapter_type="s3",name="primary"} 1"#,
        r#"kvtier_store_failed_keys_total{adapter="0",adapter_type="s3",name="primary",kind="throttled"} 1"#,
        r#"kvtier_load_failed_keys_total{adapter="0",adapter_type="s3",name="primary",kind="timeout"} 1"#,
        r#"kvtier_retries_total{adapter="0",adapter_type="s3",name="primary",cause="throttled"} 1"#,
        r#"kvtier_hub_requests_total{adapter="0",adapter_type="s3",name="primary",route="xet_read_token"} 1"#,
        r#"kvtier_hf_metadata_cache_total{adapter="0",adapter_type="s3",name="primary",result="hit"} 1"#,
        r#"kvtier_usage_bytes_by_salt{adapter="0",adapter_type="s3",name="primary",cache_salt="tenant-a"} 7"#,
        r#"kvtier_inflight_requests{adapter="0",adapter_type="s3",name="primary",op="store"} 0"#,
        r#"kvtier_request_duration_seconds_count{adapter="0",adapter_type="s3",name="primary",op="store"} 1"#,
        r#"kvtier_healthy{adapter="0",adapter_type="s3",name="primary"} 1"#,
        r#"kvtier_fleet_joined{adapter="0",adapter_type="s3",name="primary"} -1"#,
    ] {
        assert!(text.lines().any(|l| l == line), "missing {line} in\n{text}");
    }
}

#[test]
fn salt_series_are_bounded_and_pruned() {
    let mut registry = Registry::default();
    let metrics = Metrics::register(&mut registry);
    let a = metrics.adapter(1, "fs", None);
    let mut shown = Vec::new();
    let salts: Vec<(String, u64)> = (0..40).map(|i| (format!("s{i:02}"), 100 + i)).collect();
    a.set_salt_usage(salts.iter().map(|(s, b)| (s.as_str(), *b)), &mut shown);
    let series = |registry: &Registry| {
        let mut text = String::new();
        encode(&mut text, registry).unwrap();
        text.lines()
            .filter(|l| l.starts_with("kvtier_usage_bytes_by_salt{"))
            .map(str::to_owned)
            .collect::<Vec<_>>()
    };
    let lines = series(&registry);
    assert_eq!(lines.len(), MAX_SALT_SERIES + 1);
    // The 24 smallest (100..=123) are summed into _other.
    let other: u64 = (100..124).sum();
    assert!(lines
        .iter()
        .any(|l| l.ends_with(&format!("cache_salt=\"_other\"}} {other}"))));
    assert!(lines.iter().any(|l| l.contains("cache_salt=\"s39\"")));
    assert!(!lines.iter().any(|l| l.contains("cache_salt=\"s00\"")));
    // A salt that leaves loses its series.
    a.set_salt_usage([("only", 5u64)].into_iter(), &mut shown);
    let lines = series(&registry);
    assert_eq!(lines.len(), 1, "{lines:?}");
    assert!(lines[0].contains("cache_salt=\"only\""));
}

#[test]
fn off_records_nothing() {
    let a = AdapterMetrics::off();
    assert!(!a.is_on());
    let s = a.start(Op::Load, 3, 30);
    a.finish(s);
    a.loaded(3, 30, 0);
}
