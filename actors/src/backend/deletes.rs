//! The backend actor's deletes: a host's delete and an eviction go through
//! [`BackendActor::start_delete`], a fleet round's claimed keys through `delete_claimed`, both
//! end in `finish_delete`; corrupt objects are deleted at once when unlocked (a message to this
//! actor) or at their last unlock.
//!
//! Invariants: only keys that are nameable, unlocked, not busy and with no store waiting are
//! removed (`BackendActor::removable`); a key is marked deleting before its removal is sent, so
//! no lookup locks it meanwhile; once the storage has answered, the stores waiting for the
//! keys start.

use actix::prelude::*;

use super::BackendActor;
use crate::key::{KeyMap, ObjectKey};
use crate::messages::*;
use crate::metrics::Op;
use crate::storage::{BackendError, Removed};

impl BackendActor {
    /// Marks `keys` as being deleted, removes them, and replies with the keys removed.
    /// Once the storage has answered, the stores waiting for these keys start.
    pub(super) fn start_delete<R: 'static>(
        &mut self,
        keys: Vec<ObjectKey>,
        cause: DeleteCause,
        ctx: &mut Context<Self>,
        reply: impl FnOnce(Vec<(ObjectKey, u64)>) -> R + 'static,
    ) -> ActorResponse<Self, R> {
        if keys.is_empty() {
            return ActorResponse::reply(reply(Vec::new()));
        }
        let Some(index) = self.fleet_index() else {
            return self.delete_claimed(keys, KeyMap::default(), cause, ctx, reply);
        };
        for k in &keys {
            self.deleting.insert(k.clone());
        }
        self.probes.deleting(keys.iter());
        // Fleet mode: only the keys the index lets this node delete (see fleet.rs).
        ActorResponse::r#async(self.fleet_claim(index, keys, move |go, refused, act, ctx| {
            for k in &refused {
                act.deleting.remove(k);
            }
            act.start_waiting(refused, ctx);
            if go.is_empty() {
                return Box::pin(actix::fut::ready(reply(Vec::new())));
            }
            let (io, done) = act.remove_keys(go, KeyMap::default(), cause, reply);
            act.respond_later(io, ctx, done)
        }))
    }

    /// Marks `keys` as being deleted and removes them, with no claim (without a fleet, or keys
    /// a fleet round has claimed already). `index_sizes`: sizes the fleet index gave for keys
    /// it knew, so that an object this node did not store counts as removed with its size when
    /// the store cannot say whether it existed.
    pub(super) fn delete_claimed<R: 'static>(
        &mut self,
        keys: Vec<ObjectKey>,
        index_sizes: KeyMap<u64>,
        cause: DeleteCause,
        ctx: &mut Context<Self>,
        reply: impl FnOnce(Vec<(ObjectKey, u64)>) -> R + 'static,
    ) -> ActorResponse<Self, R> {
        for k in &keys {
            self.deleting.insert(k.clone());
        }
        self.probes.deleting(keys.iter());
        let (io, done) = self.remove_keys(keys, index_sizes, cause, reply);
        self.respond(io, ctx, done)
    }

    /// Removes `keys` (already marked as being deleted) from the storage; the step applies the
    /// results, releases fleet claims, and starts the stores waiting for these keys.
    #[allow(clippy::type_complexity)]
    fn remove_keys<R: 'static>(
        &mut self,
        keys: Vec<ObjectKey>,
        index_sizes: KeyMap<u64>,
        cause: DeleteCause,
        reply: impl FnOnce(Vec<(ObjectKey, u64)>) -> R + 'static,
    ) -> (
        crate::storage::Io<Vec<Result<Removed, BackendError>>>,
        impl FnOnce(Vec<Result<Removed, BackendError>>, &mut Self, &mut Context<Self>) -> R + 'static,
    ) {
        let started = self.begin(Op::Delete, keys.len(), 0);
        let io = self.storage.remove(keys.clone());
        (
            io,
            move |results: Vec<Result<Removed, BackendError>>,
                  act: &mut Self,
                  ctx: &mut Context<Self>| {
                if act.fleet.is_some() {
                    let (gone, kept): (Vec<_>, Vec<_>) =
                        keys.iter().zip(&results).partition(|(_, r)| r.is_ok());
                    let gone = gone.into_iter().map(|(k, _)| k.clone()).collect();
                    let kept = kept.into_iter().map(|(k, _)| k.clone()).collect();
                    act.fleet_release(gone, kept, cause, ctx);
                }
                let removed = act.finish_delete(keys.clone(), results, &index_sizes, cause);
                started.outcome(removed.len(), 0);
                act.metrics.deleted(removed.len());
                act.metrics.finish(started);
                act.start_waiting(keys, ctx);
                reply(removed)
            },
        )
    }

    pub(super) fn finish_delete(
        &mut self,
        keys: Vec<ObjectKey>,
        results: Vec<Result<Removed, BackendError>>,
        index_sizes: &KeyMap<u64>,
        cause: DeleteCause,
    ) -> Vec<(ObjectKey, u64)> {
        let mut removed = Vec::new();
        let mut gone = Vec::new();
        let mut gone_sizes = Vec::new();
        for (key, res) in keys.into_iter().zip(results) {
            self.deleting.remove(&key);
            let indexed = index_sizes.get(&key).copied();
            let known = self.ledger.contains(&key) || indexed.is_some();
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
                removed.push((key, size.or(indexed).unwrap_or(0)));
            }
        }
        if !gone.is_empty() {
            self.publish(UsageEventKind::Deleted {
                keys: gone,
                sizes: gone_sizes,
                cause,
            });
        }
        removed
    }

    /// Deletes corrupt objects: the unlocked ones now (through a [`Delete`] to this actor,
    /// which skips busy keys), the locked ones at their last unlock (see the module docs).
    pub(super) fn remove_corrupt(&mut self, keys: Vec<ObjectKey>, ctx: &mut Context<Self>) {
        let mut now = Vec::new();
        for key in keys {
            if self.locks.contains_key(&key) {
                self.corrupt.insert(key);
            } else {
                now.push(key);
            }
        }
        if !now.is_empty() {
            ctx.address().do_send(RemoveCorrupt { keys: now });
        }
    }
}
