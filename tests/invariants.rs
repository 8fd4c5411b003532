//! Invariants under random operations (proptest), against `memory`, `fs`, `fault_inject`
//! wrapping `memory` with nonzero error rates, `s3` on a Garage server and `hfbucket` on the Hub
//! emulator (both started by the test; fewer operations, as each one is a network round trip),
//! with the `LRU` policy; and against `memory` with
//! every other policy that evicts (`ARC` and `FLRU` with byte budgets, `FLRU` in each of its
//! `flru_admission` modes, `IsolatedLRU` with quotas), so the lock invariant holds
//! whatever a policy offers.
//!
//! Each case starts a real [`Tier`] (controller, backend actor, eviction actor) with a small
//! capacity so eviction runs all the time, and drives it with a random sequence of store,
//! lookup-and-lock, load, unlock and delete messages over a small key space. A model tracks what
//! the test knows for sure: the bytes of the last successful store of each key and how many
//! locks the test holds. Eviction runs concurrently, so an unlocked key may vanish at any time;
//! a locked key may not. Checked after every step, or every few steps for the costly ones:
//!
//! * a key the test holds a lock on always looks up as a hit and loads (unless the load
//!   failed by an injected fault, counted in `status`), and is still listed: locked keys are
//!   never deleted or evicted, and a delete never reports one;
//! * every load hit returns exactly the bytes last stored; a miss leaves the buffer untouched;
//! * the adapter's `locked_keys` equals the number of keys the model holds locks on (unlocks
//!   never fail, refcounts never go negative or leak);
//! * usage equals the sum of the sizes of the objects actually stored (listed), per-salt bytes
//!   sum to it, and the key count matches;
//! * at the end of a case, and every few hundred steps, eviction brings usage under the
//!   watermark whenever the unlocked keys allow it (for `IsolatedLRU`: every salt under
//!   `watermark × quota`, a salt without quota to nothing, unless its locked keys hold it up).
//!
//! Each test runs rounds of cases (each case up to 1500 operations) until at least 10,000
//! operations ran (`s3`: 2,000, `hfbucket`: 600, each case on a key prefix of its own), and
//! prints the count and time. A failing case is shrunk to a short operation
//! sequence, printed in the panic.

#[cfg(any(feature = "s3", feature = "hfbucket"))]
use kvtier_testkit as support;

use std::cell::Cell;
use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use bytes::{Bytes, BytesMut};
use kvtier::actors::backends::fault_inject::{FaultInjectConfig, PerOp};
#[cfg(feature = "hfbucket")]
use kvtier::actors::backends::hfbucket::HfBucketConfig;
use kvtier::actors::backends::memory::MemoryConfig;
use kvtier::actors::config::{EvictionConfig, EvictionPolicy, EvictionUnit, FlruAdmission, GIB};
use kvtier::actors::eviction::GetLruOrder;
use kvtier::actors::ListKeys;
use kvtier::{AdapterConfig, AdapterSpec, ObjectKey, Tier, TierConfig};
use proptest::prelude::*;
use proptest::test_runner::{Config, TestCaseError, TestRunner};
#[cfg(feature = "s3")]
use support::garage::Garage;
#[cfg(feature = "hfbucket")]
use support::hub::HubEmulator;

/// Keys in play: few, so operations collide.
const KEYS: u8 = 16;
/// Capacity in bytes; objects are 64..=256 bytes, so 16 keys (up to 4 KiB) overflow it.
const CAPACITY: u64 = 2048;
const WATERMARK: f64 = 0.7;
/// Operations per test, at least; cases run in rounds of [`CASES`] until this many ran.
const MIN_TOTAL_OPS: usize = 10_000;
const CASES: u32 = 4;
/// Operations per case: any length up to this, so a failure shrinks to a short sequence.
const MAX_OPS: usize = 1500;
/// Full checks (listing, usage) every this many operations; the watermark check less often.
const FULL_CHECK_EVERY: usize = 8;
const WATERMARK_CHECK_EVERY: usize = 250;
/// `IsolatedLRU` quotas: salt `a` and the unsalted keys have one, salt `b` has none (allowlist
/// rule: it is wiped).
const QUOTAS: [(&str, u64); 2] = [("a", 900), ("", 700)];

/// Faults injected over the cases of the `fault_inject` test (from its `status` counters).
static FAULTS: AtomicU64 = AtomicU64::new(0);

#[derive(Debug, Clone)]
enum Op {
    /// Store these keys (distinct), each with a size class 1..=4 (× 64 bytes).
    Store(Vec<(u8, u8)>),
    Lookup(Vec<u8>),
    Load(Vec<u8>),
    Unlock(Vec<u8>),
    Delete(Vec<u8>),
}

fn ops() -> impl Strategy<Value = Vec<Op>> {
    let ids = || prop::collection::vec(0..KEYS, 1..5);
    let op = prop_oneof![
        3 => prop::collection::vec((0..KEYS, 1u8..=4), 1..5).prop_map(|mut v| {
            let mut seen = Vec::new();
            v.retain(|(k, _)| {
                let new = !seen.contains(k);
                seen.push(*k);
                new
            });
            Op::Store(v)
        }),
        3 => ids().prop_map(Op::Lookup),
        2 => ids().prop_map(Op::Load),
        3 => ids().prop_map(Op::Unlock),
        1 => ids().prop_map(Op::Delete),
    ];
    prop::collection::vec(op, 1..=MAX_OPS)
}

fn key(id: u8) -> ObjectKey {
    let k = ObjectKey::new("inv/model", 1, vec![id, 0xab]).unwrap();
    match id % 3 {
        0 => k.with_salt("a").unwrap(),
        1 => k.with_salt("b").unwrap(),
        _ => k,
    }
}

/// Bytes of the `version`-th store, `len` long: distinct per key and version.
fn bytes_for(id: u8, version: u64, len: usize) -> Bytes {
    Bytes::from(
        (0..len)
            .map(|j| (version as usize * 7 + id as usize * 13 + j) as u8)
            .collect::<Vec<u8>>(),
    )
}

#[derive(Default)]
struct Model {
    /// The bytes of the last successful store of each key (it may since have been evicted).
    bytes: BTreeMap<u8, Bytes>,
    /// Locks the test holds.
    locks: BTreeMap<u8, u32>,
    version: u64,
}

impl Model {
    fn locked(&self, id: u8) -> bool {
        self.locks.get(&id).is_some_and(|n| *n > 0)
    }
    fn locked_bytes(&self) -> u64 {
        self.locks
            .keys()
            .filter_map(|id| self.bytes.get(id))
            .map(|b| b.len() as u64)
            .sum()
    }
    /// Locked bytes of one salt (`""`: unsalted).
    fn locked_salt_bytes(&self, salt: &str) -> u64 {
        self.locks
            .keys()
            .filter(|id| key(**id).cache_salt().unwrap_or("") == salt)
            .filter_map(|id| self.bytes.get(id))
            .map(|b| b.len() as u64)
            .sum()
    }
}

#[derive(Clone, Copy, Debug)]
enum Backend {
    Memory,
    Fs,
    FaultyMemory,
    #[cfg(feature = "s3")]
    S3,
    #[cfg(feature = "hfbucket")]
    HfBucket,
}

/// The server a remote backend's cases run against: started once per test; each case gets a
/// key prefix of its own, so it starts on an empty store.
enum Remote {
    Local,
    #[cfg(feature = "s3")]
    Garage(Box<Garage>),
    #[cfg(feature = "hfbucket")]
    Hub(HubEmulator),
}

#[cfg(feature = "s3")]
const S3_BUCKET: &str = "kvtier-invariants";
#[cfg(feature = "hfbucket")]
const HUB_TOKEN: &str = "hf_invariants_token";
#[cfg(feature = "hfbucket")]
const HUB_BUCKET: &str = "kvtier-org/invariants";

/// Cases started so far: the key prefix of the next remote case.
#[cfg(any(feature = "s3", feature = "hfbucket"))]
static CASE: AtomicU64 = AtomicU64::new(0);

impl Remote {
    fn start(backend: Backend) -> Remote {
        match backend {
            #[cfg(feature = "s3")]
            Backend::S3 => {
                let garage = Garage::start();
                garage.create_bucket(S3_BUCKET);
                Remote::Garage(Box::new(garage))
            }
            #[cfg(feature = "hfbucket")]
            Backend::HfBucket => {
                let hub = HubEmulator::start(HUB_TOKEN);
                hub.create_bucket(HUB_BUCKET);
                Remote::Hub(hub)
            }
            _ => Remote::Local,
        }
    }

    /// The adapter of a remote case, on a prefix no other case uses.
    #[cfg(any(feature = "s3", feature = "hfbucket"))]
    fn adapter(&self) -> Option<AdapterConfig> {
        let prefix = format!("case{}", CASE.fetch_add(1, Ordering::Relaxed));
        let spec = match self {
            Remote::Local => return None,
            #[cfg(feature = "s3")]
            Remote::Garage(g) => {
                let mut c = kvtier::actors::backends::s3::S3Config::new(&g.s3_endpoint, &g.region)
                    .bucket(S3_BUCKET)
                    .access_key_id(&g.access_key_id)
                    .secret_access_key(&g.secret_access_key);
                c.s3_key_prefix = Some(prefix);
                AdapterSpec::S3(c)
            }
            #[cfg(feature = "hfbucket")]
            Remote::Hub(hub) => {
                let mut c = HfBucketConfig::new(format!("hf://buckets/{HUB_BUCKET}/{prefix}"));
                c.token = Some(kvtier::actors::config::Secret::new(HUB_TOKEN));
                c.token_env = "KVTIER_TEST_NO_SUCH_VAR".into();
                c.hf_endpoint = Some(hub.endpoint().to_owned());
                AdapterSpec::HfBucket(c)
            }
        };
        Some(AdapterConfig::new(spec))
    }
}

/// The policy of a run: its name and, for `FLRU`, its `flru_admission` (`None`: the default).
type Policy = (EvictionPolicy, Option<FlruAdmission>);

#[cfg_attr(
    not(any(feature = "s3", feature = "hfbucket")),
    allow(unused_variables)
)]
fn adapter(
    backend: Backend,
    (policy, admission): Policy,
    dir: &std::path::Path,
    remote: &Remote,
) -> AdapterConfig {
    let mut a = match backend {
        #[cfg(feature = "s3")]
        Backend::S3 => remote.adapter().expect("a Garage"),
        #[cfg(feature = "hfbucket")]
        Backend::HfBucket => remote.adapter().expect("a Hub emulator"),
        Backend::Memory => AdapterConfig::memory(),
        Backend::Fs => AdapterConfig::fs(dir),
        Backend::FaultyMemory => {
            AdapterConfig::fault_inject(AdapterSpec::Memory(MemoryConfig::default()), {
                let mut built = FaultInjectConfig::default();
                built.error_rates = {
                    let mut built = PerOp::default();
                    built.put = 0.1;
                    built.head = 0.1;
                    built.get = 0.1;
                    built.remove = 0.1;
                    built.list = 0.0;
                    built
                };
                built.fail_every_nth_item = 4;
                built.seed = Some(0x5eed);
                built
            })
        }
    };
    a.common.max_capacity_gb = CAPACITY as f64 / GIB;
    a.common.eviction = Some({
        let mut built = EvictionConfig::with_policy(policy);
        built.trigger_watermark = WATERMARK;
        built.eviction_ratio = 0.3;
        built.eviction_unit = match policy {
            EvictionPolicy::Arc | EvictionPolicy::Flru => EvictionUnit::Bytes,
            _ => EvictionUnit::Keys,
        };
        built.flru_admission = admission;
        if policy == EvictionPolicy::IsolatedLru {
            for (salt, q) in QUOTAS {
                built.quotas.0.insert(salt.to_owned(), q);
            }
        }
        built
    });
    a
}

/// Injected `get` failures so far (0 without fault injection).
async fn injected_get_failures(tier: &Tier) -> u64 {
    let d = &tier.status().await.unwrap().adapters[0].details;
    ["errors", "nth_item_failures", "corrupted_sizes"]
        .iter()
        .map(|k| d["injected"][k]["get"].as_u64().unwrap_or(0))
        .sum()
}

/// Every listed key with its size.
async fn listing(tier: &Tier) -> Result<Vec<(ObjectKey, u64)>, TestCaseError> {
    let mut out = Vec::new();
    let mut cursor = None;
    loop {
        let page = tier
            .controller()
            .send(ListKeys {
                model: None,
                cursor,
                page_size: 7,
                adapter: 0,
            })
            .await
            .unwrap()
            .map_err(|e| TestCaseError::fail(format!("list failed: {e}")))?;
        out.extend(page.entries);
        match page.next {
            Some(n) => cursor = Some(n),
            None => return Ok(out),
        }
    }
}

/// Usage equals the listed objects' sizes (retried: eviction may be mid-round), locked keys are
/// listed, and listed sizes agree with the model.
async fn full_check(tier: &Tier, m: &Model, step: usize) -> Result<(), TestCaseError> {
    let mut last = String::new();
    for _ in 0..100 {
        let before = tier.usage().await.unwrap().adapters[0].clone();
        let listed = listing(tier).await?;
        let after = tier.usage().await.unwrap().adapters[0].clone();
        let sum: u64 = listed.iter().map(|(_, s)| *s).sum();
        if before == after && sum == after.used_bytes && listed.len() == after.keys {
            let by_salt: u64 = after.bytes_by_cache_salt.values().sum();
            prop_assert_eq!(by_salt, after.used_bytes, "per-salt bytes sum to usage");
            for id in m.locks.keys() {
                let k = key(*id);
                let size = listed.iter().find(|(l, _)| *l == k).map(|(_, s)| *s);
                prop_assert_eq!(
                    size,
                    m.bytes.get(id).map(|b| b.len() as u64),
                    "step {}: locked key {} is listed with its size",
                    step,
                    id
                );
            }
            for (k, s) in &listed {
                let id = (0..KEYS).find(|i| key(*i) == *k);
                let known = id.and_then(|i| m.bytes.get(&i)).map(|b| b.len() as u64);
                prop_assert_eq!(Some(*s), known, "step {}: listed {:?}", step, k);
            }
            return Ok(());
        }
        last = format!(
            "usage {before:?} / {after:?}, listed {sum} bytes in {} keys",
            listed.len()
        );
        actix_rt::time::sleep(Duration::from_millis(10)).await;
    }
    Err(TestCaseError::fail(format!(
        "step {step}: usage never matched the stored objects: {last}"
    )))
}

/// `IsolatedLRU`: eviction brings every salt under `watermark × quota` (a salt without quota
/// to nothing) unless what is left of it is locked.
async fn quota_check(tier: &Tier, m: &Model, step: usize) -> Result<(), TestCaseError> {
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        let u = tier.usage().await.unwrap().adapters[0].clone();
        let over: Vec<(String, u64)> = u
            .bytes_by_cache_salt
            .iter()
            .filter(|(salt, bytes)| {
                let quota = QUOTAS.iter().find(|(s, _)| s == salt).map_or(0, |q| q.1);
                (**bytes as f64) >= WATERMARK * quota as f64 && **bytes > m.locked_salt_bytes(salt)
            })
            .map(|(s, b)| (s.clone(), *b))
            .collect();
        if over.is_empty() {
            return Ok(());
        }
        if Instant::now() > deadline {
            return Err(TestCaseError::fail(format!(
                "step {step}: salts over their quota: {over:?}; locks {:?}",
                m.locks
            )));
        }
        actix_rt::time::sleep(Duration::from_millis(10)).await;
    }
}

/// Eviction brings usage under the watermark when the unlocked keys allow it.
async fn watermark_check(
    tier: &Tier,
    policy: EvictionPolicy,
    m: &Model,
    step: usize,
) -> Result<(), TestCaseError> {
    if policy == EvictionPolicy::IsolatedLru {
        return quota_check(tier, m, step).await;
    }
    let cap = tier.usage().await.unwrap().adapters[0].capacity_bytes;
    let limit = WATERMARK * cap as f64;
    if m.locked_bytes() as f64 >= limit {
        return Ok(());
    }
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        let u = tier.usage().await.unwrap().adapters[0].clone();
        if (u.used_bytes as f64) < limit {
            return Ok(());
        }
        if Instant::now() > deadline {
            let stats = tier.eviction_stats().await.unwrap();
            let lru = tier.evictor().send(GetLruOrder(0)).await.unwrap();
            return Err(TestCaseError::fail(format!(
                "step {step}: usage {} stays at or above the watermark {limit} with {} locked \
                 bytes; eviction actor: {stats:?}, LRU {lru:?}, locks {:?}",
                u.used_bytes,
                m.locked_bytes(),
                m.locks
            )));
        }
        actix_rt::time::sleep(Duration::from_millis(10)).await;
    }
}

async fn run(
    backend: Backend,
    policy: Policy,
    remote: &Remote,
    ops: Vec<Op>,
) -> Result<(), TestCaseError> {
    let dir = tempfile::TempDir::new().unwrap();
    let tier = Tier::start(&{
        let mut built = TierConfig::default();
        built.adapters = vec![adapter(backend, policy, dir.path(), remote)];
        built.eviction_interval_ms = 20;
        built
    })
    .await
    .unwrap();
    let faulty = matches!(backend, Backend::FaultyMemory);
    let mut m = Model::default();
    let result = async {
        for (step, op) in ops.into_iter().enumerate() {
            match op {
                Op::Store(items) => {
                    let mut payloads = Vec::new();
                    for (id, class) in &items {
                        m.version += 1;
                        payloads.push(bytes_for(*id, m.version, 64 * *class as usize));
                    }
                    let keys: Vec<ObjectKey> = items.iter().map(|(id, _)| key(*id)).collect();
                    let rep = tier.store(keys.clone(), payloads.clone()).await.unwrap();
                    let o = &rep.adapters[0].1;
                    prop_assert_eq!(o.stored + o.failed.len(), items.len());
                    if !faulty {
                        // Only a key whose deletion is under way (fs eviction) may be refused.
                        for f in &o.failed {
                            prop_assert!(f.error.contains("being deleted"), "{}", f.error);
                        }
                    }
                    for (((id, _), k), p) in items.iter().zip(&keys).zip(payloads) {
                        if !o.failed.iter().any(|f| f.key == *k) {
                            m.bytes.insert(*id, p);
                        }
                    }
                }
                Op::Lookup(ids) => {
                    let hits = tier
                        .lookup_and_lock(ids.iter().map(|i| key(*i)).collect())
                        .await
                        .unwrap();
                    for (i, id) in ids.iter().enumerate() {
                        if m.locked(*id) {
                            prop_assert!(hits.get(i), "step {}: locked key {} missed", step, id);
                        }
                        if hits.get(i) {
                            prop_assert!(m.bytes.contains_key(id), "hit on never-stored {}", id);
                            *m.locks.entry(*id).or_default() += 1;
                        }
                    }
                }
                Op::Load(ids) => {
                    let before = injected_get_failures(&tier).await;
                    let bufs = ids
                        .iter()
                        .map(|id| {
                            let len = m.bytes.get(id).map_or(64, |b| b.len());
                            let mut b = BytesMut::zeroed(len);
                            b.fill(0xa5);
                            b
                        })
                        .collect();
                    let rep = tier.load(ids.iter().map(|i| key(*i)).collect(), bufs).await;
                    let mut locked_misses = 0;
                    for (i, id) in ids.iter().enumerate() {
                        let buf = &rep.buffers[i];
                        if rep.hits.get(i) {
                            let want = m.bytes.get(id);
                            prop_assert_eq!(
                                Some(&buf[..]),
                                want.map(|b| &b[..]),
                                "step {}: load of {} returned other bytes",
                                step,
                                id
                            );
                        } else {
                            prop_assert!(
                                buf.iter().all(|b| *b == 0xa5),
                                "step {}: a missed load of {} wrote its buffer",
                                step,
                                id
                            );
                            if m.locked(*id) {
                                locked_misses += 1;
                            }
                        }
                    }
                    let injected = injected_get_failures(&tier).await - before;
                    prop_assert!(
                        locked_misses <= injected,
                        "step {}: {} locked keys missed on load, {} get faults injected",
                        step,
                        locked_misses,
                        injected
                    );
                }
                Op::Unlock(ids) => {
                    tier.unlock(ids.iter().map(|i| key(*i)).collect());
                    for id in ids {
                        if let Some(n) = m.locks.get_mut(&id) {
                            *n -= 1;
                            if *n == 0 {
                                m.locks.remove(&id);
                            }
                        }
                    }
                }
                Op::Delete(ids) => {
                    let rep = tier
                        .delete(ids.iter().map(|i| key(*i)).collect())
                        .await
                        .unwrap();
                    for k in rep.all_keys() {
                        let id = ids.iter().find(|i| key(**i) == *k);
                        prop_assert!(id.is_some(), "deleted a key not asked for: {:?}", k);
                        let id = *id.unwrap();
                        prop_assert!(!m.locked(id), "step {}: deleted locked key {}", step, id);
                    }
                }
            }
            let status = tier.status().await.unwrap().adapters[0].clone();
            prop_assert_eq!(
                status.locked_keys,
                m.locks.len(),
                "step {}: locked keys in the adapter vs held by the test",
                step
            );
            if step.is_multiple_of(FULL_CHECK_EVERY) {
                full_check(&tier, &m, step).await?;
            }
            if step.is_multiple_of(WATERMARK_CHECK_EVERY) {
                watermark_check(&tier, policy.0, &m, step).await?;
            }
        }
        full_check(&tier, &m, usize::MAX).await?;
        watermark_check(&tier, policy.0, &m, usize::MAX).await?;
        // Releasing every lock leaves none behind, and eviction can then go all the way.
        let held: Vec<ObjectKey> = m
            .locks
            .iter()
            .flat_map(|(id, n)| std::iter::repeat_n(key(*id), *n as usize))
            .collect();
        tier.unlock(held);
        m.locks.clear();
        prop_assert_eq!(tier.status().await.unwrap().adapters[0].locked_keys, 0);
        watermark_check(&tier, policy.0, &m, usize::MAX).await?;
        let d = &tier.status().await.unwrap().adapters[0].details;
        FAULTS.fetch_add(d["injected_total"].as_u64().unwrap_or(0), Ordering::Relaxed);
        Ok(())
    }
    .await;
    tier.close().await;
    result
}

fn check(backend: Backend, policy: Policy) {
    check_at_least(backend, policy, MIN_TOTAL_OPS)
}

/// Runs rounds of cases until `min_ops` operations ran.
fn check_at_least(backend: Backend, policy: Policy, min_ops: usize) {
    let remote = Remote::start(backend);
    let total = Cell::new(0usize);
    let cases = Cell::new(0usize);
    let started = Instant::now();
    while total.get() < min_ops {
        let mut runner = TestRunner::new(Config {
            cases: CASES,
            failure_persistence: None,
            max_shrink_iters: 1000,
            ..Config::default()
        });
        let result = runner.run(&ops(), |ops| {
            total.set(total.get() + ops.len());
            cases.set(cases.get() + 1);
            actix_rt::System::new().block_on(run(backend, policy, &remote, ops))
        });
        if let Err(e) = result {
            panic!("{backend:?} {policy:?}: {e}");
        }
    }
    let (total, cases) = (total.get(), cases.get());
    eprintln!(
        "{backend:?} {policy:?}: {total} operations in {cases} cases, {:.1} s",
        started.elapsed().as_secs_f64()
    );
    if matches!(backend, Backend::FaultyMemory) {
        let faults = FAULTS.load(Ordering::Relaxed);
        eprintln!("{backend:?}: {faults} faults injected");
        assert!(faults > 0, "the faulty backend injected faults");
    }
    assert!(total >= min_ops, "{total} operations");
}

#[test]
fn invariants_memory() {
    check(Backend::Memory, (EvictionPolicy::Lru, None));
}

#[test]
fn invariants_fs() {
    check(Backend::Fs, (EvictionPolicy::Lru, None));
}

/// On Garage: every operation is an S3 request (lookups HEAD, loads GET, listings LIST), so
/// fewer operations than the local backends.
#[cfg(feature = "s3")]
#[test]
fn invariants_s3() {
    check_at_least(Backend::S3, (EvictionPolicy::Lru, None), 2_000);
}

/// On the Hub emulator, whose stores go through Xet's CAS: fewer operations still.
#[cfg(feature = "hfbucket")]
#[test]
fn invariants_hfbucket() {
    check_at_least(Backend::HfBucket, (EvictionPolicy::Lru, None), 600);
}

#[test]
fn invariants_fault_inject() {
    check(Backend::FaultyMemory, (EvictionPolicy::Lru, None));
}

#[test]
fn invariants_memory_arc() {
    check(Backend::Memory, (EvictionPolicy::Arc, None));
}

#[test]
fn invariants_memory_flru() {
    check(Backend::Memory, (EvictionPolicy::Flru, None));
}

/// `FLRU` with the admission that is not the default: `rates` orders by a score recomputed
/// between rounds.
#[test]
fn invariants_memory_flru_fixed_modes() {
    check(
        Backend::Memory,
        (EvictionPolicy::Flru, Some(FlruAdmission::Rates)),
    );
}

#[test]
fn invariants_memory_isolated_lru() {
    check(Backend::Memory, (EvictionPolicy::IsolatedLru, None));
}

/// Every policy that evicts is covered above (a new one must be added here).
#[test]
fn every_policy_is_covered() {
    let covered = [
        EvictionPolicy::Lru,
        EvictionPolicy::Arc,
        EvictionPolicy::Flru,
        EvictionPolicy::IsolatedLru,
        EvictionPolicy::Noop,
    ];
    assert!(EvictionPolicy::ALL.iter().all(|p| covered.contains(p)));
}

/// One request of [`concurrent_writes_fs`]: keys are indices into 3 keys, store sizes are in
/// units of 64 bytes.
#[derive(Clone, Debug)]
enum Req {
    Store(Vec<(u8, u16)>),
    Delete(Vec<u8>),
    LookupUnlock(Vec<u8>),
}

/// Rounds of requests; the requests of a round are all in flight at once.
fn rounds() -> impl Strategy<Value = Vec<Vec<Req>>> {
    let req = prop_oneof![
        4 => prop::collection::vec((0u8..3, 1u16..=64), 1..=3).prop_map(Req::Store),
        1 => prop::collection::vec(0u8..3, 1..=2).prop_map(Req::Delete),
        1 => prop::collection::vec(0u8..3, 1..=3).prop_map(Req::LookupUnlock),
    ];
    prop::collection::vec(prop::collection::vec(req, 2..=8), 1..=10)
}

fn race_key(i: u8) -> ObjectKey {
    ObjectKey::new("race/model", 0, vec![i]).unwrap()
}

/// The bytes of store item `id`: its id, then a pattern of it, so a torn or mixed object
/// shows.
fn race_payload(id: u64, len: usize) -> Bytes {
    let mut v = id.to_le_bytes().to_vec();
    v.extend((8..len).map(|j| (id as usize).wrapping_mul(131).wrapping_add(j) as u8));
    Bytes::from(v)
}

async fn race_case(rounds: Vec<Vec<Req>>) -> Result<(), TestCaseError> {
    let dir = tempfile::tempdir().unwrap();
    let tier = Tier::start(&TierConfig::with_adapters(vec![AdapterConfig::fs(
        dir.path(),
    )]))
    .await
    .unwrap();
    let name =
        |i: u8| kvtier::actors::backends::fs::file_name(&race_key(i), kvtier::NameFormat::Seed);
    let mut next_id = 0u64;
    // Every item stored so far: (id, key index, length).
    let mut written: Vec<(u64, u8, usize)> = Vec::new();
    let result = async {
        for round in rounds {
            let mut reqs = Vec::new();
            for req in round {
                let tier = &tier;
                match req {
                    Req::Store(items) => {
                        let mut keys = Vec::new();
                        let mut objects = Vec::new();
                        for (k, units) in items {
                            let len = units as usize * 64;
                            written.push((next_id, k, len));
                            keys.push(race_key(k));
                            objects.push(race_payload(next_id, len));
                            next_id += 1;
                        }
                        reqs.push(futures_util::future::Either::Left(async move {
                            let rep = tier.store(keys, objects).await.unwrap();
                            let failed = &rep.adapters[0].1.failed;
                            prop_assert!(failed.is_empty(), "a store failed: {failed:?}");
                            Ok(())
                        }));
                    }
                    Req::Delete(ks) => reqs.push(futures_util::future::Either::Right(
                        futures_util::future::Either::Left(async move {
                            tier.delete(ks.into_iter().map(race_key).collect())
                                .await
                                .unwrap();
                            Ok(())
                        }),
                    )),
                    Req::LookupUnlock(ks) => reqs.push(futures_util::future::Either::Right(
                        futures_util::future::Either::Right(async move {
                            let keys: Vec<ObjectKey> = ks.into_iter().map(race_key).collect();
                            let hits = tier.lookup_and_lock(keys.clone()).await.unwrap();
                            let held = (0..keys.len())
                                .filter(|i| hits.get(*i))
                                .map(|i| keys[i].clone())
                                .collect();
                            tier.unlock(held);
                            Ok(())
                        }),
                    )),
                }
            }
            for r in futures_util::future::join_all(reqs).await {
                r?;
            }
            // Every request of the round has answered: the directory and the ledger agree,
            // and every object is one stored item, whole.
            let mut files = (0u64, 0usize);
            for entry in std::fs::read_dir(dir.path()).unwrap() {
                let entry = entry.unwrap();
                let fname = entry.file_name().into_string().unwrap();
                prop_assert!(
                    !fname.ends_with(".tmp"),
                    "a temporary file is left: {fname}"
                );
                let Some(k) = (0..3).find(|&i| name(i) == fname) else {
                    return Err(TestCaseError::fail(format!("unexpected file {fname}")));
                };
                let bytes = std::fs::read(entry.path()).unwrap();
                let id = u64::from_le_bytes(bytes[..8].try_into().unwrap());
                prop_assert!(
                    written.contains(&(id, k, bytes.len())),
                    "{fname} holds {} bytes of item {id}, which was not stored so",
                    bytes.len()
                );
                prop_assert_eq!(&bytes[..], &race_payload(id, bytes.len())[..], "torn");
                files.0 += bytes.len() as u64;
                files.1 += 1;
            }
            // Unlocks are fire-and-forget: a usage request after them sees them applied.
            let usage = tier.usage().await.unwrap().adapters[0].clone();
            prop_assert_eq!(
                (usage.used_bytes, usage.keys),
                files,
                "ledger (bytes, keys) != directory"
            );
        }
        Ok(())
    }
    .await;
    tier.close().await;
    result
}

/// Stores, deletes and lookups of the same few keys, many in flight at once on `fs` (4 worker
/// threads): no store fails (a store waits for a delete in flight), no object is ever torn or
/// mixed, no temporary file is left, and after every round the ledger equals the directory.
#[test]
fn concurrent_writes_fs() {
    let started = Instant::now();
    let mut runner = TestRunner::new(Config {
        cases: 64,
        failure_persistence: None,
        max_shrink_iters: 500,
        ..Config::default()
    });
    let result = runner.run(&rounds(), |rounds| {
        actix_rt::System::new().block_on(race_case(rounds))
    });
    if let Err(e) = result {
        panic!("{e}");
    }
    eprintln!(
        "concurrent_writes_fs: 64 cases, {:.1} s",
        started.elapsed().as_secs_f64()
    );
}
