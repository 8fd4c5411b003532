//! The load-buffer contract, path by path: a load's reply gives every buffer back, in request
//! order, with its original length (and, for host memory, its original address), whether the
//! key hit, missed, the backend actor died before or during the load, or several adapters
//! answered. And host memory is written in place: no intermediate copy.

use kvtier_testkit as support;

use actix::prelude::*;
use bytes::{Bytes, BytesMut};
use kvtier::actors::backends::memory::MemoryStorage;
use kvtier::actors::storage::{Fetched, Io, Removed};
use kvtier::actors::{AdapterHandle, BackendActor, BackendError, Controller, KeyPage, Storage};
use kvtier::{
    AdapterConfig, HostRegion, Load, LoadBuf, LoadReport, ObjectKey, Store, Tier, TierConfig,
};
use support::{key, payload};

/// Lengths of the buffers in a reply.
fn lens(r: &LoadReport) -> Vec<usize> {
    r.buffers.iter().map(|b| b.len()).collect()
}

fn backend(storage: Box<dyn Storage>) -> (Arbiter, AdapterHandle) {
    let kind = storage.kind();
    let (arbiter, addr) = BackendActor::new(0, storage, 0, Vec::new()).spawn();
    (arbiter, AdapterHandle::new(0, kind, addr))
}

fn memory() -> Box<dyn Storage> {
    Box::new(MemoryStorage::new(Default::default()))
}

async fn store(c: &Addr<Controller>, keys: Vec<ObjectKey>, objects: Vec<Bytes>) {
    let rep = c.send(Store { keys, objects }).await.unwrap();
    assert!(rep.success(), "{rep:?}");
}

/// Buffers of three lengths, each filled with its own marker byte.
fn marked(lens: &[usize]) -> Vec<LoadBuf> {
    lens.iter()
        .enumerate()
        .map(|(i, &n)| LoadBuf::from(vec![0xA0 + i as u8; n]))
        .collect()
}

#[actix_rt::test]
async fn hits_and_misses_give_every_buffer_back_in_order() {
    let (arbiter, handle) = backend(memory());
    let c = Controller::new(vec![handle]).start();
    store(
        &c,
        vec![key(1), key(3)],
        vec![payload(1, 64), payload(3, 16)],
    )
    .await;
    // key(1) hits; key(2) is absent; key(3) exists with another size.
    let rep = c
        .send(Load {
            keys: vec![key(1), key(2), key(3)],
            buffers: marked(&[64, 32, 8]),
        })
        .await
        .unwrap();
    assert_eq!(format!("{}", rep.hits), "100");
    assert_eq!(lens(&rep), [64, 32, 8]);
    assert_eq!(&rep.buffers[0][..], &payload(1, 64)[..]);
    assert!(
        rep.buffers[1].iter().all(|b| *b == 0xA1),
        "a miss is untouched"
    );
    assert!(
        rep.buffers[2].iter().all(|b| *b == 0xA2),
        "a size mismatch is untouched"
    );
    let (_, back) = rep
        .into_parts::<Vec<u8>>()
        .expect("the caller's type comes back");
    assert_eq!(back.len(), 3);
    arbiter.stop();
}

#[actix_rt::test]
async fn a_backend_that_died_before_the_load_gives_every_buffer_back() {
    let (arbiter, handle) = backend(memory());
    let c = Controller::new(vec![handle]).start();
    arbiter.stop();
    arbiter.join().unwrap();
    let rep = c
        .send(Load {
            keys: vec![key(1), key(2)],
            buffers: marked(&[10, 20]),
        })
        .await
        .unwrap();
    assert_eq!(format!("{}", rep.hits), "00");
    assert_eq!(lens(&rep), [10, 20]);
    assert!(rep.buffers[1].iter().all(|b| *b == 0xA1));
}

/// A storage whose reads never finish: the read holds the buffer until it is dropped.
struct Stalled {
    reading: flume::Sender<()>,
}

impl Storage for Stalled {
    fn kind(&self) -> &'static str {
        "stalled"
    }
    fn put(&mut self, items: Vec<(ObjectKey, Bytes)>) -> Io<Vec<Result<(), BackendError>>> {
        Io::ready(vec![Ok(()); items.len()])
    }
    fn head(
        &mut self,
        _: &[ObjectKey],
        known: &[Option<u64>],
    ) -> Io<Vec<Result<Option<u64>, BackendError>>> {
        Io::ready(known.iter().map(|k| Ok(*k)).collect())
    }
    fn get(&mut self, items: Vec<(ObjectKey, LoadBuf)>) -> Io<Vec<Result<Fetched, BackendError>>> {
        let reading = self.reading.clone();
        Io::pending(async move {
            let _held = items;
            let _ = reading.send(());
            std::future::pending::<Vec<Result<Fetched, BackendError>>>().await
        })
    }
    fn remove(&mut self, keys: Vec<ObjectKey>) -> Io<Vec<Result<Removed, BackendError>>> {
        Io::ready(vec![Ok(Removed::Absent); keys.len()])
    }
    fn list(
        &mut self,
        _: Option<String>,
        _: Option<String>,
        _: usize,
    ) -> Io<Result<KeyPage, BackendError>> {
        Io::ready(Ok(KeyPage::default()))
    }
    fn details(&self) -> serde_json::Value {
        serde_json::json!({})
    }
}

#[actix_rt::test]
async fn a_backend_that_dies_during_the_load_gives_every_buffer_back() {
    let (tx, reading) = flume::unbounded();
    let (arbiter, handle) = backend(Box::new(Stalled { reading: tx }));
    let c = Controller::new(vec![handle]).start();
    let load = c.send(Load {
        keys: vec![key(1), key(2)],
        buffers: marked(&[7, 9]),
    });
    let load = actix_rt::spawn(load);
    // The storage holds both buffers now; its actor goes away.
    reading.recv_async().await.unwrap();
    arbiter.stop();
    let rep = load.await.unwrap().unwrap();
    assert_eq!(format!("{}", rep.hits), "00");
    assert_eq!(lens(&rep), [7, 9]);
    assert!(rep.buffers[0].iter().all(|b| *b == 0xA0));
}

#[actix_rt::test]
async fn several_adapters_give_every_buffer_back_in_order() {
    let (a0, h0) = backend(memory());
    let (a1, mut h1) = backend(memory());
    h1.index = 1;
    let c = Controller::new(vec![h0.clone(), h1.clone()]).start();
    // key(1) only on adapter 1, key(2) on adapter 0, key(3) nowhere.
    let stored = h1
        .addr
        .send(Store {
            keys: vec![key(1)],
            objects: vec![payload(1, 40)],
        })
        .await
        .unwrap();
    assert!(stored.success());
    let stored = h0
        .addr
        .send(Store {
            keys: vec![key(2)],
            objects: vec![payload(2, 24)],
        })
        .await
        .unwrap();
    assert!(stored.success());
    let rep = c
        .send(Load {
            keys: vec![key(1), key(2), key(3)],
            buffers: marked(&[40, 24, 12]),
        })
        .await
        .unwrap();
    assert_eq!(format!("{}", rep.hits), "110");
    assert_eq!(lens(&rep), [40, 24, 12]);
    assert_eq!(&rep.buffers[0][..], &payload(1, 40)[..]);
    assert_eq!(&rep.buffers[1][..], &payload(2, 24)[..]);
    // One adapter dies: the other still serves, and nothing is lost.
    a0.stop();
    a0.join().unwrap();
    let rep = c
        .send(Load {
            keys: vec![key(2), key(1)],
            buffers: marked(&[24, 40]),
        })
        .await
        .unwrap();
    assert_eq!(format!("{}", rep.hits), "01");
    assert_eq!(lens(&rep), [24, 40]);
    a1.stop();
}

/// The arena path: loads write into, and stores read from, regions of one host allocation.
#[actix_rt::test]
async fn host_regions_are_loaded_and_stored_in_place() {
    let config = TierConfig::with_adapters(vec![AdapterConfig::memory()]);
    let tier = Tier::start(&config).await.unwrap();
    const CHUNK: usize = 256;
    let mut arena = vec![0u8; 4 * CHUNK];
    for (i, c) in arena.chunks_mut(CHUNK).enumerate() {
        c.copy_from_slice(&payload(i as u32, CHUNK));
    }
    let keys: Vec<ObjectKey> = (0..4).map(key).collect();
    let regions = |arena: &mut Vec<u8>| -> Vec<HostRegion> {
        (0..4)
            // SAFETY: disjoint regions of `arena`, which outlives the call that uses them and is
            // not touched meanwhile.
            .map(|i| unsafe { HostRegion::new(arena.as_mut_ptr().add(i * CHUNK), CHUNK) })
            .collect()
    };
    let rep = tier
        .store_from(keys.clone(), regions(&mut arena))
        .await
        .unwrap();
    assert!(rep.success());
    arena.fill(0);
    let rep = tier.load(keys, regions(&mut arena)).await;
    assert!(rep.hits.all());
    let (_, back) = rep.into_parts::<HostRegion>().unwrap();
    for (i, r) in back.iter().enumerate() {
        assert_eq!(r.as_ptr(), arena[i * CHUNK..].as_ptr(), "the same memory");
    }
    for (i, c) in arena.chunks(CHUNK).enumerate() {
        assert_eq!(c, &payload(i as u32, CHUNK)[..], "loaded in place");
    }
    // A plain BytesMut still works, and comes back as itself.
    let rep = tier.load(vec![key(0)], vec![BytesMut::zeroed(CHUNK)]).await;
    let (hits, bufs) = rep.into_parts::<BytesMut>().unwrap();
    assert!(hits.all());
    assert_eq!(&bufs[0][..], &payload(0, CHUNK)[..]);
    tier.close().await;
}
