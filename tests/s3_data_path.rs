//! The `s3` adapter's request handling against scripted HTTP servers (no Garage): which
//! failures are retried, what a failure's message says, that a GET whose body stalls
//! mid-stream ends within the attempt timeout, that every failure is the right kind of failure
//! (a missing bucket is an error, never a miss; a storm of 503s opens the breaker; a skewed
//! clock is corrected). Each test runs on both data paths where the behaviour applies to both.

use kvtier_testkit as support;

use std::io::{Read, Write};
use std::net::TcpListener;
use std::sync::mpsc;
use std::time::{Duration, Instant};

use bytes::BytesMut;
use kvtier::actors::backends::s3::{DataPath, S3Config};
use kvtier::{AdapterConfig, AdapterSpec, Tier, TierConfig};
use support::{key, payload};

/// One scripted answer: these bytes, then close the connection or hold it open (unfinished)
/// until the test process ends.
struct Reply {
    bytes: Vec<u8>,
    hold: bool,
}

/// Serves one connection per reply in `replies`, reading each request head and body first;
/// sends each request head (request line first) on the channel. Health checks (the GET of
/// `.kvtier-health-check` that status sends) are answered 404 `NoSuchKey` and neither take a
/// reply nor reach the channel; see [`scripted_probes`].
fn scripted(replies: Vec<Reply>) -> (u16, mpsc::Receiver<String>) {
    scripted_probes(replies, || {
        status(404, "NoSuchKey", "The specified key does not exist.")
    })
}

/// [`scripted`], answering health checks with `probe()`. Requests beyond the replies are held
/// unanswered.
fn scripted_probes(replies: Vec<Reply>, probe: fn() -> Reply) -> (u16, mpsc::Receiver<String>) {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        let mut held = Vec::new();
        let mut replies = replies.into_iter();
        loop {
            let Ok((mut c, _)) = listener.accept() else {
                return;
            };
            let head = support::read_request_head(&mut c);
            let length: usize = head
                .lines()
                .find_map(|l| {
                    let (k, v) = l.split_once(':')?;
                    k.eq_ignore_ascii_case("content-length")
                        .then(|| v.trim().parse().ok())?
                })
                .unwrap_or(0);
            let mut body = vec![0u8; length];
            let _ = c.read_exact(&mut body);
            let first = head.lines().next().unwrap_or_default();
            let reply = if first.contains(".kvtier-health-check") {
                probe()
            } else {
                let _ = tx.send(head);
                match replies.next() {
                    Some(reply) => reply,
                    // Beyond the script: held open, unanswered, until the test process ends.
                    None => Reply {
                        bytes: Vec::new(),
                        hold: true,
                    },
                }
            };
            let _ = c.write_all(&reply.bytes);
            if reply.hold {
                held.push(c);
            }
        }
    });
    (port, rx)
}

fn status(code: u16, s3_code: &str, message: &str) -> Reply {
    let body = format!(
        "<?xml version=\"1.0\" encoding=\"UTF-8\"?><Error><Code>{s3_code}</Code><Message>{message}</Message></Error>"
    );
    Reply {
        bytes: format!(
            "HTTP/1.1 {code} X\r\nContent-Type: application/xml\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
            body.len()
        )
        .into_bytes(),
        hold: false,
    }
}

fn ok() -> Reply {
    Reply {
        bytes: b"HTTP/1.1 200 OK\r\nContent-Length: 0\r\nConnection: close\r\n\r\n".to_vec(),
        hold: false,
    }
}

async fn tier(port: u16, path: DataPath, attempt_timeout: Option<f64>) -> Tier {
    let mut c = S3Config::new(format!("http://127.0.0.1:{port}"), "garage")
        .bucket("scripted")
        .access_key_id("GKscripted")
        .secret_access_key("scripted-secret");
    c.s3_data_path = path;
    c.s3_attempt_timeout_secs = attempt_timeout;
    c.circuit_breaker_cooldown_secs = 60.0;
    let tier = Tier::start(&{
        let mut built = TierConfig::default();
        built.adapters = vec![{
            let mut built = AdapterConfig::default();
            built.common = Default::default();
            built.spec = AdapterSpec::S3(c);
            built
        }];
        built.eviction_interval_ms = 50;
        built
    })
    .await
    .unwrap();
    let status = tier.status().await.unwrap();
    let want = match path {
        DataPath::Direct => "direct",
        DataPath::Sdk => "sdk",
    };
    assert!(
        status.adapters[0].details["data_path"]
            .as_str()
            .is_some_and(|p| p.starts_with(want)),
        "{status:?}"
    );
    tier
}

/// 503 SlowDown and 500 are retried with backoff and the PUT then succeeds; on both paths.
#[actix_rt::test]
async fn slow_down_and_server_errors_are_retried() {
    for path in [DataPath::Direct, DataPath::Sdk] {
        let (port, seen) = scripted(vec![
            status(503, "SlowDown", "Please reduce your request rate."),
            status(500, "InternalError", "We encountered an internal error."),
            ok(),
        ]);
        let tier = tier(port, path, None).await;
        let rep = tier
            .store(vec![key(1)], vec![payload(1, 1000)])
            .await
            .unwrap();
        assert!(rep.adapters[0].1.failed.is_empty(), "{path:?}: {rep:?}");
        let requests: Vec<String> = seen.try_iter().collect();
        assert_eq!(requests.len(), 3, "{path:?}: {requests:?}");
        assert!(
            requests.iter().all(|r| r.starts_with("PUT /scripted/")),
            "{requests:?}"
        );
        tier.close().await;
    }
}

/// A 403 is final: one request, and the failure names the status and the S3 error code.
#[actix_rt::test]
async fn access_denied_is_not_retried_and_is_named() {
    for path in [DataPath::Direct, DataPath::Sdk] {
        let (port, seen) = scripted(vec![status(403, "AccessDenied", "Access Denied"), ok()]);
        let tier = tier(port, path, None).await;
        let rep = tier
            .store(vec![key(1)], vec![payload(1, 1000)])
            .await
            .unwrap();
        let failed = &rep.adapters[0].1.failed;
        assert_eq!(failed.len(), 1, "{path:?}: {rep:?}");
        assert!(
            failed[0].error.contains("AccessDenied"),
            "{path:?}: {}",
            failed[0].error
        );
        assert!(
            !failed[0].error.contains("scripted-secret"),
            "no secret in errors"
        );
        assert_eq!(seen.try_iter().count(), 1, "{path:?}: a 403 is not retried");
        let status = tier.status().await.unwrap();
        assert_eq!(
            status.adapters[0].details["circuit_breaker"]["consecutive_failures"], 0,
            "{path:?}: an answer from the store is not a connection failure"
        );
        tier.close().await;
    }
}

/// A GET whose server declares 100 bytes, sends 40, then stalls: on the direct path the body is
/// read inside the attempt, so the load ends as a miss within the attempt timeout (0.5 s here)
/// and counts as a connection failure. (The SDK path notices a stalled body only through its
/// stalled-stream protection, after a 20 s grace period: not tested here.)
#[actix_rt::test]
async fn a_get_body_that_stalls_mid_stream_ends_within_the_attempt_timeout() {
    let mut stalled = b"HTTP/1.1 200 OK\r\nContent-Length: 100\r\n\r\n".to_vec();
    stalled.extend_from_slice(&[7u8; 40]);
    let (port, seen) = scripted(vec![Reply {
        bytes: stalled,
        hold: true,
    }]);
    let tier = tier(port, DataPath::Direct, Some(0.5)).await;
    // A hang guard only: what ends the load is the attempt timeout, shown by the count below.
    let got = tokio::time::timeout(
        Duration::from_secs(60),
        tier.load(vec![key(1)], vec![BytesMut::zeroed(100)]),
    )
    .await
    .expect("a stalled body must not hang the load");
    assert!(!got.hits.all(), "a stalled body is a miss");
    // The stalled attempt timed out and was retried once (a GET is idempotent); the retry,
    // held unanswered, timed out too. Without the attempt timeout the first would still hang.
    let lines = request_lines(&seen);
    assert_eq!(lines.len(), 2, "{lines:?}");
    assert!(lines.iter().all(|l| l.starts_with("GET ")), "{lines:?}");
    let status = tier.status().await.unwrap();
    assert_eq!(
        status.adapters[0].details["circuit_breaker"]["consecutive_failures"], 1,
        "{status:?}"
    );
    tier.close().await;
}

fn reply(head: &str, body: &str) -> Reply {
    Reply {
        bytes: format!(
            "HTTP/1.1 {head}\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
            body.len()
        )
        .into_bytes(),
        hold: false,
    }
}

/// A HEAD answered 404 (no body, as S3 sends it).
fn head_404() -> Reply {
    Reply {
        bytes: b"HTTP/1.1 404 Not Found\r\nContent-Length: 0\r\nConnection: close\r\n\r\n".to_vec(),
        hold: false,
    }
}

fn request_lines(seen: &mpsc::Receiver<String>) -> Vec<String> {
    seen.try_iter()
        .map(|h| h.lines().next().unwrap_or("").to_owned())
        .collect()
}

async fn breaker(tier: &Tier) -> serde_json::Value {
    let status = tier.status().await.unwrap();
    status.adapters[0].details["circuit_breaker"].clone()
}

/// A GET answered 404 `NoSuchBucket` (bucket deleted or misnamed) is an error for the adapter,
/// never a miss: the breaker opens at once, status is unhealthy, the message names the bucket,
/// and the next requests are refused without reaching the store.
#[actix_rt::test]
async fn no_such_bucket_on_get_is_an_error_not_a_miss() {
    for path in [DataPath::Direct, DataPath::Sdk] {
        let (port, seen) = scripted(vec![status(
            404,
            "NoSuchBucket",
            "The specified bucket does not exist",
        )]);
        let tier = tier(port, path, None).await;
        let got = tier.load(vec![key(1)], vec![BytesMut::zeroed(100)]).await;
        assert!(!got.hits.all(), "{path:?}");
        let status = tier.status().await.unwrap();
        assert!(!status.adapters[0].is_healthy, "{path:?}: {status:?}");
        let b = &status.adapters[0].details["circuit_breaker"];
        assert_eq!(b["state"], "open", "{path:?}: {b}");
        let why = b["last_failure"].as_str().unwrap_or_default();
        assert!(
            why.contains("bucket \"scripted\" does not exist"),
            "{path:?}: {why}"
        );
        assert_eq!(request_lines(&seen).len(), 1, "{path:?}: not retried");
        // The next lookup is refused at once: no request.
        let found = tier.lookup_and_lock(vec![key(2)]).await.unwrap();
        assert!(!found.all());
        assert_eq!(
            request_lines(&seen).len(),
            0,
            "{path:?}: the breaker is open"
        );
        tier.close().await;
    }
}

/// A HEAD 404 has no body: the adapter asks whether the bucket exists (`HeadBucket`) before it
/// calls the 404 a miss. A missing bucket is then an error; an existing one makes the 404 a
/// miss, and later 404s within `s3_bucket_check_secs` are misses without asking again.
#[actix_rt::test]
async fn a_head_404_is_a_miss_only_on_an_existing_bucket() {
    for path in [DataPath::Direct, DataPath::Sdk] {
        // The bucket is gone.
        let (port, seen) = scripted(vec![head_404(), head_404()]);
        let gone = tier(port, path, None).await;
        let found = gone.lookup_and_lock(vec![key(1)]).await.unwrap();
        assert!(!found.all());
        let lines = request_lines(&seen);
        assert_eq!(lines.len(), 2, "{path:?}: {lines:?}");
        assert!(lines[0].starts_with("HEAD /scripted/"), "{lines:?}");
        assert!(lines[1].starts_with("HEAD /scripted"), "{lines:?}");
        assert!(!lines[1].starts_with("HEAD /scripted/test"), "{lines:?}");
        let b = breaker(&gone).await;
        assert_eq!(b["state"], "open", "{path:?}: {b}");
        assert!(
            b["last_failure"]
                .as_str()
                .unwrap_or_default()
                .contains("bucket \"scripted\" does not exist"),
            "{path:?}: {b}"
        );
        gone.close().await;

        // The bucket exists: a miss, checked once.
        let (port, seen) = scripted(vec![head_404(), ok(), head_404(), head_404()]);
        let there = tier(port, path, None).await;
        for i in 0..2 {
            let found = there.lookup_and_lock(vec![key(i)]).await.unwrap();
            assert!(!found.all());
        }
        assert_eq!(request_lines(&seen).len(), 3, "{path:?}: one bucket check");
        let status = there.status().await.unwrap();
        assert!(status.adapters[0].is_healthy, "{path:?}: {status:?}");
        assert_eq!(
            status.adapters[0].details["circuit_breaker"]["consecutive_failures"],
            0
        );
        there.close().await;
    }
}

/// A storm of 503 SlowDown that outlasts the retries counts toward the breaker: a batch of 3
/// keys that fail after their retries opens it, and the next requests are refused without a
/// request instead of each paying the full retry ladder.
#[actix_rt::test]
async fn a_storm_of_503s_opens_the_breaker() {
    for path in [DataPath::Direct, DataPath::Sdk] {
        let slow_down = || status(503, "SlowDown", "Please reduce your request rate.");
        let (port, seen) = scripted((0..9).map(|_| slow_down()).collect());
        let tier = tier(port, path, None).await;
        let rep = tier
            .store(
                vec![key(1), key(2), key(3)],
                vec![payload(1, 100), payload(2, 100), payload(3, 100)],
            )
            .await
            .unwrap();
        assert_eq!(rep.adapters[0].1.failed.len(), 3, "{path:?}: {rep:?}");
        assert_eq!(
            request_lines(&seen).len(),
            9,
            "{path:?}: 3 attempts per key"
        );
        let b = breaker(&tier).await;
        assert_eq!(b["state"], "open", "{path:?}: {b}");
        assert!(
            b["last_failure"]
                .as_str()
                .unwrap_or_default()
                .contains("SlowDown"),
            "{b}"
        );
        let fast = b["fast_failures"].as_u64().unwrap();
        let rep = tier
            .store(vec![key(4)], vec![payload(4, 100)])
            .await
            .unwrap();
        assert!(rep.adapters[0].1.failed[0]
            .error
            .contains("circuit breaker open"));
        let b = breaker(&tier).await;
        assert_eq!(
            b["fast_failures"],
            fast + 1,
            "{path:?}: refused, not retried: {b}"
        );
        assert_eq!(request_lines(&seen).len(), 0, "{path:?}: no request");
        tier.close().await;
    }
}

/// A 429 with `Retry-After: 2` is retried after 2 s (the backoff alone would wait at most
/// 1 s before the first retry). Direct path (the SDK's standard strategy has its own rules).
#[actix_rt::test]
async fn retry_after_is_honoured() {
    let throttled = reply(
        "429 Too Many Requests\r\nRetry-After: 2\r\nContent-Type: application/xml",
        "<Error><Code>SlowDown</Code></Error>",
    );
    let (port, seen) = scripted(vec![throttled, ok()]);
    let tier = tier(port, DataPath::Direct, None).await;
    let t = Instant::now();
    let rep = tier
        .store(vec![key(1)], vec![payload(1, 100)])
        .await
        .unwrap();
    let took = t.elapsed();
    assert!(rep.adapters[0].1.failed.is_empty(), "{rep:?}");
    assert_eq!(request_lines(&seen).len(), 2);
    assert!(took >= Duration::from_secs(2), "retried after {took:?}");
    tier.close().await;
}

/// A GET or HEAD that times out is retried once (idempotent); a PUT that times out is not
/// (it may still be landing, and its body would be sent again to a store that does not
/// answer).
#[actix_rt::test]
async fn timed_out_gets_and_heads_are_retried_once_puts_are_not() {
    let frozen = || Reply {
        bytes: Vec::new(),
        hold: true,
    };
    let mut body = b"HTTP/1.1 200 OK\r\nContent-Length: 100\r\nConnection: close\r\n\r\n".to_vec();
    body.extend_from_slice(&[7u8; 100]);
    let sized = Reply {
        bytes: b"HTTP/1.1 200 OK\r\nContent-Length: 100\r\nConnection: close\r\n\r\n".to_vec(),
        hold: false,
    };
    let (port, seen) = scripted(vec![
        frozen(),
        Reply {
            bytes: body,
            hold: false,
        },
        frozen(),
        sized,
        frozen(),
    ]);
    let tier = tier(port, DataPath::Direct, Some(0.5)).await;
    let got = tier.load(vec![key(1)], vec![BytesMut::zeroed(100)]).await;
    assert!(got.hits.all(), "the retry after the timeout loaded it");
    let lines = request_lines(&seen);
    assert_eq!(lines.len(), 2, "{lines:?}");
    assert!(lines.iter().all(|l| l.starts_with("GET ")), "{lines:?}");
    let found = tier.lookup_and_lock(vec![key(1)]).await.unwrap();
    assert!(found.all(), "the retry after the timeout found it");
    tier.unlock(vec![key(1)]);
    let lines = request_lines(&seen);
    assert_eq!(lines.len(), 2, "{lines:?}");
    let rep = tier
        .store(vec![key(2)], vec![payload(2, 100)])
        .await
        .unwrap();
    assert_eq!(rep.adapters[0].1.failed.len(), 1, "{rep:?}");
    assert!(
        rep.adapters[0].1.failed[0].error.contains("timeout"),
        "{rep:?}"
    );
    let lines = request_lines(&seen);
    assert_eq!(
        lines.len(),
        1,
        "a PUT is not retried after a timeout: {lines:?}"
    );
    tier.close().await;
}

/// `RequestTimeTooSkewed`: the request is signed again with the server's clock (from its
/// `Date` header) and retried; on both paths.
#[actix_rt::test]
async fn a_skewed_clock_adopts_the_servers_time() {
    for path in [DataPath::Direct, DataPath::Sdk] {
        let server_time = std::time::SystemTime::now() + Duration::from_secs(3600);
        let skewed = reply(
            &format!(
                "403 Forbidden\r\nDate: {}\r\nContent-Type: application/xml",
                httpdate::fmt_http_date(server_time)
            ),
            "<Error><Code>RequestTimeTooSkewed</Code><Message>The difference between the request time and the current time is too large.</Message></Error>",
        );
        let (port, seen) = scripted(vec![skewed, ok()]);
        let tier = tier(port, path, None).await;
        let rep = tier
            .store(vec![key(1)], vec![payload(1, 100)])
            .await
            .unwrap();
        assert!(rep.adapters[0].1.failed.is_empty(), "{path:?}: {rep:?}");
        let heads: Vec<String> = seen.try_iter().collect();
        assert_eq!(heads.len(), 2, "{path:?}");
        let signed_at = |head: &str| {
            let v = head
                .lines()
                .find_map(|l| {
                    let (k, v) = l.split_once(':')?;
                    k.eq_ignore_ascii_case("x-amz-date")
                        .then(|| v.trim().to_owned())
                })
                .expect("x-amz-date");
            // 20261201T050102Z
            let t = format!(
                "{}-{}-{}T{}:{}:{}Z",
                &v[0..4],
                &v[4..6],
                &v[6..8],
                &v[9..11],
                &v[11..13],
                &v[13..15]
            );
            humantime::parse_rfc3339(&t).unwrap()
        };
        let diff = |a: std::time::SystemTime, b: std::time::SystemTime| {
            a.duration_since(b)
                .or_else(|_| b.duration_since(a))
                .unwrap()
        };
        let first = signed_at(&heads[0]);
        let second = signed_at(&heads[1]);
        assert!(
            diff(first, std::time::SystemTime::now()) < Duration::from_secs(120),
            "{path:?}"
        );
        assert!(
            diff(second, server_time) < Duration::from_secs(120),
            "{path:?}: the retry signs with the server's clock"
        );
        tier.close().await;
    }
}

/// The value of `kvtier_healthy` in the tier's metrics.
fn healthy_gauge(tier: &Tier) -> String {
    let text = tier.metrics_text().expect("metrics are on");
    text.lines()
        .find(|l| l.starts_with("kvtier_healthy{"))
        .and_then(|l| l.rsplit_once(' '))
        .map(|(_, v)| v.to_owned())
        .unwrap_or_default()
}

/// Status asks the store whether it can serve (a GET of `.kvtier-health-check`, before any data
/// request): `NoSuchKey` is healthy; a missing bucket, refused credentials or an unreachable
/// endpoint are unhealthy, with the reason, in status and in `kvtier_healthy`; an answer later
/// clears a refusal. On both data paths.
#[actix_rt::test]
async fn status_is_unhealthy_when_the_store_cannot_serve() {
    for path in [DataPath::Direct, DataPath::Sdk] {
        // A store that answers: healthy, and the health checks never reach the script.
        let (port, seen) = scripted(vec![]);
        let t = tier(port, path, None).await;
        let s = t.status().await.unwrap();
        assert!(s.adapters[0].is_healthy, "{path:?}: {s:?}");
        assert_eq!(s.adapters[0].reason, None);
        assert_eq!(
            s.adapters[0].details["circuit_breaker"]["health_checks"], 2,
            "{path:?}: one per status: {s:?}"
        );
        assert_eq!(healthy_gauge(&t), "1");
        assert_eq!(request_lines(&seen).len(), 0);
        t.close().await;

        // The bucket does not exist: unhealthy, the bucket named, the breaker open.
        let (port, _seen) = scripted_probes(vec![], || {
            status(404, "NoSuchBucket", "The specified bucket does not exist")
        });
        let t = tier(port, path, None).await;
        let s = t.status().await.unwrap();
        let a = &s.adapters[0];
        assert!(!a.is_healthy, "{path:?}: {s:?}");
        let why = a.reason.clone().unwrap_or_default();
        assert!(
            why.contains("bucket \"scripted\" does not exist"),
            "{path:?}: {why}"
        );
        assert_eq!(a.details["circuit_breaker"]["state"], "open", "{path:?}");
        assert_eq!(healthy_gauge(&t), "0", "{path:?}");
        t.close().await;

        // Refused credentials: unhealthy with the S3 code, the breaker left closed (a status
        // request must not cut traffic off).
        let (port, _seen) = scripted_probes(vec![], || {
            status(403, "InvalidAccessKeyId", "The access key does not exist.")
        });
        let t = tier(port, path, None).await;
        let s = t.status().await.unwrap();
        let a = &s.adapters[0];
        assert!(!a.is_healthy, "{path:?}: {s:?}");
        let why = a.reason.clone().unwrap_or_default();
        assert!(
            why.contains("health check failed") && why.contains("InvalidAccessKeyId"),
            "{path:?}: {why}"
        );
        assert!(!why.contains("scripted-secret"), "no secret in the reason");
        assert_eq!(a.details["circuit_breaker"]["state"], "closed", "{path:?}");
        assert_eq!(healthy_gauge(&t), "0", "{path:?}");
        t.close().await;

        // A plain AccessDenied on the missing probe object is what AWS answers to credentials
        // without s3:ListBucket (which kvtier does not need): healthy.
        let (port, _seen) =
            scripted_probes(vec![], || status(403, "AccessDenied", "Access Denied"));
        let t = tier(port, path, None).await;
        let s = t.status().await.unwrap();
        assert!(s.adapters[0].is_healthy, "{path:?}: {s:?}");
        t.close().await;
    }

    // Nothing listens: unhealthy, a connection failure.
    let port = {
        let l = TcpListener::bind("127.0.0.1:0").unwrap();
        l.local_addr().unwrap().port()
    };
    let t = tier(port, DataPath::Direct, None).await;
    let s = t.status().await.unwrap();
    let why = s.adapters[0].reason.clone().unwrap_or_default();
    assert!(!s.adapters[0].is_healthy, "{s:?}");
    assert!(why.contains("health check failed"), "{why}");
    assert_eq!(healthy_gauge(&t), "0");
    t.close().await;
}

/// One deadline per request across its retries (`retry_timeout_secs`): a store answering 503
/// with `Retry-After: 10` is asked once when the deadline (1 s) cannot fit the wait, where
/// the attempt count alone (3) would have allowed two more; the error says the deadline
/// passed. A store that never answers is given up at the deadline, not after the 60 s attempt
/// timeout. No timing is asserted: the counts and the messages show what ended the request.
#[actix_rt::test]
async fn a_request_ends_by_its_deadline_whatever_the_retries_say() {
    let unavailable = || {
        reply(
            "503 Service Unavailable\r\nRetry-After: 10\r\nContent-Type: application/xml",
            "<Error><Code>SlowDown</Code></Error>",
        )
    };
    let (port, seen) = scripted((0..3).map(|_| unavailable()).collect());
    let t = deadline_tier(port, 1.0).await;
    let rep = tokio::time::timeout(
        Duration::from_secs(120),
        t.store(vec![key(1)], vec![payload(1, 100)]),
    )
    .await
    .expect("hang guard")
    .unwrap();
    let failed = &rep.adapters[0].1.failed;
    assert_eq!(failed.len(), 1, "{rep:?}");
    assert!(
        failed[0].error.contains("deadline passed")
            && failed[0].error.contains("retry_timeout_secs = 1s"),
        "{}",
        failed[0].error
    );
    assert_eq!(request_lines(&seen).len(), 1, "no retry past the deadline");
    t.close().await;

    // Never answered: the GET's attempt (60 s by default) is cut to the deadline, and no
    // retry follows it.
    let frozen = || Reply {
        bytes: Vec::new(),
        hold: true,
    };
    let (port, seen) = scripted((0..3).map(|_| frozen()).collect());
    let t = deadline_tier(port, 1.0).await;
    let got = tokio::time::timeout(
        Duration::from_secs(120),
        t.load(vec![key(1)], vec![BytesMut::zeroed(100)]),
    )
    .await
    .expect("hang guard");
    assert!(!got.hits.all());
    assert_eq!(request_lines(&seen).len(), 1, "no retry past the deadline");
    let s = t.status().await.unwrap();
    let last = s.adapters[0].details["circuit_breaker"]["last_failure"]
        .as_str()
        .unwrap_or_default()
        .to_owned();
    assert!(last.contains("deadline passed"), "{last}");
    t.close().await;
}

/// A direct-path tier with `retry_timeout_secs = deadline` and the default attempt timeout;
/// its breaker opens on the first failure so that status shows it.
async fn deadline_tier(port: u16, deadline: f64) -> Tier {
    let mut c = S3Config::new(format!("http://127.0.0.1:{port}"), "garage")
        .bucket("scripted")
        .access_key_id("GKscripted")
        .secret_access_key("scripted-secret");
    c.retry_timeout_secs = deadline;
    c.circuit_breaker_cooldown_secs = 60.0;
    let mut built = TierConfig::default();
    built.adapters = vec![{
        let mut a = AdapterConfig::default();
        a.spec = AdapterSpec::S3(c);
        a
    }];
    Tier::start(&built).await.unwrap()
}

/// With `s3_checksum = "crc32c"` a load checks the CRC32C the store keeps for the object
/// (`x-amz-checksum-mode: ENABLED`, answered with `x-amz-checksum-crc32c`): a body that does
/// not match it is a miss (retried first, as a body damaged in transit), and one that matches
/// is a hit. Direct path.
#[actix_rt::test]
async fn a_load_whose_bytes_do_not_match_the_stored_crc32c_is_a_miss() {
    use kvtier::actors::backends::s3::ChecksumMode;
    let body = [7u8; 100];
    // CRC32C (Castagnoli) of 100 bytes of 7, big-endian, base64 (computed apart; the same
    // routine gives `4waSgw==` for the check value of "123456789").
    let good = "RIwLEg==";
    let answer = |crc: &str| {
        let mut bytes = format!(
            "HTTP/1.1 200 OK\r\nContent-Length: 100\r\nx-amz-checksum-crc32c: {crc}\r\nConnection: close\r\n\r\n"
        )
        .into_bytes();
        bytes.extend_from_slice(&[7u8; 100]);
        Reply { bytes, hold: false }
    };
    let (port, seen) = scripted(vec![
        answer("AAAAAA=="),
        answer("AAAAAA=="),
        answer("AAAAAA=="),
        answer(good),
    ]);
    let mut c = S3Config::new(format!("http://127.0.0.1:{port}"), "garage")
        .bucket("scripted")
        .access_key_id("GKscripted")
        .secret_access_key("scripted-secret");
    c.s3_checksum = ChecksumMode::Crc32c;
    let mut built = TierConfig::default();
    built.adapters = vec![{
        let mut a = AdapterConfig::default();
        a.spec = AdapterSpec::S3(c);
        a
    }];
    let t = Tier::start(&built).await.unwrap();
    let got = t.load(vec![key(1)], vec![BytesMut::zeroed(100)]).await;
    assert!(!got.hits.all(), "a CRC32C mismatch is a miss");
    let heads: Vec<String> = seen.try_iter().collect();
    assert_eq!(heads.len(), 3, "retried, as a body damaged in transit");
    assert!(
        heads.iter().all(|h| h
            .to_ascii_lowercase()
            .contains("x-amz-checksum-mode: enabled")),
        "{heads:?}"
    );
    let got = t.load(vec![key(1)], vec![BytesMut::zeroed(100)]).await;
    assert!(got.hits.all(), "the matching CRC32C is a hit");
    assert_eq!(&got.buffers[0][..], &body[..]);
    t.close().await;
}
