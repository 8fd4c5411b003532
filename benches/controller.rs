//! Micro benchmark: lookup_and_lock + unlock of 256-key batches through the controller on the
//! memory backend (the message-routing overhead of the runtime, no I/O).
//!
//! Run: `cargo bench --bench controller`. Goal: >= 1,000,000 keys/s on a 2-core machine.
//! A second group times the same 256 lookups against a plain `HashMap` in one thread, the
//! baseline docs/benchmarks.md compares with.

use std::collections::HashMap;
use std::time::{Duration, Instant};

use bytes::Bytes;
use criterion::{criterion_group, criterion_main, Criterion, Throughput};
use kvtier::{AdapterConfig, ObjectKey, Tier, TierConfig};

const BATCH: usize = 256;

fn keys(n: usize) -> Vec<ObjectKey> {
    let base = ObjectKey::new("llama-3.1-8b", 3, vec![0u8; 16]).unwrap();
    (0..n)
        .map(|i| base.with_hash((i as u128).to_be_bytes().to_vec()).unwrap())
        .collect()
}

/// A memory tier with the benchmark's keys stored, metrics on or off.
fn tier(sys: &actix_rt::SystemRunner, metrics: bool) -> Tier {
    sys.block_on(async {
        let mut config = TierConfig::with_adapters(vec![AdapterConfig::memory()]);
        config.metrics = metrics;
        let tier = Tier::start(&config).await.unwrap();
        let ks = keys(BATCH * 4);
        let objs = vec![Bytes::from_static(&[1u8; 64]); ks.len()];
        assert!(tier.store(ks, objs).await.unwrap().success());
        tier
    })
}

fn lookup_unlock(c: &mut Criterion) {
    let sys = actix_rt::System::new();
    let batches: Vec<Vec<ObjectKey>> = keys(BATCH * 4).chunks(BATCH).map(|c| c.to_vec()).collect();

    let mut g = c.benchmark_group("controller");
    g.throughput(Throughput::Elements(BATCH as u64));
    g.measurement_time(Duration::from_secs(5));
    // Metrics on is the default; "metrics off" is `metrics = false` (the overhead figure of
    // docs/benchmarks.md is the ratio of the two).
    for (label, metrics) in [("", true), (" (metrics off)", false)] {
        let tier = tier(&sys, metrics);
        g.bench_function(
            format!("lookup_and_lock+unlock/256 keys/memory{label}"),
            |b| {
                b.iter_custom(|iters| {
                    sys.block_on(async {
                        let start = Instant::now();
                        for i in 0..iters {
                            let batch = batches[i as usize % batches.len()].clone();
                            let hits = tier.lookup_and_lock(batch.clone()).await.unwrap();
                            assert_eq!(hits.count_ones(), BATCH);
                            tier.unlock(batch);
                        }
                        // A round trip behind the last unlock, so every unlock is counted.
                        tier.usage().await.unwrap();
                        start.elapsed()
                    })
                })
            },
        );
        sys.block_on(tier.close());
    }

    let map: HashMap<ObjectKey, u64> = keys(BATCH * 4).into_iter().map(|k| (k, 64)).collect();
    g.bench_function(
        "baseline: HashMap lookup+lock+unlock/256 keys/one thread",
        |b| {
            let mut locks: HashMap<ObjectKey, u32> = HashMap::new();
            let mut i = 0usize;
            b.iter(|| {
                let batch = batches[i % batches.len()].clone();
                i += 1;
                let mut hits = 0;
                for k in &batch {
                    if map.contains_key(k) {
                        *locks.entry(k.clone()).or_insert(0) += 1;
                        hits += 1;
                    }
                }
                for k in &batch {
                    if let Some(n) = locks.get_mut(k) {
                        *n -= 1;
                        if *n == 0 {
                            locks.remove(k);
                        }
                    }
                }
                hits
            })
        },
    );
    g.finish();
}

criterion_group!(benches, lookup_unlock);
criterion_main!(benches);
