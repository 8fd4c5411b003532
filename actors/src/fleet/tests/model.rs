//! The fleet index against a model, under random operations of three nodes on one index
//! (proptest): stores, lookups that lock, unlocks, claims, releases, announced writes and
//! their ends, eviction rounds and lease releases. Every reply (lock outcomes, names claimed,
//! round outcomes, usage with pending bytes) must equal the model's; and no name that any
//! node holds locked is ever granted to a claim or a round. The model orders victims by LRU;
//! under the fleet's `ARC` and `FLRU` orders a round must claim as many as the model's, each
//! a known name no node locks or deletes, and the model follows the index's choice.

use std::collections::{BTreeMap, VecDeque};

use proptest::prelude::*;
use proptest::test_runner::{Config, TestRunner};

use super::*;

const NODES: usize = 3;
const NAMES: u8 = 8;
const CAPACITY: u64 = 100;

#[derive(Debug, Clone)]
enum Op {
    /// A probe found the object (FleetStored::found).
    Found {
        node: usize,
        name: u8,
        size: u64,
    },
    Lock {
        node: usize,
        names: Vec<u8>,
    },
    /// Unlocks the `nth` name the node holds (if any).
    Unlock {
        node: usize,
        nth: usize,
    },
    Claim {
        node: usize,
        names: Vec<u8>,
    },
    /// Releases every claim of the node: deleted from the store, or kept.
    Release {
        node: usize,
        removed: bool,
    },
    /// Announces a write; `limited`: only if the bucket's footprint stays within the
    /// capacity (a write that waits for room).
    Write {
        node: usize,
        name: u8,
        size: u64,
        limited: bool,
    },
    /// Ends the node's oldest write: written, or failed.
    EndWrite {
        node: usize,
        ok: bool,
    },
    Round {
        node: usize,
    },
    LeaseRelease {
        node: usize,
    },
}

fn op() -> impl Strategy<Value = Op> {
    let node = 0..NODES;
    let name = 0..NAMES;
    let names = proptest::collection::vec(0..NAMES, 1..4);
    prop_oneof![
        (node.clone(), name.clone(), 1..30u64).prop_map(|(node, name, size)| Op::Found {
            node,
            name,
            size
        }),
        (node.clone(), names.clone()).prop_map(|(node, names)| Op::Lock { node, names }),
        (node.clone(), 0..4usize).prop_map(|(node, nth)| Op::Unlock { node, nth }),
        (node.clone(), names).prop_map(|(node, names)| Op::Claim { node, names }),
        (node.clone(), any::<bool>()).prop_map(|(node, removed)| Op::Release { node, removed }),
        (node.clone(), name, 1..30u64, any::<bool>()).prop_map(|(node, name, size, limited)| {
            Op::Write {
                node,
                name,
                size,
                limited,
            }
        }),
        (node.clone(), any::<bool>()).prop_map(|(node, ok)| Op::EndWrite { node, ok }),
        node.clone().prop_map(|node| Op::Round { node }),
        node.prop_map(|node| Op::LeaseRelease { node }),
    ]
}

fn n(name: u8) -> String {
    format!("k{name}")
}

/// What the index should hold.
#[derive(Default, Clone)]
struct Model {
    /// Known objects: size and recency tick.
    known: BTreeMap<String, (u64, u64)>,
    clock: u64,
    locks: [BTreeMap<String, u32>; NODES],
    deleting: BTreeMap<String, usize>,
    /// Each node's writes in flight: name, size, and whether a deletion of the name came
    /// since the write was announced (then its end does not add it).
    writes: [VecDeque<(String, u64, bool)>; NODES],
    lease: Option<usize>,
}

impl Model {
    fn locked(&self, name: &str) -> bool {
        self.locks.iter().any(|l| l.contains_key(name))
    }

    fn free(&self, name: &str) -> bool {
        !self.locked(name) && !self.deleting.contains_key(name)
    }

    fn add(&mut self, name: &str, size: u64) {
        self.clock += 1;
        self.known.insert(name.to_string(), (size, self.clock));
    }

    fn usage(&self) -> (u64, u64, u64) {
        let bytes = self.known.values().map(|(s, _)| s).sum();
        let pending = self.writes.iter().flatten().map(|(_, s, _)| s).sum();
        (bytes, self.known.len() as u64, pending)
    }

    fn lock(&mut self, node: usize, name: &str) -> FleetLock {
        if self.deleting.contains_key(name) {
            return FleetLock::Deleting;
        }
        *self.locks[node].entry(name.to_string()).or_default() += 1;
        match self.known.get(name).map(|(s, _)| *s) {
            Some(size) => {
                self.add(name, size);
                FleetLock::Known(size)
            }
            None => FleetLock::Unknown,
        }
    }

    fn claim(&mut self, node: usize, name: &str) -> bool {
        let ok = self.free(name);
        if ok {
            self.deleting.insert(name.to_string(), node);
        }
        ok
    }

    /// The ROUND script's rule (see scripts/round.lua), with the same arithmetic.
    fn round(&mut self, node: usize) -> Round {
        let (known, objects, pending) = self.usage();
        let claimed: u64 = self
            .deleting
            .keys()
            .map(|k| self.known.get(k).map_or(0, |(s, _)| *s))
            .sum();
        let stored = known as f64 - claimed as f64;
        let landing = stored + pending as f64;
        let (mark, ahead) = (0.8 * CAPACITY as f64, 0.9 * CAPACITY as f64);
        if stored < mark && landing < ahead {
            return Round::Under;
        }
        if self.lease.is_some_and(|h| h != node) {
            return Round::Busy;
        }
        self.lease = Some(node);
        let average = if known > 0 && objects > 0 {
            known as f64 / objects as f64
        } else {
            1.0
        };
        let mut limit = 0f64;
        if stored >= mark {
            limit = ((objects as f64 - self.deleting.len() as f64) * 0.2).floor();
        }
        if landing >= ahead {
            limit = limit.max(((landing - ahead) / average).ceil());
        }
        let limit = limit.max(1.0) as usize;
        let mut order: Vec<(u64, String)> = self
            .known
            .iter()
            .map(|(k, (_, t))| (*t, k.clone()))
            .collect();
        order.sort();
        let mut out = Vec::new();
        for (_, name) in order {
            if out.len() >= limit {
                break;
            }
            if self.claim(node, &name) {
                let size = self.known[&name].0;
                out.push((name, size));
            }
        }
        Round::Claimed(out)
    }
}

async fn run_case(url: &str, case: u64, ops: Vec<Op>, order: FleetOrder) {
    let mut nodes = Vec::new();
    for i in 0..NODES {
        let mut c = config(url, &format!("n{i}"), DEFAULT_TTL);
        c.identity = format!("model-case-{case}");
        c.order = Some(order);
        let addr = FleetIndex::new(c).start();
        joined(&addr, 1).await;
        nodes.push(addr);
    }
    let mut m = Model::default();
    for (step, op) in ops.into_iter().enumerate() {
        let at = format!("step {step}: {op:?}");
        let usage = match op {
            Op::Found { node, name, size } => {
                m.add(&n(name), size);
                let u = nodes[node]
                    .send(FleetStored::found(vec![obj(&n(name), "", size)]))
                    .await;
                Some(u.unwrap().unwrap())
            }
            Op::Lock { node, names } => {
                let asked: Vec<String> = names.iter().map(|&x| n(x)).collect();
                // The index touches a batch last name first.
                let mut want: Vec<FleetLock> =
                    asked.iter().rev().map(|a| m.lock(node, a)).collect();
                want.reverse();
                let got = nodes[node]
                    .send(FleetLockNames(touched(&asked)))
                    .await
                    .unwrap()
                    .unwrap();
                assert_eq!(got, want, "{at}");
                None
            }
            Op::Unlock { node, nth } => {
                let Some(name) = m.locks[node].keys().nth(nth).cloned() else {
                    continue;
                };
                let left = m.locks[node].get_mut(&name).unwrap();
                *left -= 1;
                if *left == 0 {
                    m.locks[node].remove(&name);
                }
                nodes[node]
                    .send(FleetUnlock(vec![name]))
                    .await
                    .unwrap()
                    .unwrap();
                None
            }
            Op::Claim { node, names } => {
                let asked: Vec<String> = names.iter().map(|&x| n(x)).collect();
                let want: Vec<String> =
                    asked.iter().filter(|a| m.claim(node, a)).cloned().collect();
                let got = nodes[node].send(FleetClaim(asked)).await.unwrap().unwrap();
                assert_eq!(got, want, "{at}");
                None
            }
            Op::Release { node, removed } => {
                let mine: Vec<String> = m
                    .deleting
                    .iter()
                    .filter(|(_, &by)| by == node)
                    .map(|(k, _)| k.clone())
                    .collect();
                for name in &mine {
                    m.deleting.remove(name);
                    if removed {
                        m.known.remove(name);
                        for w in m.writes.iter_mut().flatten() {
                            if w.0 == *name {
                                w.2 = true;
                            }
                        }
                    }
                }
                let (removed, kept) = if removed {
                    (mine, vec![])
                } else {
                    (vec![], mine)
                };
                let msg = FleetRelease {
                    removed,
                    kept,
                    evicted: true,
                };
                let u = nodes[node].send(msg).await;
                Some(u.unwrap().unwrap())
            }
            Op::Write {
                node,
                name,
                size,
                limited,
            } => {
                let (bytes, _, pending) = m.usage();
                let started = !limited || bytes + pending + size <= CAPACITY;
                if started {
                    m.writes[node].push_back((n(name), size, false));
                }
                let msg = FleetWriting {
                    names: vec![n(name)],
                    bytes: size,
                    limit: limited.then_some(CAPACITY),
                };
                let got = nodes[node].send(msg).await.unwrap().unwrap();
                assert_eq!(got.started, started, "{at}");
                Some(got.usage)
            }
            Op::EndWrite { node, ok } => {
                let Some((name, size, tainted)) = m.writes[node].pop_front() else {
                    continue;
                };
                if ok && !tainted {
                    m.add(&name, size);
                }
                let msg = FleetStored {
                    objects: if ok {
                        vec![obj(&name, "", size)]
                    } else {
                        vec![]
                    },
                    written: true,
                    ended_names: vec![name],
                    ended_bytes: size,
                };
                Some(nodes[node].send(msg).await.unwrap().unwrap())
            }
            Op::Round { node } => {
                let before = m.clone();
                let want = m.round(node);
                let got = nodes[node]
                    .send(FleetRound {
                        capacity: CAPACITY,
                        watermark: 0.8,
                        ratio: 0.2,
                        per_salt: false,
                        ahead: landing_mark(0.8, false),
                        catch_up: false,
                        waiting: 0,
                    })
                    .await
                    .unwrap()
                    .unwrap();
                match (&got, &want) {
                    (Round::Claimed(got), Round::Claimed(want)) if order != FleetOrder::Lru => {
                        assert_eq!(got.len(), want.len(), "{at}: {got:?} against {want:?}");
                        m = before;
                        m.lease = Some(node);
                        for (name, size) in got {
                            assert_eq!(m.known.get(name).map(|k| k.0), Some(*size), "{at}");
                            assert!(m.claim(node, name), "{at}: {name} was not free");
                        }
                    }
                    _ => assert_eq!(got, want, "{at}"),
                }
                if let Round::Claimed(c) = &got {
                    for (name, _) in c {
                        assert!(!m.locked(name), "{at}: a locked name was claimed");
                    }
                }
                None
            }
            Op::LeaseRelease { node } => {
                if m.lease == Some(node) {
                    m.lease = None;
                }
                nodes[node]
                    .send(FleetLeaseRelease(Lease::Evict))
                    .await
                    .unwrap()
                    .unwrap();
                None
            }
        };
        if let Some(u) = usage {
            assert_eq!((u.bytes, u.objects, u.pending), m.usage(), "{at}");
        }
        // The lock rule, whatever the operation: no name is both locked and being deleted.
        for name in m.deleting.keys() {
            assert!(!m.locked(name), "{at}: {name} locked and being deleted");
        }
    }
    for node in nodes {
        node.send(Die).await.unwrap();
    }
}

/// `cases` random runs under `order`, each on its own bucket identity of one server.
fn random_runs(order: FleetOrder, cases: u32) {
    let redis = RedisServer::start();
    let url = redis.url();
    let mut runner = TestRunner::new(Config {
        cases,
        failure_persistence: None,
        ..Config::default()
    });
    let case = std::cell::Cell::new(0u64);
    runner
        .run(&proptest::collection::vec(op(), 1..60), |ops| {
            case.set(case.get() + 1);
            actix_rt::System::new().block_on(run_case(&url, case.get(), ops, order));
            Ok(())
        })
        .unwrap();
}

#[test]
fn the_index_follows_the_model_under_random_operations_of_three_nodes() {
    random_runs(FleetOrder::Lru, 48);
}

#[test]
fn arc_and_flru_orders_keep_the_model_and_the_lock_rule() {
    random_runs(FleetOrder::Arc, 24);
    random_runs(
        FleetOrder::Flru {
            bonus: 0.4,
            adaptive: true,
        },
        24,
    );
    random_runs(
        FleetOrder::Flru {
            bonus: 0.4,
            adaptive: false,
        },
        16,
    );
}
