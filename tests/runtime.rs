//! Runtime-level behaviour beyond the conformance suite: polling hosts, start-up errors.

mod support;

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
            buffers: vec![BytesMut::zeroed(32)],
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
