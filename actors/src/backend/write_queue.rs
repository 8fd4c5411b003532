//! One write per key at a time: the stores in flight, the items waiting for their key, and
//! the stores not answered yet.
//!
//! A key is *busy* while a store or a delete of it is in flight. A store item of a busy key
//! (or of a key that already has items waiting) joins the key's queue and is written when the
//! operation ahead of it ends. Invariants of [`WriteQueue`]:
//! - at most one write per key is in flight (`storing`), and an item is never written while a
//!   delete of its key is in flight;
//! - a key's waiting items are written in arrival order (first come, first served), and a key
//!   has a queue entry only while items wait in it;
//! - a store ([`StoreBatch`]) is answered once each of its items has been written or has
//!   failed (`left` reaches 0), and only then.
//!
//! No waiting item can wait forever: a queue moves forward when an operation on its key ends
//! ([`WriteQueue::next_items`]), and every operation in flight ends (the storages bound their
//! own I/O). The backend actor owns the queue; no lock.

use std::collections::{HashMap, VecDeque};

use actix::fut::wrap_future;
use actix::prelude::*;
use bytes::Bytes;

use super::BackendActor;
use crate::key::{KeyMap, KeySet, ObjectKey};
use crate::messages::{FailedKey, StoreOutcome, StoreReport, UsageEventKind};
use crate::metrics::{Op, Started};
use crate::storage::{BackendError, ErrorKind};

/// Identifies one [`crate::messages::Store`] request while its items are written.
pub(super) type BatchId = u64;

/// A store item: its request, key and object.
pub(super) type Item = (BatchId, ObjectKey, Bytes);

/// A [`crate::messages::Store`] request whose items are being written, possibly in several parts (items of busy
/// keys wait for them, see the module docs).
pub(super) struct StoreBatch {
    pub(super) outcome: StoreOutcome,
    /// Items neither written nor failed yet.
    pub(super) left: usize,
    pub(super) started: Started,
    /// Where the report goes once `left` is 0; `None` while the request's handler still runs
    /// (it then answers itself).
    pub(super) reply: Option<tokio::sync::oneshot::Sender<StoreReport>>,
}

/// The writes of one adapter (see the module docs).
#[derive(Default)]
pub(super) struct WriteQueue {
    /// Keys with a write in flight (at most one per key).
    storing: KeySet,
    /// Store items waiting for their key to be free, per key in arrival order.
    waiting: KeyMap<VecDeque<(BatchId, Bytes)>>,
    /// Stores not answered yet, by id.
    batches: HashMap<BatchId, StoreBatch>,
    next_batch: BatchId,
}

impl WriteQueue {
    /// Whether a write of `key` is in flight.
    pub(super) fn writing(&self, key: &ObjectKey) -> bool {
        self.storing.contains(key)
    }

    /// Whether store items wait for `key`.
    pub(super) fn has_waiting(&self, key: &ObjectKey) -> bool {
        self.waiting.contains_key(key)
    }

    /// A new store's id.
    pub(super) fn next_id(&mut self) -> BatchId {
        let id = self.next_batch;
        self.next_batch += 1;
        id
    }

    /// An item of store `id`. Returned to be written now when its key is free (`deleting`:
    /// whether a delete of it is in flight), and the key is then marked as being written;
    /// otherwise it waits behind the operations ahead of it.
    pub(super) fn admit(
        &mut self,
        id: BatchId,
        key: ObjectKey,
        obj: Bytes,
        deleting: bool,
    ) -> Option<Item> {
        if deleting || self.storing.contains(&key) || self.waiting.contains_key(&key) {
            self.waiting.entry(key).or_default().push_back((id, obj));
            None
        } else {
            self.storing.insert(key.clone());
            Some((id, key, obj))
        }
    }

    /// The write of `key` ended.
    pub(super) fn ended(&mut self, key: &ObjectKey) {
        self.storing.remove(key);
    }

    /// For each of `freed` that is free now (not written, not in `deleting`), the first item
    /// waiting for it, marked as being written.
    pub(super) fn next_items(&mut self, freed: Vec<ObjectKey>, deleting: &KeySet) -> Vec<Item> {
        let mut items = Vec::new();
        for key in freed {
            if self.storing.contains(&key) || deleting.contains(&key) {
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
        items
    }

    /// Records store `id`, not answered yet.
    pub(super) fn insert_batch(&mut self, id: BatchId, batch: StoreBatch) {
        self.batches.insert(id, batch);
    }

    /// Store `id`, while it is not answered.
    pub(super) fn batch_mut(&mut self, id: BatchId) -> Option<&mut StoreBatch> {
        self.batches.get_mut(&id)
    }

    /// Store `id`, taken out to be answered.
    pub(super) fn take_batch(&mut self, id: BatchId) -> Option<StoreBatch> {
        self.batches.remove(&id)
    }
}

impl BackendActor {
    /// Records a store's outcome and ends its request.
    pub(super) fn record_store(&self, started: Started, outcome: &StoreOutcome) {
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
    /// being stored) and applies the results when they arrive. With a fleet, the write is
    /// announced to the index first (see `fleet_write`).
    pub(super) fn put_items(&mut self, items: Vec<Item>, ctx: &mut Context<Self>) {
        if items.is_empty() {
            return;
        }
        match self.fleet_index() {
            Some(index) => self.fleet_write(index, items, None, ctx),
            None => self.write_items(items, ctx),
        }
    }

    /// Writes `items` now (see [`put_items`](Self::put_items)).
    pub(super) fn write_items(&mut self, items: Vec<Item>, ctx: &mut Context<Self>) {
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
    pub(super) fn finish_items(
        &mut self,
        owners: Vec<BatchId>,
        keys: Vec<ObjectKey>,
        sizes: Vec<u64>,
        results: Vec<Result<(), BackendError>>,
        ctx: &mut Context<Self>,
    ) {
        let ended: u64 = sizes.iter().sum();
        for key in &keys {
            self.writes.ended(key);
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
            let Some(batch) = self.writes.batch_mut(id) else {
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
        // Events before replies: a host sees a store's events before its result. With a fleet,
        // replies wait until the index knows the objects, so that any node finds them then.
        let stored = self
            .fleet
            .is_some()
            .then(|| self.fleet_stored_msg((&ok_keys, &ok_sizes), Some((&keys, ended))));
        if !ok_keys.is_empty() {
            self.publish(UsageEventKind::Stored {
                keys: ok_keys,
                sizes: ok_sizes,
            });
        }
        match stored.zip(self.fleet_index()) {
            Some((msg, index)) => self.fleet_written(index, msg, complete, ctx),
            None => self.answer_stores(complete),
        }
        self.start_waiting(keys, ctx);
    }

    /// Answers the stores `complete` (every item written or failed).
    pub(super) fn answer_stores(&mut self, complete: Vec<BatchId>) {
        for id in complete {
            if let Some(batch) = self.writes.take_batch(id) {
                let report = self.end_store(batch.started, batch.outcome);
                if let Some(tx) = batch.reply {
                    let _ = tx.send(report);
                }
            }
        }
    }

    /// Records a finished store and builds its report.
    pub(super) fn end_store(&self, started: Started, outcome: StoreOutcome) -> StoreReport {
        self.record_store(started, &outcome);
        StoreReport {
            adapters: vec![(self.index, outcome)],
        }
    }

    /// Starts, for each of `freed` that is no longer busy, the first store item waiting for it.
    pub(super) fn start_waiting(&mut self, freed: Vec<ObjectKey>, ctx: &mut Context<Self>) {
        let items = self.writes.next_items(freed, &self.deleting);
        self.put_items(items, ctx);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key(hash: u8) -> ObjectKey {
        ObjectKey::new("m", 0, vec![hash]).unwrap()
    }

    fn obj(tag: u8) -> Bytes {
        Bytes::from(vec![tag; 4])
    }

    /// The (store, first byte of the object) of items, for comparing.
    fn ids(items: &[Item]) -> Vec<(BatchId, u8)> {
        items.iter().map(|(id, _, o)| (*id, o[0])).collect()
    }

    #[test]
    fn a_free_key_is_written_at_once_and_a_busy_one_waits() {
        let mut q = WriteQueue::default();
        assert!(q.admit(0, key(1), obj(1), false).is_some());
        assert!(q.writing(&key(1)));
        // The same key again (another store, or twice in one batch) waits.
        assert!(q.admit(1, key(1), obj(2), false).is_none());
        assert!(q.has_waiting(&key(1)));
        // Another key is free.
        assert!(q.admit(1, key(2), obj(3), false).is_some());
        // A key being deleted waits too, even with no write in flight.
        assert!(q.admit(2, key(3), obj(4), true).is_none());
        assert!(!q.writing(&key(3)));
    }

    #[test]
    fn waiting_items_go_in_arrival_order_one_at_a_time() {
        let mut q = WriteQueue::default();
        let none = KeySet::default();
        assert!(q.admit(0, key(1), obj(10), false).is_some());
        assert!(q.admit(1, key(1), obj(11), false).is_none());
        assert!(q.admit(2, key(1), obj(12), false).is_none());
        // The write in flight has not ended: nothing starts.
        assert!(q.next_items(vec![key(1)], &none).is_empty());
        q.ended(&key(1));
        assert_eq!(ids(&q.next_items(vec![key(1)], &none)), [(1, 11)]);
        assert!(q.writing(&key(1)));
        // Freed twice without the write ending: still one write at a time.
        assert!(q.next_items(vec![key(1)], &none).is_empty());
        q.ended(&key(1));
        assert_eq!(ids(&q.next_items(vec![key(1)], &none)), [(2, 12)]);
        assert!(
            !q.has_waiting(&key(1)),
            "the queue entry goes with its last item"
        );
        q.ended(&key(1));
        assert!(q.next_items(vec![key(1)], &none).is_empty());
        assert!(!q.writing(&key(1)));
    }

    #[test]
    fn items_behind_a_delete_start_when_it_ends() {
        let mut q = WriteQueue::default();
        let mut deleting = KeySet::default();
        deleting.insert(key(1));
        assert!(q.admit(0, key(1), obj(1), true).is_none());
        assert!(q.next_items(vec![key(1)], &deleting).is_empty());
        deleting.clear();
        assert_eq!(ids(&q.next_items(vec![key(1)], &deleting)), [(0, 1)]);
    }

    #[test]
    fn batches_are_kept_until_taken() {
        let mut q = WriteQueue::default();
        let (a, b) = (q.next_id(), q.next_id());
        assert_ne!(a, b);
        let batch = |left| StoreBatch {
            outcome: StoreOutcome::default(),
            left,
            started: crate::metrics::AdapterMetrics::off().start(Op::Store, 1, 0),
            reply: None,
        };
        q.insert_batch(a, batch(2));
        q.batch_mut(a).unwrap().left -= 1;
        assert_eq!(q.batch_mut(a).map(|b| b.left), Some(1));
        assert!(q.batch_mut(b).is_none());
        assert_eq!(q.take_batch(a).map(|b| b.left), Some(1));
        assert!(q.take_batch(a).is_none());
    }
}
