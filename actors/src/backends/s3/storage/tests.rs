//! Tests of the S3 storage: configuration to client, credentials, errors as the seam names
//! them, without a server (the Garage suites are in `tests/`).

use super::*;
use aws_credential_types::provider::{future, ProvideCredentials};
use aws_credential_types::Credentials;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::SystemTime;

/// A credential source answering from a list (the last answer repeats): access key id and
/// lifetime.
#[derive(Debug)]
struct Rotating {
    calls: Arc<AtomicUsize>,
    answers: Vec<(&'static str, Duration)>,
}

impl ProvideCredentials for Rotating {
    fn provide_credentials<'a>(&'a self) -> future::ProvideCredentials<'a>
    where
        Self: 'a,
    {
        let n = self.calls.fetch_add(1, Ordering::SeqCst);
        let (id, ttl) = self.answers[n.min(self.answers.len() - 1)];
        future::ProvideCredentials::ready(Ok(Credentials::new(
            id,
            "secret",
            Some("token".into()),
            Some(SystemTime::now() + ttl),
            "test",
        )))
    }
}

/// A server answering every request 200 and reporting, per request, the access key id it
/// was signed with and whether the SDK sent it (its `user-agent`).
fn recording_server() -> (u16, std::sync::mpsc::Receiver<(String, bool)>) {
    recording_server_answering(Vec::new())
}

/// [`recording_server`], answering the first requests with `first` (raw responses).
fn recording_server_answering(
    first: Vec<String>,
) -> (u16, std::sync::mpsc::Receiver<(String, bool)>) {
    use std::io::{Read, Write};
    let mut first = first.into_iter();
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        for conn in listener.incoming() {
            let Ok(mut c) = conn else { break };
            let mut head = Vec::new();
            let mut byte = [0u8; 1];
            while !head.ends_with(b"\r\n\r\n") && c.read(&mut byte).unwrap_or(0) == 1 {
                head.push(byte[0]);
            }
            let head = String::from_utf8_lossy(&head).to_lowercase();
            let header = |name: &str| {
                head.lines()
                    .find_map(|l| l.strip_prefix(name).map(|v| v.trim().to_owned()))
            };
            let len: usize = header("content-length:")
                .and_then(|v| v.parse().ok())
                .unwrap_or(0);
            let mut body = vec![0u8; len];
            let _ = c.read_exact(&mut body);
            let akid = header("authorization:")
                .and_then(|a| Some(a.split_once("credential=")?.1.split('/').next()?.to_owned()))
                .unwrap_or_default();
            let sdk = header("user-agent:").is_some_and(|u| u.contains("aws-sdk-rust"));
            let _ = tx.send((akid, sdk));
            let answer = first.next().unwrap_or_else(|| {
                "HTTP/1.1 200 OK\r\nContent-Length: 0\r\nConnection: close\r\n\r\n".into()
            });
            let _ = c.write_all(answer.as_bytes());
        }
    });
    (port, rx)
}

fn block_on<F: Future>(f: F) -> F::Output {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap()
        .block_on(f)
}

async fn put_one(st: &mut S3Storage, i: u8) -> Result<(), BackendError> {
    let key = ObjectKey::new("m", 0, vec![i]).unwrap();
    let io = st.put(vec![(key, Bytes::from_static(b"data"))]);
    let mut res = io.resolve(st).await;
    res.pop().unwrap()
}

async fn storage(port: u16, provider: impl ProvideCredentials + 'static) -> S3Storage {
    storage_on(port, provider, DataPath::Direct).await
}

async fn storage_on(
    port: u16,
    provider: impl ProvideCredentials + 'static,
    path: DataPath,
) -> S3Storage {
    let mut cfg = S3Config::for_endpoint(
        &format!("http://127.0.0.1:{port}"),
        "scripted",
        "garage",
        "unused",
        "unused",
    );
    cfg.s3_data_path = path;
    let provider = SharedCredentialsProvider::new(provider);
    S3Storage::open_with(&cfg, NameFormat::default(), 0, None, Some(provider))
        .await
        .unwrap()
}

/// `close` returns once the I/O runtime's tasks are gone, and with them their sockets (the
/// soak counts descriptors right after `Tier::close`). Fails with the runtime shut down
/// in the background.
#[test]
fn close_returns_once_the_io_runtime_has_dropped_its_tasks() {
    block_on(async {
        let (port, _seen) = recording_server();
        let mut st = storage(port, Credentials::new("akid", "secret", None, None, "t")).await;
        /// Lets go of its `Arc` slowly, so a close that does not wait returns first.
        struct SlowDrop {
            _held: Arc<()>,
        }
        impl Drop for SlowDrop {
            fn drop(&mut self) {
                std::thread::sleep(Duration::from_millis(100));
            }
        }
        let held = Arc::new(());
        let (started, running) = tokio::sync::oneshot::channel();
        let task_holds = SlowDrop {
            _held: held.clone(),
        };
        st.handle.spawn(async move {
            let _held = task_holds;
            let _ = started.send(());
            std::future::pending::<()>().await
        });
        running.await.unwrap();
        assert_eq!(Arc::strong_count(&held), 2);
        st.close();
        assert_eq!(
            Arc::strong_count(&held),
            1,
            "a task of the I/O runtime outlived close"
        );
    });
}

/// Temporary credentials on the direct path: refreshed in the background once within
/// [`REFRESH_AHEAD`] of expiry, and the next requests sign with the new ones.
#[test]
fn the_direct_path_refreshes_expiring_credentials() {
    block_on(async {
        let (port, seen) = recording_server();
        let calls = Arc::new(AtomicUsize::new(0));
        let mut st = storage(
            port,
            Rotating {
                calls: calls.clone(),
                answers: vec![
                    ("akidone", Duration::from_secs(120)),
                    ("akidtwo", Duration::from_secs(3600)),
                ],
            },
        )
        .await;
        assert_eq!(st.details()["data_path"], "direct");
        put_one(&mut st, 0).await.unwrap();
        assert_eq!(seen.recv().unwrap(), ("akidone".into(), false));
        // That request started the refresh (2 minutes left); a later one picks it up.
        let mut fresh = false;
        for i in 1..50 {
            tokio::time::sleep(Duration::from_millis(20)).await;
            put_one(&mut st, i).await.unwrap();
            let (akid, sdk) = seen.recv().unwrap();
            assert!(!sdk, "the direct path carries the data throughout");
            if akid == "akidtwo" {
                fresh = true;
                break;
            }
            assert_eq!(akid, "akidone");
        }
        assert!(fresh, "the refreshed credentials were never used");
        assert_eq!(calls.load(Ordering::SeqCst), 2, "one refresh, no more");
        assert_eq!(st.details()["direct_credentials"]["refreshes"], 1);
    });
}

/// Credentials within [`SDK_FALLBACK_WITHIN`] of expiry are not used by the direct path:
/// the SDK, whose identity cache handles them, carries the request.
#[test]
fn nearly_expired_credentials_send_data_through_the_sdk() {
    block_on(async {
        let (port, seen) = recording_server();
        let mut st = storage(
            port,
            Rotating {
                calls: Arc::new(AtomicUsize::new(0)),
                answers: vec![("akidshort", Duration::from_secs(45))],
            },
        )
        .await;
        put_one(&mut st, 0).await.unwrap();
        let (_, sdk) = seen.recv().unwrap();
        assert!(
            sdk,
            "a request signed with credentials about to expire went direct"
        );
    });
}

/// An S3 error answer with `status` (e.g. `"403 Forbidden"`) and error `code`.
fn refusal(status: &str, code: &str) -> String {
    let body = format!("<Error><Code>{code}</Code><Message>no</Message></Error>");
    format!(
        "HTTP/1.1 {status}\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    )
}

/// A source handing out `akidold`, then `akidnew` (both valid for an hour).
fn old_then_new(calls: &Arc<AtomicUsize>) -> Rotating {
    Rotating {
        calls: calls.clone(),
        answers: vec![
            ("akidold", Duration::from_secs(3600)),
            ("akidnew", Duration::from_secs(3600)),
        ],
    }
}

/// A request whose credentials are refused (`ExpiredToken`, `InvalidAccessKeyId`, …)
/// fetches fresh ones from the source and is retried once with them; the storage then
/// signs later requests with them too.
#[test]
fn refused_credentials_are_fetched_again_and_the_request_retried() {
    for code in ["ExpiredToken", "InvalidAccessKeyId", "TokenRefreshRequired"] {
        block_on(async {
            let refused = refusal("403 Forbidden", code);
            let (port, seen) = recording_server_answering(vec![refused]);
            let calls = Arc::new(AtomicUsize::new(0));
            let mut st = storage(port, old_then_new(&calls)).await;
            put_one(&mut st, 0).await.unwrap();
            assert_eq!(seen.recv().unwrap(), ("akidold".into(), false), "{code}");
            assert_eq!(seen.recv().unwrap(), ("akidnew".into(), false), "{code}");
            assert_eq!(calls.load(Ordering::SeqCst), 2, "{code}: one refresh");
            put_one(&mut st, 1).await.unwrap();
            assert_eq!(seen.recv().unwrap().0, "akidnew", "{code}: adopted");
            assert_eq!(st.details()["direct_credentials"]["refreshes"], 1);
        });
    }
}

/// A source that only ever hands out credentials within [`REFRESH_AHEAD`] of expiry is
/// asked again after [`REFRESH_RETRY`], not at every request.
#[test]
fn short_lived_credentials_are_not_refreshed_at_every_request() {
    block_on(async {
        let (port, seen) = recording_server();
        let calls = Arc::new(AtomicUsize::new(0));
        let mut st = storage(
            port,
            Rotating {
                calls: calls.clone(),
                answers: vec![("akidshort", Duration::from_secs(120))],
            },
        )
        .await;
        for i in 0..30 {
            put_one(&mut st, i).await.unwrap();
            seen.recv().unwrap();
        }
        let n = calls.load(Ordering::SeqCst);
        assert!(n <= 3, "the source was asked {n} times for 30 requests");
    });
}

/// On the SDK path too, a request whose credentials are refused is retried once with
/// credentials fetched again from the source (through a config override: the SDK's
/// identity cache keeps the ones it holds).
#[test]
fn refused_credentials_on_the_sdk_path_are_fetched_again() {
    block_on(async {
        let refused = refusal("400 Bad Request", "ExpiredToken");
        let (port, seen) = recording_server_answering(vec![refused]);
        let calls = Arc::new(AtomicUsize::new(0));
        let mut st = storage_on(port, old_then_new(&calls), DataPath::Sdk).await;
        put_one(&mut st, 0).await.unwrap();
        assert_eq!(seen.recv().unwrap(), ("akidold".into(), true));
        assert_eq!(seen.recv().unwrap(), ("akidnew".into(), true));
        assert_eq!(calls.load(Ordering::SeqCst), 2);
    });
}

/// A credential source that panics on its second call, never answers its third, and
/// answers after that.
#[derive(Debug)]
struct Unruly {
    calls: Arc<AtomicUsize>,
}

impl ProvideCredentials for Unruly {
    fn provide_credentials<'a>(&'a self) -> future::ProvideCredentials<'a>
    where
        Self: 'a,
    {
        let n = self.calls.fetch_add(1, Ordering::SeqCst);
        future::ProvideCredentials::new(async move {
            match n {
                0 => {}
                1 => panic!("credential source panicked (on purpose, in a test)"),
                2 => std::future::pending::<()>().await,
                _ => {
                    return Ok(Credentials::new(
                        "akidlater",
                        "secret",
                        Some("token".into()),
                        Some(SystemTime::now() + Duration::from_secs(3600)),
                        "test",
                    ))
                }
            }
            Ok(Credentials::new(
                "akidfirst",
                "secret",
                Some("token".into()),
                Some(SystemTime::now() + Duration::from_secs(120)),
                "test",
            ))
        })
    }
}

/// A background refresh that panics, then one that hangs, cannot wedge the direct path:
/// requests go on with the current credentials, the panic counts as a failed refresh, the
/// hung one is abandoned after its deadline, and the next refresh lands.
#[test]
fn a_refresh_that_panics_or_hangs_does_not_wedge_the_direct_path() {
    block_on(async {
        let (port, seen) = recording_server();
        let calls = Arc::new(AtomicUsize::new(0));
        let mut st = storage(
            port,
            Unruly {
                calls: calls.clone(),
            },
        )
        .await;
        {
            let path = st.direct.as_mut().unwrap();
            path.refresh_retry = Duration::ZERO;
            path.refresh_deadline = Duration::from_millis(200);
        }
        let mut fresh = false;
        for i in 0..200u32 {
            put_one(&mut st, (i % 250) as u8).await.unwrap();
            let (akid, sdk) = seen.recv().unwrap();
            assert!(!sdk, "the direct path carries the data throughout");
            if akid == "akidlater" {
                fresh = true;
                break;
            }
            assert_eq!(akid, "akidfirst");
            // Polls the refresh (bounded by the loop), not a wait for an outcome.
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        assert!(fresh, "the adapter stayed wedged: {}", st.details());
        let d = st.details();
        assert_eq!(d["direct_credentials"]["refresh_failures"], 2, "{d}");
        assert_eq!(d["direct_credentials"]["refreshing"], false, "{d}");
        assert_eq!(calls.load(Ordering::SeqCst), 4);
    });
}
