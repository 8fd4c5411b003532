//! No thread and no temporary directory outlives its tier: after `Tier::close`, and after a
//! `Tier::start` that failed part-way, the process has the threads it had before.
//!
//! One test in a binary of its own, so that no other test's threads come and go while it
//! counts (`/proc/self/task`).

use kvtier::{AdapterConfig, Tier, TierConfig};

/// `PF_EXITING` in a thread's `flags` (field 9 of `/proc/<pid>/task/<tid>/stat`): the thread
/// has entered the kernel's exit path and runs no more user code.
const PF_EXITING: u64 = 0x4;

/// The threads a tier starts: its arbiters (`actix-rt|system:…|arbiter:…`), its worker pools
/// (`kvtier-worker-<i>`), and any unnamed thread it spawned from this one (Linux gives a new
/// thread its parent's name), by their names in `/proc/self/task/*/comm`. Not counted: the
/// blocking-pool threads of the caller's own runtime (`tokio-runtime-w…`), whose number varies,
/// and threads already exiting. A joined thread can still be listed for a moment: `join`
/// returns once the thread has released its memory, before the kernel drops it from the list
/// (seen in about 1 run in 100 of this test). Such a thread is flagged `PF_EXITING`; a thread
/// the tier did not stop, or stopped without waiting for, is still running user code and is
/// counted.
fn threads() -> usize {
    let me = std::fs::read_to_string("/proc/thread-self/comm").unwrap();
    let names: Vec<String> = std::fs::read_dir("/proc/self/task")
        .expect("/proc/self/task")
        .filter_map(|e| {
            let dir = e.ok()?.path();
            let stat = std::fs::read_to_string(dir.join("stat")).ok()?;
            // After the name's closing parenthesis: state, ppid, pgrp, session, tty_nr,
            // tpgid, flags.
            let flags: u64 = stat[stat.rfind(')')? + 1..]
                .split_whitespace()
                .nth(6)?
                .parse()
                .ok()?;
            if flags & PF_EXITING != 0 {
                return None;
            }
            std::fs::read_to_string(dir.join("comm")).ok()
        })
        .collect();
    let spawned_here = names.iter().filter(|n| **n == me).count() - 1;
    let named = names
        .iter()
        .filter(|n| n.starts_with("actix-rt|") || n.starts_with("kvtier-worker"))
        .count();
    named + spawned_here
}

fn entries(dir: &std::path::Path) -> usize {
    std::fs::read_dir(dir).map(|d| d.count()).unwrap_or(0)
}

#[test]
fn close_and_a_failed_start_leave_no_thread_behind() {
    let tmp = tempfile::tempdir().unwrap();
    let data = tmp.path().join("kv");
    let file = tmp.path().join("a-file");
    std::fs::write(&file, b"x").unwrap();
    let good = || {
        TierConfig::with_adapters(vec![
            AdapterConfig::memory(),
            AdapterConfig::fs(&data),
            AdapterConfig::memory(),
        ])
    };
    // The second adapter cannot open (its directory would be under a file), after the first
    // has started its arbiter.
    let bad = || {
        TierConfig::with_adapters(vec![
            AdapterConfig::fs(&data),
            AdapterConfig::fs(file.join("sub")),
        ])
    };
    actix_rt::System::new().block_on(async {
        let before = threads();
        assert_eq!(before, 0, "no tier has run yet");
        for round in 0..5 {
            let tier = Tier::start(&good()).await.unwrap();
            assert!(tier
                .store(
                    vec![kvtier::ObjectKey::new("m", 0, vec![round]).unwrap()],
                    vec![bytes::Bytes::from(vec![round; 64])],
                )
                .await
                .unwrap()
                .success());
            assert!(
                threads() > before,
                "the tier runs its arbiters on threads of its own"
            );
            tier.close().await;
            assert_eq!(threads(), before, "round {round}: threads left after close");

            let err = Tier::start(&bad())
                .await
                .err()
                .expect("adapter #1 cannot open");
            assert!(err.to_string().starts_with("adapter #1 (fs): "), "{err}");
            assert_eq!(
                threads(),
                before,
                "round {round}: threads left after a failed start"
            );
        }
    });
    // The fs adapter's directory holds what was stored, and nothing else was left in `tmp`.
    assert_eq!(entries(tmp.path()), 2, "kv and a-file");
    assert!(entries(&data) > 0, "the stores reached the fs adapter");
}
