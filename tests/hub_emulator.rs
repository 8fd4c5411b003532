//! Checks of the loopback Hugging Face Hub emulator (testkit/src/hub.rs): auth and status codes,
//! a real Xet upload and download through `hf-xet` against the Xet project's own CAS server,
//! batch registration, paths-info/tree/resolve shapes, `Link` paging, and the fault switches.

use kvtier_testkit::hub;

use std::collections::BTreeSet;
use std::path::Path;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use hub::{HubEmulator, HubOptions, Route};
use serde_json::{json, Value};
use ureq::http::HeaderMap;
use xet::xet_session::{header, HeaderValue, Sha256Policy, XetFileInfo, XetSessionBuilder};

const TOKEN: &str = "hf_test_token";
const BUCKET: &str = "kv-org/kv-bucket";

// ---- a small blocking HTTP client ----

struct Resp {
    status: u16,
    headers: HeaderMap,
    body: Vec<u8>,
}

impl Resp {
    fn json(&self) -> Value {
        serde_json::from_slice(&self.body)
            .unwrap_or_else(|e| panic!("not JSON ({e}): {}", String::from_utf8_lossy(&self.body)))
    }

    fn header(&self, name: &str) -> Option<&str> {
        self.headers.get(name).and_then(|v| v.to_str().ok())
    }
}

struct Client {
    agent: ureq::Agent,
    base: String,
    auth: Option<String>,
}

impl Client {
    fn new(e: &HubEmulator, token: Option<&str>) -> Client {
        let agent = ureq::Agent::config_builder()
            .http_status_as_error(false)
            .max_redirects(0)
            .build()
            .new_agent();
        Client {
            agent,
            base: e.endpoint().to_string(),
            auth: token.map(|t| format!("Bearer {t}")),
        }
    }

    fn url(&self, path: &str) -> String {
        if path.starts_with("http") {
            path.to_string()
        } else {
            format!("{}{path}", self.base)
        }
    }

    fn finish(r: Result<ureq::http::Response<ureq::Body>, ureq::Error>) -> Resp {
        let mut r = r.expect("HTTP request");
        let status = r.status().as_u16();
        let headers = r.headers().clone();
        let body = r
            .body_mut()
            .with_config()
            .limit(u64::MAX)
            .read_to_vec()
            .expect("read body");
        Resp {
            status,
            headers,
            body,
        }
    }

    fn get_with(&self, path: &str, extra: &[(&str, &str)]) -> Resp {
        let mut req = self.agent.get(self.url(path));
        if let Some(a) = &self.auth {
            req = req.header("Authorization", a);
        }
        for (k, v) in extra {
            req = req.header(*k, *v);
        }
        Self::finish(req.call())
    }

    fn get(&self, path: &str) -> Resp {
        self.get_with(path, &[])
    }

    fn head(&self, path: &str) -> Resp {
        let mut req = self.agent.head(self.url(path));
        if let Some(a) = &self.auth {
            req = req.header("Authorization", a);
        }
        Self::finish(req.call())
    }

    fn post(&self, path: &str, content_type: &str, body: &[u8]) -> Resp {
        let mut req = self
            .agent
            .post(self.url(path))
            .header("Content-Type", content_type);
        if let Some(a) = &self.auth {
            req = req.header("Authorization", a);
        }
        Self::finish(req.send(body))
    }

    fn post_json(&self, path: &str, v: &Value) -> Resp {
        self.post(path, "application/json", v.to_string().as_bytes())
    }

    fn batch(&self, bucket: &str, lines: &[Value]) -> Resp {
        let body: String = lines.iter().map(|l| format!("{l}\n")).collect();
        self.post(
            &format!("/api/buckets/{bucket}/batch"),
            "application/x-ndjson",
            body.as_bytes(),
        )
    }

    fn paths_info(&self, bucket: &str, paths: &[&str]) -> Resp {
        self.post_json(
            &format!("/api/buckets/{bucket}/paths-info"),
            &json!({ "paths": paths }),
        )
    }
}

/// Python's `quote(s, safe="")`.
fn quote(s: &str) -> String {
    percent_encoding::utf8_percent_encode(s, percent_encoding::NON_ALPHANUMERIC).to_string()
}

/// Deterministic incompressible-ish bytes.
fn data(seed: u64, n: usize) -> Vec<u8> {
    let mut x = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    (0..n)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            (x >> 24) as u8
        })
        .collect()
}

fn bearer_headers(token: &str) -> xet::xet_session::HeaderMap {
    let mut h = xet::xet_session::HeaderMap::new();
    h.insert(
        header::AUTHORIZATION,
        HeaderValue::from_str(&format!("Bearer {token}")).unwrap(),
    );
    h
}

/// Uploads `files` through hf-xet with the emulator's write-token route; returns (hash, size).
/// Blocking API: must run on a thread without a tokio runtime (plain #[test] threads are).
fn xet_upload(
    e: &HubEmulator,
    bucket: &str,
    files: Vec<Vec<u8>>,
    cache: &Path,
) -> Vec<(String, u64)> {
    let session = XetSessionBuilder::new()
        .with_cache_dir(cache)
        .build()
        .expect("xet session");
    let commit = session
        .new_upload_commit()
        .expect("upload commit builder")
        .with_token_refresh_url(
            format!("{}/api/buckets/{bucket}/xet-write-token", e.endpoint()),
            bearer_headers(e.token()),
        )
        .build_blocking()
        .expect("upload commit");
    let handles: Vec<_> = files
        .into_iter()
        .enumerate()
        .map(|(i, bytes)| {
            commit
                .upload_bytes_blocking(bytes, Sha256Policy::Skip, Some(format!("file-{i}")))
                .expect("upload bytes")
        })
        .collect();
    commit.commit_blocking().expect("commit");
    handles
        .iter()
        .map(|h| {
            let meta = h.finalize_ingestion_blocking().expect("finalize");
            (
                meta.xet_info.hash.clone(),
                meta.xet_info.file_size.expect("size known"),
            )
        })
        .collect()
}

/// Reads a file (or a byte range of it) back through hf-xet with the read-token route.
fn xet_download(
    e: &HubEmulator,
    bucket: &str,
    hash: &str,
    size: u64,
    range: Option<std::ops::Range<u64>>,
    cache: &Path,
) -> Vec<u8> {
    let session = XetSessionBuilder::new()
        .with_cache_dir(cache)
        .build()
        .expect("xet session");
    let group = session
        .new_download_stream_group()
        .expect("download group builder")
        .with_token_refresh_url(
            format!("{}/api/buckets/{bucket}/xet-read-token", e.endpoint()),
            bearer_headers(e.token()),
        )
        .build_blocking()
        .expect("download group");
    let mut stream = group
        .download_stream_blocking(XetFileInfo::new(hash.to_string(), size), range)
        .expect("download stream");
    let mut out = Vec::new();
    while let Some(chunk) = stream.blocking_next().expect("next chunk") {
        out.extend_from_slice(&chunk);
    }
    out
}

#[test]
fn auth_is_enforced_and_bucket_codes_match_the_hub() {
    let hub = HubEmulator::start(TOKEN);
    let anon = Client::new(&hub, None);
    let wrong = Client::new(&hub, Some("nope"));
    let c = Client::new(&hub, Some(TOKEN));

    // Every Hub route wants the bearer token.
    for client in [&anon, &wrong] {
        assert_eq!(
            client
                .post_json(&format!("/api/buckets/{BUCKET}"), &json!({}))
                .status,
            401
        );
        assert_eq!(client.get(&format!("/api/buckets/{BUCKET}")).status, 401);
        assert_eq!(client.paths_info(BUCKET, &["a"]).status, 401);
        assert_eq!(
            client
                .get(&format!("/api/buckets/{BUCKET}/tree?recursive=true"))
                .status,
            401
        );
        assert_eq!(
            client
                .batch(BUCKET, &[json!({"type": "deleteFile", "path": "a"})])
                .status,
            401
        );
        assert_eq!(
            client.get(&format!("/buckets/{BUCKET}/resolve/a")).status,
            401
        );
        assert_eq!(
            client.head(&format!("/buckets/{BUCKET}/resolve/a")).status,
            401
        );
        assert_eq!(
            client
                .get(&format!("/api/buckets/{BUCKET}/xet-write-token"))
                .status,
            401
        );
        assert_eq!(
            client
                .get(&format!("/api/buckets/{BUCKET}/xet-read-token"))
                .status,
            401
        );
    }
    assert!(!hub.bucket_exists(BUCKET), "a 401 create must not create");

    // Missing bucket: 404 RepoNotFound everywhere.
    let r = c.get(&format!("/api/buckets/{BUCKET}"));
    assert_eq!(r.status, 404);
    assert_eq!(r.header("x-error-code"), Some("RepoNotFound"));
    for r in [
        c.paths_info(BUCKET, &["a"]),
        c.get(&format!("/api/buckets/{BUCKET}/tree")),
        c.batch(BUCKET, &[json!({"type": "deleteFile", "path": "a"})]),
        c.get(&format!("/buckets/{BUCKET}/resolve/a")),
        c.get(&format!("/api/buckets/{BUCKET}/xet-write-token")),
    ] {
        assert_eq!(
            (r.status, r.header("x-error-code")),
            (404, Some("RepoNotFound"))
        );
    }

    // Create, then 409 that still carries the url.
    let r = c.post_json(&format!("/api/buckets/{BUCKET}"), &json!({"private": true}));
    assert_eq!(r.status, 200, "{}", String::from_utf8_lossy(&r.body));
    let url = format!("{}/buckets/{BUCKET}", hub.endpoint());
    assert_eq!(r.json()["url"], json!(url));
    let r = c.post(&format!("/api/buckets/{BUCKET}"), "application/json", b"");
    assert_eq!(r.status, 409);
    assert_eq!(r.json()["url"], json!(url));
    assert!(hub.bucket_exists(BUCKET));

    // Info.
    let r = c.get(&format!("/api/buckets/{BUCKET}"));
    assert_eq!(r.status, 200);
    let info = r.json();
    assert_eq!(info["id"], json!(BUCKET));
    assert_eq!(info["private"], json!(true));
    assert_eq!(info["size"], json!(0));
    assert_eq!(info["totalFiles"], json!(0));
    let created = info["createdAt"].as_str().unwrap();
    assert_eq!(created.len(), "2026-01-01T00:00:00.000Z".len(), "{created}");
    assert!(
        created.ends_with('Z') && created.as_bytes()[19] == b'.',
        "{created}"
    );

    // Xet tokens: JSON body and headers, expiry well ahead.
    let now = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_secs();
    for route in ["xet-write-token", "xet-read-token"] {
        let r = c.get(&format!("/api/buckets/{BUCKET}/{route}"));
        assert_eq!(r.status, 200);
        let v = r.json();
        assert_eq!(v["casUrl"], json!(hub.cas_endpoint()));
        assert!(!v["accessToken"].as_str().unwrap().is_empty());
        let exp = v["exp"].as_u64().unwrap();
        assert!(exp > now + 60, "exp {exp} now {now}");
        assert_eq!(r.header("x-xet-cas-url"), Some(hub.cas_endpoint()));
        assert_eq!(r.header("x-xet-access-token"), v["accessToken"].as_str());
        assert_eq!(
            r.header("x-xet-token-expiration"),
            Some(exp.to_string().as_str())
        );
    }

    // Unknown file: 404 EntryNotFound.
    let r = c.get(&format!(
        "/buckets/{BUCKET}/resolve/{}",
        quote("no/such@file")
    ));
    assert_eq!(
        (r.status, r.header("x-error-code")),
        (404, Some("EntryNotFound"))
    );
    let r = c.head(&format!("/buckets/{BUCKET}/resolve/nothing"));
    assert_eq!(
        (r.status, r.header("x-error-code")),
        (404, Some("EntryNotFound"))
    );

    // Every request above was counted, the 401s included.
    assert_eq!(hub.requests(Route::BucketInfo), 4);
    assert_eq!(hub.requests(Route::CreateBucket), 4);
}

#[test]
fn xet_upload_registers_resolves_and_deletes_end_to_end() {
    let hub = HubEmulator::start(TOKEN);
    assert!(hub.create_bucket(BUCKET));
    let c = Client::new(&hub, Some(TOKEN));
    let cache = tempfile::tempdir().unwrap();

    let big = data(1, 3 * 1024 * 1024 + 1234);
    let small = data(2, 100 * 1024 + 7);
    let uploaded = xet_upload(&hub, BUCKET, vec![big.clone(), small.clone()], cache.path());
    let (big_hash, big_size) = uploaded[0].clone();
    let (small_hash, small_size) = uploaded[1].clone();
    assert_eq!(big_size, big.len() as u64);
    assert_eq!(small_size, small.len() as u64);
    assert_eq!(big_hash.len(), 64);
    assert!(
        hub.requests(Route::XetWriteToken) >= 1,
        "hf-xet fetched its CAS token from us"
    );

    // Object paths as the adapter writes them: the name percent-encoded inside the path.
    let big_path = "prod/llama@000000ff@00010203".replace('@', "%40");
    let small_path = "prod/llama@000000ff@00010204@user-42".replace('@', "%40");
    let mtime_ms: u64 = 1_700_000_000_123;
    let r = c.batch(
        BUCKET,
        &[
            json!({"type": "addFile", "path": big_path, "xetHash": big_hash, "size": big_size}),
            // Like the Python client: no size (the Hub asks the CAS), mtime in integer ms.
            json!({"type": "addFile", "path": small_path, "xetHash": small_hash, "mtime": mtime_ms}),
        ],
    );
    assert_eq!(r.status, 200, "{}", String::from_utf8_lossy(&r.body));
    assert_eq!(
        r.json(),
        json!({"success": true, "processed": 2, "succeeded": 2, "failed": []})
    );
    assert_eq!(
        hub.paths(BUCKET),
        vec![big_path.clone(), small_path.clone()]
    );
    assert_eq!(hub.total_size(BUCKET), big_size + small_size);

    // paths-info: files with the right size and hash, missing paths omitted, directories typed.
    let r = c.paths_info(BUCKET, &[&small_path, "prod/missing", &big_path, "prod"]);
    assert_eq!(r.status, 200);
    let entries = r.json();
    let entries = entries.as_array().unwrap();
    assert_eq!(entries.len(), 3, "{entries:?}");
    assert_eq!(entries[0]["type"], json!("file"));
    assert_eq!(entries[0]["path"], json!(small_path));
    assert_eq!(entries[0]["size"], json!(small_size));
    assert_eq!(entries[0]["xetHash"], json!(small_hash));
    assert_eq!(entries[0]["mtime"], json!("2023-11-14T22:13:20.123Z"));
    assert_eq!(entries[1]["path"], json!(big_path));
    assert_eq!(entries[1]["size"], json!(big_size));
    assert_eq!(
        entries[2],
        json!({"type": "directory", "path": "prod", "uploadedAt": entries[2]["uploadedAt"]})
    );

    // Bucket info sums the files.
    let info = c.get(&format!("/api/buckets/{BUCKET}")).json();
    assert_eq!(info["size"], json!(big_size + small_size));
    assert_eq!(info["totalFiles"], json!(2));

    // Tree, recursive, under the prefix (percent-encoded as a whole, as clients do).
    let r = c.get(&format!(
        "/api/buckets/{BUCKET}/tree/{}?recursive=true",
        quote("prod")
    ));
    assert_eq!(r.status, 200);
    let listed: Vec<(String, u64)> = r
        .json()
        .as_array()
        .unwrap()
        .iter()
        .filter(|e| e["type"] == "file")
        .map(|e| {
            (
                e["path"].as_str().unwrap().to_string(),
                e["size"].as_u64().unwrap(),
            )
        })
        .collect();
    assert_eq!(
        listed,
        vec![
            (big_path.clone(), big_size),
            (small_path.clone(), small_size)
        ]
    );
    assert!(r.header("link").is_none());
    // The root listing has the directory too.
    let root = c
        .get(&format!("/api/buckets/{BUCKET}/tree?recursive=true"))
        .json();
    assert_eq!(root[0]["type"], json!("directory"));
    assert_eq!(root.as_array().unwrap().len(), 3);
    let r = c.get(&format!(
        "/api/buckets/{BUCKET}/tree/{}?recursive=true",
        quote("nope")
    ));
    assert_eq!((r.status, r.json()), (200, json!([])));

    // Resolve: 302 to the bytes, then the exact bytes; the path is decoded exactly once.
    let resolve = format!("/buckets/{BUCKET}/resolve/{}", quote(&big_path));
    let r = c.get(&resolve);
    assert_eq!(r.status, 302);
    assert_eq!(r.header("x-xet-hash"), Some(big_hash.as_str()));
    let location = r.header("location").unwrap().to_string();
    let bytes = c.get(&location);
    assert_eq!(bytes.status, 200);
    assert_eq!(
        bytes.header("content-length"),
        Some(big_size.to_string().as_str())
    );
    assert!(bytes.body == big, "resolved bytes differ");
    // Range honoured on the target.
    let part = c.get_with(&location, &[("Range", "bytes=1000-2000999")]);
    assert_eq!(part.status, 206);
    assert_eq!(
        part.header("content-range"),
        Some(format!("bytes 1000-2000999/{big_size}").as_str())
    );
    assert!(part.body == big[1000..2_001_000]);
    let tail = c.get_with(&location, &[("Range", "bytes=-10")]);
    assert_eq!((tail.status, &tail.body[..]), (206, &big[big.len() - 10..]));
    let r = c.get_with(
        &location,
        &[("Range", format!("bytes={big_size}-").as_str())],
    );
    assert_eq!(r.status, 416);

    // HEAD resolve: metadata headers only.
    let r = c.head(&format!("/buckets/{BUCKET}/resolve/{}", quote(&small_path)));
    assert_eq!(r.status, 200);
    assert_eq!(r.header("x-xet-hash"), Some(small_hash.as_str()));
    assert_eq!(
        r.header("content-length"),
        Some(small_size.to_string().as_str())
    );
    assert_eq!(
        r.header("link"),
        Some(
            format!(
                "<{}/api/buckets/{BUCKET}/xet-read-token>; rel=\"xet-auth\"",
                hub.endpoint()
            )
            .as_str()
        )
    );
    assert!(r.body.is_empty());

    // Download through hf-xet with a read token: full and ranged.
    let got = xet_download(&hub, BUCKET, &small_hash, small_size, None, cache.path());
    assert!(got == small, "xet download differs");
    let got = xet_download(
        &hub,
        BUCKET,
        &big_hash,
        big_size,
        Some(5..70_005),
        cache.path(),
    );
    assert!(got == big[5..70_005], "xet ranged download differs");
    assert!(hub.requests(Route::XetReadToken) >= 1);

    // Batch validation: unknown hash fails that path; size mismatch fails; all failed => 422.
    let unknown = "ab".repeat(32);
    let r = c.batch(
        BUCKET,
        &[
            json!({"type": "addFile", "path": "prod/x", "xetHash": unknown}),
            json!({"type": "addFile", "path": "prod/y", "xetHash": small_hash, "size": small_size + 1}),
            json!({"type": "addFile", "path": "prod/z", "xetHash": "not-a-hash"}),
        ],
    );
    assert_eq!(r.status, 422);
    let v = r.json();
    assert_eq!(
        (v["success"].clone(), v["succeeded"].clone()),
        (json!(false), json!(0))
    );
    let failed: Vec<&str> = v["failed"]
        .as_array()
        .unwrap()
        .iter()
        .map(|f| f["path"].as_str().unwrap())
        .collect();
    assert_eq!(failed, vec!["prod/x", "prod/y", "prod/z"]);
    // Mixed: 200 with the failure listed.
    let r = c.batch(
        BUCKET,
        &[
            json!({"type": "addFile", "path": "prod/copy", "xetHash": small_hash}),
            json!({"type": "addFile", "path": "prod/x", "xetHash": unknown}),
        ],
    );
    assert_eq!(r.status, 200);
    let v = r.json();
    assert_eq!(v["success"], json!(false));
    assert_eq!(v["processed"], json!(2));
    assert_eq!(v["succeeded"], json!(1));
    assert_eq!(v["failed"][0]["path"], json!("prod/x"));
    assert!(v["failed"][0]["error"]
        .as_str()
        .unwrap()
        .contains("not found"));
    assert_eq!(hub.paths(BUCKET).len(), 3);

    // Limits: more than 1000 lines or paths is refused.
    let many: Vec<Value> = (0..1001)
        .map(|i| json!({"type": "deleteFile", "path": format!("p{i}")}))
        .collect();
    assert_eq!(c.batch(BUCKET, &many).status, 400);
    let many_paths: Vec<String> = (0..1001).map(|i| format!("p{i}")).collect();
    let refs: Vec<&str> = many_paths.iter().map(String::as_str).collect();
    assert_eq!(c.paths_info(BUCKET, &refs).status, 400);

    // deleteFile removes; deleting a missing path is a failure for that path.
    let r = c.batch(
        BUCKET,
        &[
            json!({"type": "deleteFile", "path": big_path}),
            json!({"type": "deleteFile", "path": "prod/copy"}),
            json!({"type": "deleteFile", "path": "prod/never-there"}),
        ],
    );
    assert_eq!(r.status, 200);
    assert_eq!(r.json()["succeeded"], json!(2));
    assert_eq!(hub.paths(BUCKET), vec![small_path.clone()]);
    assert_eq!(c.paths_info(BUCKET, &[&big_path]).json(), json!([]));
    let r = c.get(&resolve);
    assert_eq!(
        (r.status, r.header("x-error-code")),
        (404, Some("EntryNotFound"))
    );
}

#[test]
fn tree_pages_follow_the_link_header() {
    let hub = HubEmulator::start_with(HubOptions {
        tree_page_size: 7,
        ..HubOptions::new(TOKEN)
    })
    .unwrap();
    let c = Client::new(&hub, Some(TOKEN));
    let mut expected = BTreeSet::new();
    for i in 0..25 {
        let p = format!("pre/fix/obj%40{i:03}");
        hub.insert_file(BUCKET, &p, &"00".repeat(32), 10 + i);
        expected.insert(p);
    }
    hub.insert_file(BUCKET, "other/file", &"00".repeat(32), 1);
    // The Hub's recursive tree matches the prefix as a plain string: `pre/fix` lists this too.
    hub.insert_file(BUCKET, "pre/fixture", &"00".repeat(32), 1);

    let mut url = format!(
        "/api/buckets/{BUCKET}/tree/{}?recursive=true",
        quote("pre/fix")
    );
    let mut seen = Vec::new();
    let mut pages = 0;
    loop {
        let r = c.get(&url);
        assert_eq!(r.status, 200);
        pages += 1;
        let page = r.json();
        assert!(page.as_array().unwrap().len() <= 7);
        for e in page.as_array().unwrap() {
            assert_eq!(e["type"], json!("file"));
            seen.push(e["path"].as_str().unwrap().to_string());
        }
        match r.header("link") {
            Some(link) => {
                assert!(link.ends_with("; rel=\"next\""), "{link}");
                url = link[1..link.find('>').unwrap()].to_string();
                assert!(url.starts_with(hub.endpoint()));
            }
            None => break,
        }
    }
    assert_eq!(pages, 4);
    assert_eq!(seen.len(), 26, "no duplicates, nothing lost");
    expected.insert("pre/fixture".to_string());
    assert_eq!(seen.iter().cloned().collect::<BTreeSet<_>>(), expected);
    assert_eq!(hub.requests(Route::Tree), 4);

    // Non-recursive listing of the root: two directories.
    let r = c.get(&format!("/api/buckets/{BUCKET}/tree"));
    let v = r.json();
    let dirs: Vec<&str> = v
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["path"].as_str().unwrap())
        .collect();
    assert_eq!(dirs, vec!["other", "pre"]);
}

#[test]
fn fault_switches_do_what_they_say() {
    let hub = HubEmulator::start(TOKEN);
    hub.create_bucket(BUCKET);
    let c = Client::new(&hub, Some(TOKEN));
    let info = format!("/api/buckets/{BUCKET}");

    // Counters: nothing yet, then exactly what was sent.
    assert_eq!(hub.total_requests(), 0);
    assert_eq!(c.get(&info).status, 200);
    assert_eq!(hub.requests(Route::BucketInfo), 1);
    assert_eq!(hub.requests(Route::PathsInfo), 0);
    hub.reset_requests();
    assert_eq!(hub.total_requests(), 0);

    // 429 with Retry-After for the next 2 requests, then normal service.
    hub.throttle_next(2, 3, None);
    for _ in 0..2 {
        let r = c.get(&info);
        assert_eq!(r.status, 429);
        assert_eq!(r.header("retry-after"), Some("3"));
    }
    assert_eq!(c.get(&info).status, 200);

    // A 503 burst scoped to paths-info leaves other routes alone.
    hub.fail_next(3, 503, Some(Route::PathsInfo));
    assert_eq!(c.get(&info).status, 200);
    for _ in 0..3 {
        assert_eq!(c.paths_info(BUCKET, &["a"]).status, 503);
    }
    assert_eq!(c.paths_info(BUCKET, &["a"]).status, 200);
    assert_eq!(hub.requests(Route::PathsInfo), 4);

    // An unscoped 500 burst hits any route.
    hub.fail_next(1, 500, None);
    assert_eq!(c.get(&format!("/api/buckets/{BUCKET}/tree")).status, 500);
    assert_eq!(c.get(&format!("/api/buckets/{BUCKET}/tree")).status, 200);

    // Latency, and setting it back to zero. Shown by order, not by timing the second
    // request: a request sent under 60 s of latency is still waiting when one sent after the
    // reset has its answer.
    hub.set_latency(Duration::from_millis(300));
    let t = Instant::now();
    assert_eq!(c.get(&info).status, 200);
    assert!(
        t.elapsed() >= Duration::from_millis(300),
        "{:?}",
        t.elapsed()
    );
    hub.set_latency(Duration::from_secs(60));
    let before = hub.requests(Route::BucketInfo);
    let (slow_tx, slow_rx) = std::sync::mpsc::channel();
    {
        let slow = Client::new(&hub, Some(TOKEN));
        let info = info.clone();
        std::thread::spawn(move || {
            let _ = slow_tx.send(slow.get(&info).status);
        });
    }
    // The slow request has reached the emulator (counted before its latency is applied).
    let guard = Instant::now() + Duration::from_secs(60);
    while hub.requests(Route::BucketInfo) == before {
        assert!(Instant::now() < guard, "the slow request never arrived");
        std::thread::yield_now();
    }
    hub.set_latency(Duration::ZERO);
    assert_eq!(c.get(&info).status, 200);
    assert!(
        slow_rx.try_recv().is_err(),
        "the request after the reset was answered while the one under latency still waits"
    );

    // Fail the 2nd file of every batch: 200, that path failed and not applied.
    let hash = "00".repeat(32);
    hub.insert_file(BUCKET, "a", &hash, 1);
    hub.insert_file(BUCKET, "b", &hash, 1);
    hub.insert_file(BUCKET, "c", &hash, 1);
    hub.fail_batch_line(Some(2));
    let r = c.batch(
        BUCKET,
        &[
            json!({"type": "deleteFile", "path": "a"}),
            json!({"type": "deleteFile", "path": "b"}),
            json!({"type": "deleteFile", "path": "c"}),
        ],
    );
    assert_eq!(r.status, 200);
    let v = r.json();
    assert_eq!(v["succeeded"], json!(2));
    assert_eq!(
        v["failed"],
        json!([{"path": "b", "error": "injected failure"}])
    );
    assert_eq!(hub.paths(BUCKET), vec!["b"]);
    // A one-line batch whose only line fails: 422.
    hub.fail_batch_line(Some(1));
    let r = c.batch(BUCKET, &[json!({"type": "deleteFile", "path": "b"})]);
    assert_eq!(r.status, 422);
    hub.fail_batch_line(None);
    hub.fail_batch_paths(["b"]);
    assert_eq!(
        c.batch(BUCKET, &[json!({"type": "deleteFile", "path": "b"})])
            .status,
        422
    );
    hub.clear_faults();
    assert_eq!(
        c.batch(BUCKET, &[json!({"type": "deleteFile", "path": "b"})])
            .status,
        200
    );
    assert!(hub.paths(BUCKET).is_empty());

    // Direct helpers are not requests.
    hub.reset_requests();
    hub.create_bucket("x/y");
    let _ = hub.files(BUCKET);
    assert_eq!(hub.total_requests(), 0);
}

#[test]
fn admin_routes_drive_faults_over_http() {
    let hub = HubEmulator::start(TOKEN);
    hub.create_bucket(BUCKET);
    let c = Client::new(&hub, Some(TOKEN));
    let admin = Client::new(&hub, None);
    let info = format!("/api/buckets/{BUCKET}");

    let r = admin.post_json(
        "/_emulator/faults",
        &json!({"throttle": {"count": 1, "retry_after_secs": 0, "route": "bucket_info"},
                "server_errors": {"count": 1, "status": 502, "route": "tree"},
                "tree_page_size": 1}),
    );
    assert_eq!(r.status, 200, "{}", String::from_utf8_lossy(&r.body));
    let r = c.get(&info);
    assert_eq!((r.status, r.header("retry-after")), (429, Some("0")));
    assert_eq!(c.get(&info).status, 200);
    assert_eq!(c.get(&format!("{info}/tree")).status, 502);
    hub.insert_file(BUCKET, "a", &"00".repeat(32), 1);
    hub.insert_file(BUCKET, "b", &"00".repeat(32), 1);
    let r = c.get(&format!("{info}/tree"));
    assert_eq!(r.status, 200);
    assert!(r.header("link").is_some(), "page size 1 => a next link");

    let counts = admin.get("/_emulator/requests").json();
    assert_eq!(counts["bucket_info"], json!(2));
    assert_eq!(counts["tree"], json!(2));
    assert_eq!(counts["total"], json!(4));
    let files = admin
        .get(&format!("/_emulator/buckets/{BUCKET}/files"))
        .json();
    assert_eq!(files.as_array().unwrap().len(), 2);

    assert_eq!(
        admin
            .post("/_emulator/reset", "application/json", b"")
            .status,
        200
    );
    assert_eq!(hub.total_requests(), 0);
    assert_eq!(
        admin
            .post_json(
                "/_emulator/faults",
                &json!({"throttle": {"route": "nope", "count": 1}})
            )
            .status,
        400
    );
}
