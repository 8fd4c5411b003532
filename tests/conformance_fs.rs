//! The conformance suite against the `fs` backend, plus its own tests (restart recovery,
//! atomic writes, LMCache file names).

use kvtier_testkit as support;

use bytes::BytesMut;
use kvtier::{AdapterConfig, Tier, TierConfig};
use support::conformance::Fixture;
use support::{key, payload};
use tempfile::TempDir;

struct Fs(TempDir);

impl Fs {
    fn new() -> Self {
        Fs(TempDir::new().unwrap())
    }
}

impl Fixture for Fs {
    fn adapter(&self, slot: usize) -> AdapterConfig {
        AdapterConfig::fs(self.0.path().join(format!("slot{slot}")))
    }
}

support::conformance_tests!(Fs::new());

fn config(a: AdapterConfig) -> TierConfig {
    {
        let mut built = TierConfig::default();
        built.adapters = vec![a];
        built.eviction_interval_ms = 50;
        built
    }
}

#[actix_rt::test]
async fn restart_recovers_usage_and_objects() {
    let fx = Fs::new();
    let mut a = fx.adapter(0);
    a.common.max_capacity_gb = 1.0;
    a.common.eviction = Some(Default::default());
    let tier = Tier::start(&config(a.clone())).await.unwrap();
    assert!(tier
        .store(
            vec![key(1), key(2), support::salted(3, "s")],
            vec![payload(1, 100), payload(2, 200), payload(3, 300)],
        )
        .await
        .unwrap()
        .success());
    let before = tier.usage().await.unwrap();
    tier.close().await;

    let tier = Tier::start(&config(a)).await.unwrap();
    let after = tier.usage().await.unwrap();
    assert_eq!(after, before);
    assert_eq!(after.adapters[0].used_bytes, 600);
    assert_eq!(after.adapters[0].bytes_by_cache_salt.get("s"), Some(&300));
    let stats = tier.eviction_stats().await.unwrap();
    assert!(
        support::wait_until(5, || async {
            tier.eviction_stats().await.unwrap()[0].1.tracked_keys == 3
        })
        .await,
        "the eviction actor learnt the recovered keys: {stats:?}"
    );
    // Recovered keys are hits without a new store.
    let rep = tier
        .store(vec![key(1)], vec![payload(1, 100)])
        .await
        .unwrap();
    assert_eq!(rep.adapters[0].1.new_bytes, 0);
    let loaded = tier.load(vec![key(2)], vec![BytesMut::zeroed(200)]).await;
    assert!(loaded.hits.all());
    tier.close().await;
}

#[actix_rt::test]
async fn recovery_off_starts_empty_and_leftover_temp_files_are_ignored() {
    let fx = Fs::new();
    let a = fx.adapter(0);
    let dir = fx.0.path().join("slot0");
    let tier = Tier::start(&config(a.clone())).await.unwrap();
    assert!(tier
        .store(vec![key(1)], vec![payload(1, 100)])
        .await
        .unwrap()
        .success());
    tier.close().await;
    // A torn write from a crash: never visible as an object.
    std::fs::write(
        dir.join("test-model@0x00000000@00000002.data.1-0.tmp"),
        b"torn",
    )
    .unwrap();
    std::fs::write(dir.join("unrelated.txt"), b"x").unwrap();

    let tier = Tier::start(&config(a.clone())).await.unwrap();
    assert_eq!(tier.usage().await.unwrap().adapters[0].keys, 1);
    assert_eq!(
        format!(
            "{}",
            tier.lookup_and_lock(vec![key(1), key(2)]).await.unwrap()
        ),
        "10"
    );
    tier.unlock(vec![key(1)]);
    tier.close().await;

    let mut off = a;
    if let kvtier::AdapterSpec::Fs(c) = &mut off.spec {
        c.recover_on_start = false;
    }
    let tier = Tier::start(&config(off)).await.unwrap();
    assert_eq!(tier.usage().await.unwrap().adapters[0].keys, 0);
    // Still found by a lookup (a probe), which then accounts for it.
    assert!(tier.lookup_and_lock(vec![key(1)]).await.unwrap().all());
    assert_eq!(tier.usage().await.unwrap().adapters[0].used_bytes, 100);
    tier.close().await;
}

#[actix_rt::test]
async fn files_use_lmcache_names_and_raw_bytes() {
    let fx = Fs::new();
    let tier = Tier::start(&config(fx.adapter(0))).await.unwrap();
    let k = kvtier::ObjectKey::new("meta-llama/Llama-3", 255, vec![0u8, 1, 2, 3])
        .unwrap()
        .with_salt("user-42")
        .unwrap();
    assert!(tier
        .store(vec![k], vec![payload(5, 64)])
        .await
        .unwrap()
        .success());
    tier.close().await;
    let path =
        fx.0.path()
            .join("slot0/meta-llama-SEP-Llama-3@0x000000ff@00010203@user-42.data");
    assert_eq!(std::fs::read(path).unwrap(), payload(5, 64).to_vec());
}

#[actix_rt::test]
async fn unwritable_directory_is_a_named_start_error() {
    let fx = Fs::new();
    let file = fx.0.path().join("a-file");
    std::fs::write(&file, b"x").unwrap();
    let err = Tier::start(&config(AdapterConfig::fs(file.join("sub"))))
        .await
        .err()
        .expect("cannot create a directory under a file");
    let msg = err.to_string();
    assert!(msg.starts_with("adapter #0 (fs): "), "{msg}");
    assert!(msg.contains("base_path"), "{msg}");
}
