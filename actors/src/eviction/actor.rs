//! The eviction actor: one for the runtime, tracking every adapter that evicts.
//!
//! Per adapter it holds a [`PolicyState`] fed by the backend's usage events and the backend's
//! usage as last reported. Invariants: at most one round per adapter is in flight; after a
//! round the next check waits until the round's `Deleted` event has been applied (so a plan
//! never offers keys already removed); a usage reading older (by ledger counter) than the one
//! held is ignored. All state is the actor's own; no lock.

use std::collections::HashMap;
use std::time::Duration;

use actix::prelude::*;
use serde::Serialize;

use super::messages::*;
use super::state::PolicyState;
use crate::backend::BackendActor;
use crate::config::{EvictionConfig, EvictionPolicy as PolicyName};
use crate::messages::{AdapterIndex, Evict, GetUsage, UsageEvent, UsageEventKind};

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
    /// A [`WhenIdle`] came while a round was in flight: that round's "nothing could go" (its
    /// keys locked when it planned) does not answer it; one more check, started after it, does.
    recheck: bool,
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
                        recheck: false,
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
                if removed.is_empty() && !std::mem::take(&mut t.recheck) {
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
            UsageEventKind::Deleted { keys, cause, .. } => t.state.removed(&keys, cause),
        }
        if check {
            self.check(msg.adapter, ctx);
        }
    }
}

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

impl Handler<GetQuotas> for EvictionActor {
    type Result = MessageResult<GetQuotas>;

    fn handle(&mut self, msg: GetQuotas, _: &mut Context<Self>) -> Self::Result {
        MessageResult(self.adapters.get(&msg.0).map(|t| t.state.quotas().clone()))
    }
}

impl Handler<WhenIdle> for EvictionActor {
    type Result = ResponseFuture<()>;

    fn handle(&mut self, msg: WhenIdle, ctx: &mut Context<Self>) -> Self::Result {
        let (tx, rx) = tokio::sync::oneshot::channel();
        match self.adapters.get_mut(&msg.0) {
            Some(t) => {
                t.idle_waiters.push(tx);
                t.recheck |= t.in_flight;
            }
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
