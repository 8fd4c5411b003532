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
//! object's stored checksum ([`Fetched::Corrupt`]) is a miss, counted
//! (`kvtier_corrupt_objects_total`). The object is then deleted as a [`Delete`] would (a
//! message to this actor): at once when the key is unlocked and not busy; when it is locked
//! (the usual case: a load follows a lookup-and-lock), the key is marked corrupt, lookups miss
//! it from then on, and its last unlock deletes it (a lock is never broken). A successful store
//! of the key clears the mark. [`Verify`] (`kvtier scrub`) checks objects on the storage's
//! worker pool and, with `delete_corrupt`, removes the corrupt ones the same way.
//!
//! Keys the adapter's name format cannot name (a non-zero `object_group_id` in the `seed`
//! format, see [`ObjectKey::check_name_format`]) never reach the storage: a store fails for
//! that key, a lookup and a load miss (the buffer comes back untouched), a delete skips it.

use std::any::Any;
use std::collections::{BTreeMap, HashMap, VecDeque};
use std::sync::Arc;

use actix::fut::wrap_future;
use actix::prelude::*;
use bytes::Bytes;

use crate::buffer::{lend, Homecoming, LoadBuf};
use crate::key::{KeyMap, KeySet, NameFormat, ObjectKey};
use crate::messages::*;
use crate::metrics::{AdapterMetrics, Op, Started};
use crate::storage::{BackendError, ErrorKind, Fetched, Io, IoFuture, IoState, Removed, Storage};

/// How often the per-salt usage series are refreshed (when the ledger changed).
const SALT_SERIES_PERIOD: std::time::Duration = std::time::Duration::from_secs(1);

/// Default page size for [`ListKeys`].
pub const DEFAULT_PAGE_SIZE: usize = 500;

/// Bytes accounted per key, in total and per cache salt.
#[derive(Debug, Default)]
struct Ledger {
    sizes: KeyMap<u64>,
    used: u64,
    by_salt: HashMap<Option<Arc<str>>, u64>,
    /// Bumped on every change: orders readings of `used` (see [`UsageEvent::ledger_seq`]).
    seq: u64,
}

impl Ledger {
    /// Records a key; returns true when it was new. A changed size moves usage by the difference.
    fn insert(&mut self, key: &ObjectKey, size: u64) -> bool {
        self.seq += 1;
        let salt = self
            .by_salt
            .entry(key.cache_salt_arc().cloned())
            .or_default();
        match self.sizes.insert(key.clone(), size) {
            None => {
                self.used += size;
                *salt += size;
                true
            }
            Some(old) => {
                self.used = self.used.saturating_sub(old) + size;
                *salt = salt.saturating_sub(old) + size;
                false
            }
        }
    }

    /// Forgets a key; returns the size it had. Usage never goes below zero.
    fn remove(&mut self, key: &ObjectKey) -> Option<u64> {
        let size = self.sizes.remove(key)?;
        self.seq += 1;
        self.used = self.used.saturating_sub(size);
        let salt = key.cache_salt_arc().cloned();
        if let Some(b) = self.by_salt.get_mut(&salt) {
            *b = b.saturating_sub(size);
            if *b == 0 {
                self.by_salt.remove(&salt);
            }
        }
        Some(size)
    }
}

/// The actor for one adapter. See the module docs.
pub struct BackendActor {
    index: AdapterIndex,
    storage: Box<dyn Storage>,
    capacity_bytes: u64,
    locks: KeyMap<u32>,
    ledger: Ledger,
    deleting: KeySet,
    /// Keys with a write in flight (at most one per key, see the module docs).
    storing: KeySet,
    /// Store items waiting for their key to be free, per key in arrival order.
    waiting: KeyMap<VecDeque<(BatchId, Bytes)>>,
    /// Stores not answered yet, by id.
    batches: HashMap<BatchId, StoreBatch>,
    next_batch: BatchId,
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
}

/// Identifies one [`Store`] request while its items are written.
type BatchId = u64;

/// A [`Store`] request whose items are being written, possibly in several parts (items of busy
/// keys wait for them, see the module docs).
struct StoreBatch {
    outcome: StoreOutcome,
    /// Items neither written nor failed yet.
    left: usize,
    started: Started,
    /// Where the report goes once `left` is 0; `None` while the request's handler still runs
    /// (it then answers itself).
    reply: Option<tokio::sync::oneshot::Sender<StoreReport>>,
}

/// What a lookup needs to know when its probes return: whether a deletion of one of its keys
/// started after they were sent, and whether a write of one started or ended since. A probe
/// that saw the object before such a deletion must not lock it (the load would miss a locked
/// key), whether the deletion has ended by then or not. A probe that raced a write may have
/// seen the object before or after it, so its size must not overwrite the ledger's (which
/// follows the writes). Only deletions and writes seen while a probe is in flight are
/// remembered, so this stays small.
#[derive(Debug, Default)]
struct Probes {
    in_flight: u32,
    /// Counts deletions started and writes started or ended; a probe remembers the count at
    /// its start.
    epoch: u64,
    /// Keys whose deletion started while a probe was in flight, with the epoch it started in.
    deleted: KeyMap<u64>,
    /// Keys whose write started or ended while a probe was in flight, with the latest epoch.
    written: KeyMap<u64>,
}

impl Probes {
    /// A probe starts: returns the epoch to hand to [`Probes::end`].
    fn start(&mut self) -> u64 {
        self.in_flight += 1;
        self.epoch
    }

    /// Deletions of `keys` start.
    fn deleting<'a>(&mut self, keys: impl Iterator<Item = &'a ObjectKey>) {
        self.epoch += 1;
        if self.in_flight > 0 {
            for k in keys {
                self.deleted.insert(k.clone(), self.epoch);
            }
        }
    }

    /// Writes of `keys` start or end.
    fn writing<'a>(&mut self, keys: impl Iterator<Item = &'a ObjectKey>) {
        self.epoch += 1;
        if self.in_flight > 0 {
            for k in keys {
                self.written.insert(k.clone(), self.epoch);
            }
        }
    }

    /// Whether a write of `key` started or ended after the probe that started at `since`.
    fn written_since(&self, key: &ObjectKey, since: u64) -> bool {
        self.written.get(key).is_some_and(|&e| e > since)
    }

    /// Whether a deletion of `key` started after the probe that started at `since`.
    fn deleted_since(&self, key: &ObjectKey, since: u64) -> bool {
        self.deleted.get(key).is_some_and(|&e| e > since)
    }

    /// A probe ended.
    fn end(&mut self) {
        self.in_flight -= 1;
        if self.in_flight == 0 {
            self.deleted.clear();
            self.written.clear();
        }
    }
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
            storing: KeySet::default(),
            waiting: KeyMap::default(),
            batches: HashMap::new(),
            next_batch: 0,
            subscribers,
            format: NameFormat::default(),
            probes: Probes::default(),
            metrics: AdapterMetrics::off(),
            salts_shown: (Vec::new(), u64::MAX),
            corrupt: KeySet::default(),
        }
    }

    fn context(&self, err: &BackendError) -> String {
        format!("adapter #{} ({}): {err}", self.index, self.storage.kind())
    }

    fn publish(&self, kind: UsageEventKind) {
        self.metrics.set_usage(
            self.ledger.used,
            self.ledger.sizes.len(),
            self.capacity_bytes,
        );
        if self.subscribers.is_empty() {
            return;
        }
        let event = UsageEvent {
            adapter: self.index,
            used_bytes: self.ledger.used,
            ledger_seq: self.ledger.seq,
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

    /// Whether a store or a delete of `key` is in flight (a store of it must wait).
    fn busy(&self, key: &ObjectKey) -> bool {
        self.storing.contains(key) || self.deleting.contains(key)
    }

    /// Whether a delete or an eviction may remove `key` now: nameable, not locked, not already
    /// being deleted, not being written (a delete racing a write could land before or after
    /// it at the store, while the ledger would follow whichever reply came last), and with no
    /// store waiting for it (the key is about to be written again).
    fn removable(&self, key: &ObjectKey) -> bool {
        self.nameable(key)
            && !self.locks.contains_key(key)
            && !self.busy(key)
            && !self.waiting.contains_key(key)
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

    /// Records a store's outcome and ends its request.
    fn record_store(&self, started: Started, outcome: &StoreOutcome) {
        started.outcome(outcome.stored, outcome.failed.len());
        if !self.metrics.is_on() {
            return;
        }
        self.metrics.stored(outcome.stored, outcome.stored_bytes);
        for f in &outcome.failed {
            self.metrics.failed(Op::Store, f.kind, 1);
        }
        self.metrics.finish(started);
    }

    /// Writes `items` (each belonging to the store `BatchId`; their keys are already marked as
    /// being stored) and applies the results when they arrive.
    fn put_items(&mut self, items: Vec<(BatchId, ObjectKey, Bytes)>, ctx: &mut Context<Self>) {
        if items.is_empty() {
            return;
        }
        let mut owners = Vec::with_capacity(items.len());
        let mut keys = Vec::with_capacity(items.len());
        let mut sizes = Vec::with_capacity(items.len());
        let mut puts = Vec::with_capacity(items.len());
        for (id, key, obj) in items {
            owners.push(id);
            keys.push(key.clone());
            sizes.push(obj.len() as u64);
            puts.push((key, obj));
        }
        self.probes.writing(keys.iter());
        let io = self.storage.put(puts);
        match self.now_or_later(io) {
            Ok(results) => self.finish_items(owners, keys, sizes, results, ctx),
            Err(fut) => {
                ctx.spawn(wrap_future::<_, Self>(fut).map(move |finish, act, ctx| {
                    let results = finish(act.storage_any());
                    act.finish_items(owners, keys, sizes, results, ctx)
                }));
            }
        }
    }

    /// Applies written items to the ledger and their stores' outcomes, answers the stores that
    /// are complete, and starts the items that were waiting for these keys.
    fn finish_items(
        &mut self,
        owners: Vec<BatchId>,
        keys: Vec<ObjectKey>,
        sizes: Vec<u64>,
        results: Vec<Result<(), BackendError>>,
        ctx: &mut Context<Self>,
    ) {
        for key in &keys {
            self.storing.remove(key);
        }
        self.probes.writing(keys.iter());
        let mut ok_keys = Vec::with_capacity(keys.len());
        let mut ok_sizes = Vec::with_capacity(keys.len());
        let mut complete = Vec::new();
        let items = owners.into_iter().zip(keys.iter().cloned()).zip(sizes);
        // A storage that answers fewer items than it was given fails the rest (every item
        // must end, or its store would never be answered).
        let results = results
            .into_iter()
            .map(Some)
            .chain(std::iter::repeat_with(|| None));
        for (((id, key), size), res) in items.zip(results) {
            let res = res.unwrap_or_else(|| {
                Err(BackendError::new(
                    ErrorKind::Other,
                    "put",
                    "the storage gave no result for this item",
                ))
            });
            let failure = res.err().map(|e| (e.kind(), self.context(&e)));
            let Some(batch) = self.batches.get_mut(&id) else {
                continue;
            };
            match failure {
                None => {
                    self.corrupt.remove(&key);
                    batch.outcome.stored_bytes += size;
                    if self.ledger.insert(&key, size) {
                        batch.outcome.new_bytes += size;
                    }
                    batch.outcome.stored += 1;
                    ok_keys.push(key);
                    ok_sizes.push(size);
                }
                Some((kind, error)) => {
                    tracing::warn!(%error, key = %key, "store failed");
                    batch.outcome.failed.push(FailedKey { key, kind, error });
                }
            }
            batch.left -= 1;
            if batch.left == 0 && batch.reply.is_some() {
                complete.push(id);
            }
        }
        // Events before replies: a host sees a store's events before its result.
        if !ok_keys.is_empty() {
            self.publish(UsageEventKind::Stored {
                keys: ok_keys,
                sizes: ok_sizes,
            });
        }
        for id in complete {
            if let Some(batch) = self.batches.remove(&id) {
                let report = self.end_store(batch.started, batch.outcome);
                if let Some(tx) = batch.reply {
                    let _ = tx.send(report);
                }
            }
        }
        self.start_waiting(keys, ctx);
    }

    /// Records a finished store and builds its report.
    fn end_store(&self, started: Started, outcome: StoreOutcome) -> StoreReport {
        self.record_store(started, &outcome);
        StoreReport {
            adapters: vec![(self.index, outcome)],
        }
    }

    /// Starts, for each of `freed` that is no longer busy, the first store item waiting for it.
    fn start_waiting(&mut self, freed: Vec<ObjectKey>, ctx: &mut Context<Self>) {
        let mut items = Vec::new();
        for key in freed {
            if self.busy(&key) {
                continue;
            }
            let Some(queue) = self.waiting.get_mut(&key) else {
                continue;
            };
            let next = queue.pop_front();
            if queue.is_empty() {
                self.waiting.remove(&key);
            }
            if let Some((id, obj)) = next {
                self.storing.insert(key.clone());
                items.push((id, key, obj));
            }
        }
        self.put_items(items, ctx);
    }

    /// Marks `keys` as being deleted, removes them, and replies with the keys removed.
    /// Once the storage has answered, the stores waiting for these keys start.
    fn start_delete<R: 'static>(
        &mut self,
        keys: Vec<ObjectKey>,
        ctx: &mut Context<Self>,
        reply: impl FnOnce(Vec<(ObjectKey, u64)>) -> R + 'static,
    ) -> ActorResponse<Self, R> {
        if keys.is_empty() {
            return ActorResponse::reply(reply(Vec::new()));
        }
        for k in &keys {
            self.deleting.insert(k.clone());
        }
        self.probes.deleting(keys.iter());
        let started = self.begin(Op::Delete, keys.len(), 0);
        let io = self.storage.remove(keys.clone());
        self.respond(io, ctx, move |results, act, ctx| {
            let removed = act.finish_delete(keys.clone(), results);
            started.outcome(removed.len(), 0);
            act.metrics.deleted(removed.len());
            act.metrics.finish(started);
            act.start_waiting(keys, ctx);
            reply(removed)
        })
    }

    fn finish_delete(
        &mut self,
        keys: Vec<ObjectKey>,
        results: Vec<Result<Removed, BackendError>>,
    ) -> Vec<(ObjectKey, u64)> {
        let mut removed = Vec::new();
        let mut gone = Vec::new();
        let mut gone_sizes = Vec::new();
        for (key, res) in keys.into_iter().zip(results) {
            self.deleting.remove(&key);
            let known = self.ledger.sizes.contains_key(&key);
            let ours = match res {
                Ok(Removed::Yes) => true,
                Ok(Removed::Unknown) => known,
                Ok(Removed::Absent) => false,
                Err(e) => {
                    self.metrics.failed(Op::Delete, e.kind(), 1);
                    tracing::warn!(error = %self.context(&e), key = %key, "delete failed");
                    continue;
                }
            };
            let size = self.ledger.remove(&key);
            if let Some(size) = size {
                gone.push(key.clone());
                gone_sizes.push(size);
            }
            if ours {
                removed.push((key, size.unwrap_or(0)));
            }
        }
        if !gone.is_empty() {
            self.publish(UsageEventKind::Deleted {
                keys: gone,
                sizes: gone_sizes,
            });
        }
        removed
    }

    fn usage(&self) -> Usage {
        let used = self.ledger.used;
        let fraction = if self.capacity_bytes == 0 {
            -1.0
        } else {
            used as f64 / self.capacity_bytes as f64
        };
        Usage {
            adapter: self.index,
            used_bytes: used,
            capacity_bytes: self.capacity_bytes,
            ledger_seq: self.ledger.seq,
            fraction,
            keys: self.ledger.sizes.len(),
            bytes_by_cache_salt: self
                .ledger
                .by_salt
                .iter()
                .filter(|(_, b)| **b > 0)
                .map(|(s, b)| (s.as_deref().unwrap_or("").to_owned(), *b))
                .collect::<BTreeMap<_, _>>(),
        }
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
                        bytes = act.ledger.used,
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

impl Handler<Store> for BackendActor {
    type Result = ActorResponse<Self, StoreReport>;

    fn handle(&mut self, msg: Store, ctx: &mut Context<Self>) -> Self::Result {
        let mut outcome = StoreOutcome::default();
        let bytes = msg.objects.iter().map(|o| o.len() as u64).sum();
        let started = self.begin(Op::Store, msg.keys.len(), bytes);
        if msg.keys.len() != msg.objects.len() {
            let error = self.context(&BackendError::invalid(format!(
                "{} keys but {} objects",
                msg.keys.len(),
                msg.objects.len()
            )));
            outcome.failed = msg
                .keys
                .into_iter()
                .map(|key| FailedKey {
                    key,
                    kind: ErrorKind::Invalid,
                    error: error.clone(),
                })
                .collect();
            self.record_store(started, &outcome);
            return ActorResponse::reply(StoreReport {
                adapters: vec![(self.index, outcome)],
            });
        }
        let id = self.next_batch;
        self.next_batch += 1;
        let mut now = Vec::with_capacity(msg.keys.len());
        let mut written = Vec::with_capacity(msg.keys.len());
        for (key, obj) in msg.keys.into_iter().zip(msg.objects) {
            if let Err(e) = self.check_nameable(&key) {
                outcome.failed.push(FailedKey {
                    key,
                    kind: ErrorKind::Invalid,
                    error: e,
                });
                continue;
            }
            if obj.is_empty() {
                let error =
                    self.context(&BackendError::invalid("empty object (chunks must be full)"));
                outcome.failed.push(FailedKey {
                    key,
                    kind: ErrorKind::Invalid,
                    error,
                });
                continue;
            }
            written.push(key.clone());
            if self.busy(&key) || self.waiting.contains_key(&key) {
                // Behind the delete or store in flight (or an earlier item of this batch).
                self.waiting.entry(key).or_default().push_back((id, obj));
            } else {
                self.storing.insert(key.clone());
                now.push((id, key, obj));
            }
        }
        self.batches.insert(
            id,
            StoreBatch {
                outcome,
                left: written.len(),
                started,
                reply: None,
            },
        );
        self.put_items(now, ctx);
        if self.batches.get(&id).is_some_and(|b| b.left == 0) {
            let batch = self.batches.remove(&id).expect("checked above");
            return ActorResponse::reply(self.end_store(batch.started, batch.outcome));
        }
        let (tx, rx) = tokio::sync::oneshot::channel();
        if let Some(batch) = self.batches.get_mut(&id) {
            batch.reply = Some(tx);
        }
        let index = self.index;
        ActorResponse::r#async(Box::pin(wrap_future::<_, Self>(async move {
            rx.await.unwrap_or_else(|_| {
                // Only when the actor stopped first: whether these writes landed is unknown.
                let error = format!("adapter #{index}: stopped before the store ended");
                let failed = written
                    .into_iter()
                    .map(|key| FailedKey {
                        key,
                        kind: ErrorKind::Unavailable,
                        error: error.clone(),
                    })
                    .collect();
                StoreReport {
                    adapters: vec![(
                        index,
                        StoreOutcome {
                            failed,
                            ..StoreOutcome::default()
                        },
                    )],
                }
            })
        })))
    }
}

impl Handler<LookupAndLock> for BackendActor {
    type Result = ActorResponse<Self, Bitmap>;

    fn handle(&mut self, msg: LookupAndLock, ctx: &mut Context<Self>) -> Self::Result {
        let n = msg.keys.len();
        let started = self.begin(Op::Lookup, n, 0);
        let mut keys = Vec::with_capacity(n);
        let mut known = Vec::with_capacity(n);
        let mut probe_at = Vec::with_capacity(n);
        for (i, key) in msg.keys.into_iter().enumerate() {
            if self.deleting.contains(&key) || self.corrupt.contains(&key) || !self.nameable(&key) {
                continue;
            }
            known.push(self.ledger.sizes.get(&key).copied());
            keys.push(key);
            probe_at.push(i);
        }
        if keys.is_empty() {
            self.metrics.finish(started);
            return ActorResponse::reply(Bitmap::zeros(n));
        }
        let io = self.storage.head(&keys, &known);
        let immediate = !matches!(io.0, IoState::Pending(_));
        let since = self.probes.start();
        self.respond(io, ctx, move |results, act, _| {
            let mut hits = Bitmap::zeros(n);
            let mut found = Vec::new();
            let mut found_sizes = Vec::new();
            let mut accessed = Vec::new();
            let answers = keys.into_iter().zip(probe_at).zip(known).zip(results);
            for (((key, i), ledger_size), res) in answers {
                let size = match res {
                    Ok(s) => s,
                    Err(e) => {
                        act.metrics.failed(Op::Lookup, e.kind(), 1);
                        tracing::debug!(error = %act.context(&e), key = %key, "lookup probe failed");
                        continue;
                    }
                };
                match size {
                    Some(size)
                        if size > 0
                            && !act.deleting.contains(&key)
                            && !act.corrupt.contains(&key)
                            && !act.probes.deleted_since(&key, since) =>
                    {
                        hits.set(i, true);
                        act.lock(&key);
                        // A size the ledger has needs no update (nor a change count). Answered
                        // at once, the ledger cannot have changed since it was read. A probe
                        // that raced a write of the key leaves the ledger to the write.
                        let unchanged = ledger_size == Some(size)
                            && (immediate || act.ledger.sizes.get(&key) == Some(&size));
                        let raced = act.storing.contains(&key)
                            || act.probes.written_since(&key, since);
                        if !unchanged && !raced && act.ledger.insert(&key, size) {
                            found.push(key.clone());
                            found_sizes.push(size);
                        }
                        if !act.subscribers.is_empty() {
                            accessed.push(key);
                        }
                    }
                    _ => {}
                }
            }
            act.probes.end();
            let hit_keys = hits.count_ones();
            started.outcome(hit_keys, n - hit_keys);
            act.metrics.lookup_hits(hit_keys);
            act.metrics.set_locked(act.locks.len());
            act.metrics.finish(started);
            if !found.is_empty() {
                act.publish(UsageEventKind::Stored {
                    keys: found,
                    sizes: found_sizes,
                });
            }
            if !accessed.is_empty() {
                act.publish(UsageEventKind::Accessed { keys: accessed });
            }
            hits
        })
    }
}

impl BackendActor {
    /// Applies a load's results: hits, and keys found absent (removed behind our back) leave
    /// the ledger.
    fn finish_load(
        &mut self,
        keys: Vec<ObjectKey>,
        results: Vec<Result<Fetched, BackendError>>,
        started: Started,
        lens: Vec<u64>,
        ctx: &mut Context<Self>,
    ) -> Bitmap {
        let mut hits = Bitmap::zeros(keys.len());
        let mut corrupt = Vec::new();
        let mut gone = Vec::new();
        let mut gone_sizes = Vec::new();
        let (mut hit_bytes, mut hit_keys, mut missed) = (0u64, 0usize, 0usize);
        for (i, (key, res)) in keys.into_iter().zip(results).enumerate() {
            match res {
                Ok(Fetched::Hit) => {
                    hits.set(i, true);
                    hit_keys += 1;
                    hit_bytes += lens.get(i).copied().unwrap_or(0);
                }
                Ok(Fetched::SizeMismatch { actual }) => {
                    missed += 1;
                    tracing::debug!(adapter = self.index, key = %key, actual, "load size mismatch: miss")
                }
                Ok(Fetched::Corrupt { expected, actual }) => {
                    missed += 1;
                    tracing::warn!(
                        adapter = self.index,
                        kind = self.storage.kind(),
                        key = %key,
                        expected = format_args!("{expected:08x}"),
                        actual = format_args!("{actual:08x}"),
                        "corrupt object (checksum mismatch): a miss, and removed"
                    );
                    corrupt.push(key);
                }
                Ok(Fetched::Absent) => {
                    missed += 1;
                    if let Some(size) = self.ledger.remove(&key) {
                        gone.push(key);
                        gone_sizes.push(size);
                    }
                }
                Err(e) => {
                    self.metrics.failed(Op::Load, e.kind(), 1);
                    tracing::warn!(error = %self.context(&e), key = %key, "load failed")
                }
            }
        }
        started.outcome(hit_keys, missed);
        self.metrics.loaded(hit_keys, hit_bytes, missed);
        self.metrics.finish(started);
        if !corrupt.is_empty() {
            self.metrics.corrupt(corrupt.len());
            self.remove_corrupt(corrupt, ctx);
        }
        if !gone.is_empty() {
            self.publish(UsageEventKind::Deleted {
                keys: gone,
                sizes: gone_sizes,
            });
        }
        hits
    }
}

impl BackendActor {
    /// Deletes corrupt objects: the unlocked ones now (through a [`Delete`] to this actor,
    /// which skips busy keys), the locked ones at their last unlock (see the module docs).
    fn remove_corrupt(&mut self, keys: Vec<ObjectKey>, ctx: &mut Context<Self>) {
        let mut now = Vec::new();
        for key in keys {
            if self.locks.contains_key(&key) {
                self.corrupt.insert(key);
            } else {
                now.push(key);
            }
        }
        if !now.is_empty() {
            ctx.address().do_send(Delete {
                keys: now,
                adapter: None,
            });
        }
    }
}

/// The reply to a load, sent once every lent buffer is home.
fn reply_when_home(hits: Bitmap, mut home: Homecoming) -> ActorResponse<BackendActor, LoadReport> {
    match home.try_collect() {
        Some(buffers) => ActorResponse::reply(LoadReport { hits, buffers }),
        None => ActorResponse::r#async(Box::pin(wrap_future::<_, BackendActor>(async move {
            LoadReport {
                hits,
                buffers: home.collect().await,
            }
        }))),
    }
}

impl Handler<Load> for BackendActor {
    type Result = ActorResponse<Self, LoadReport>;

    fn handle(&mut self, msg: Load, ctx: &mut Context<Self>) -> Self::Result {
        if msg.keys.len() != msg.buffers.len() {
            tracing::warn!(
                adapter = self.index,
                keys = msg.keys.len(),
                buffers = msg.buffers.len(),
                "load with mismatched keys and buffers: every key is a miss"
            );
            return ActorResponse::reply(LoadReport::missed(msg.keys.len(), msg.buffers));
        }
        let lens: Vec<u64> = if self.metrics.is_on() {
            msg.buffers.iter().map(|b| b.len() as u64).collect()
        } else {
            Vec::new()
        };
        let started = self.begin(Op::Load, msg.keys.len(), lens.iter().sum());
        let (lent, home) = lend(msg.buffers);
        let keys = msg.keys.clone();
        let items: Vec<(ObjectKey, LoadBuf)> = msg.keys.into_iter().zip(lent).collect();
        let (items, unnameable) = self.split_unnameable(items);
        let io = self
            .storage
            .get(items)
            .map(move |results| merge_unnameable(results, unnameable));
        match self.now_or_later(io) {
            Ok(results) => {
                reply_when_home(self.finish_load(keys, results, started, lens, ctx), home)
            }
            Err(fut) => ActorResponse::r#async(Box::pin(
                wrap_future::<_, Self>(fut)
                    .map(move |finish, act, ctx| {
                        let results = finish(act.storage_any());
                        act.finish_load(keys, results, started, lens, ctx)
                    })
                    .then(move |hits, _, _| {
                        wrap_future(async move {
                            LoadReport {
                                hits,
                                buffers: home.collect().await,
                            }
                        })
                    }),
            )),
        }
    }
}

impl Handler<Unlock> for BackendActor {
    type Result = ();

    fn handle(&mut self, msg: Unlock, ctx: &mut Context<Self>) {
        let mut corrupt = Vec::new();
        for key in &msg.keys {
            if let Some(n) = self.locks.get_mut(key) {
                *n -= 1;
                if *n == 0 {
                    self.locks.remove(key);
                    if self.corrupt.remove(key) {
                        corrupt.push(key.clone());
                    }
                }
            }
        }
        self.metrics.set_locked(self.locks.len());
        if !corrupt.is_empty() {
            self.remove_corrupt(corrupt, ctx);
        }
    }
}

impl Handler<Touch> for BackendActor {
    type Result = ();

    /// Publishes `Accessed` for the held keys; the storage is not called.
    fn handle(&mut self, msg: Touch, _: &mut Context<Self>) {
        if self.subscribers.is_empty() {
            return;
        }
        let keys: Vec<ObjectKey> = msg
            .keys
            .into_iter()
            .filter(|k| self.ledger.sizes.contains_key(k) && !self.deleting.contains(k))
            .collect();
        if !keys.is_empty() {
            self.publish(UsageEventKind::Accessed { keys });
        }
    }
}

impl Handler<Delete> for BackendActor {
    type Result = ActorResponse<Self, DeleteReport>;

    fn handle(&mut self, msg: Delete, ctx: &mut Context<Self>) -> Self::Result {
        let mut seen = KeySet::default();
        let keys: Vec<ObjectKey> = msg
            .keys
            .into_iter()
            .filter(|k| self.removable(k))
            .filter(|k| seen.insert(k.clone()))
            .collect();
        let index = self.index;
        self.start_delete(keys, ctx, move |removed| DeleteReport {
            adapters: vec![(index, removed.into_iter().map(|(k, _)| k).collect())],
        })
    }
}

impl Handler<Evict> for BackendActor {
    type Result = ActorResponse<Self, Vec<(ObjectKey, u64)>>;

    fn handle(&mut self, msg: Evict, ctx: &mut Context<Self>) -> Self::Result {
        let keys = msg.select(|k| {
            let size = *self.ledger.sizes.get(k)?;
            self.removable(k).then_some(size)
        });
        let metrics = self.metrics.clone();
        self.start_delete(keys, ctx, move |removed| {
            metrics.evicted(removed.len(), removed.iter().map(|(_, b)| b).sum());
            removed
        })
    }
}

impl Handler<GetUsage> for BackendActor {
    type Result = MessageResult<GetUsage>;

    fn handle(&mut self, _: GetUsage, _: &mut Context<Self>) -> Self::Result {
        self.refresh_salt_series();
        MessageResult(UsageReport {
            adapters: vec![self.usage()],
        })
    }
}

/// Status runs the storage's health check first ([`Storage::probe`]), so a store that cannot
/// serve (a missing bucket, refused credentials, an unreachable endpoint) is unhealthy even
/// before a data request has failed.
impl Handler<GetStatus> for BackendActor {
    type Result = ActorResponse<Self, StatusReport>;

    fn handle(&mut self, _: GetStatus, ctx: &mut Context<Self>) -> Self::Result {
        let io = self.storage.probe();
        self.respond(io, ctx, |(), act, _| {
            let reason = act.storage.unhealthy();
            StatusReport {
                adapters: vec![Status {
                    adapter: act.index,
                    kind: act.storage.kind().to_owned(),
                    is_healthy: reason.is_none() && act.storage.is_healthy(),
                    reason,
                    locked_keys: act.locks.len(),
                    details: act.storage.details(),
                }],
            }
        })
    }
}

impl Handler<ListKeys> for BackendActor {
    type Result = ActorResponse<Self, Result<KeyPage, BackendError>>;

    fn handle(&mut self, msg: ListKeys, ctx: &mut Context<Self>) -> Self::Result {
        let limit = if msg.page_size == 0 {
            DEFAULT_PAGE_SIZE
        } else {
            msg.page_size
        };
        let io = self.storage.list(msg.model, msg.cursor, limit);
        self.respond(io, ctx, |res, _, _| res)
    }
}

impl Handler<Verify> for BackendActor {
    type Result = ResponseActFuture<Self, Result<VerifyReport, BackendError>>;

    fn handle(&mut self, msg: Verify, ctx: &mut Context<Self>) -> Self::Result {
        let keys = msg.keys;
        let io = self.storage.verify(keys.clone());
        let addr = ctx.address();
        let delete = msg.delete_corrupt;
        let checked = match self.now_or_later(io) {
            Ok(v) => Box::pin(actix::fut::ready(v)) as ResponseActFuture<Self, _>,
            Err(fut) => Box::pin(
                wrap_future::<_, Self>(fut).map(|finish, act, _| finish(act.storage_any())),
            ),
        };
        Box::pin(
            checked
                .map(move |results, act: &mut Self, _| {
                    let corrupt: Vec<ObjectKey> = keys
                        .iter()
                        .zip(&results)
                        .filter(|(_, r)| matches!(r, Ok(crate::storage::Verdict::Corrupt(_))))
                        .map(|(k, _)| k.clone())
                        .collect();
                    act.metrics.corrupt(corrupt.len());
                    if delete {
                        // Locked keys go at their last unlock; lookups miss them meanwhile.
                        for k in corrupt.iter().filter(|k| act.locks.contains_key(*k)) {
                            act.corrupt.insert(k.clone());
                        }
                    }
                    (keys.into_iter().zip(results).collect::<Vec<_>>(), corrupt)
                })
                .then(move |(results, corrupt), _, _| {
                    wrap_future(async move {
                        let deleted = if delete && !corrupt.is_empty() {
                            addr.send(Delete {
                                keys: corrupt,
                                adapter: None,
                            })
                            .await
                            .map(|r| r.adapters.into_iter().flat_map(|(_, k)| k).collect())
                            .unwrap_or_default()
                        } else {
                            Vec::new()
                        };
                        Ok(VerifyReport { results, deleted })
                    })
                }),
        )
    }
}

impl Handler<SubscribeUsage> for BackendActor {
    type Result = ();

    fn handle(&mut self, msg: SubscribeUsage, _: &mut Context<Self>) {
        self.subscribers.push(msg.0);
    }
}

/// Keys the adapter's name format cannot name: kept away from the storage (see the module docs).
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
        if !self.metrics.is_on() || self.salts_shown.1 == self.ledger.seq {
            return;
        }
        self.salts_shown.1 = self.ledger.seq;
        let by_salt = self
            .ledger
            .by_salt
            .iter()
            .map(|(s, b)| (s.as_deref().unwrap_or(""), *b));
        self.metrics
            .set_salt_usage(by_salt, &mut self.salts_shown.0);
    }

    /// Sets the object name format of the storage (default: `seed`); keys it cannot name are
    /// refused before any I/O. Must match the format the storage was opened with.
    pub fn with_name_format(mut self, format: NameFormat) -> Self {
        self.format = format;
        self
    }

    /// Whether the storage can name `key` in its format.
    fn nameable(&self, key: &ObjectKey) -> bool {
        key.check_name_format(self.format).is_ok()
    }

    /// `Ok` for a key the storage can name; otherwise the per-key error of a refused store.
    fn check_nameable(&self, key: &ObjectKey) -> Result<(), String> {
        key.check_name_format(self.format)
            .map_err(|e| self.context(&BackendError::invalid(e.to_string())))
    }

    /// Splits a load's items into those the storage can name and, with their positions, the
    /// others (their lent buffers are dropped here untouched, and go home; see
    /// [`merge_unnameable`]).
    fn split_unnameable(
        &self,
        items: Vec<(ObjectKey, LoadBuf)>,
    ) -> (Vec<(ObjectKey, LoadBuf)>, Vec<Unnameable>) {
        if items.iter().all(|(k, _)| self.nameable(k)) {
            return (items, Vec::new());
        }
        let mut named = Vec::with_capacity(items.len());
        let mut refused = Vec::new();
        for (i, (key, buf)) in items.into_iter().enumerate() {
            match self.check_nameable(&key) {
                Ok(()) => named.push((key, buf)),
                Err(reason) => refused.push((i, BackendError::invalid(reason))),
            }
        }
        (named, refused)
    }
}

/// A load item kept from the storage: its position, and why.
type Unnameable = (usize, BackendError);

/// Puts the items [`BackendActor::split_unnameable`] kept from the storage back at their
/// positions, as failed reads (misses that leave the ledger alone).
fn merge_unnameable(
    mut results: Vec<Result<Fetched, BackendError>>,
    unnameable: Vec<Unnameable>,
) -> Vec<Result<Fetched, BackendError>> {
    // Ascending positions: each insert lands where the request had it.
    for (i, err) in unnameable {
        results.insert(i, Err(err));
    }
    results
}
