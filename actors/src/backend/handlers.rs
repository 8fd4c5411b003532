//! The backend actor's message handlers, and the load results they share (deletes and
//! corrupt objects are in `deletes.rs`).
//!
//! Each handler changes the actor's state only on the actor's thread: at once, or in the
//! completion closure of its storage I/O (`BackendActor::respond`). Invariants kept here
//! (see the [module docs](super) for the whole set): a lookup never locks a key being deleted,
//! marked corrupt, or whose deletion started after its probe was sent; a load's reply is sent
//! only once every lent buffer is home; events are published before the reply they belong to;
//! a delete or an eviction removes only keys that are nameable, unlocked, not busy and with no
//! store waiting (`BackendActor::removable`).

use actix::fut::wrap_future;
use actix::prelude::*;

use super::naming::merge_unnameable;
use super::write_queue::StoreBatch;
use super::{BackendActor, DEFAULT_PAGE_SIZE};
use crate::buffer::{lend, Homecoming, LoadBuf};
use crate::fleet::{FleetLock, FleetLockNames};
use crate::key::{KeySet, ObjectKey};
use crate::messages::*;
use crate::metrics::{Op, Started};
use crate::storage::{BackendError, ErrorKind, Fetched, IoState};

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
        let id = self.writes.next_id();
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
            // Items behind a delete or store in flight (or an earlier item of this batch) wait.
            let deleting = self.deleting.contains(&key);
            now.extend(self.writes.admit(id, key, obj, deleting));
        }
        self.writes.insert_batch(
            id,
            StoreBatch {
                outcome,
                left: written.len(),
                started,
                reply: None,
            },
        );
        self.put_items(now, ctx);
        if self.writes.batch_mut(id).is_some_and(|b| b.left == 0) {
            let batch = self.writes.take_batch(id).expect("checked above");
            return ActorResponse::reply(self.end_store(batch.started, batch.outcome));
        }
        let (tx, rx) = tokio::sync::oneshot::channel();
        if let Some(batch) = self.writes.batch_mut(id) {
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
        let Some(index) = self.fleet_index() else {
            return match self.lookup(msg.keys, None) {
                Err(hits) => ActorResponse::reply(hits),
                Ok((io, done)) => self.respond(io, ctx, done),
            };
        };
        // Fleet mode: lock in the index first (see fleet.rs), then probe what it does not know.
        let names = self.fleet_names(&msg.keys);
        ActorResponse::r#async(Box::pin(
            wrap_future::<_, Self>(index.send(FleetLockNames(names))).then(move |res, act, ctx| {
                let answers = match res {
                    Ok(Ok(a)) if a.len() == msg.keys.len() => Some(a),
                    _ => None,
                };
                let locked: Vec<bool> = match &answers {
                    Some(a) => a.iter().map(|l| *l != FleetLock::Deleting).collect(),
                    None => vec![false; msg.keys.len()],
                };
                let keys = msg.keys.clone();
                let fut: ResponseActFuture<Self, Bitmap> = match act.lookup(msg.keys, answers) {
                    Err(hits) => Box::pin(actix::fut::ready(hits)),
                    Ok((io, done)) => act.respond_later(io, ctx, done),
                };
                Box::pin(fut.map(move |hits, act: &mut Self, _| {
                    act.fleet_after_lookup(&keys, &locked, &hits);
                    hits
                }))
            }),
        ))
    }
}

/// The probe results of a lookup, applied by [`BackendActor::lookup`]'s step.
type Probed = Vec<Result<Option<u64>, BackendError>>;

impl BackendActor {
    /// A lookup's probe and the step that applies its results (or, `Err`, the answer at once).
    /// `fleet`: the index's answer per key (fleet mode): a key being deleted is skipped, and
    /// the size the index knows replaces the local ledger's (another node may have removed an
    /// object this ledger still holds; the index's lock makes its size safe to trust).
    #[allow(clippy::type_complexity)]
    fn lookup(
        &mut self,
        msg_keys: Vec<ObjectKey>,
        fleet: Option<Vec<FleetLock>>,
    ) -> Result<
        (
            crate::storage::Io<Probed>,
            impl FnOnce(Probed, &mut Self, &mut Context<Self>) -> Bitmap + 'static,
        ),
        Bitmap,
    > {
        let n = msg_keys.len();
        let started = self.begin(Op::Lookup, n, 0);
        let mut keys = Vec::with_capacity(n);
        let mut known = Vec::with_capacity(n);
        let mut probe_at = Vec::with_capacity(n);
        for (i, key) in msg_keys.into_iter().enumerate() {
            if self.deleting.contains(&key) || self.corrupt.contains(&key) || !self.nameable(&key) {
                continue;
            }
            let size = match fleet.as_ref().map(|f| f[i]) {
                Some(FleetLock::Deleting) => continue,
                Some(FleetLock::Known(size)) => Some(size),
                Some(FleetLock::Unknown) => None,
                None => self.ledger.get(&key),
            };
            known.push(size);
            keys.push(key);
            probe_at.push(i);
        }
        if keys.is_empty() {
            self.metrics.finish(started);
            return Err(Bitmap::zeros(n));
        }
        let in_fleet = fleet.is_some();
        let io = self.storage.head(&keys, &known);
        let immediate = !matches!(io.0, IoState::Pending(_));
        let since = self.probes.start();
        Ok((
            io,
            move |results: Probed, act: &mut Self, ctx: &mut Context<Self>| {
                let mut hits = Bitmap::zeros(n);
                let mut found = Vec::new();
                let mut found_sizes = Vec::new();
                let mut accessed = Vec::new();
                let mut probed_in = (Vec::new(), Vec::new());
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
                            if in_fleet && ledger_size.is_none() {
                                // Found in the store, unknown to the index: the index learns it.
                                probed_in.0.push(key.clone());
                                probed_in.1.push(size);
                            }
                            // A size the ledger has needs no update (nor a change count). Answered
                            // at once, the ledger cannot have changed since it was read. A probe
                            // that raced a write of the key leaves the ledger to the write.
                            let unchanged = ledger_size == Some(size)
                                && (immediate || act.ledger.get(&key) == Some(size));
                            let raced =
                                act.writes.writing(&key) || act.probes.written_since(&key, since);
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
                if !probed_in.0.is_empty() {
                    act.fleet_found(&probed_in.0, &probed_in.1, ctx);
                }
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
            },
        ))
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
                let (hits, misses) = self.finish_load(keys, results, started, lens, ctx);
                reply_when_home(hits, misses, home)
            }
            Err(fut) => ActorResponse::r#async(Box::pin(
                wrap_future::<_, Self>(fut)
                    .map(move |finish, act, ctx| {
                        let results = finish(act.storage_any());
                        act.finish_load(keys, results, started, lens, ctx)
                    })
                    .then(move |(hits, misses), _, _| {
                        wrap_future(
                            async move { LoadReport::new(hits, home.collect().await, misses) },
                        )
                    }),
            )),
        }
    }
}
impl Handler<Unlock> for BackendActor {
    type Result = ();

    fn handle(&mut self, msg: Unlock, ctx: &mut Context<Self>) {
        self.fleet_unlock(&msg.keys);
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

    /// Publishes `Accessed` for the held keys; the storage is not called. With a fleet, the
    /// keys' fleet recency is refreshed in the index.
    fn handle(&mut self, msg: Touch, _: &mut Context<Self>) {
        if let Some(index) = self.fleet_index() {
            index.do_send(crate::fleet::FleetTouch(self.fleet_names(&msg.keys)));
        }
        if self.subscribers.is_empty() {
            return;
        }
        let keys: Vec<ObjectKey> = msg
            .keys
            .into_iter()
            .filter(|k| self.ledger.contains(k) && !self.deleting.contains(k))
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
        self.start_delete(keys, DeleteCause::Deleted, ctx, move |removed| {
            DeleteReport {
                adapters: vec![(index, removed.into_iter().map(|(k, _)| k).collect())],
            }
        })
    }
}

/// The same as [`Delete`], for keys found corrupt (their event says so).
impl Handler<RemoveCorrupt> for BackendActor {
    type Result = ActorResponse<Self, DeleteReport>;

    fn handle(&mut self, msg: RemoveCorrupt, ctx: &mut Context<Self>) -> Self::Result {
        let mut seen = KeySet::default();
        let keys: Vec<ObjectKey> = msg
            .keys
            .into_iter()
            .filter(|k| self.removable(k))
            .filter(|k| seen.insert(k.clone()))
            .collect();
        let index = self.index;
        self.start_delete(keys, DeleteCause::Corrupt, ctx, move |removed| {
            DeleteReport {
                adapters: vec![(index, removed.into_iter().map(|(k, _)| k).collect())],
            }
        })
    }
}
impl Handler<Evict> for BackendActor {
    type Result = ActorResponse<Self, Vec<(ObjectKey, u64)>>;

    fn handle(&mut self, msg: Evict, ctx: &mut Context<Self>) -> Self::Result {
        let keys = msg.select(|k| {
            let size = self.ledger.get(k)?;
            self.removable(k).then_some(size)
        });
        let metrics = self.metrics.clone();
        self.start_delete(keys, DeleteCause::Evicted, ctx, move |removed| {
            metrics.evicted(removed.len(), removed.iter().map(|(_, b)| b).sum());
            removed
        })
    }
}
impl Handler<GetUsage> for BackendActor {
    type Result = ActorResponse<Self, UsageReport>;

    /// Without a fleet, the ledger's usage. With one, the fleet's, read from the index (the
    /// node's own in `node_used_bytes`); the ledger's while the index does not answer.
    fn handle(&mut self, _: GetUsage, _: &mut Context<Self>) -> Self::Result {
        self.refresh_salt_series();
        let local = self.ledger.usage(self.index, self.capacity_bytes);
        let Some(index) = self.fleet_index() else {
            return ActorResponse::reply(UsageReport {
                adapters: vec![local],
            });
        };
        ActorResponse::r#async(Box::pin(
            wrap_future::<_, Self>(index.send(crate::fleet::GetFleetUsage)).map(
                move |res, act, ctx| {
                    let Ok(Ok(fleet)) = res else {
                        return UsageReport {
                            adapters: vec![local],
                        };
                    };
                    let capacity = local.capacity_bytes;
                    let usage = Usage {
                        used_bytes: fleet.bytes,
                        fraction: if capacity == 0 {
                            -1.0
                        } else {
                            fleet.bytes as f64 / capacity as f64
                        },
                        keys: fleet.objects as usize,
                        bytes_by_cache_salt: fleet.by_salt.clone(),
                        node_used_bytes: Some(local.used_bytes),
                        ..local
                    };
                    act.fleet_usage(fleet, ctx);
                    UsageReport {
                        adapters: vec![usage],
                    }
                },
            ),
        ))
    }
}
/// Status runs the storage's health check first ([`Storage::probe`](crate::storage::Storage::probe)), so a store that cannot
/// serve (a missing bucket, refused credentials, an unreachable endpoint) is unhealthy even
/// before a data request has failed. With a fleet, it also says how the node stands in the
/// index.
impl Handler<GetStatus> for BackendActor {
    type Result = ActorResponse<Self, StatusReport>;

    fn handle(&mut self, _: GetStatus, ctx: &mut Context<Self>) -> Self::Result {
        let io = self.storage.probe();
        let checked = self.respond_later(io, ctx, |(), act, _| {
            let reason = act.storage.unhealthy();
            Status {
                adapter: act.index,
                kind: act.storage.kind().to_owned(),
                is_healthy: reason.is_none() && act.storage.is_healthy(),
                reason,
                locked_keys: act.locks.len(),
                details: act.storage.details(),
                fleet: None,
            }
        });
        ActorResponse::r#async(Box::pin(checked.then(|mut status, act: &mut Self, _| {
            act.fleet_status().map(move |fleet, _, _| {
                status.fleet = fleet;
                StatusReport {
                    adapters: vec![status],
                }
            })
        })))
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
                            addr.send(RemoveCorrupt { keys: corrupt })
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

impl BackendActor {
    /// Applies a load's results: hits, and keys found absent (removed behind our back) leave
    /// the ledger.
    pub(super) fn finish_load(
        &mut self,
        keys: Vec<ObjectKey>,
        results: Vec<Result<Fetched, BackendError>>,
        started: Started,
        lens: Vec<u64>,
        ctx: &mut Context<Self>,
    ) -> (Bitmap, Vec<(usize, MissReason)>) {
        let mut hits = Bitmap::zeros(keys.len());
        let mut misses = Vec::new();
        let mut corrupt = Vec::new();
        let mut gone = Vec::new();
        let mut gone_sizes = Vec::new();
        let mut vanished = Vec::new();
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
                    misses.push((i, MissReason::WrongSize { actual }));
                    tracing::debug!(adapter = self.index, key = %key, actual, "load size mismatch: miss")
                }
                Ok(Fetched::Corrupt { expected, actual }) => {
                    missed += 1;
                    misses.push((i, MissReason::Corrupt));
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
                    misses.push((i, MissReason::Absent));
                    if self.fleet.is_some() {
                        vanished.push(key.clone());
                    }
                    if let Some(size) = self.ledger.remove(&key) {
                        gone.push(key);
                        gone_sizes.push(size);
                    }
                }
                Err(e) => {
                    misses.push((i, MissReason::Failed(e.kind())));
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
        if !vanished.is_empty() {
            self.fleet_vanished(&vanished);
        }
        if !gone.is_empty() {
            self.publish(UsageEventKind::Deleted {
                keys: gone,
                sizes: gone_sizes,
                cause: DeleteCause::Vanished,
            });
        }
        (hits, misses)
    }
}

/// The reply to a load, sent once every lent buffer is home.
fn reply_when_home(
    hits: Bitmap,
    misses: Vec<(usize, MissReason)>,
    mut home: Homecoming,
) -> ActorResponse<BackendActor, LoadReport> {
    match home.try_collect() {
        Some(buffers) => ActorResponse::reply(LoadReport::new(hits, buffers, misses)),
        None => ActorResponse::r#async(Box::pin(wrap_future::<_, BackendActor>(async move {
            LoadReport::new(hits, home.collect().await, misses)
        }))),
    }
}
