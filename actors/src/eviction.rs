//! The eviction actor: one LRU per adapter, fed by usage events.
//!
//! It subscribes to every backend's [`UsageEvent`]s and keeps, per adapter with an `eviction`
//! policy and a capacity, the keys in recency order (stores and lookup hits refresh it) with their
//! sizes. When usage reaches `trigger_watermark × capacity` it asks the backend to remove
//! `floor(n × eviction_ratio)` keys (at least 1 when the ratio is > 0), least recent first; the
//! backend skips locked keys, which stay candidates for the next round. Checks run after every
//! store event, right after a round that removed something, and on a timer.

use std::collections::HashMap;
use std::time::Duration;

use actix::prelude::*;
use lru::LruCache;
use serde::Serialize;

use crate::config::{EvictionConfig, EvictionPolicy};
use crate::key::{BuildDigestHasher, KeyMap, ObjectKey};
use crate::messages::{AdapterIndex, Evict, UsageEvent, UsageEventKind};

/// Default period of the timer check.
pub const DEFAULT_CHECK_INTERVAL: Duration = Duration::from_secs(1);

/// How many candidates beyond the round's count are offered, so locked keys can be skipped.
const EXTRA_CANDIDATES: usize = 1024;

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
    /// Bytes tracked now.
    pub tracked_bytes: u64,
}

struct Tracked {
    target: EvictionTarget,
    /// Per key: its size, and the stamp of the store event that last set it.
    lru: LruCache<ObjectKey, (u64, u64), BuildDigestHasher>,
    /// The next store stamp.
    stamp: u64,
    used: u64,
    evict: Option<Recipient<Evict>>,
    in_flight: bool,
    stats: EvictionStats,
}

impl Tracked {
    fn forget(&mut self, key: &ObjectKey) -> Option<u64> {
        let (size, _) = self.lru.pop(key)?;
        self.used = self.used.saturating_sub(size);
        Some(size)
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
            .filter(|t| t.capacity_bytes > 0 && t.config.eviction_policy == EvictionPolicy::Lru)
            .map(|t| {
                (
                    t.adapter,
                    Tracked {
                        target: t,
                        lru: LruCache::unbounded_with_hasher(BuildDigestHasher::default()),
                        stamp: 0,
                        used: 0,
                        evict: None,
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
        let Some(evict) = t.evict.clone() else { return };
        let count = t.target.config.keys_to_evict(t.lru.len());
        if count == 0 {
            return;
        }
        let (candidates, sizes): (Vec<ObjectKey>, KeyMap<(u64, u64)>) = t
            .lru
            .iter()
            .rev()
            .take(count + EXTRA_CANDIDATES)
            .map(|(k, s)| (k.clone(), (k.clone(), *s)))
            .unzip();
        t.in_flight = true;
        t.stats.rounds += 1;
        tracing::debug!(adapter, count, used = t.used, "eviction round");
        evict
            .send(Evict { candidates, count })
            .into_actor(self)
            .map(move |res, act, ctx| {
                let Some(t) = act.adapters.get_mut(&adapter) else {
                    return;
                };
                t.in_flight = false;
                let removed = res.unwrap_or_default();
                for key in &removed {
                    // The backend's Deleted event may still be queued; account now so the
                    // next check sees the new usage. But the key may have been removed and
                    // stored again while this reply was on its way (its Deleted and then its
                    // Stored event already seen): forget it only if no store event refreshed
                    // it since the round began, or the new object would go untracked.
                    let (size, stamp) = sizes.get(key).copied().unwrap_or_default();
                    if t.lru.peek(key).is_some_and(|(_, now)| *now == stamp) {
                        t.forget(key);
                    }
                    t.stats.evicted_keys += 1;
                    t.stats.evicted_bytes += size;
                }
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

/// Gives the eviction actor the backend to send [`Evict`] to for an adapter.
#[derive(Message)]
#[rtype(result = "()")]
pub struct AttachBackend {
    /// The adapter.
    pub adapter: AdapterIndex,
    /// Its backend actor.
    pub evict: Recipient<Evict>,
}

impl Handler<AttachBackend> for EvictionActor {
    type Result = ();

    fn handle(&mut self, msg: AttachBackend, ctx: &mut Context<Self>) {
        if let Some(t) = self.adapters.get_mut(&msg.adapter) {
            t.evict = Some(msg.evict);
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
        match msg.kind {
            UsageEventKind::Stored { keys, sizes } => {
                for (key, size) in keys.into_iter().zip(sizes) {
                    t.stamp += 1;
                    if let Some((old, _)) = t.lru.put(key, (size, t.stamp)) {
                        t.used = t.used.saturating_sub(old);
                    }
                    t.used += size;
                }
                self.check(msg.adapter, ctx);
            }
            UsageEventKind::Accessed { keys } => {
                for key in &keys {
                    t.lru.promote(key);
                }
            }
            UsageEventKind::Deleted { keys, .. } => {
                for key in &keys {
                    t.forget(key);
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
                s.tracked_keys = t.lru.len() as u64;
                s.tracked_bytes = t.used;
                (*id, s)
            })
            .collect();
        out.sort_by_key(|(id, _)| *id);
        MessageResult(out)
    }
}

/// The keys of an adapter from least to most recently used (for tests and diagnostics).
#[derive(Debug, Clone, Copy, Message)]
#[rtype(result = "Vec<ObjectKey>")]
pub struct GetLruOrder(pub AdapterIndex);

impl Handler<GetLruOrder> for EvictionActor {
    type Result = MessageResult<GetLruOrder>;

    fn handle(&mut self, msg: GetLruOrder, _: &mut Context<Self>) -> Self::Result {
        MessageResult(
            self.adapters
                .get(&msg.0)
                .map(|t| t.lru.iter().rev().map(|(k, _)| k.clone()).collect())
                .unwrap_or_default(),
        )
    }
}
