//! Runtime-level behaviour beyond the conformance suite: polling hosts, start-up errors.

use kvtier_testkit as support;

use std::sync::atomic::Ordering::SeqCst;
use std::time::Duration;

use bytes::BytesMut;
use kvtier::actors::{Load, LookupAndLock, Op, OpResult, Store, Submit, TakeResult, TierEvent};
use kvtier::{AdapterConfig, Tier, TierConfig};
use support::{key, payload};

/// The next completion notice on `rx`, skipping usage events. Waits without blocking the
/// arbiter (the controller runs on the test's thread).
async fn completed(rx: &flume::Receiver<TierEvent>) -> u64 {
    loop {
        let ev = actix_rt::time::timeout(Duration::from_secs(5), rx.recv_async())
            .await
            .expect("an event within 5 s")
            .expect("channel open");
        match ev {
            TierEvent::Completed { task } => return task,
            TierEvent::Usage(_) => continue,
        }
    }
}

async fn memory_tier() -> Tier {
    Tier::start(&TierConfig::with_adapters(vec![AdapterConfig::memory()]))
        .await
        .unwrap()
}

/// Takes the result of `task`, which must be there, and checks a second take gives nothing.
async fn take_once(tier: &Tier, task: u64) -> OpResult {
    let c = tier.controller();
    let result = c.send(TakeResult(task)).await.unwrap().expect("a result");
    assert!(
        c.send(TakeResult(task)).await.unwrap().is_none(),
        "taken once"
    );
    result
}

#[actix_rt::test]
async fn submitted_operations_are_announced_and_taken_by_id() {
    let tier = memory_tier().await;
    let rx = tier.events();
    let c = tier.controller();
    let t0 = c
        .send(Submit(Op::Store(Store {
            keys: vec![key(1)],
            objects: vec![payload(1, 32)],
        })))
        .await
        .unwrap();
    assert_eq!(completed(&rx).await, t0);
    match take_once(&tier, t0).await {
        OpResult::Store(r) => assert_eq!(r.adapters[0].1.new_bytes, 32),
        other => panic!("{other:?}"),
    }
    let t1 = c
        .send(Submit(Op::LookupAndLock(LookupAndLock {
            keys: vec![key(1), key(2)],
        })))
        .await
        .unwrap();
    assert_ne!(t1, t0);
    assert_eq!(completed(&rx).await, t1);
    match take_once(&tier, t1).await {
        OpResult::LookupAndLock(bits) => assert_eq!(format!("{bits}"), "10"),
        other => panic!("{other:?}"),
    }
    // Through the facade; the load's buffer comes back with the result.
    let t2 = tier
        .submit(Op::Load(Load {
            keys: vec![key(1)],
            buffers: vec![BytesMut::zeroed(32).into()],
        }))
        .await
        .unwrap();
    assert_eq!(completed(&rx).await, t2);
    match tier.take_result(t2).await.unwrap() {
        Some(OpResult::Load(r)) => {
            assert!(r.hits.all());
            assert_eq!(&r.buffers[0][..], &payload(1, 32)[..]);
        }
        other => panic!("{other:?}"),
    }
    assert!(tier.take_result(t2).await.unwrap().is_none());
    assert!(tier.take_result(999).await.unwrap().is_none(), "unknown id");
    tier.close().await;
}

/// A monitoring channel registered before the host's, or after it, or one that went away,
/// never takes the host's result: every live channel hears of every completion, and the
/// result is fetched by its task id exactly once.
#[actix_rt::test]
async fn listeners_never_steal_submit_results() {
    for host_first in [false, true] {
        let tier = memory_tier().await;
        let gone = tier.events();
        let (host, monitor) = if host_first {
            let h = tier.events();
            (h, tier.events())
        } else {
            let m = tier.events();
            (tier.events(), m)
        };
        drop(gone);
        let task = tier
            .submit(Op::Store(Store {
                keys: vec![key(1)],
                objects: vec![payload(1, 16)],
            }))
            .await
            .unwrap();
        assert_eq!(completed(&monitor).await, task, "host_first={host_first}");
        assert_eq!(completed(&host).await, task, "host_first={host_first}");
        match take_once(&tier, task).await {
            OpResult::Store(r) => assert!(r.success(), "{r:?}"),
            other => panic!("{other:?}"),
        }
        tier.close().await;
    }
}

/// With no channel at all, the result still waits for its taker: a later request to the
/// controller is answered after the completion (both run on the controller's mailbox).
#[actix_rt::test]
async fn results_wait_without_listeners() {
    let tier = memory_tier().await;
    let task = tier
        .submit(Op::LookupAndLock(LookupAndLock { keys: vec![key(5)] }))
        .await
        .unwrap();
    // The lookup runs on the backend's arbiter: wait for its completion notice on a channel
    // registered after the submit (notices are sent to the channels live at completion).
    let late = tier.events();
    let mut result = tier.take_result(task).await.unwrap();
    if result.is_none() {
        assert_eq!(completed(&late).await, task);
        result = tier.take_result(task).await.unwrap();
    }
    match result {
        Some(OpResult::LookupAndLock(bits)) => assert_eq!(format!("{bits}"), "0"),
        other => panic!("{other:?}"),
    }
    assert!(tier.take_result(task).await.unwrap().is_none());
    tier.close().await;
}

/// `close` returns once the runtime has stopped: the controller no longer takes messages, and
/// the caller's arbiter (which the controller shared) goes on serving.
#[actix_rt::test]
async fn close_returns_after_the_runtime_stopped() {
    let tier = memory_tier().await;
    assert!(tier
        .store(vec![key(1)], vec![payload(1, 8)])
        .await
        .unwrap()
        .success());
    let controller = tier.controller().clone();
    tier.close().await;
    assert!(
        controller.send(kvtier::GetUsage).await.is_err(),
        "the controller stopped"
    );
    let tier = memory_tier().await;
    assert_eq!(tier.usage().await.unwrap().adapters[0].used_bytes, 0);
    tier.close().await;
}

#[actix_rt::test]
async fn no_adapters_is_a_start_error() {
    let err = Tier::start(&TierConfig::default()).await.err().unwrap();
    assert!(matches!(err, kvtier::StartError::NoAdapters));
}

/// Memory storage whose writes (or probes) reach the store at once but whose replies wait for
/// a gate: a request in flight, as with any remote store.
struct Gated {
    inner: kvtier::actors::backends::memory::MemoryStorage,
    /// Gates the replies to writes, when set.
    gate: Option<flume::Receiver<()>>,
    /// Gates the replies to probes (lookups), when set.
    probe_gate: Option<flume::Receiver<()>>,
    /// Gates the replies to removals, when set.
    remove_gate: Option<flume::Receiver<()>>,
    objects: std::sync::Arc<std::sync::atomic::AtomicUsize>,
    /// Writes that reached the store (items of `put`).
    puts: std::sync::Arc<std::sync::atomic::AtomicUsize>,
}

impl Gated {
    fn new(
        gate: Option<flume::Receiver<()>>,
        probe_gate: Option<flume::Receiver<()>>,
    ) -> (Self, std::sync::Arc<std::sync::atomic::AtomicUsize>) {
        let objects = std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(0));
        let storage = Gated {
            inner: kvtier::actors::backends::memory::MemoryStorage::new(Default::default()),
            gate,
            probe_gate,
            remove_gate: None,
            objects: objects.clone(),
            puts: Default::default(),
        };
        (storage, objects)
    }

    /// The same, with the replies to removals waiting for `gate`.
    fn with_remove_gate(mut self, gate: flume::Receiver<()>) -> Self {
        self.remove_gate = Some(gate);
        self
    }

    /// The count of writes that reached the store.
    fn puts(&self) -> std::sync::Arc<std::sync::atomic::AtomicUsize> {
        self.puts.clone()
    }
}

/// `value` once `gate` opens, or at once without a gate.
fn after_gate<T: 'static>(
    gate: &Option<flume::Receiver<()>>,
    value: T,
) -> kvtier::actors::storage::Io<T> {
    use kvtier::actors::storage::Io;
    match gate.clone() {
        None => Io::ready(value),
        Some(gate) => Io::pending(async move {
            let _ = gate.recv_async().await;
            value
        }),
    }
}

impl kvtier::actors::Storage for Gated {
    fn kind(&self) -> &'static str {
        "gated"
    }
    fn put(
        &mut self,
        items: Vec<(kvtier::ObjectKey, bytes::Bytes)>,
    ) -> kvtier::actors::storage::Io<Vec<Result<(), kvtier::actors::BackendError>>> {
        self.puts.fetch_add(items.len(), SeqCst);
        let res = ready(self.inner.put(items));
        let n = self.count();
        self.objects.store(n, SeqCst);
        after_gate(&self.gate, res)
    }
    fn head(
        &mut self,
        keys: &[kvtier::ObjectKey],
        known: &[Option<u64>],
    ) -> kvtier::actors::storage::Io<Vec<Result<Option<u64>, kvtier::actors::BackendError>>> {
        let res = ready(self.inner.head(keys, known));
        after_gate(&self.probe_gate, res)
    }
    fn get(
        &mut self,
        items: Vec<(kvtier::ObjectKey, kvtier::LoadBuf)>,
    ) -> kvtier::actors::storage::Io<
        Vec<Result<kvtier::actors::storage::Fetched, kvtier::actors::BackendError>>,
    > {
        self.inner.get(items)
    }
    fn remove(
        &mut self,
        keys: Vec<kvtier::ObjectKey>,
    ) -> kvtier::actors::storage::Io<
        Vec<Result<kvtier::actors::storage::Removed, kvtier::actors::BackendError>>,
    > {
        let r = ready(self.inner.remove(keys));
        let n = self.count();
        self.objects.store(n, SeqCst);
        after_gate(&self.remove_gate, r)
    }
    fn list(
        &mut self,
        model: Option<String>,
        cursor: Option<String>,
        limit: usize,
    ) -> kvtier::actors::storage::Io<Result<kvtier::KeyPage, kvtier::actors::BackendError>> {
        self.inner.list(model, cursor, limit)
    }
    fn details(&self) -> serde_json::Value {
        serde_json::json!({})
    }
}

impl Gated {
    fn count(&mut self) -> usize {
        use kvtier::actors::storage::Storage;
        ready(Storage::list(&mut self.inner, None, None, usize::MAX))
            .unwrap()
            .entries
            .len()
    }
}

/// The value of an `Io` that completed at once (memory storage always does).
fn ready<T: 'static>(io: kvtier::actors::storage::Io<T>) -> T {
    use futures_util::FutureExt;
    assert!(io.is_ready(), "memory storage completes at once");
    let mut unused = ();
    io.resolve(&mut unused)
        .now_or_never()
        .expect("a ready Io resolves at once")
}

/// A delete (or an eviction) of a key whose write is still in flight is skipped: otherwise the
/// two could land at the store in one order and reach the ledger in the other, and usage
/// would no longer match the store.
#[actix_rt::test]
async fn deletes_skip_keys_being_written() {
    use actix::Actor;
    use kvtier::actors::{BackendActor, Delete, Evict, GetUsage};
    let (open, gate) = flume::unbounded();
    let (storage, objects) = Gated::new(Some(gate), None);
    let actor = BackendActor::new(0, Box::new(storage), 0, Vec::new()).start();
    let store = actor.send(Store {
        keys: vec![key(1)],
        objects: vec![payload(1, 32)],
    });
    // `send` queues the store at once: the delete below is handled after it.
    let store = actix_rt::spawn(store);
    let usage = actor.send(GetUsage).await.unwrap();
    assert_eq!(usage.adapters[0].keys, 0, "the write has not ended");
    assert_eq!(objects.load(SeqCst), 1, "the write reached the store");
    let del = actor
        .send(Delete {
            keys: vec![key(1)],
            adapter: None,
        })
        .await
        .unwrap();
    assert!(
        del.adapters[0].1.is_empty(),
        "skipped while written: {del:?}"
    );
    let evicted = actor.send(Evict::keys(vec![key(1)], 1)).await.unwrap();
    assert!(evicted.is_empty(), "not evicted while written");
    assert_eq!(objects.load(SeqCst), 1);
    open.send(()).unwrap();
    assert!(store.await.unwrap().unwrap().success());
    let usage = actor.send(GetUsage).await.unwrap();
    assert_eq!(
        (usage.adapters[0].keys, usage.adapters[0].used_bytes),
        (1, 32)
    );
    // Once the write has ended, the key can go.
    let del = actor
        .send(Delete {
            keys: vec![key(1)],
            adapter: None,
        })
        .await
        .unwrap();
    assert_eq!(del.adapters[0].1, vec![key(1)]);
    assert_eq!(objects.load(SeqCst), 0);
    let usage = actor.send(GetUsage).await.unwrap();
    assert_eq!(
        (usage.adapters[0].keys, usage.adapters[0].used_bytes),
        (0, 0)
    );
}

/// A lookup whose probe saw an object before a delete of it started must not lock it, even
/// when the delete has ended by the time the probe returns: the load of that locked key would
/// miss. (The soak found this: a batch mixing known and unknown keys waits for its probes, and
/// an eviction removed a known key meanwhile.)
#[actix_rt::test]
async fn a_probe_that_raced_a_delete_does_not_lock() {
    use actix::Actor;
    use kvtier::actors::{BackendActor, Delete, GetStatus, GetUsage};
    let (open, probe_gate) = flume::unbounded();
    let (storage, objects) = Gated::new(None, Some(probe_gate));
    let actor = BackendActor::new(0, Box::new(storage), 0, Vec::new()).start();
    let stored = actor
        .send(Store {
            keys: vec![key(1), key(2)],
            objects: vec![payload(1, 32), payload(2, 32)],
        })
        .await
        .unwrap();
    assert!(stored.success());
    // Queued before the delete: its probe starts first and waits for the gate.
    let lookup = actix_rt::spawn(actor.send(LookupAndLock {
        keys: vec![key(1), key(2), key(3)],
    }));
    let del = actor
        .send(Delete {
            keys: vec![key(1)],
            adapter: None,
        })
        .await
        .unwrap();
    assert_eq!(del.adapters[0].1, vec![key(1)], "not locked yet: deleted");
    assert_eq!(objects.load(SeqCst), 1);
    open.send(()).unwrap();
    let hits = lookup.await.unwrap().unwrap();
    assert_eq!(
        (hits.get(0), hits.get(1), hits.get(2)),
        (false, true, false),
        "the deleted key is a miss, the other a hit"
    );
    let status = actor.send(GetStatus).await.unwrap();
    assert_eq!(status.adapters[0].locked_keys, 1, "only key 2 is locked");
    let usage = actor.send(GetUsage).await.unwrap();
    assert_eq!(
        (usage.adapters[0].keys, usage.adapters[0].used_bytes),
        (1, 32),
        "the deleted key stays out of the ledger"
    );
    let loaded = actor
        .send(Load {
            keys: vec![key(2)],
            buffers: vec![BytesMut::zeroed(32).into()],
        })
        .await
        .unwrap();
    assert!(loaded.hits.get(0), "a locked key loads");
}

/// A store of a key whose delete is in flight waits for the delete to end, then writes: it
/// never fails with "key is being deleted", and the object is there afterwards. (Before the
/// backend actor queued such stores, this store failed at once.)
#[actix_rt::test]
async fn a_store_waits_for_the_delete_in_flight() {
    use actix::Actor;
    use kvtier::actors::{BackendActor, Delete, GetUsage};
    let (open, gate) = flume::unbounded();
    let (storage, objects) = Gated::new(None, None);
    let storage = storage.with_remove_gate(gate);
    let puts = storage.puts();
    let actor = BackendActor::new(0, Box::new(storage), 0, Vec::new()).start();
    let first = actor
        .send(Store {
            keys: vec![key(1), key(2)],
            objects: vec![payload(1, 32), payload(2, 32)],
        })
        .await
        .unwrap();
    assert!(first.success());
    // The delete reaches the store and waits for the gate to answer.
    let del = actix_rt::spawn(actor.send(Delete {
        keys: vec![key(1)],
        adapter: None,
    }));
    // Handled after the delete (one mailbox, in order), with a new size, and beside a key that
    // is free: that one is written at once.
    let store = actix_rt::spawn(actor.send(Store {
        keys: vec![key(1), key(3)],
        objects: vec![payload(7, 48), payload(3, 32)],
    }));
    let usage = actor.send(GetUsage).await.unwrap();
    assert_eq!(objects.load(SeqCst), 2, "key 1 removed, key 3 written");
    assert_eq!(puts.load(SeqCst), 3, "key 1's write waits for the delete");
    assert_eq!(usage.adapters[0].keys, 3, "the delete has not ended");
    open.send(()).unwrap();
    let del = del.await.unwrap().unwrap();
    assert_eq!(del.adapters[0].1, vec![key(1)]);
    let stored = store.await.unwrap().unwrap();
    assert!(stored.success(), "{stored:?}");
    let out = &stored.adapters[0].1;
    assert_eq!((out.stored, out.new_bytes), (2, 48 + 32));
    assert_eq!(puts.load(SeqCst), 4);
    let usage = actor.send(GetUsage).await.unwrap();
    assert_eq!(
        (usage.adapters[0].keys, usage.adapters[0].used_bytes),
        (3, 48 + 32 + 32),
        "the ledger holds the new object"
    );
    let loaded = actor
        .send(Load {
            keys: vec![key(1)],
            buffers: vec![BytesMut::zeroed(48).into()],
        })
        .await
        .unwrap();
    assert!(
        loaded.hits.get(0),
        "the object stored after the delete is there"
    );
    assert_eq!(&loaded.buffers[0][..], &payload(7, 48)[..]);
}

/// Two stores of one key in flight at once reach the store one after the other, in the order
/// they arrived, so the ledger records the size of the object the store holds. (Before, the
/// second write went out at once, and the ledger followed whichever reply came last.)
#[actix_rt::test]
async fn stores_of_one_key_are_written_in_turn() {
    use actix::Actor;
    use kvtier::actors::{BackendActor, GetUsage};
    let (open, gate) = flume::unbounded();
    let (storage, _) = Gated::new(Some(gate), None);
    let puts = storage.puts();
    let actor = BackendActor::new(0, Box::new(storage), 0, Vec::new()).start();
    let a = actix_rt::spawn(actor.send(Store {
        keys: vec![key(1)],
        objects: vec![payload(1, 32)],
    }));
    // The same key twice in one batch, too: written in turn as well.
    let b = actix_rt::spawn(actor.send(Store {
        keys: vec![key(1), key(1)],
        objects: vec![payload(2, 48), payload(3, 64)],
    }));
    actor.send(GetUsage).await.unwrap();
    assert_eq!(puts.load(SeqCst), 1, "the later writes wait for the first");
    open.send(()).unwrap();
    assert!(a.await.unwrap().unwrap().success());
    actor.send(GetUsage).await.unwrap();
    assert_eq!(puts.load(SeqCst), 2, "then one more");
    open.send(()).unwrap();
    open.send(()).unwrap();
    let b = b.await.unwrap().unwrap();
    assert!(b.success(), "{b:?}");
    assert_eq!(b.adapters[0].1.stored, 2);
    assert_eq!(puts.load(SeqCst), 3);
    let usage = actor.send(GetUsage).await.unwrap();
    assert_eq!(
        (usage.adapters[0].keys, usage.adapters[0].used_bytes),
        (1, 64),
        "the last write is what the store holds"
    );
    let loaded = actor
        .send(Load {
            keys: vec![key(1)],
            buffers: vec![BytesMut::zeroed(64).into()],
        })
        .await
        .unwrap();
    assert!(loaded.hits.get(0));
    assert_eq!(&loaded.buffers[0][..], &payload(3, 64)[..]);
}
