//! The backend actor: one per configured adapter, generic over its [`Storage`].
//!
//! It owns everything the semantics define, so every backend behaves the same way:
//! lock reference counts, the usage ledger (total and per cache salt), the set of keys being
//! deleted (a lookup never locks a key whose deletion is under way, and a store to it is refused
//! until the deletion ends), the keys being stored (a delete or an eviction skips them until the
//! write ends, so the two never race at the store and the ledger always follows the last
//! operation that reached it), and the usage events it publishes. Storage I/O runs concurrently;
//! its results are applied to the actor's state in the completion closure, on the actor's own
//! thread, so no lock is ever needed.
//!
//! Keys the adapter's name format cannot name (a non-zero `object_group_id` in the `seed`
//! format, see [`ObjectKey::check_name_format`]) never reach the storage: a store fails for
//! that key, a lookup and a load miss (the buffer comes back untouched), a delete skips it.

use std::collections::{BTreeMap, HashMap};

use crate::key::{KeyMap, KeySet};
use std::sync::Arc;

use actix::fut::wrap_future;
use actix::prelude::*;
use bytes::BytesMut;

use crate::key::{NameFormat, ObjectKey};
use crate::messages::*;
use crate::storage::{BackendError, Fetched, Io, Observed, Removed, Storage};

/// Default page size for [`ListKeys`].
pub const DEFAULT_PAGE_SIZE: usize = 500;

/// Bytes accounted per key, in total and per cache salt.
#[derive(Debug, Default)]
struct Ledger {
    sizes: KeyMap<u64>,
    used: u64,
    by_salt: HashMap<Option<Arc<str>>, u64>,
}

impl Ledger {
    /// Records a key; returns true when it was new. A changed size moves usage by the difference.
    fn insert(&mut self, key: &ObjectKey, size: u64) -> bool {
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
pub struct BackendActor<S: Storage> {
    index: AdapterIndex,
    storage: S,
    capacity_bytes: u64,
    locks: KeyMap<u32>,
    ledger: Ledger,
    deleting: KeySet,
    /// Keys with a write in flight, and how many.
    storing: KeyMap<u32>,
    subscribers: Vec<Recipient<UsageEvent>>,
    /// The storage's object name format (see [`BackendActor::with_name_format`]).
    format: NameFormat,
}

impl<S: Storage> BackendActor<S> {
    /// A backend actor for adapter `index` with `capacity_bytes` (0: usage-driven eviction off),
    /// publishing usage events to `subscribers`.
    pub fn new(
        index: AdapterIndex,
        storage: S,
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
            storing: KeyMap::default(),
            subscribers,
            format: NameFormat::default(),
        }
    }

    fn context(&self, err: &BackendError) -> String {
        format!("adapter #{} ({}): {err}", self.index, self.storage.kind())
    }

    fn publish(&self, kind: UsageEventKind) {
        if self.subscribers.is_empty() {
            return;
        }
        let event = UsageEvent {
            adapter: self.index,
            kind,
        };
        for s in &self.subscribers {
            s.do_send(event.clone());
        }
    }

    /// Runs `done` on the storage result now, or on the actor when it arrives.
    fn respond<T: 'static, R: 'static>(
        &mut self,
        io: Io<T>,
        done: impl FnOnce(T, &mut Self) -> R + 'static,
    ) -> ActorResponse<Self, R> {
        match io {
            Io::Ready(v) => ActorResponse::reply(done(v, self)),
            Io::Pending(fut) => ActorResponse::r#async(Box::pin(
                wrap_future::<_, Self>(fut).map(move |v, act, _| done(v, act)),
            )),
        }
    }

    /// Tells the storage how an operation went, for its circuit breaker.
    fn observe_health<'a, T: 'a>(
        &mut self,
        results: impl IntoIterator<Item = &'a Result<T, BackendError>>,
    ) {
        let (mut ok, mut connection_failures, mut refused) = (0, 0, 0);
        for r in results {
            match r {
                Ok(_) => ok += 1,
                Err(BackendError::Connection { .. }) => connection_failures += 1,
                Err(BackendError::Unavailable { .. }) => refused += 1,
                Err(_) => {}
            }
        }
        self.storage.observe(Observed::Health {
            ok,
            connection_failures,
            refused,
        });
    }

    /// Whether a delete or an eviction may remove `key` now: nameable, not locked, not already
    /// being deleted, and not being written (a delete racing a write could land before or after
    /// it at the store, while the ledger would follow whichever reply came last).
    fn removable(&self, key: &ObjectKey) -> bool {
        self.nameable(key)
            && !self.locks.contains_key(key)
            && !self.deleting.contains(key)
            && !self.storing.contains_key(key)
    }

    fn lock(&mut self, key: &ObjectKey) {
        match self.locks.get_mut(key) {
            Some(n) => *n += 1,
            None => {
                self.locks.insert(key.clone(), 1);
            }
        }
    }

    fn finish_store(
        &mut self,
        keys: Vec<ObjectKey>,
        sizes: Vec<u64>,
        results: Vec<Result<(), BackendError>>,
        mut outcome: StoreOutcome,
    ) -> StoreOutcome {
        self.observe_health(&results);
        for key in &keys {
            if let Some(n) = self.storing.get_mut(key) {
                *n -= 1;
                if *n == 0 {
                    self.storing.remove(key);
                }
            }
        }
        let mut ok_keys = Vec::with_capacity(keys.len());
        let mut ok_sizes = Vec::with_capacity(keys.len());
        for ((key, size), res) in keys.into_iter().zip(sizes).zip(results) {
            match res {
                Ok(()) => {
                    if self.ledger.insert(&key, size) {
                        outcome.new_bytes += size;
                    }
                    outcome.stored += 1;
                    ok_keys.push(key);
                    ok_sizes.push(size);
                }
                Err(e) => {
                    let error = self.context(&e);
                    tracing::warn!(%error, key = %key, "store failed");
                    outcome.failed.push(FailedKey { key, error });
                }
            }
        }
        if !ok_keys.is_empty() {
            self.storage.observe(Observed::Stored(&ok_keys, &ok_sizes));
            self.publish(UsageEventKind::Stored {
                keys: ok_keys,
                sizes: ok_sizes,
            });
        }
        outcome
    }

    /// Marks `keys` as being deleted, removes them, and replies with the keys removed.
    fn start_delete<R: 'static>(
        &mut self,
        keys: Vec<ObjectKey>,
        reply: impl FnOnce(Vec<ObjectKey>) -> R + 'static,
    ) -> ActorResponse<Self, R> {
        if keys.is_empty() {
            return ActorResponse::reply(reply(Vec::new()));
        }
        for k in &keys {
            self.deleting.insert(k.clone());
        }
        let io = self.storage.remove(keys.clone());
        self.respond(io, move |results, act| {
            reply(act.finish_delete(keys, results))
        })
    }

    fn finish_delete(
        &mut self,
        keys: Vec<ObjectKey>,
        results: Vec<Result<Removed, BackendError>>,
    ) -> Vec<ObjectKey> {
        self.observe_health(&results);
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
                    tracing::warn!(error = %self.context(&e), key = %key, "delete failed");
                    continue;
                }
            };
            if let Some(size) = self.ledger.remove(&key) {
                gone.push(key.clone());
                gone_sizes.push(size);
            }
            if ours {
                removed.push(key);
            }
        }
        if !gone.is_empty() {
            self.storage.observe(Observed::Removed(&gone));
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

impl<S: Storage + Send> BackendActor<S> {
    /// Starts the actor on an arbiter (thread) of its own, so a slow store never delays another.
    /// The caller keeps the arbiter and stops it at shutdown.
    pub fn spawn(self) -> (Arbiter, Addr<Self>) {
        let arbiter = Arbiter::new();
        let addr = Self::start_in_arbiter(&arbiter.handle(), move |_| self);
        (arbiter, addr)
    }
}

impl<S: Storage> Actor for BackendActor<S> {
    type Context = Context<Self>;

    fn started(&mut self, ctx: &mut Context<Self>) {
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
        match io {
            Io::Ready(v) => apply(v, self),
            // Hold the mailbox until the index is rebuilt, so no request sees a partial ledger.
            Io::Pending(fut) => {
                ctx.wait(wrap_future::<_, Self>(fut).map(move |v, act, _| apply(v, act)))
            }
        }
    }

    fn stopped(&mut self, _: &mut Context<Self>) {
        self.storage.close();
    }
}

impl<S: Storage> Handler<Store> for BackendActor<S> {
    type Result = ActorResponse<Self, StoreReport>;

    fn handle(&mut self, msg: Store, _: &mut Context<Self>) -> Self::Result {
        let mut outcome = StoreOutcome::default();
        if msg.keys.len() != msg.objects.len() {
            let error = self.context(&BackendError::Invalid {
                reason: format!("{} keys but {} objects", msg.keys.len(), msg.objects.len()),
            });
            outcome.failed = msg
                .keys
                .into_iter()
                .map(|key| FailedKey {
                    key,
                    error: error.clone(),
                })
                .collect();
            return ActorResponse::reply(StoreReport {
                adapters: vec![(self.index, outcome)],
            });
        }
        let mut items = Vec::with_capacity(msg.keys.len());
        let mut keys = Vec::with_capacity(msg.keys.len());
        let mut sizes = Vec::with_capacity(msg.keys.len());
        for (key, obj) in msg.keys.into_iter().zip(msg.objects) {
            if let Err(e) = self.check_nameable(&key) {
                outcome.failed.push(FailedKey { key, error: e });
                continue;
            }
            let reject = if obj.is_empty() {
                Some("empty object (chunks must be full)")
            } else if self.deleting.contains(&key) {
                Some("key is being deleted; store it again later")
            } else {
                None
            };
            if let Some(reason) = reject {
                let error = self.context(&BackendError::Invalid {
                    reason: reason.into(),
                });
                outcome.failed.push(FailedKey { key, error });
                continue;
            }
            keys.push(key.clone());
            sizes.push(obj.len() as u64);
            items.push((key, obj));
        }
        if items.is_empty() {
            return ActorResponse::reply(StoreReport {
                adapters: vec![(self.index, outcome)],
            });
        }
        for key in &keys {
            *self.storing.entry(key.clone()).or_default() += 1;
        }
        let io = self.storage.put(items);
        self.respond(io, move |results, act| StoreReport {
            adapters: vec![(act.index, act.finish_store(keys, sizes, results, outcome))],
        })
    }
}

impl<S: Storage> Handler<LookupAndLock> for BackendActor<S> {
    type Result = ActorResponse<Self, Bitmap>;

    fn handle(&mut self, msg: LookupAndLock, _: &mut Context<Self>) -> Self::Result {
        let mut hits = Bitmap::zeros(msg.keys.len());
        let mut accessed = Vec::new();
        let mut probe = Vec::new();
        let mut probe_at = Vec::new();
        let trust = self.storage.lookups_trust_ledger();
        for (i, key) in msg.keys.iter().enumerate() {
            if self.deleting.contains(key) || !self.nameable(key) {
                continue;
            }
            if trust && self.ledger.sizes.get(key).is_some_and(|s| *s > 0) {
                hits.set(i, true);
                self.lock(key);
                if !self.subscribers.is_empty() {
                    accessed.push(key.clone());
                }
            } else {
                probe.push(key.clone());
                probe_at.push(i);
            }
        }
        if probe.is_empty() {
            if !accessed.is_empty() {
                self.publish(UsageEventKind::Accessed { keys: accessed });
            }
            return ActorResponse::reply(hits);
        }
        let io = self.storage.head(probe.clone());
        self.respond(io, move |results, act| {
            act.observe_health(&results);
            let mut found = Vec::new();
            let mut found_sizes = Vec::new();
            let mut probed = Vec::with_capacity(probe.len());
            for ((key, i), res) in probe.iter().zip(probe_at).zip(results) {
                let size = match res {
                    Ok(s) => s,
                    Err(e) => {
                        tracing::debug!(error = %act.context(&e), key = %key, "lookup probe failed");
                        probed.push(None);
                        continue;
                    }
                };
                probed.push(size);
                match size {
                    Some(size) if size > 0 && !act.deleting.contains(key) => {
                        hits.set(i, true);
                        act.lock(key);
                        if act.ledger.insert(key, size) {
                            found.push(key.clone());
                            found_sizes.push(size);
                        }
                        accessed.push(key.clone());
                    }
                    _ => {}
                }
            }
            act.storage.observe(Observed::Probed(&probe, &probed));
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

impl<S: Storage> Handler<Load> for BackendActor<S> {
    type Result = ActorResponse<Self, LoadReport>;

    fn handle(&mut self, msg: Load, _: &mut Context<Self>) -> Self::Result {
        if msg.keys.len() != msg.buffers.len() {
            tracing::warn!(
                adapter = self.index,
                keys = msg.keys.len(),
                buffers = msg.buffers.len(),
                "load with mismatched keys and buffers: every key is a miss"
            );
            return ActorResponse::reply(LoadReport {
                hits: Bitmap::zeros(msg.keys.len()),
                buffers: msg.buffers,
            });
        }
        let keys = msg.keys.clone();
        let items: Vec<(ObjectKey, BytesMut)> = msg.keys.into_iter().zip(msg.buffers).collect();
        let (items, unnameable) = self.split_unnameable(items);
        let io = self.storage.get(items);
        self.respond(io, move |results, act| {
            let results = merge_unnameable(results, unnameable);
            act.observe_health(results.iter().map(|(_, r)| r));
            let mut hits = Bitmap::zeros(keys.len());
            let mut buffers = Vec::with_capacity(keys.len());
            let mut gone = Vec::new();
            let mut gone_sizes = Vec::new();
            for (i, (key, (buf, res))) in keys.into_iter().zip(results).enumerate() {
                buffers.push(buf);
                match res {
                    Ok(Fetched::Hit) => hits.set(i, true),
                    Ok(Fetched::SizeMismatch { actual }) => {
                        tracing::debug!(adapter = act.index, key = %key, actual, "load size mismatch: miss")
                    }
                    Ok(Fetched::Absent) => {
                        // Removed behind our back: stop accounting for it.
                        if let Some(size) = act.ledger.remove(&key) {
                            gone.push(key);
                            gone_sizes.push(size);
                        }
                    }
                    Err(e) => tracing::warn!(error = %act.context(&e), key = %key, "load failed"),
                }
            }
            if !gone.is_empty() {
                act.storage.observe(Observed::Removed(&gone));
                act.publish(UsageEventKind::Deleted {
                    keys: gone,
                    sizes: gone_sizes,
                });
            }
            LoadReport { hits, buffers }
        })
    }
}

impl<S: Storage> Handler<Unlock> for BackendActor<S> {
    type Result = ();

    fn handle(&mut self, msg: Unlock, _: &mut Context<Self>) {
        for key in &msg.keys {
            if let Some(n) = self.locks.get_mut(key) {
                *n -= 1;
                if *n == 0 {
                    self.locks.remove(key);
                }
            }
        }
    }
}

impl<S: Storage> Handler<Delete> for BackendActor<S> {
    type Result = ActorResponse<Self, DeleteReport>;

    fn handle(&mut self, msg: Delete, _: &mut Context<Self>) -> Self::Result {
        let mut seen = KeySet::default();
        let keys: Vec<ObjectKey> = msg
            .keys
            .into_iter()
            .filter(|k| self.removable(k))
            .filter(|k| seen.insert(k.clone()))
            .collect();
        let index = self.index;
        self.start_delete(keys, move |removed| DeleteReport {
            adapters: vec![(index, removed)],
        })
    }
}

impl<S: Storage> Handler<Evict> for BackendActor<S> {
    type Result = ActorResponse<Self, Vec<ObjectKey>>;

    fn handle(&mut self, msg: Evict, _: &mut Context<Self>) -> Self::Result {
        let mut seen = KeySet::default();
        let keys: Vec<ObjectKey> = msg
            .candidates
            .into_iter()
            .filter(|k| self.removable(k))
            .filter(|k| seen.insert(k.clone()))
            .take(msg.count)
            .collect();
        self.start_delete(keys, |removed| removed)
    }
}

impl<S: Storage> Handler<GetUsage> for BackendActor<S> {
    type Result = MessageResult<GetUsage>;

    fn handle(&mut self, _: GetUsage, _: &mut Context<Self>) -> Self::Result {
        MessageResult(UsageReport {
            adapters: vec![self.usage()],
        })
    }
}

impl<S: Storage> Handler<GetStatus> for BackendActor<S> {
    type Result = MessageResult<GetStatus>;

    fn handle(&mut self, _: GetStatus, _: &mut Context<Self>) -> Self::Result {
        MessageResult(StatusReport {
            adapters: vec![Status {
                adapter: self.index,
                kind: self.storage.kind().to_owned(),
                is_healthy: self.storage.is_healthy(),
                locked_keys: self.locks.len(),
                details: self.storage.details(),
            }],
        })
    }
}

impl<S: Storage> Handler<ListKeys> for BackendActor<S> {
    type Result = ActorResponse<Self, Result<KeyPage, BackendError>>;

    fn handle(&mut self, msg: ListKeys, _: &mut Context<Self>) -> Self::Result {
        let limit = if msg.page_size == 0 {
            DEFAULT_PAGE_SIZE
        } else {
            msg.page_size
        };
        let io = self.storage.list(msg.model, msg.cursor, limit);
        self.respond(io, |res, act| {
            act.observe_health(std::iter::once(&res));
            res
        })
    }
}

impl<S: Storage> Handler<SubscribeUsage> for BackendActor<S> {
    type Result = ();

    fn handle(&mut self, msg: SubscribeUsage, _: &mut Context<Self>) {
        self.subscribers.push(msg.0);
    }
}

/// Keys the adapter's name format cannot name: kept away from the storage (see the module docs).
impl<S: Storage> BackendActor<S> {
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
        key.check_name_format(self.format).map_err(|e| {
            self.context(&BackendError::Invalid {
                reason: e.to_string(),
            })
        })
    }

    /// Splits a load's items into those the storage can name and, with their positions, the
    /// others (whose buffers go back untouched as misses, see [`merge_unnameable`]).
    fn split_unnameable(
        &self,
        items: Vec<(ObjectKey, BytesMut)>,
    ) -> (Vec<(ObjectKey, BytesMut)>, Vec<Unnameable>) {
        if items.iter().all(|(k, _)| self.nameable(k)) {
            return (items, Vec::new());
        }
        let mut named = Vec::with_capacity(items.len());
        let mut refused = Vec::new();
        for (i, (key, buf)) in items.into_iter().enumerate() {
            match self.check_nameable(&key) {
                Ok(()) => named.push((key, buf)),
                Err(reason) => refused.push((i, buf, BackendError::Invalid { reason })),
            }
        }
        (named, refused)
    }
}

/// A load item kept from the storage: its position, its untouched buffer, and why.
type Unnameable = (usize, BytesMut, BackendError);

/// Puts the items [`BackendActor::split_unnameable`] kept from the storage back at their
/// positions, as failed reads (misses that leave the ledger alone).
fn merge_unnameable(
    mut results: Vec<(BytesMut, Result<Fetched, BackendError>)>,
    unnameable: Vec<Unnameable>,
) -> Vec<(BytesMut, Result<Fetched, BackendError>)> {
    // Ascending positions: each insert lands where the request had it.
    for (i, buf, err) in unnameable {
        results.insert(i, (buf, Err(err)));
    }
    results
}
