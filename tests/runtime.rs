//! Runtime-level behaviour beyond the conformance suite: polling hosts, start-up errors.

mod support;

use std::sync::atomic::Ordering::SeqCst;
use std::time::Duration;

use bytes::BytesMut;
use kvtier::actors::{Load, LookupAndLock, Op, OpResult, Store, Submit, TierEvent};
use kvtier::{AdapterConfig, Tier, TierConfig};
use support::{key, payload};

/// Waits without blocking the arbiter (the controller runs on the test's thread).
async fn completed(rx: &flume::Receiver<TierEvent>) -> (u64, OpResult) {
    loop {
        let ev = actix_rt::time::timeout(Duration::from_secs(5), rx.recv_async())
            .await
            .expect("an event within 5 s")
            .expect("channel open");
        match ev {
            TierEvent::Completed { task, result } => return (task, result),
            TierEvent::Usage(_) => continue,
        }
    }
}

#[actix_rt::test]
async fn submitted_operations_complete_on_the_event_channel() {
    let tier = Tier::start(&TierConfig {
        adapters: vec![AdapterConfig::memory()],
        ..Default::default()
    })
    .await
    .unwrap();
    let rx = tier.events();
    let c = tier.controller();
    let t0 = c
        .send(Submit(Op::Store(Store {
            keys: vec![key(1)],
            objects: vec![payload(1, 32)],
        })))
        .await
        .unwrap();
    let (task, result) = completed(&rx).await;
    assert_eq!(task, t0);
    match result {
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
    match completed(&rx).await {
        (t, OpResult::LookupAndLock(bits)) => {
            assert_eq!(t, t1);
            assert_eq!(format!("{bits}"), "10");
        }
        other => panic!("{other:?}"),
    }
    let t2 = c
        .send(Submit(Op::Load(Load {
            keys: vec![key(1)],
            buffers: vec![BytesMut::zeroed(32).into()],
        })))
        .await
        .unwrap();
    match completed(&rx).await {
        (t, OpResult::Load(r)) => {
            assert_eq!(t, t2);
            assert!(r.hits.all());
            assert_eq!(&r.buffers[0][..], &payload(1, 32)[..]);
        }
        other => panic!("{other:?}"),
    }
    tier.shutdown();
}

#[actix_rt::test]
async fn no_adapters_is_a_start_error() {
    let err = Tier::start(&TierConfig::default()).await.err().unwrap();
    assert!(matches!(err, kvtier::StartError::NoAdapters));
}

/// Memory storage whose writes reach the store at once but whose replies wait for a gate:
/// a write in flight, as with any remote store.
struct GatedWrites {
    inner: kvtier::actors::backends::memory::MemoryStorage,
    gate: flume::Receiver<()>,
    objects: std::sync::Arc<std::sync::atomic::AtomicUsize>,
}

impl kvtier::actors::Storage for GatedWrites {
    fn kind(&self) -> &'static str {
        "gated"
    }
    fn put(
        &mut self,
        items: Vec<(kvtier::ObjectKey, bytes::Bytes)>,
    ) -> kvtier::actors::storage::Io<Vec<Result<(), kvtier::actors::BackendError>>> {
        use kvtier::actors::storage::Io;
        let res = ready(self.inner.put(items));
        let n = self.count();
        self.objects.store(n, SeqCst);
        let gate = self.gate.clone();
        Io::pending(async move {
            let _ = gate.recv_async().await;
            res
        })
    }
    fn head(
        &mut self,
        keys: Vec<(kvtier::ObjectKey, Option<u64>)>,
    ) -> kvtier::actors::storage::Io<Vec<Result<Option<u64>, kvtier::actors::BackendError>>> {
        self.inner.head(keys)
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
        let r = self.inner.remove(keys);
        let n = self.count();
        self.objects.store(n, SeqCst);
        r
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

impl GatedWrites {
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
    let objects = std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let storage = GatedWrites {
        inner: kvtier::actors::backends::memory::MemoryStorage::new(Default::default()),
        gate,
        objects: objects.clone(),
    };
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
    let evicted = actor
        .send(Evict {
            candidates: vec![key(1)],
            count: 1,
        })
        .await
        .unwrap();
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
