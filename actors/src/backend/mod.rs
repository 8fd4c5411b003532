//! The backend actor: one per configured adapter, driving its [`Storage`] (a `Box<dyn Storage>`:
//! one virtual call per batch).
//!
//! It owns everything the semantics define, so every backend behaves the same way:
//! lock reference counts, the usage ledger (total and per cache salt), the set of keys being
//! deleted (a lookup never locks a key whose deletion is under way), the keys being stored (a
//! delete or an eviction skips them until the write ends), the stores waiting for their key
//! (see below), the deletions started while a lookup's probes are in flight (a
//! probe that saw an object before its deletion started never locks it: a locked key always
//! loads), and the usage events it publishes. Storage I/O runs concurrently;
//! its results are applied to the actor's state (and, through [`Io::then`], to the storage's)
//! in the completion closure, on the actor's own thread, so no lock is ever needed.
//!
//! The ledger here is the only record of usage in the runtime: events carry its total, and the
//! eviction actor reads usage from them (it keeps recency only). Load buffers are lent to the
//! storage ([`crate::buffer::lend`]) and the reply is sent only once every one is back.
//!
//! **One write per key at a time.** A key is *busy* while a store or a delete of it is in
//! flight. A store of a busy key waits: its item joins the key's queue (first come, first
//! served) and is written when the operation ahead of it ends, so a store never fails because
//! the key is being deleted, and two stores of one key (from two requests, or twice in one
//! batch) reach the storage one after the other. The storage therefore sees the key's
//! operations in the order the ledger applies their results, and the ledger always records the
//! size of the object the storage holds. A delete or an eviction skips a busy key, or one with
//! stores waiting (the key is about to be written again). A store's reply is sent once every
//! one of its items has been written or has failed; its other keys are written meanwhile. No
//! waiting item can wait forever: each queue only moves forward when an operation ends, and
//! every operation in flight ends (the storages bound their own I/O).
//!
//! A [`Touch`] never reaches the storage: it only publishes `Accessed` for the keys the ledger
//! holds and that are not being deleted, so eviction sees the same recency update as for a lookup
//! hit, without I/O and without a lock.
//!
//! **Corrupt objects are never served, then removed.** A load whose bytes do not match the
//! object's stored checksum ([`Fetched::Corrupt`](crate::storage::Fetched::Corrupt)) is a miss, counted
//! (`kvtier_corrupt_objects_total`). The object is then deleted as a [`Delete`] would (a
//! `RemoveCorrupt` message to this actor, whose `Deleted` event says
//! [`DeleteCause::Corrupt`]): at once when the key is unlocked and not busy; when it is locked
//! (the usual case: a load follows a lookup-and-lock), the key is marked corrupt, lookups miss
//! it from then on, and its last unlock deletes it (a lock is never broken). A successful store
//! of the key clears the mark. [`Verify`] (`kvtier scrub`) checks objects on the storage's
//! worker pool and, with `delete_corrupt`, removes the corrupt ones the same way.
//!
//! Keys the adapter's name format cannot name (a non-zero `object_group_id` in the `seed`
//! format, see [`ObjectKey::check_name_format`]) never reach the storage: a store fails for
//! that key, a lookup and a load miss (the buffer comes back untouched), a delete skips it.
//!
//! The files, each with the invariants it keeps: `ledger.rs` (usage per key, per salt, and
//! its change count), `probes.rs` (what a lookup's probes must not trust), `write_queue.rs`
//! (one write per key, in arrival order; stores answered when their last item ends),
//! `naming.rs` (unnameable keys kept from the storage), `fleet.rs` (fleet mode: locks, claims,
//! usage and eviction through the fleet index), `handlers.rs` (the messages); this file
//! holds the actor's state and the steps every handler uses.

mod deletes;
mod fleet;
mod handlers;
mod ledger;
mod naming;
mod probes;
mod write_queue;

use std::any::Any;

use actix::fut::wrap_future;
use actix::prelude::*;

use crate::key::{KeyMap, KeySet, NameFormat, ObjectKey};
use crate::messages::*;
use crate::metrics::{AdapterMetrics, Op, Started};
use crate::storage::{BackendError, Io, IoFuture, IoState, Storage};
use ledger::Ledger;
use probes::Probes;
use write_queue::WriteQueue;

/// How often the per-salt usage series are refreshed (when the ledger changed).
const SALT_SERIES_PERIOD: std::time::Duration = std::time::Duration::from_secs(1);

/// Default page size for [`ListKeys`].
pub(crate) const DEFAULT_PAGE_SIZE: usize = 500;

/// The actor for one adapter. See the module docs.
pub struct BackendActor {
    index: AdapterIndex,
    storage: Box<dyn Storage>,
    capacity_bytes: u64,
    locks: KeyMap<u32>,
    ledger: Ledger,
    deleting: KeySet,
    /// Writes in flight, store items waiting for their key, stores not answered yet.
    writes: WriteQueue,
    subscribers: Vec<Recipient<UsageEvent>>,
    /// The storage's object name format (see [`BackendActor::with_name_format`]).
    format: NameFormat,
    /// Lookups whose probes are in flight, and the deletions started while any was.
    probes: Probes,
    /// This adapter's series (see [`BackendActor::with_metrics`]).
    metrics: AdapterMetrics,
    /// The cache salts with a usage series, and the ledger change they were read at.
    salts_shown: (Vec<String>, u64),
    /// Keys found corrupt while locked: lookups miss them; the last unlock deletes them.
    corrupt: KeySet,
    /// Fleet mode (`[fleet]`): the index and what this node holds in it (see `fleet.rs`).
    fleet: Option<fleet::FleetLink>,
}

impl BackendActor {
    /// A backend actor for adapter `index` with `capacity_bytes` (0: usage-driven eviction off),
    /// publishing usage events to `subscribers`.
    pub fn new(
        index: AdapterIndex,
        storage: Box<dyn Storage>,
        capacity_bytes: u64,
        subscribers: Vec<Recipient<UsageEvent>>,
    ) -> Self {
        Self {
            index,
            storage,
            capacity_bytes,
            locks: KeyMap::default(),
            ledger: Ledger::default(),
            deleting: KeySet::default(),
            writes: WriteQueue::default(),
            subscribers,
            format: NameFormat::default(),
            probes: Probes::default(),
            metrics: AdapterMetrics::off(),
            salts_shown: (Vec::new(), u64::MAX),
            corrupt: KeySet::default(),
            fleet: None,
        }
    }

    fn context(&self, err: &BackendError) -> String {
        format!("adapter #{} ({}): {err}", self.index, self.storage.kind())
    }

    fn publish(&self, kind: UsageEventKind) {
        self.metrics
            .set_usage(self.ledger.used(), self.ledger.len(), self.capacity_bytes);
        if self.subscribers.is_empty() {
            return;
        }
        let event = UsageEvent {
            adapter: self.index,
            used_bytes: self.ledger.used(),
            ledger_seq: self.ledger.seq(),
            kind,
        };
        for s in &self.subscribers {
            s.do_send(event.clone());
        }
    }

    /// The storage as `Any`, for finishing its [`Io`]s.
    fn storage_any(&mut self) -> &mut dyn Any {
        &mut *self.storage as &mut dyn Any
    }

    /// The result now, when it is available without waiting; otherwise its future.
    fn now_or_later<T: 'static>(&mut self, io: Io<T>) -> Result<T, IoFuture<T>> {
        match io.0 {
            IoState::Ready(v) => Ok(v),
            IoState::Deferred(finish) => Ok(finish(self.storage_any())),
            IoState::Pending(fut) => Err(fut),
        }
    }

    /// Runs `done` on the storage result now, or on the actor when it arrives (after the
    /// storage's own finishing step).
    fn respond<T: 'static, R: 'static>(
        &mut self,
        io: Io<T>,
        ctx: &mut Context<Self>,
        done: impl FnOnce(T, &mut Self, &mut Context<Self>) -> R + 'static,
    ) -> ActorResponse<Self, R> {
        match self.now_or_later(io) {
            Ok(v) => ActorResponse::reply(done(v, self, ctx)),
            Err(fut) => ActorResponse::r#async(Box::pin(wrap_future::<_, Self>(fut).map(
                move |finish, act, ctx| {
                    let v = finish(act.storage_any());
                    done(v, act, ctx)
                },
            ))),
        }
    }

    /// As [`BackendActor::respond`], always as a future (for steps that follow another future).
    fn respond_later<T: 'static, R: 'static>(
        &mut self,
        io: Io<T>,
        ctx: &mut Context<Self>,
        done: impl FnOnce(T, &mut Self, &mut Context<Self>) -> R + 'static,
    ) -> ResponseActFuture<Self, R> {
        match self.now_or_later(io) {
            Ok(v) => Box::pin(actix::fut::ready(done(v, self, ctx))),
            Err(fut) => Box::pin(wrap_future::<_, Self>(fut).map(move |finish, act, ctx| {
                let v = finish(act.storage_any());
                done(v, act, ctx)
            })),
        }
    }

    /// Whether a store or a delete of `key` is in flight (a store of it must wait).
    fn busy(&self, key: &ObjectKey) -> bool {
        self.writes.writing(key) || self.deleting.contains(key)
    }

    /// Whether a delete or an eviction may remove `key` now: nameable, not locked, not already
    /// being deleted, not being written (a delete racing a write could land before or after
    /// it at the store, while the ledger would follow whichever reply came last), and with no
    /// store waiting for it (the key is about to be written again).
    fn removable(&self, key: &ObjectKey) -> bool {
        self.nameable(key)
            && !self.locks.contains_key(key)
            && !self.busy(key)
            && !self.writes.has_waiting(key)
    }

    fn lock(&mut self, key: &ObjectKey) {
        match self.locks.get_mut(key) {
            Some(n) => *n += 1,
            None => {
                self.locks.insert(key.clone(), 1);
            }
        }
    }

    /// A request of `op` arrives: counted in the metrics, and given a `tracing` span
    /// (`kvtier.request`, at debug level: free when no subscriber wants it) with the adapter,
    /// operation, key count and bytes; the outcome is recorded in it when the request ends.
    fn begin(&self, op: Op, keys: usize, bytes: u64) -> Started {
        let span = tracing::debug_span!(
            "kvtier.request",
            adapter = self.index,
            adapter_type = self.storage.kind(),
            op = op.as_str(),
            keys,
            bytes,
            ok = tracing::field::Empty,
            failed = tracing::field::Empty,
        );
        self.metrics.start(op, keys, bytes).with_span(span)
    }
}

impl BackendActor {
    /// Starts the actor on an arbiter (thread) of its own, so a slow store never delays another.
    /// The caller keeps the arbiter and stops it at shutdown.
    pub fn spawn(self) -> (Arbiter, Addr<Self>) {
        let arbiter = Arbiter::new();
        let addr = Self::start_in_arbiter(&arbiter.handle(), move |_| self);
        (arbiter, addr)
    }
}

impl Actor for BackendActor {
    type Context = Context<Self>;

    fn started(&mut self, ctx: &mut Context<Self>) {
        self.start_fleet(ctx);
        if self.metrics.is_on() {
            ctx.run_interval(SALT_SERIES_PERIOD, |act, _| act.refresh_salt_series());
        }
        let Some(io) = self.storage.recover() else {
            return;
        };
        let apply =
            |res: Result<Vec<crate::storage::Recovered>, BackendError>, act: &mut Self| match res {
                Ok(mut found) => {
                    found.sort_by_key(|r| r.modified);
                    let mut keys = Vec::with_capacity(found.len());
                    let mut sizes = Vec::with_capacity(found.len());
                    for r in found {
                        act.ledger.insert(&r.key, r.size);
                        keys.push(r.key);
                        sizes.push(r.size);
                    }
                    tracing::info!(
                        adapter = act.index,
                        kind = act.storage.kind(),
                        keys = keys.len(),
                        bytes = act.ledger.used(),
                        "recovered index"
                    );
                    if !keys.is_empty() {
                        act.publish(UsageEventKind::Stored { keys, sizes });
                    }
                }
                Err(e) => tracing::warn!(error = %act.context(&e), "index recovery failed"),
            };
        match self.now_or_later(io) {
            Ok(v) => apply(v, self),
            // Hold the mailbox until the index is rebuilt, so no request sees a partial ledger.
            Err(fut) => ctx.wait(wrap_future::<_, Self>(fut).map(move |finish, act, _| {
                let v = finish(act.storage_any());
                apply(v, act)
            })),
        }
    }

    fn stopped(&mut self, _: &mut Context<Self>) {
        self.storage.close();
    }
}

impl BackendActor {
    /// Records this adapter's metrics into `metrics` (default: off), and hands them to the
    /// storage for what only it sees (retries, breaker, Hub routes).
    pub fn with_metrics(mut self, metrics: AdapterMetrics) -> Self {
        metrics.set_usage(0, 0, self.capacity_bytes);
        self.storage.attach_metrics(metrics.clone());
        self.metrics = metrics;
        self
    }

    /// Refreshes the per-salt usage series when the ledger changed since the last refresh.
    fn refresh_salt_series(&mut self) {
        if !self.metrics.is_on() || self.salts_shown.1 == self.ledger.seq() {
            return;
        }
        self.salts_shown.1 = self.ledger.seq();
        let by_salt = self.ledger.by_salt();
        self.metrics
            .set_salt_usage(by_salt, &mut self.salts_shown.0);
    }

    /// Sets the object name format of the storage (default: `seed`); keys it cannot name are
    /// refused before any I/O. Must match the format the storage was opened with.
    pub fn with_name_format(mut self, format: NameFormat) -> Self {
        self.format = format;
        self
    }
}
