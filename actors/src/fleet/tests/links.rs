//! Connections lost and found: a node cut off for less than its TTL keeps its locks, one cut
//! off longer loses them and rejoins by itself, and an unreachable index is reported.

use super::*;

/// Cuts every client connection of the server (as a network blip would), from a plain client.
fn cut_connections(redis: &RedisServer) {
    admin(
        redis,
        &["CLIENT", "KILL", "TYPE", "normal", "SKIPME", "yes"],
    );
}

#[actix_rt::test]
async fn a_node_cut_off_for_less_than_its_ttl_keeps_its_locks() {
    let redis = RedisServer::start();
    let (a, b) = (node(&redis.url(), "a").await, node(&redis.url(), "b").await);
    found(&a, "x", "", 100).await;
    lock(&a, &["x"]).await;
    cut_connections(&redis);
    until("a notices the cut", || async {
        a.send(GetFleetUsage).await.unwrap().is_err()
    })
    .await;
    joined(&a, 2).await;
    until("b is connected again", || async {
        b.send(GetFleetUsage).await.unwrap().is_ok()
    })
    .await;
    assert!(
        claim(&b, &["x"]).await.is_empty(),
        "a's lock survived its reconnection"
    );
}

/// A TCP forwarder to the server that a test can cut: while cut, it closes every connection
/// through it and new ones at once (a node on the far side of a partition). The only state
/// shared with its threads is the `cut` flag: each pump reads with a short timeout and
/// checks it, so no list of connections is kept.
struct Proxy {
    port: u16,
    cut: std::sync::Arc<std::sync::atomic::AtomicBool>,
}

impl Proxy {
    fn start(target: u16) -> Self {
        use std::io::{Read, Write};
        use std::sync::atomic::Ordering;
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let port = listener.local_addr().unwrap().port();
        let proxy = Self {
            port,
            cut: Default::default(),
        };
        let cut = proxy.cut.clone();
        std::thread::spawn(move || {
            for client in listener.incoming().flatten() {
                if cut.load(Ordering::SeqCst) {
                    continue;
                }
                let Ok(server) = TcpStream::connect(("127.0.0.1", target)) else {
                    continue;
                };
                for (mut from, mut to) in [
                    (client.try_clone().unwrap(), server.try_clone().unwrap()),
                    (server, client.try_clone().unwrap()),
                ] {
                    let cut = cut.clone();
                    from.set_read_timeout(Some(Duration::from_millis(20)))
                        .unwrap();
                    std::thread::spawn(move || {
                        let mut buf = [0u8; 16 * 1024];
                        while !cut.load(Ordering::SeqCst) {
                            match from.read(&mut buf) {
                                Ok(0) => break,
                                Ok(n) if to.write_all(&buf[..n]).is_ok() => {}
                                Ok(_) => break,
                                Err(e)
                                    if e.kind() == std::io::ErrorKind::WouldBlock
                                        || e.kind() == std::io::ErrorKind::TimedOut => {}
                                Err(_) => break,
                            }
                        }
                        let _ = from.shutdown(std::net::Shutdown::Both);
                        let _ = to.shutdown(std::net::Shutdown::Both);
                    });
                }
            }
        });
        proxy
    }

    fn url(&self) -> String {
        format!("redis://127.0.0.1:{}/0", self.port)
    }

    fn set_cut(&self, cut: bool) {
        self.cut.store(cut, std::sync::atomic::Ordering::SeqCst);
    }
}

#[actix_rt::test]
async fn a_node_cut_off_longer_than_its_ttl_loses_its_locks_and_rejoins_by_itself() {
    let redis = RedisServer::start();
    let proxy = Proxy::start(redis.port);
    let ttl = Duration::from_millis(600);
    let a = node_with(&proxy.url(), "a", ttl).await;
    let b = node_with(&redis.url(), "b", ttl).await;
    found(&a, "x", "", 100).await;
    lock(&a, &["x"]).await;
    assert!(claim(&b, &["x"]).await.is_empty(), "a holds x");
    proxy.set_cut(true);
    until("a is alone", || async {
        !a.send(GetFleetStatus).await.unwrap().joined
    })
    .await;
    // b's heartbeats reap a once its liveness lapses: the lock goes with it, and b may delete
    // x (the bound docs/fleet.md states for a cut longer than the TTL).
    until("b reaps a and claims x", || async {
        claim(&b, &["x"]).await == names(&["x"])
    })
    .await;
    deleted(&b, &["x"]).await;
    proxy.set_cut(false);
    joined(&a, 2).await;
    // Back without a restart: the index no longer knows x, so a's next lookup of it probes the
    // store (and misses there), never loads it on the index's word.
    assert_eq!(lock(&a, &["x"]).await, vec![FleetLock::Unknown]);
    assert_eq!(usage(&a).await.objects, 0);
}

#[actix_rt::test]
async fn an_unreachable_index_is_reported_and_the_node_rejoins_without_a_restart() {
    let port = free_port();
    let url = format!("redis://:hunter2-secret@127.0.0.1:{port}/0");
    let a = FleetIndex::new(config(&url, "a", Duration::from_millis(300))).start();
    until("a reports why it is alone", || async {
        a.send(GetFleetStatus)
            .await
            .unwrap()
            .reason
            .is_some_and(|r| r != "not connected yet")
    })
    .await;
    let err = a
        .send(FleetStored::found(vec![obj("x", "", 1)]))
        .await
        .unwrap()
        .unwrap_err();
    assert!(matches!(err, FleetError::Unreachable(_)), "{err:?}");
    let status = a.send(GetFleetStatus).await.unwrap();
    assert!(!status.joined);
    for text in [format!("{err}"), format!("{status:?}")] {
        assert!(!text.contains("hunter2"), "the password leaked: {text}");
    }

    // The server comes up (with a password): the node joins on its own.
    let auth = ["--requirepass", "hunter2-secret"];
    let redis = RedisServer::start_on(port, &auth);
    joined(&a, 1).await;
    found(&a, "x", "", 1).await;

    // It goes away: the next request fails at once, and the node is alone.
    drop(redis);
    until("a notices the index is gone", || async {
        a.send(GetFleetUsage).await.unwrap().is_err()
    })
    .await;
    assert!(!a.send(GetFleetStatus).await.unwrap().joined);
    // And back (empty, as a restarted server without persistence): the node joins again.
    let _redis = RedisServer::start_on(port, &auth);
    joined(&a, 2).await;
    assert_eq!(
        usage(&a).await,
        FleetUsage::default(),
        "a restarted index starts empty"
    );
}
