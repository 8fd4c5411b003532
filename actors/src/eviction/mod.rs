//! The eviction actor, and the eviction policies (one file each, behind [`EvictionPolicy`]).
//!
//! It subscribes to the usage events of every backend whose adapter has an `eviction` policy
//! and a capacity. Per adapter it keeps a policy (recency, or whatever the policy orders by,
//! fed by the events: stores and lookup hits) and the adapter's latest usage **as the backend
//! reports it** (every event carries the backend ledger's total; after a round it asks with
//! [`GetUsage`]). The backend's ledger is the only account of usage: there is no second total
//! here, so nothing to reconcile when a store and an eviction race.
//!
//! When usage reaches `trigger_watermark × capacity` it asks the backend to remove
//! `floor(n × eviction_ratio)` keys (at least 1 when the ratio is > 0), in the policy's order;
//! the backend skips locked keys and keys it does not hold, which stay candidates for the next
//! round. Checks run after every store event, right after a round that removed something, and
//! on a timer. At most one round per adapter is in flight.
//!
//! Policies: [`lru::Lru`] (`"LRU"`) and [`noop::Noop`] (`"noop"`). A new policy is one file
//! implementing [`EvictionPolicy`], plus its name in [`crate::config::EvictionPolicy`].

pub mod lru;
pub mod noop;

use std::collections::HashMap;
use std::time::Duration;

use actix::prelude::*;
use serde::Serialize;

use crate::backend::BackendActor;
use crate::config::{EvictionConfig, EvictionPolicy as PolicyName};
use crate::key::ObjectKey;
use crate::messages::{AdapterIndex, Evict, GetUsage, UsageEvent, UsageEventKind};

/// Default period of the timer check.
pub const DEFAULT_CHECK_INTERVAL: Duration = Duration::from_secs(1);

/// How many candidates beyond the round's count are offered, so locked keys can be skipped.
const EXTRA_CANDIDATES: usize = 1024;

/// What decides which keys go first. Fed with an adapter's usage events, in order; asked for
/// candidates when a round starts.
///
/// Invariants every policy keeps: a key is tracked from its first `on_stored` until its
/// `on_removed`; `candidates` names only tracked keys, each once, best victim first; `len` is
/// the number of tracked keys.
pub trait EvictionPolicy: Send + 'static {
    /// The policy's name as configured (`LRU`, `noop`).
    fn name(&self) -> &'static str;
    /// A key was written (or found) with this size; stores refresh recency.
    fn on_stored(&mut self, key: &ObjectKey, size: u64);
    /// A lookup hit the key.
    fn on_accessed(&mut self, key: &ObjectKey);
    /// The key is gone.
    fn on_removed(&mut self, key: &ObjectKey);
    /// Up to `n` keys in eviction order.
    fn candidates(&self, n: usize) -> Vec<ObjectKey>;
    /// Keys tracked.
    fn len(&self) -> usize;
    /// True when nothing is tracked.
    fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// A new policy of the configured name.
pub fn policy(name: PolicyName) -> Box<dyn EvictionPolicy> {
    match name {
        PolicyName::Lru => Box::new(lru::Lru::default()),
        PolicyName::Noop => Box::new(noop::Noop),
    }
}

/// Eviction settings of one adapter.
#[derive(Debug, Clone, Copy)]
pub struct EvictionTarget {
    /// The adapter.
    pub adapter: AdapterIndex,
    /// Its capacity in bytes (0: never evict).
    pub capacity_bytes: u64,
    /// Its policy.
    pub config: EvictionConfig,
}

impl EvictionTarget {
    /// True when this adapter has something to evict with: a capacity and a policy that evicts.
    pub fn evicts(&self) -> bool {
        self.capacity_bytes > 0 && self.config.eviction_policy != PolicyName::Noop
    }
}

/// Counters of one adapter's evictions.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct EvictionStats {
    /// Rounds started.
    pub rounds: u64,
    /// Keys removed.
    pub evicted_keys: u64,
    /// Bytes removed.
    pub evicted_bytes: u64,
    /// Keys tracked now.
    pub tracked_keys: u64,
    /// The adapter's usage as the backend last reported it.
    pub tracked_bytes: u64,
}

struct Tracked {
    target: EvictionTarget,
    policy: Box<dyn EvictionPolicy>,
    /// The backend's usage, as it last reported it, and that reading's ledger counter (a
    /// reading older than the one held is ignored: a `GetUsage` reply can arrive after events
    /// the backend published later).
    used: u64,
    seq: u64,
    backend: Option<Addr<BackendActor>>,
    in_flight: bool,
    stats: EvictionStats,
}

impl Tracked {
    /// Takes a usage reading unless a newer one is held.
    fn read(&mut self, used: u64, seq: u64) {
        if seq >= self.seq {
            self.used = used;
            self.seq = seq;
        }
    }

    fn over_watermark(&self) -> bool {
        let cap = self.target.capacity_bytes;
        cap > 0 && self.used as f64 >= self.target.config.trigger_watermark * cap as f64
    }
}

/// The eviction actor. See the module docs.
pub struct EvictionActor {
    adapters: HashMap<AdapterIndex, Tracked>,
    interval: Duration,
}

impl EvictionActor {
    /// An actor for these adapters (those without capacity or with the `noop` policy are ignored),
    /// checking every `interval` as well as on events.
    pub fn new(targets: impl IntoIterator<Item = EvictionTarget>, interval: Duration) -> Self {
        let adapters = targets
            .into_iter()
            .filter(|t| t.evicts())
            .map(|t| {
                (
                    t.adapter,
                    Tracked {
                        target: t,
                        policy: policy(t.config.eviction_policy),
                        used: 0,
                        seq: 0,
                        backend: None,
                        in_flight: false,
                        stats: EvictionStats::default(),
                    },
                )
            })
            .collect();
        Self { adapters, interval }
    }

    fn check(&mut self, adapter: AdapterIndex, ctx: &mut Context<Self>) {
        let Some(t) = self.adapters.get_mut(&adapter) else {
            return;
        };
        if t.in_flight || !t.over_watermark() {
            return;
        }
        let Some(backend) = t.backend.clone() else {
            return;
        };
        let count = t.target.config.keys_to_evict(t.policy.len());
        if count == 0 {
            return;
        }
        let candidates = t.policy.candidates(count + EXTRA_CANDIDATES);
        t.in_flight = true;
        t.stats.rounds += 1;
        tracing::debug!(adapter, count, used = t.used, "eviction round");
        let round = async move {
            let removed = backend
                .send(Evict { candidates, count })
                .await
                .unwrap_or_default();
            // The backend's ledger after the round (its Deleted event may still be queued).
            let used = backend
                .send(GetUsage)
                .await
                .ok()
                .and_then(|u| u.adapters.first().map(|u| (u.used_bytes, u.ledger_seq)));
            (removed, used)
        };
        round
            .into_actor(self)
            .map(move |(removed, used), act, ctx| {
                let Some(t) = act.adapters.get_mut(&adapter) else {
                    return;
                };
                t.in_flight = false;
                if let Some((used, seq)) = used {
                    t.read(used, seq);
                }
                t.stats.evicted_keys += removed.len() as u64;
                t.stats.evicted_bytes += removed.iter().map(|(_, s)| s).sum::<u64>();
                if !removed.is_empty() {
                    act.check(adapter, ctx);
                }
            })
            .spawn(ctx);
    }
}

impl Actor for EvictionActor {
    type Context = Context<Self>;

    fn started(&mut self, ctx: &mut Context<Self>) {
        ctx.run_interval(self.interval, |act, ctx| {
            let ids: Vec<AdapterIndex> = act.adapters.keys().copied().collect();
            for id in ids {
                act.check(id, ctx);
            }
        });
    }
}

/// Gives the eviction actor the backend of an adapter (for [`Evict`] and [`GetUsage`]).
#[derive(Message)]
#[rtype(result = "()")]
pub struct AttachBackend {
    /// The adapter.
    pub adapter: AdapterIndex,
    /// Its backend actor.
    pub backend: Addr<BackendActor>,
}

impl Handler<AttachBackend> for EvictionActor {
    type Result = ();

    fn handle(&mut self, msg: AttachBackend, ctx: &mut Context<Self>) {
        if let Some(t) = self.adapters.get_mut(&msg.adapter) {
            t.backend = Some(msg.backend);
            self.check(msg.adapter, ctx);
        }
    }
}

impl Handler<UsageEvent> for EvictionActor {
    type Result = ();

    fn handle(&mut self, msg: UsageEvent, ctx: &mut Context<Self>) {
        let Some(t) = self.adapters.get_mut(&msg.adapter) else {
            return;
        };
        t.read(msg.used_bytes, msg.ledger_seq);
        match msg.kind {
            UsageEventKind::Stored { keys, sizes } => {
                for (key, size) in keys.iter().zip(sizes) {
                    t.policy.on_stored(key, size);
                }
                self.check(msg.adapter, ctx);
            }
            UsageEventKind::Accessed { keys } => {
                for key in &keys {
                    t.policy.on_accessed(key);
                }
            }
            UsageEventKind::Deleted { keys, .. } => {
                for key in &keys {
                    t.policy.on_removed(key);
                }
            }
        }
    }
}

/// Ask for per-adapter eviction counters.
#[derive(Debug, Clone, Copy, Message)]
#[rtype(result = "Vec<(AdapterIndex, EvictionStats)>")]
pub struct GetEvictionStats;

impl Handler<GetEvictionStats> for EvictionActor {
    type Result = MessageResult<GetEvictionStats>;

    fn handle(&mut self, _: GetEvictionStats, _: &mut Context<Self>) -> Self::Result {
        let mut out: Vec<_> = self
            .adapters
            .iter()
            .map(|(id, t)| {
                let mut s = t.stats;
                s.tracked_keys = t.policy.len() as u64;
                s.tracked_bytes = t.used;
                (*id, s)
            })
            .collect();
        out.sort_by_key(|(id, _)| *id);
        MessageResult(out)
    }
}

/// The keys of an adapter in eviction order, first victim first (for tests and diagnostics).
#[derive(Debug, Clone, Copy, Message)]
#[rtype(result = "Vec<ObjectKey>")]
pub struct GetLruOrder(pub AdapterIndex);

impl Handler<GetLruOrder> for EvictionActor {
    type Result = MessageResult<GetLruOrder>;

    fn handle(&mut self, msg: GetLruOrder, _: &mut Context<Self>) -> Self::Result {
        MessageResult(
            self.adapters
                .get(&msg.0)
                .map(|t| t.policy.candidates(usize::MAX))
                .unwrap_or_default(),
        )
    }
}
