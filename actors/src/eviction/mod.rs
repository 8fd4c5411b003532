//! The eviction actor, and the eviction policies (one file each, behind [`EvictionPolicy`]).
//!
//! It subscribes to the usage events of every backend whose adapter has an `eviction` policy
//! (and a capacity, except for `IsolatedLRU`, which is driven by quotas). Per adapter it keeps a
//! [`PolicyState`]: the policy (recency, frequency, whatever it orders by), fed by the events
//! in the order the backend published them, and a [`SizeBook`] of the tracked keys' sizes and
//! per-salt bytes built from the same events. The adapter's total usage is the backend's: every
//! event carries the ledger's total, and after a round it asks with [`GetUsage`]. The size book
//! only mirrors the event stream (for byte budgets and per-salt quotas); it is never reconciled
//! against the ledger, because the events are the ledger's changes in order.
//!
//! A round is planned by the policy ([`EvictionPolicy::plan`]); the global policies (`LRU`,
//! `ARC`, `FLRU`) follow LMCache's watermark rule: when usage reaches
//! `trigger_watermark × capacity`, remove `floor(n × eviction_ratio)` keys (at least 1 when the
//! ratio is > 0), or with `eviction_unit = "bytes"` keys until `ceil(used × ratio)` bytes are
//! freed. `IsolatedLRU` plans one budget per cache salt over its quota. The backend skips
//! locked keys and keys it does not hold, which stay candidates for the next round: **no
//! policy can evict a locked key**, because only the backend removes and it checks the lock.
//!
//! Checks run after every store event, after a round that removed something (once the
//! round's `Deleted` event has been applied, so the next plan never sees removed keys), after a
//! quota change, and on a timer. At most one round per adapter is in flight.
//!
//! The simulator of `kvtier bench --simulate` drives the same [`PolicyState`] with a model
//! ledger, so what it measures is this code.

pub mod arc;
pub mod flru;
pub mod isolated_lru;
pub mod lru;
pub mod noop;

use std::collections::HashMap;
use std::time::Duration;

use actix::prelude::*;
use serde::Serialize;

use crate::backend::BackendActor;
use crate::config::{
    bytes_for_ratio, keys_for_ratio, EvictionConfig, EvictionPolicy as PolicyName, EvictionUnit,
    FlruAdmission, Quotas,
};
use crate::key::{KeyMap, ObjectKey};
use crate::messages::{AdapterIndex, Evict, EvictGroup, GetUsage, UsageEvent, UsageEventKind};

/// Default period of the timer check.
pub const DEFAULT_CHECK_INTERVAL: Duration = Duration::from_secs(1);

/// How many candidates beyond a group's budget are offered, so locked keys can be skipped.
pub const EXTRA_CANDIDATES: usize = 1024;

/// What decides which keys go first. Fed with an adapter's usage events, in order (each batch
/// in the order of the request that caused it); asked for a round's plan.
///
/// Invariants every policy keeps: a key is tracked from its first `on_stored` until its
/// `on_removed`; `victims` names only tracked keys, each once, first victim first; `len` is
/// the number of tracked keys. Unknown keys given to `on_accessed` or `on_removed` are ignored.
pub trait EvictionPolicy: Send + 'static {
    /// The policy's name as configured (`LRU`, `ARC`, `IsolatedLRU`, `FLRU`, `noop`).
    fn name(&self) -> &'static str;
    /// Keys were written (or re-written), in request order. Their sizes are in the book.
    fn on_stored(&mut self, keys: &[ObjectKey]);
    /// Lookups hit these keys, or a [`Touch`](crate::messages::Touch) marked them, in request
    /// order.
    fn on_accessed(&mut self, keys: &[ObjectKey]);
    /// The keys are gone.
    fn on_removed(&mut self, keys: &[ObjectKey]);
    /// Every tracked key in eviction order, first victim first.
    fn victims(&self) -> Box<dyn Iterator<Item = &ObjectKey> + '_>;
    /// Keys tracked.
    fn len(&self) -> usize;
    /// True when nothing is tracked.
    fn is_empty(&self) -> bool {
        self.len() == 0
    }
    /// The round to run now, if any: by default LMCache's global watermark rule over
    /// [`victims`](Self::victims) (see [`global_round`]).
    fn plan(&mut self, pressure: &Pressure<'_>, book: &SizeBook) -> Vec<EvictGroup> {
        global_round(self.victims(), self.len(), pressure, book)
    }
}

/// What a plan is made from: the adapter's usage as the backend reported it and its settings.
#[derive(Debug, Clone, Copy)]
pub struct Pressure<'a> {
    /// Bytes used (the backend ledger's total).
    pub used_bytes: u64,
    /// Capacity in bytes (0: no capacity).
    pub capacity_bytes: u64,
    /// The adapter's eviction settings, quotas included (as changed at run time).
    pub config: &'a EvictionConfig,
}

impl Pressure<'_> {
    /// True when usage is at or above `trigger_watermark × capacity` (never without capacity).
    pub fn over_watermark(&self) -> bool {
        self.capacity_bytes > 0
            && self.used_bytes as f64 >= self.config.trigger_watermark * self.capacity_bytes as f64
    }
}

/// LMCache's global rule: nothing under the watermark; else one group of `victims` sized by
/// `eviction_ratio` of the `tracked` keys (or of the used bytes, with `eviction_unit = "bytes"`).
///
/// With `eviction_unit = "bytes"` a round also catches up: when stores outran eviction and the
/// usage is past the watermark, it frees at least down to where a round started exactly at the
/// watermark would end (`watermark × capacity × (1 − ratio)`). Without that, small rounds (the
/// 0.5 % of `FLRU`) fall behind a fast writer, one round per store batch, and the tier
/// grows past its capacity. The `keys` unit keeps LMCache's rule exactly.
pub fn global_round<'a>(
    victims: impl Iterator<Item = &'a ObjectKey>,
    tracked: usize,
    pressure: &Pressure<'_>,
    book: &SizeBook,
) -> Vec<EvictGroup> {
    if !pressure.over_watermark() {
        return Vec::new();
    }
    let c = pressure.config;
    let used = pressure.used_bytes;
    let mut ratio = c.eviction_ratio;
    if c.eviction_unit == EvictionUnit::Bytes && used > 0 && ratio > 0.0 {
        let floor = c.trigger_watermark * pressure.capacity_bytes as f64 * (1.0 - ratio);
        ratio = ratio.max((used as f64 - floor) / used as f64).min(1.0);
    }
    ratio_group(victims, tracked, used, ratio, c.eviction_unit, book)
        .into_iter()
        .collect()
}

/// One group over `victims`: `floor(keys × ratio)` keys (unit `keys`) or enough keys to free
/// `ceil(bytes × ratio)` bytes (unit `bytes`), plus [`EXTRA_CANDIDATES`] spares for locked keys.
pub fn ratio_group<'a>(
    victims: impl Iterator<Item = &'a ObjectKey>,
    keys: usize,
    bytes: u64,
    ratio: f64,
    unit: EvictionUnit,
    book: &SizeBook,
) -> Option<EvictGroup> {
    match unit {
        EvictionUnit::Keys => {
            let count = keys_for_ratio(ratio, keys);
            if count == 0 {
                return None;
            }
            let candidates: Vec<ObjectKey> =
                victims.take(count + EXTRA_CANDIDATES).cloned().collect();
            (!candidates.is_empty()).then_some(EvictGroup {
                candidates,
                max_keys: count,
                min_bytes: 0,
            })
        }
        EvictionUnit::Bytes => {
            let target = bytes_for_ratio(ratio, bytes);
            if target == 0 {
                return None;
            }
            let (mut acc, mut extra) = (0u64, 0usize);
            let mut candidates = Vec::new();
            for k in victims {
                if acc >= target {
                    if extra == EXTRA_CANDIDATES {
                        break;
                    }
                    extra += 1;
                }
                acc += book.size(k).unwrap_or(0);
                candidates.push(k.clone());
            }
            (!candidates.is_empty()).then(|| EvictGroup {
                max_keys: candidates.len(),
                candidates,
                min_bytes: target,
            })
        }
    }
}

/// Sizes of the tracked keys and bytes per cache salt (`""` for unsalted keys), built from the
/// usage events. Invariant: `salt_bytes(s)` is the sum of the sizes of the tracked keys of `s`.
#[derive(Debug, Default)]
pub struct SizeBook {
    sizes: KeyMap<u64>,
    by_salt: HashMap<String, (u64, usize)>,
}

impl SizeBook {
    /// Records (or replaces) the size of a key.
    pub fn insert(&mut self, key: &ObjectKey, size: u64) {
        let old = self.sizes.insert(key.clone(), size);
        let e = self
            .by_salt
            .entry(key.cache_salt().unwrap_or("").to_owned())
            .or_default();
        match old {
            Some(o) => e.0 = e.0 - o + size,
            None => {
                e.0 += size;
                e.1 += 1;
            }
        }
    }

    /// Forgets a key; returns its size.
    pub fn remove(&mut self, key: &ObjectKey) -> Option<u64> {
        let size = self.sizes.remove(key)?;
        let salt = key.cache_salt().unwrap_or("");
        if let Some(e) = self.by_salt.get_mut(salt) {
            e.0 -= size;
            e.1 -= 1;
            if e.1 == 0 {
                self.by_salt.remove(salt);
            }
        }
        Some(size)
    }

    /// The size of a tracked key.
    pub fn size(&self, key: &ObjectKey) -> Option<u64> {
        self.sizes.get(key).copied()
    }

    /// Bytes of the tracked keys of `salt` (`""`: unsalted).
    pub fn salt_bytes(&self, salt: &str) -> u64 {
        self.by_salt.get(salt).map_or(0, |e| e.0)
    }

    /// Every salt with tracked keys, with its bytes and key count, sorted by salt.
    pub fn salts(&self) -> Vec<(&str, u64, usize)> {
        let mut v: Vec<_> = self
            .by_salt
            .iter()
            .map(|(s, (b, n))| (s.as_str(), *b, *n))
            .collect();
        v.sort_unstable_by(|a, b| a.0.cmp(b.0));
        v
    }

    /// Bytes of every tracked key.
    pub fn total_bytes(&self) -> u64 {
        self.by_salt.values().map(|e| e.0).sum()
    }
}

/// A new policy of the configured name, with the settings of its own that `config` holds.
pub fn policy(config: &EvictionConfig) -> Box<dyn EvictionPolicy> {
    match config.eviction_policy {
        PolicyName::Lru => Box::new(lru::Lru::default()),
        PolicyName::Arc => Box::new(arc::Arc::default()),
        PolicyName::IsolatedLru => Box::new(isolated_lru::IsolatedLru::default()),
        PolicyName::Flru => Box::new(flru::Flru::new(
            config.flru_bonus_per_use.unwrap_or(flru::BONUS_PER_USE),
            match config.flru_admission.unwrap_or_default() {
                FlruAdmission::Adaptive => &flru::MODES,
                FlruAdmission::Rates => &flru::RATE_LOW_MODE,
            },
        )),
        PolicyName::Noop => Box::new(noop::Noop),
    }
}

/// One adapter's policy with its size book and settings: what the eviction actor holds per
/// adapter, and what the offline simulator drives. Feed it the events in order; ask it for
/// a plan with the backend's usage.
pub struct PolicyState {
    policy: Box<dyn EvictionPolicy>,
    book: SizeBook,
    config: EvictionConfig,
}

impl PolicyState {
    /// A fresh state for these settings.
    pub fn new(config: EvictionConfig) -> Self {
        Self {
            policy: policy(&config),
            book: SizeBook::default(),
            config,
        }
    }

    /// The policy's name.
    pub fn name(&self) -> &'static str {
        self.policy.name()
    }

    /// The settings in force (quotas as changed at run time).
    pub fn config(&self) -> &EvictionConfig {
        &self.config
    }

    /// Keys were stored with these sizes (request order).
    pub fn stored(&mut self, keys: &[ObjectKey], sizes: &[u64]) {
        for (k, s) in keys.iter().zip(sizes) {
            self.book.insert(k, *s);
        }
        self.policy.on_stored(keys);
    }

    /// Lookups hit these keys (request order).
    pub fn accessed(&mut self, keys: &[ObjectKey]) {
        self.policy.on_accessed(keys);
    }

    /// The keys are gone.
    pub fn removed(&mut self, keys: &[ObjectKey]) {
        for k in keys {
            self.book.remove(k);
        }
        self.policy.on_removed(keys);
    }

    /// The round to run now (empty: none), given the backend's usage and capacity.
    pub fn plan(&mut self, used_bytes: u64, capacity_bytes: u64) -> Vec<EvictGroup> {
        let pressure = Pressure {
            used_bytes,
            capacity_bytes,
            config: &self.config,
        };
        self.policy.plan(&pressure, &self.book)
    }

    /// Sets (`Some`) or removes (`None`) the quota of a cache salt; returns the previous one.
    /// Only `IsolatedLRU` reads quotas; the change applies at the next plan.
    pub fn set_quota(&mut self, cache_salt: &str, limit_bytes: Option<u64>) -> Option<u64> {
        match limit_bytes {
            Some(l) => self.config.quotas.0.insert(cache_salt.to_owned(), l),
            None => self.config.quotas.0.remove(cache_salt),
        }
    }

    /// The quotas in force.
    pub fn quotas(&self) -> &Quotas {
        &self.config.quotas
    }

    /// Every tracked key in eviction order.
    pub fn order(&self) -> Vec<ObjectKey> {
        self.policy.victims().cloned().collect()
    }

    /// Keys tracked.
    pub fn len(&self) -> usize {
        self.policy.len()
    }

    /// True when nothing is tracked.
    pub fn is_empty(&self) -> bool {
        self.policy.is_empty()
    }

    /// The size book.
    pub fn book(&self) -> &SizeBook {
        &self.book
    }
}

/// Eviction settings of one adapter.
#[derive(Debug, Clone)]
pub struct EvictionTarget {
    /// The adapter.
    pub adapter: AdapterIndex,
    /// Its capacity in bytes (0: no capacity).
    pub capacity_bytes: u64,
    /// Its policy.
    pub config: EvictionConfig,
}

impl EvictionTarget {
    /// True when this adapter has something to evict with: a policy that evicts, and a capacity
    /// (`IsolatedLRU` needs none: its quotas drive it, as in LMCache).
    pub fn evicts(&self) -> bool {
        match self.config.eviction_policy {
            PolicyName::Noop => false,
            PolicyName::IsolatedLru => true,
            _ => self.capacity_bytes > 0,
        }
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
    adapter: AdapterIndex,
    capacity_bytes: u64,
    state: PolicyState,
    /// The backend's usage, as it last reported it, and that reading's ledger counter (a
    /// reading older than the one held is ignored: a `GetUsage` reply can arrive after events
    /// the backend published later).
    used: u64,
    seq: u64,
    /// The ledger counter of the last event applied to `state`.
    event_seq: u64,
    /// After a round: the next check waits until the events up to this counter (the round's
    /// `Deleted` among them) are applied, so the plan never offers keys already removed.
    wait_for_seq: Option<u64>,
    backend: Option<Addr<BackendActor>>,
    in_flight: bool,
    stats: EvictionStats,
    /// [`WhenIdle`] callers, answered when a check finds nothing to do.
    idle_waiters: Vec<tokio::sync::oneshot::Sender<()>>,
}

impl Tracked {
    /// Answers the [`WhenIdle`] callers.
    fn idle(&mut self) {
        for w in self.idle_waiters.drain(..) {
            let _ = w.send(());
        }
    }

    /// Takes a usage reading unless a newer one is held.
    fn read(&mut self, used: u64, seq: u64) {
        if seq >= self.seq {
            self.used = used;
            self.seq = seq;
        }
    }
}

/// The eviction actor. See the module docs.
pub struct EvictionActor {
    adapters: HashMap<AdapterIndex, Tracked>,
    interval: Duration,
}

impl EvictionActor {
    /// An actor for these adapters (those that do not evict, see [`EvictionTarget::evicts`],
    /// are ignored), checking every `interval` as well as on events.
    pub fn new(targets: impl IntoIterator<Item = EvictionTarget>, interval: Duration) -> Self {
        let adapters = targets
            .into_iter()
            .filter(|t| t.evicts())
            .map(|t| {
                (
                    t.adapter,
                    Tracked {
                        adapter: t.adapter,
                        capacity_bytes: t.capacity_bytes,
                        state: PolicyState::new(t.config),
                        used: 0,
                        seq: 0,
                        event_seq: 0,
                        wait_for_seq: None,
                        backend: None,
                        in_flight: false,
                        stats: EvictionStats::default(),
                        idle_waiters: Vec::new(),
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
        if t.in_flight || t.wait_for_seq.is_some() {
            return;
        }
        let Some(backend) = t.backend.clone() else {
            return;
        };
        let groups = t.state.plan(t.used, t.capacity_bytes);
        if groups.is_empty() {
            t.idle();
            return;
        }
        t.in_flight = true;
        t.stats.rounds += 1;
        tracing::debug!(
            adapter = t.adapter,
            groups = groups.len(),
            used = t.used,
            "eviction round"
        );
        let round = async move {
            let removed = backend.send(Evict { groups }).await.unwrap_or_default();
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
                t.stats.evicted_keys += removed.len() as u64;
                t.stats.evicted_bytes += removed.iter().map(|(_, s)| s).sum::<u64>();
                if let Some((used, seq)) = used {
                    t.read(used, seq);
                    if !removed.is_empty() && t.event_seq < seq {
                        t.wait_for_seq = Some(seq);
                    }
                }
                if removed.is_empty() {
                    // Nothing could go (all locked): idle until the next event or tick.
                    t.idle();
                } else {
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
                // A round's events are normally applied within microseconds; a tick that still
                // finds one awaited stops waiting (the events may have been lost with a
                // restarted backend), and a stale plan is still safe: the backend skips keys it
                // no longer holds.
                if let Some(t) = act.adapters.get_mut(&id) {
                    t.wait_for_seq = None;
                }
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
        t.event_seq = t.event_seq.max(msg.ledger_seq);
        let mut check = false;
        if t.wait_for_seq.is_some_and(|s| t.event_seq >= s) {
            t.wait_for_seq = None;
            check = true;
        }
        match msg.kind {
            UsageEventKind::Stored { keys, sizes } => {
                t.state.stored(&keys, &sizes);
                check = true;
            }
            UsageEventKind::Accessed { keys } => t.state.accessed(&keys),
            UsageEventKind::Deleted { keys, .. } => t.state.removed(&keys),
        }
        if check {
            self.check(msg.adapter, ctx);
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
                s.tracked_keys = t.state.len() as u64;
                s.tracked_bytes = t.used;
                (*id, s)
            })
            .collect();
        out.sort_by_key(|(id, _)| *id);
        MessageResult(out)
    }
}

/// The keys of an adapter in eviction order, first victim first, whatever the policy (for
/// tests and diagnostics; the name is historical).
#[derive(Debug, Clone, Copy, Message)]
#[rtype(result = "Vec<ObjectKey>")]
pub struct GetLruOrder(pub AdapterIndex);

impl Handler<GetLruOrder> for EvictionActor {
    type Result = MessageResult<GetLruOrder>;

    fn handle(&mut self, msg: GetLruOrder, _: &mut Context<Self>) -> Self::Result {
        MessageResult(
            self.adapters
                .get(&msg.0)
                .map(|t| t.state.order())
                .unwrap_or_default(),
        )
    }
}

/// Set (`limit_bytes: Some`) or remove (`None`) the byte quota of a cache salt on an adapter, at
/// run time. The change applies at the next eviction cycle, which this message starts. Replies
/// with the previous limit, or `Err` when the adapter has no eviction actor state.
#[derive(Debug, Clone, Message)]
#[rtype(result = "Result<Option<u64>, QuotaError>")]
pub struct SetQuota {
    /// The adapter.
    pub adapter: AdapterIndex,
    /// The salt (`""`: unsalted keys).
    pub cache_salt: String,
    /// The new limit in bytes, or `None` to remove the entry (the salt then falls under the
    /// allowlist rule: limit 0).
    pub limit_bytes: Option<u64>,
}

/// Why a quota message was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum QuotaError {
    /// The adapter does not evict (no `eviction` table, `noop`, or no capacity).
    #[error("adapter #{0} has no eviction policy that evicts")]
    NoEviction(AdapterIndex),
    /// The adapter's policy ignores quotas.
    #[error("adapter #{0} uses the {1} policy; only IsolatedLRU uses quotas")]
    NotIsolated(AdapterIndex, &'static str),
    /// The salt is not a valid cache salt.
    #[error("invalid cache salt: {0}")]
    BadSalt(String),
}

impl Handler<SetQuota> for EvictionActor {
    type Result = Result<Option<u64>, QuotaError>;

    fn handle(&mut self, msg: SetQuota, ctx: &mut Context<Self>) -> Self::Result {
        let t = self
            .adapters
            .get_mut(&msg.adapter)
            .ok_or(QuotaError::NoEviction(msg.adapter))?;
        if t.state.config().eviction_policy != PolicyName::IsolatedLru {
            return Err(QuotaError::NotIsolated(msg.adapter, t.state.name()));
        }
        crate::key::validate_salt(&msg.cache_salt)
            .map_err(|e| QuotaError::BadSalt(e.to_string()))?;
        let old = t.state.set_quota(&msg.cache_salt, msg.limit_bytes);
        self.check(msg.adapter, ctx);
        Ok(old)
    }
}

/// The quotas in force on an adapter (`None` when it has no eviction state).
#[derive(Debug, Clone, Copy, Message)]
#[rtype(result = "Option<Quotas>")]
pub struct GetQuotas(pub AdapterIndex);

impl Handler<GetQuotas> for EvictionActor {
    type Result = MessageResult<GetQuotas>;

    fn handle(&mut self, msg: GetQuotas, _: &mut Context<Self>) -> Self::Result {
        MessageResult(self.adapters.get(&msg.0).map(|t| t.state.quotas().clone()))
    }
}

/// Replies once the adapter's eviction is idle: no round in flight and a check finds nothing
/// to evict (or nothing it may evict: the rest is locked). Replies at once for an adapter
/// without eviction. For tests and tools that must observe the settled state without sleeping.
#[derive(Debug, Clone, Copy, Message)]
#[rtype(result = "()")]
pub struct WhenIdle(pub AdapterIndex);

impl Handler<WhenIdle> for EvictionActor {
    type Result = ResponseFuture<()>;

    fn handle(&mut self, msg: WhenIdle, ctx: &mut Context<Self>) -> Self::Result {
        let (tx, rx) = tokio::sync::oneshot::channel();
        match self.adapters.get_mut(&msg.0) {
            Some(t) => t.idle_waiters.push(tx),
            None => {
                let _ = tx.send(());
            }
        }
        self.check(msg.0, ctx);
        Box::pin(async move {
            let _ = rx.await;
        })
    }
}
