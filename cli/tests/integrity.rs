//! "Never serve a wrong byte" (issue 31): the `fs` adapter's CRC32C (written in an extended
//! attribute before the rename, checked on every load), corrupt objects as misses that are
//! counted and removed (a locked key's at its last unlock), bodies changed in flight through
//! `fault_inject`, `Verify` (what `kvtier scrub` sends), torn writes of a process killed with
//! SIGKILL mid-store, and `kvtier scrub`'s exit codes and output.
//!
//! Ordering is by replies and usage events, never by sleeping.

#[path = "support/cli.rs"]
mod cli_support;
use cli_support::kvtier;
use kvtier_testkit as support;

use std::io::{BufRead, BufReader, Seek, SeekFrom, Write};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use bytes::{Bytes, BytesMut};
use kvtier::actors::backends::fault_inject::FaultInjectConfig;
use kvtier::actors::backends::fs::{crc32c, FsChecksum, FsConfig, CRC_XATTR};
use kvtier::actors::{DeleteCause, TierEvent, UsageEventKind, Verdict, Verify};
use kvtier::{AdapterConfig, AdapterSpec, MissReason, ObjectKey, Tier, TierConfig};
use support::{key, payload};

const SIZE: usize = 64 * 1024;

fn fs_spec(dir: &Path, checksum: FsChecksum) -> AdapterSpec {
    let mut c = FsConfig::new(dir);
    c.checksum = checksum;
    AdapterSpec::Fs(c)
}

async fn start(spec: AdapterSpec) -> Tier {
    let mut a = AdapterConfig::fs("unused");
    a.spec = spec;
    Tier::start(&TierConfig::with_adapters(vec![a]))
        .await
        .unwrap()
}

/// The `.data` files of a directory, sorted.
fn objects(dir: &Path) -> Vec<PathBuf> {
    let mut v: Vec<PathBuf> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "data"))
        .collect();
    v.sort();
    v
}

/// The one object file whose bytes are `data`.
fn file_of(dir: &Path, data: &[u8]) -> PathBuf {
    objects(dir)
        .into_iter()
        .find(|p| std::fs::read(p).unwrap() == data)
        .expect("an object file with these bytes")
}

/// Flips one bit of a file in place (size, name and attributes kept).
fn flip_at_rest(path: &Path, at: u64) {
    let mut f = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open(path)
        .unwrap();
    let mut b = [0u8; 1];
    f.seek(SeekFrom::Start(at)).unwrap();
    std::io::Read::read_exact(&mut f, &mut b).unwrap();
    b[0] ^= 0x10;
    f.seek(SeekFrom::Start(at)).unwrap();
    f.write_all(&b).unwrap();
}

async fn load_one(tier: &Tier, k: &ObjectKey, len: usize) -> (bool, BytesMut) {
    let r = tier
        .load(vec![k.clone()], vec![BytesMut::zeroed(len)])
        .await;
    let (hits, mut bufs) = r.into_parts::<BytesMut>().unwrap();
    (hits.get(0), bufs.pop().unwrap())
}

/// Waits for the usage event that deletes `k`, which says it was corrupt.
async fn deleted(events: &flume::Receiver<TierEvent>, k: &ObjectKey) {
    loop {
        if let TierEvent::Usage(e) = events.recv_async().await.unwrap() {
            if let UsageEventKind::Deleted { keys, cause, .. } = e.kind {
                if keys.contains(k) {
                    assert_eq!(cause, DeleteCause::Corrupt);
                    return;
                }
            }
        }
    }
}

fn corrupt_total(tier: &Tier) -> u64 {
    let text = tier.metrics_text().unwrap();
    text.lines()
        .find(|l| l.starts_with("kvtier_corrupt_objects_total{"))
        .and_then(|l| l.rsplit(' ').next())
        .map_or(0, |v| v.parse().unwrap())
}

async fn fs_details(tier: &Tier) -> serde_json::Value {
    tier.status().await.unwrap().adapters[0].details.clone()
}

/// Objects carry their CRC32C in the attribute; the file's bytes are exactly the object's
/// (LMCache reads them); a file without the attribute (LMCache's) loads as before.
#[actix_rt::test]
async fn the_checksum_rides_in_an_xattr_and_lmcache_files_still_load() {
    let dir = tempfile::tempdir().unwrap();
    let tier = start(fs_spec(dir.path(), FsChecksum::Crc32c)).await;
    let data = payload(1, SIZE);
    assert!(tier
        .store(vec![key(1), key(2)], vec![data.clone(), payload(2, SIZE)])
        .await
        .unwrap()
        .success());
    let file = file_of(dir.path(), &data);
    let attr = xattr::get(&file, CRC_XATTR).unwrap().unwrap();
    assert_eq!(attr, crc32c(&data).to_be_bytes());
    assert_eq!(std::fs::read(&file).unwrap(), data);
    // As LMCache writes it: no attribute.
    let other = file_of(dir.path(), &payload(2, SIZE));
    xattr::remove(&other, CRC_XATTR).unwrap();
    assert_eq!(
        load_one(&tier, &key(2), SIZE).await,
        (true, BytesMut::from(&payload(2, SIZE)[..]))
    );
    let (hit, buf) = load_one(&tier, &key(1), SIZE).await;
    assert!(hit);
    assert_eq!(&buf[..], &data[..]);
    assert_eq!(fs_details(&tier).await["checksum"], "crc32c");
    assert_eq!(corrupt_total(&tier), 0);
    tier.close().await;
}

/// A flipped byte at rest: the load misses (never a hit), the object is counted, and removed:
/// at once when unlocked; for a locked key, lookups miss it and its last unlock removes it.
#[actix_rt::test]
async fn a_byte_flipped_at_rest_is_a_miss_counted_and_removed() {
    let dir = tempfile::tempdir().unwrap();
    let tier = start(fs_spec(dir.path(), FsChecksum::Crc32c)).await;
    let events = tier.events();
    let (a, b) = (payload(1, SIZE), payload(2, SIZE));
    assert!(tier
        .store(vec![key(1), key(2)], vec![a.clone(), b.clone()])
        .await
        .unwrap()
        .success());
    flip_at_rest(&file_of(dir.path(), &a), 100);
    let fb = file_of(dir.path(), &b);
    flip_at_rest(&fb, SIZE as u64 - 1);

    // Unlocked: a miss, then removed.
    assert!(!load_one(&tier, &key(1), SIZE).await.0);
    deleted(&events, &key(1)).await;
    assert_eq!(objects(dir.path()).len(), 1);

    // Locked: a miss, the file stays while locked, lookups miss it, the unlock removes it.
    assert!(tier.lookup_and_lock(vec![key(2)]).await.unwrap().get(0));
    assert!(!load_one(&tier, &key(2), SIZE).await.0);
    assert!(
        fb.exists(),
        "a locked key's file is kept until its last unlock"
    );
    assert!(!tier.lookup_and_lock(vec![key(2)]).await.unwrap().get(0));
    tier.unlock(vec![key(2)]);
    deleted(&events, &key(2)).await;
    assert!(!fb.exists());
    assert_eq!(tier.usage().await.unwrap().adapters[0].used_bytes, 0);
    assert_eq!(corrupt_total(&tier), 2);
    assert_eq!(fs_details(&tier).await["corrupt_objects"], 2);
    // A fresh store of the key is served again.
    assert!(tier
        .store(vec![key(2)], vec![b.clone()])
        .await
        .unwrap()
        .success());
    assert!(tier.lookup_and_lock(vec![key(2)]).await.unwrap().get(0));
    let (hit, buf) = load_one(&tier, &key(2), SIZE).await;
    assert!(hit);
    assert_eq!(&buf[..], &b[..]);
    tier.close().await;
}

fn body_flips(inner: AdapterSpec) -> AdapterConfig {
    AdapterConfig::fault_inject(inner, {
        let mut f = FaultInjectConfig::default();
        f.corrupt_body_rate = 1.0;
        f.seed = Some(7);
        f
    })
}

/// A body changed in flight (size kept) over `fs` with checksums: every load a miss. Without a
/// checksum (`checksum = "off"`, LMCache's files, `memory`) nothing can tell: the changed bytes
/// are served, which is why the check is on by default.
#[actix_rt::test]
async fn a_body_changed_in_flight_is_a_miss_where_a_checksum_is_checked() {
    let dir = tempfile::tempdir().unwrap();
    let tier = Tier::start(&TierConfig::with_adapters(vec![body_flips(fs_spec(
        dir.path(),
        FsChecksum::Crc32c,
    ))]))
    .await
    .unwrap();
    let mut stored = Vec::new();
    for i in 0..20 {
        stored.push(payload(i, SIZE));
    }
    assert!(tier
        .store((0..20).map(key).collect(), stored.clone())
        .await
        .unwrap()
        .success());
    let bufs = (0..20).map(|_| BytesMut::zeroed(SIZE)).collect();
    let r = tier.load((0..20).map(key).collect(), bufs).await;
    assert_eq!(r.hits.count_ones(), 0, "a changed body is never a hit");
    assert!(
        (0..20).all(|i| r.miss_reason(i) == Some(MissReason::Corrupt)),
        "{:?}",
        r.misses
    );
    let details = fs_details(&tier).await;
    assert_eq!(details["injected"]["corrupted_bodies"]["get"], 20);
    assert_eq!(corrupt_total(&tier), 20);
    tier.close().await;

    // The same fault with checksums off: served, wrong.
    let dir = tempfile::tempdir().unwrap();
    let tier = Tier::start(&TierConfig::with_adapters(vec![body_flips(fs_spec(
        dir.path(),
        FsChecksum::Off,
    ))]))
    .await
    .unwrap();
    assert!(tier
        .store(vec![key(1)], vec![payload(1, SIZE)])
        .await
        .unwrap()
        .success());
    let (hit, buf) = load_one(&tier, &key(1), SIZE).await;
    assert!(hit, "without a checksum nothing can tell");
    assert_ne!(&buf[..], &payload(1, SIZE)[..]);
    tier.close().await;
}

/// `Verify` (kvtier scrub): intact, corrupt and unverifiable objects; with `delete_corrupt` the
/// unlocked corrupt object goes (usage follows), the locked one stays until its last unlock.
#[actix_rt::test]
async fn verify_finds_corrupt_objects_and_deletes_them_respecting_locks() {
    let dir = tempfile::tempdir().unwrap();
    let tier = start(fs_spec(dir.path(), FsChecksum::Crc32c)).await;
    let events = tier.events();
    let data: Vec<Bytes> = (0..4).map(|i| payload(i, SIZE)).collect();
    assert!(tier
        .store((0..4).map(key).collect(), data.clone())
        .await
        .unwrap()
        .success());
    flip_at_rest(&file_of(dir.path(), &data[1]), 7);
    let locked_file = file_of(dir.path(), &data[2]);
    flip_at_rest(&locked_file, 8);
    xattr::remove(file_of(dir.path(), &data[3]), CRC_XATTR).unwrap();
    assert!(tier.lookup_and_lock(vec![key(2)]).await.unwrap().get(0));

    let verify = |delete_corrupt| Verify {
        keys: (0..5).map(key).collect(),
        delete_corrupt,
        adapter: 0,
    };
    let report = tier
        .controller()
        .send(verify(false))
        .await
        .unwrap()
        .unwrap();
    let verdicts: Vec<_> = report
        .results
        .iter()
        .map(|(_, v)| v.clone().unwrap())
        .collect();
    assert_eq!(verdicts[0], Verdict::Intact);
    assert!(matches!(verdicts[1], Verdict::Corrupt(_)));
    assert!(matches!(verdicts[2], Verdict::Corrupt(_)));
    assert_eq!(verdicts[3], Verdict::Unverifiable);
    assert_eq!(verdicts[4], Verdict::Absent);
    assert!(report.deleted.is_empty(), "no --delete, nothing removed");
    assert_eq!(objects(dir.path()).len(), 4);

    let report = tier.controller().send(verify(true)).await.unwrap().unwrap();
    assert_eq!(report.deleted, vec![key(1)]);
    let usage = &tier.usage().await.unwrap().adapters[0];
    assert_eq!((usage.keys, usage.used_bytes), (3, 3 * SIZE as u64));
    assert!(locked_file.exists(), "a locked key is never deleted");
    tier.unlock(vec![key(2)]);
    deleted(&events, &key(2)).await;
    assert!(!locked_file.exists());
    assert_eq!(tier.usage().await.unwrap().adapters[0].keys, 2);
    tier.close().await;
}

/// `checksum` takes `crc32c` (the default) and `off`; anything else is refused, naming the
/// field.
#[test]
fn the_checksum_field_parses() {
    let parse = |extra: &str| {
        kvtier::config::parse_adapter_json(
            0,
            &format!(r#"{{"type": "fs", "base_path": "/tmp/x"{extra}}}"#),
        )
    };
    let checksum = |c: AdapterConfig| match c.spec {
        AdapterSpec::Fs(c) => c.checksum,
        other => panic!("{other:?}"),
    };
    assert_eq!(checksum(parse("").unwrap()), FsChecksum::Crc32c);
    assert_eq!(
        checksum(parse(r#", "checksum": "off""#).unwrap()),
        FsChecksum::Off
    );
    let err = parse(r#", "checksum": "md5""#).unwrap_err().to_string();
    assert!(err.contains("checksum"), "{err}");
}

/// A file system without user extended attributes (ramfs, mounted in a private mount namespace
/// by `unshare`, so nothing outside the test sees it) is reported at start with the switch that
/// lifts it; with `checksum = "off"` the same directory serves.
#[test]
fn a_file_system_without_user_xattrs_is_reported_at_start() {
    let dir = tempfile::tempdir().unwrap();
    let status = |extra: &str| {
        let adapter = format!(
            r#"{{"type": "fs", "base_path": "{}"{extra}}}"#,
            dir.path().display()
        );
        let out = Command::new("unshare")
            .args(["--mount", "--map-root-user", "sh", "-c"])
            .arg(r#"mount -t ramfs none "$1" || exit 97; exec "$2" status --l2-adapter "$3""#)
            .arg("sh")
            .arg(dir.path())
            .arg(env!("CARGO_BIN_EXE_kvtier"))
            .arg(&adapter)
            .output()
            .expect("run unshare (util-linux)");
        let code = out.status.code().unwrap_or(-1);
        assert_ne!(
            code,
            97,
            "this test mounts a ramfs in a private mount namespace: it needs `unshare --mount \
             --map-root-user` to work (root, or unprivileged user namespaces): {}",
            String::from_utf8_lossy(&out.stderr)
        );
        (code, String::from_utf8_lossy(&out.stderr).into_owned())
    };
    let (code, stderr) = status("");
    assert_eq!(code, 1, "{stderr}");
    for part in [
        "adapter #0 (fs)",
        CRC_XATTR,
        "does not support",
        "checksum = \"off\"",
    ] {
        assert!(stderr.contains(part), "{part:?} in {stderr}");
    }
    let (code, stderr) = status(r#", "checksum": "off""#);
    assert_eq!(code, 0, "{stderr}");
}

// ---------------------------------------------------------------------------------------------
// Torn writes: a child process stores objects until it is killed with SIGKILL mid-store.

const TORN_KEYS: u32 = 24;
const TORN_BATCH: u32 = 4;
const TORN_SIZE: usize = 2 << 20;
/// At least this many kills, and more (up to `TORN_MAX_ROUNDS`) until 3 of them cut a write.
const TORN_ROUNDS: u32 = 20;
const TORN_MAX_ROUNDS: u32 = 50;

/// A payload that says which key and round wrote it: `[key u32][round u32]` then words
/// derived from both and their position. Any torn or mixed file fails [`torn_check`].
fn torn_payload(i: u32, round: u32) -> Vec<u8> {
    let mut v = Vec::with_capacity(TORN_SIZE);
    v.extend_from_slice(&i.to_be_bytes());
    v.extend_from_slice(&round.to_be_bytes());
    let seed = (u64::from(i) << 32 | u64::from(round)).wrapping_mul(0x9E37_79B9_7F4A_7C15);
    let mut j = 0u64;
    while v.len() < TORN_SIZE {
        v.extend_from_slice(&(seed ^ j.wrapping_mul(0xBF58_476D_1CE4_E5B9)).to_le_bytes());
        j += 1;
    }
    v.truncate(TORN_SIZE);
    v
}

/// The round a loaded body was written in, if it is a whole payload of key `i`.
fn torn_check(i: u32, body: &[u8]) -> Option<u32> {
    let round = u32::from_be_bytes(body.get(4..8)?.try_into().ok()?);
    (body == torn_payload(i, round).as_slice()).then_some(round)
}

/// The child's side: runs only when the parent sets `KVTIER_TORN_CHILD` (otherwise passes).
/// Stores the keys in batches of `TORN_BATCH` (written in parallel by the worker pool) with
/// this round's payloads, printing `stored <key>` for each key of a batch once it is answered,
/// then starts over, until it is killed.
#[actix_rt::test]
async fn torn_write_child() {
    let Ok(dir) = std::env::var("KVTIER_TORN_CHILD") else {
        return;
    };
    let round: u32 = std::env::var("KVTIER_TORN_ROUND").unwrap().parse().unwrap();
    let tier = start(fs_spec(Path::new(&dir), FsChecksum::Crc32c)).await;
    let bodies: Vec<Bytes> = (0..TORN_KEYS)
        .map(|i| Bytes::from(torn_payload(i, round)))
        .collect();
    let mut out = std::io::stdout();
    loop {
        for first in (0..TORN_KEYS).step_by(TORN_BATCH as usize) {
            let ids: Vec<u32> = (first..first + TORN_BATCH).collect();
            let r = tier
                .store(
                    ids.iter().map(|i| key(*i)).collect(),
                    ids.iter().map(|i| bodies[*i as usize].clone()).collect(),
                )
                .await
                .unwrap();
            assert_eq!(r.adapters[0].1.stored, TORN_BATCH as usize);
            for i in ids {
                writeln!(out, "stored {i}").unwrap();
            }
            out.flush().unwrap();
        }
    }
}

/// Kills a storing process `TORN_ROUNDS` times, each time after it confirmed a different
/// number of stores, and reopens the directory with recovery each time: recovery counts only
/// whole objects (the `.data` files), every one loads as a whole payload of its key, never
/// older than the last store of it that was confirmed, and no confirmed store is lost.
#[actix_rt::test]
async fn a_store_killed_mid_write_never_loads_torn_or_stale() {
    let dir = tempfile::tempdir().unwrap();
    // Per key: the latest round whose store of it was confirmed.
    let mut confirmed: Vec<Option<u32>> = vec![None; TORN_KEYS as usize];
    let mut torn_tmp_seen = std::collections::HashSet::new();
    let mut round = 0;
    while round < TORN_ROUNDS || (torn_tmp_seen.len() < 3 && round < TORN_MAX_ROUNDS) {
        let mut child = Command::new(std::env::current_exe().unwrap())
            .args([
                "--exact",
                "torn_write_child",
                "--nocapture",
                "--test-threads=1",
            ])
            .env("KVTIER_TORN_CHILD", dir.path())
            .env("KVTIER_TORN_ROUND", round.to_string())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        // Kill after 1..=TORN_KEYS+7 confirmations (the next batch is then being written):
        // on an event, never after a sleep.
        let kill_after = 1 + (round * 7) % (TORN_KEYS + 7);
        let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
        let mut seen = 0;
        while seen < kill_after {
            let line = lines
                .next()
                .expect("the child prints until killed")
                .unwrap();
            if let Some(i) = line.strip_prefix("stored ") {
                let i: usize = i.parse().unwrap();
                confirmed[i] = Some(round);
                seen += 1;
            }
        }
        // Then wait for the next write to be under way (a temporary file not seen before),
        // so the kill lands in the middle of it (the child never stops writing).
        let tmp_names = || {
            std::fs::read_dir(dir.path())
                .unwrap()
                .filter_map(|e| e.ok())
                .map(|e| e.file_name().to_string_lossy().into_owned())
                .filter(|n| n.ends_with(".tmp"))
                .collect::<Vec<_>>()
        };
        while !tmp_names().iter().any(|n| !torn_tmp_seen.contains(n)) {
            assert!(child.try_wait().unwrap().is_none(), "the child died");
        }
        child.kill().unwrap(); // SIGKILL
        child.wait().unwrap();
        // Temporary files the kill left: each one a write cut in the middle.
        torn_tmp_seen.extend(tmp_names());

        let tier = start(fs_spec(dir.path(), FsChecksum::Crc32c)).await;
        let files = objects(dir.path()).len();
        let usage = tier.usage().await.unwrap().adapters[0].clone();
        assert_eq!(
            usage.keys, files,
            "round {round}: recovery counts whole objects only"
        );
        assert_eq!(usage.used_bytes, (files * TORN_SIZE) as u64);
        let keys: Vec<ObjectKey> = (0..TORN_KEYS).map(key).collect();
        let bufs = (0..TORN_KEYS)
            .map(|_| BytesMut::zeroed(TORN_SIZE))
            .collect();
        let (hits, bufs) = tier
            .load(keys, bufs)
            .await
            .into_parts::<BytesMut>()
            .unwrap();
        assert_eq!(hits.count_ones(), files, "round {round}");
        for i in 0..TORN_KEYS {
            let want = confirmed[i as usize];
            if !hits.get(i as usize) {
                assert_eq!(
                    want, None,
                    "round {round}: key {i}'s confirmed store was lost"
                );
                continue;
            }
            let got = torn_check(i, &bufs[i as usize]);
            assert!(
                got.is_some(),
                "round {round}: key {i} loaded a torn or foreign body"
            );
            assert!(
                got >= want,
                "round {round}: key {i} loaded a stale body ({got:?} < {want:?})"
            );
        }
        tier.close().await;
        round += 1;
    }
    eprintln!(
        "torn writes: {round} SIGKILLs, {} writes cut in the middle (temporary files \
         left), 0 torn or stale loads",
        torn_tmp_seen.len()
    );
    assert!(
        !torn_tmp_seen.is_empty(),
        "no kill landed in the middle of a write: the test proved nothing"
    );
}

// ---------------------------------------------------------------------------------------------
// kvtier scrub

/// Writes an object file as kvtier does (with its CRC32C attribute when `crc`).
fn forge(dir: &Path, name: &str, data: &[u8], crc: bool) {
    let p = dir.join(name);
    std::fs::write(&p, data).unwrap();
    if crc {
        xattr::set(&p, CRC_XATTR, &crc32c(data).to_be_bytes()).unwrap();
    }
}

#[test]
fn scrub_exit_codes_json_lines_and_delete() {
    let dir = tempfile::tempdir().unwrap();
    let spec = format!(
        r#"{{"type": "fs", "base_path": "{}"}}"#,
        dir.path().display()
    );
    forge(dir.path(), "m@0x00000001@0a0b.data", &[1u8; 1000], true);
    forge(dir.path(), "m@0x00000002@0c0d.data", &[2u8; 2000], true);
    forge(dir.path(), "m@0x00000003@0e0f.data", &[3u8; 3000], false);

    let (code, out, err) = kvtier(&["scrub", "--json", "--l2-adapter", &spec]);
    assert_eq!(code, 0, "{err}");
    assert_eq!(out, "{\"checked\":3,\"corrupt\":0,\"unverifiable\":1}\n");

    flip_at_rest(&dir.path().join("m@0x00000002@0c0d.data"), 5);
    let (code, out, _) = kvtier(&["scrub", "--json", "--l2-adapter", &spec]);
    assert_eq!(code, 1);
    let lines: Vec<serde_json::Value> = out
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(lines.len(), 2, "{out}");
    assert_eq!(lines[0]["object"], "m@00000002@0c0d");
    assert_eq!(lines[0]["corrupt"], true);
    assert!(lines[0]["reason"].as_str().unwrap().contains("CRC32C"));
    assert_eq!(
        lines[1],
        serde_json::json!({"checked": 3, "corrupt": 1, "unverifiable": 1})
    );
    assert!(
        dir.path().join("m@0x00000002@0c0d.data").exists(),
        "no --delete"
    );

    let (code, out, _) = kvtier(&["scrub", "--delete", "--l2-adapter", &spec]);
    assert_eq!(code, 1, "corrupt objects were found");
    assert!(out.starts_with("m@00000002@0c0d\tcorrupt: "), "{out}");
    assert!(out.contains("(deleted)"), "{out}");
    assert!(!dir.path().join("m@0x00000002@0c0d.data").exists());
    let (code, out, _) = kvtier(&["usage", "--json", "--l2-adapter", &spec]);
    assert_eq!(code, 0);
    let v: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert_eq!(v["adapters"][0]["used_bytes"], 4000);
    let (code, _, _) = kvtier(&["scrub", "--l2-adapter", &spec]);
    assert_eq!(code, 0, "clean after --delete");
    let (code, _, _) = kvtier(&["scrub", "--adapter", "3", "--l2-adapter", &spec]);
    assert_eq!(code, 1, "no such adapter");
}
