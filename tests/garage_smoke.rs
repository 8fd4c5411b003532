//! Smoke tests of the Garage harness (tests/support/garage.rs): start, bucket, signed S3
//! PUT/GET, stop/restart, freeze/thaw, parallel instances.
//!
//! The signed requests use `curl --aws-sigv4` (curl ≥ 7.75), so this file needs no Rust S3
//! client; the S3 backend's own tests exercise Garage through `aws-sdk-s3`.

use kvtier_testkit as support;

use std::path::Path;
use std::process::Command;
use std::time::Instant;

use support::garage::{Garage, TEST_ACCESS_KEY_ID};

/// `curl` a signed S3 request; returns (HTTP status, body).
fn s3(g: &Garage, method: &str, path: &str, upload: Option<&Path>, secret: &str) -> (u16, String) {
    let mut cmd = Command::new("curl");
    cmd.args([
        "-sS",
        "--max-time",
        "10",
        "-w",
        "\n%{http_code}",
        "-X",
        method,
    ])
    .arg("--aws-sigv4")
    .arg(format!("aws:amz:{}:s3", g.region))
    .arg("--user")
    .arg(format!("{}:{}", g.access_key_id, secret))
    // Garage requires this header; curl 7.88 does not add it.
    .args(["-H", "x-amz-content-sha256: UNSIGNED-PAYLOAD"]);
    if let Some(f) = upload {
        cmd.arg("--data-binary").arg(format!("@{}", f.display()));
    }
    cmd.arg(format!("{}{}", g.s3_endpoint, path));
    let out = cmd
        .output()
        .expect("this smoke test needs `curl` (≥ 7.75, for --aws-sigv4) on PATH");
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    let (body, code) = text.rsplit_once('\n').unwrap_or(("", &text));
    (code.trim().parse().unwrap_or(0), body.to_string())
}

#[test]
fn start_bucket_put_get_restart() {
    let t = Instant::now();
    let mut g = Garage::start();
    eprintln!("Garage::start took {:?}", t.elapsed());

    let t = Instant::now();
    g.create_bucket("kvtier-smoke");
    eprintln!("create_bucket took {:?}", t.elapsed());
    let info = g.cli(&["bucket", "info", "kvtier-smoke"]);
    assert!(
        info.lines()
            .any(|l| l.contains("RWO") && l.contains(TEST_ACCESS_KEY_ID)),
        "{info}"
    );
    let key = g.cli(&["key", "info", TEST_ACCESS_KEY_ID]);
    assert!(key.contains("Can create buckets:  true"), "{key}");

    // Signed PUT and GET with the test key; a wrong secret is refused. The `@` of kvtier's
    // object names must be sent as `%40`: Garage (like AWS) signs the URI-encoded path, and
    // curl signs the path as written.
    let file = g.dir().join("payload");
    std::fs::write(&file, b"hello garage").unwrap();
    let secret = g.secret_access_key.clone();
    let (code, body) = s3(&g, "PUT", "/kvtier-smoke/a%40b", Some(&file), &secret);
    assert_eq!(code, 200, "{body}");
    assert_eq!(
        s3(&g, "GET", "/kvtier-smoke/a%40b", None, &secret),
        (200, "hello garage".to_string())
    );
    let (code, body) = s3(
        &g,
        "GET",
        "/kvtier-smoke/a%40b",
        None,
        "wrong-secret-0123456789",
    );
    assert_eq!(code, 403, "{body}");
    assert_eq!(s3(&g, "GET", "/kvtier-smoke/missing", None, &secret).0, 404);

    // Stop: connections are refused. Restart: same endpoint, the object survived.
    let endpoint = g.s3_endpoint.clone();
    g.stop();
    assert!(!g.is_running());
    assert_eq!(s3(&g, "GET", "/kvtier-smoke/a%40b", None, &secret).0, 0);
    let t = Instant::now();
    g.restart();
    eprintln!("restart took {:?}", t.elapsed());
    assert_eq!(g.s3_endpoint, endpoint);
    assert_eq!(
        s3(&g, "GET", "/kvtier-smoke/a%40b", None, &secret),
        (200, "hello garage".to_string())
    );

    // Freeze: requests time out instead of being refused.
    g.freeze();
    let mut cmd = Command::new("curl");
    let out = cmd
        .args([
            "-s",
            "--max-time",
            "1",
            "-o",
            "/dev/null",
            "-w",
            "%{http_code}",
        ])
        .arg(format!("{endpoint}/"))
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(28), "curl exit 28 = timeout");
    g.thaw();
    assert_eq!(s3(&g, "GET", "/kvtier-smoke/a%40b", None, &secret).0, 200);
}

#[test]
fn parallel_instances() {
    let t = Instant::now();
    let handles: Vec<_> = (0..4)
        .map(|i| {
            std::thread::spawn(move || {
                let g = Garage::start();
                let bucket = format!("bucket-{i}");
                g.create_bucket(&bucket);
                let list = g.cli(&["bucket", "list"]);
                assert!(list.contains(&bucket), "{list}");
                g.s3_port
            })
        })
        .collect();
    let mut ports: Vec<u16> = handles.into_iter().map(|h| h.join().unwrap()).collect();
    eprintln!(
        "4 parallel instances (start + bucket) took {:?}",
        t.elapsed()
    );
    ports.sort();
    ports.dedup();
    assert_eq!(ports.len(), 4);
}
