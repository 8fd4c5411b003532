//! The `kvtier` binary's exit codes and outputs.

use std::process::Command;

#[path = "support/cli.rs"]
mod cli_support;
use cli_support::kvtier;

#[test]
fn check_config_prints_resolved_config_or_error() {
    let (code, out, _) = kvtier(&[
        "check-config",
        "--l2-adapter",
        r#"{"type": "fs", "base_path": "/tmp/x"}"#,
    ]);
    assert_eq!(code, 0);
    let v: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert_eq!(v["adapters"][0]["type"], "fs");
    assert_eq!(v["adapters"][0]["num_workers"], 4);
    let (code, _, err) = kvtier(&["check-config", "--l2-adapter", r#"{"type": "fs"}"#]);
    assert_eq!(code, 2);
    assert!(err.contains("adapter #0 (fs): field `base_path`"), "{err}");
}

#[test]
fn usage_errors_exit_2() {
    assert_eq!(kvtier(&["bench", "--chunks", "lots"]).0, 2);
    assert_eq!(kvtier(&["bench", "--chunk-size", "4 furlongs"]).0, 2);
    assert_eq!(kvtier(&["bench", "--batch", "0"]).0, 2);
    assert_eq!(kvtier(&["no-such-command"]).0, 2);
    let (code, _, err) = kvtier(&["usage"]);
    assert_eq!(code, 2, "no adapters");
    assert!(err.contains("no adapters configured"), "{err}");
}

#[test]
fn bench_json_on_embedded_default() {
    let (code, out, err) = kvtier(&[
        "bench",
        "--chunks",
        "48",
        "--chunk-size",
        "64KiB",
        "--batch",
        "8",
        "--json",
    ]);
    assert_eq!(code, 0, "{err}");
    let v: serde_json::Value = serde_json::from_str(out.trim()).unwrap();
    for field in [
        "store_gbps",
        "load_gbps",
        "lookup_keys_per_s",
        "verified",
        "evicted_keys",
        "errors",
    ] {
        assert!(v.get(field).is_some(), "missing {field} in {out}");
    }
    assert_eq!(v["verified"], true);
    assert_eq!(v["errors"], 0);
    assert_eq!(v["load_hits"], 48);
    assert!(
        v["evicted_keys"].as_u64().unwrap() > 0,
        "the overfill phase evicts: {out}"
    );
    let u = &v["usage"][0];
    assert!(
        u["fraction"].as_f64().unwrap() < 0.8,
        "eviction brought usage under the watermark: {out}"
    );
}

#[test]
fn ls_and_usage_on_a_directory() {
    let dir = tempfile::tempdir().unwrap();
    let spec = format!(
        r#"{{"type": "fs", "base_path": "{}"}}"#,
        dir.path().display()
    );
    std::fs::write(dir.path().join("m@0x00000001@0a0b.data"), vec![1u8; 10]).unwrap();
    std::fs::write(dir.path().join("m@0x00000002@0c@salt.data"), vec![1u8; 20]).unwrap();
    let (code, out, _) = kvtier(&["ls", "--l2-adapter", &spec]);
    assert_eq!(code, 0);
    assert_eq!(out, "m@00000001@0a0b\t10\nm@00000002@0c@salt\t20\n");
    let (code, out, _) = kvtier(&["ls", "--json", "--model", "m", "--l2-adapter", &spec]);
    assert_eq!(code, 0);
    let first: serde_json::Value = serde_json::from_str(out.lines().next().unwrap()).unwrap();
    assert_eq!(first["kv_rank"], 1);
    assert_eq!(first["size"], 10);
    let (code, out, _) = kvtier(&["usage", "--json", "--l2-adapter", &spec]);
    assert_eq!(code, 0);
    let v: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert_eq!(v["adapters"][0]["used_bytes"], 30);
    assert_eq!(v["adapters"][0]["fraction"], -1.0);
    let (code, _, _) = kvtier(&["ls", "--adapter", "3", "--l2-adapter", &spec]);
    assert_eq!(code, 1, "no such adapter");
}

/// `kvtier quota` edits the quotas of a configuration file, keeps its comments, and refuses a
/// change the strict parser rejects without touching the file.
#[test]
fn quota_set_get_rm_on_a_config_file() {
    let dir = tempfile::tempdir().unwrap();
    let cfg = dir.path().join("kvtier.toml");
    let original = "# tenants\n[[adapters]]\ntype = \"memory\" # in RAM\n[adapters.eviction]\neviction_policy = \"IsolatedLRU\"\n\n[[adapters]]\ntype = \"memory\"\n";
    std::fs::write(&cfg, original).unwrap();
    let c = cfg.to_str().unwrap();
    let (code, out, err) = kvtier(&["quota", "set", "--config", c, "tenant-a", "1GiB"]);
    assert_eq!(code, 0, "{err}");
    assert!(out.contains("1073741824"), "{out}");
    let (code, out, _) = kvtier(&["quota", "set", "--config", c, "", "512MiB"]);
    assert_eq!(code, 0);
    assert!(out.contains("\"\""), "{out}");
    let text = std::fs::read_to_string(&cfg).unwrap();
    assert!(
        text.contains("# tenants") && text.contains("# in RAM"),
        "{text}"
    );
    let (code, out, _) = kvtier(&["quota", "get", "--config", c]);
    assert_eq!(code, 0);
    assert_eq!(
        out,
        "\"tenant-a\"\t1073741824\t1.00 GiB\n\"\"\t536870912\t512.00 MiB\n"
    );
    // The strict parser sees the quotas.
    let (code, out, _) = kvtier(&["check-config", "--config", c]);
    assert_eq!(code, 0);
    assert!(out.contains("\"tenant-a\": 1073741824"), "{out}");
    let (code, _, _) = kvtier(&["quota", "rm", "--config", c, "tenant-a"]);
    assert_eq!(code, 0);
    let (_, out, _) = kvtier(&["quota", "get", "--config", c]);
    assert_eq!(out, "\"\"\t536870912\t512.00 MiB\n");
    let (code, _, err) = kvtier(&["quota", "rm", "--config", c, "tenant-a"]);
    assert_eq!(code, 1, "{err}");
    assert!(err.contains("no quota for \"tenant-a\""), "{err}");
    // Adapter #1 is LRU: quotas there are refused by the parser and the file stays as it was.
    let before = std::fs::read_to_string(&cfg).unwrap();
    let (code, _, err) = kvtier(&["quota", "set", "--config", c, "--adapter", "1", "x", "1"]);
    assert_eq!(code, 2, "{err}");
    assert!(
        err.contains("not written") && err.contains("IsolatedLRU"),
        "{err}"
    );
    assert_eq!(std::fs::read_to_string(&cfg).unwrap(), before);
    let (code, _, err) = kvtier(&["quota", "set", "--config", c, "x", "lots"]);
    assert_eq!(code, 2);
    assert!(err.contains("expected bytes"), "{err}");
}

/// Writes a trace of four conversations of growing turns over shared system blocks 0 and 1,
/// interleaved: 24 requests, 216 blocks, 50 unique.
fn conversations_trace(dir: &std::path::Path) -> std::path::PathBuf {
    let trace = dir.join("t.jsonl");
    let mut lines = String::new();
    for turn in 1..=6u32 {
        for conv in 0..4u32 {
            let mut ids = vec![0u32, 1];
            ids.extend((0..turn * 2).map(|i| 100 * (conv + 1) + i));
            lines.push_str(&format!(
                "{{\"timestamp\": {}, \"input_length\": {}, \"output_length\": 10, \"hash_ids\": {:?}}}\n",
                turn * 10 + conv,
                ids.len() * 512,
                ids
            ));
        }
    }
    std::fs::write(&trace, lines).unwrap();
    trace
}

/// `bench --trace` replays through the runtime (`memory`, LRU): the report's counts agree with
/// the trace and with each other, the small tier evicts, and nothing fails.
#[test]
fn a_trace_replays_through_the_runtime() {
    let dir = tempfile::tempdir().unwrap();
    let trace = conversations_trace(dir.path());
    let (code, out, err) = kvtier(&[
        "bench",
        "--trace",
        trace.to_str().unwrap(),
        "--block-size",
        "4KiB",
        "--capacity-fraction",
        "0.3",
        "--l2-adapter",
        r#"{"type": "memory", "eviction": {"eviction_policy": "LRU"}}"#,
        "--json",
    ]);
    assert_eq!(code, 0, "{err}");
    let r: serde_json::Value = serde_json::from_str(out.trim()).unwrap();
    let n = |f: &str| r[f].as_u64().unwrap_or_else(|| panic!("{f}: {r}"));
    let x = |f: &str| r[f].as_f64().unwrap_or_else(|| panic!("{f}: {r}"));
    assert_eq!(
        (n("requests"), n("blocks"), n("unique_blocks")),
        (24, 216, 50)
    );
    assert_eq!(n("block_size"), 4096);
    assert_eq!(n("capacity_bytes"), 15 * 4096, "30 % of 50 blocks");
    assert_eq!(n("errors"), 0, "{r}");
    assert_eq!(n("bytes_loaded"), n("prefix_hit_blocks") * 4096);
    assert!(
        n("prefix_hit_blocks") > 0 && n("prefix_hit_blocks") < 216,
        "{r}"
    );
    assert!((x("block_hit_ratio") - n("prefix_hit_blocks") as f64 / 216.0).abs() < 1e-9);
    assert!(
        n("bytes_stored") >= 50 * 4096,
        "every unique block is stored at least once"
    );
    assert!(n("evicted_keys") > 0 && n("eviction_rounds") > 0, "{r}");
    // The tier went past the watermark (it evicted) and the report says how far it filled.
    assert!(x("peak_usage_fraction") >= 0.8, "{r}");
    assert_eq!(r["policies"], serde_json::json!(["LRU"]));
    assert!(
        r["fleet_writes_waited"].is_null() && r["fleet_writes_over"].is_null(),
        "no fleet, no fleet counts: {r}"
    );
}

/// `--requests N` keeps the first N requests and `--node I/N` every N-th of them, with the
/// capacity of the whole (first N) trace; a bad `--node` is a usage error.
#[test]
fn a_replay_splits_the_trace_between_nodes() {
    let dir = tempfile::tempdir().unwrap();
    let trace = conversations_trace(dir.path());
    let t = trace.to_str().unwrap();
    let run = |extra: &[&str]| {
        let mut args = vec!["bench", "--trace", t, "--block-size", "4KiB", "--json"];
        args.extend_from_slice(extra);
        args.extend_from_slice(&[
            "--capacity-fraction",
            "0.3",
            "--l2-adapter",
            r#"{"type": "memory", "eviction": {"eviction_policy": "LRU"}}"#,
        ]);
        let (code, out, err) = kvtier(&args);
        assert_eq!(code, 0, "{err}");
        serde_json::from_str::<serde_json::Value>(out.trim()).unwrap()
    };
    let whole = run(&["--requests", "12"]);
    let parts: Vec<serde_json::Value> = (0..3)
        .map(|i| run(&["--requests", "12", "--node", &format!("{i}/3")]))
        .collect();
    assert_eq!(whole["requests"], 12);
    for p in &parts {
        assert_eq!(p["requests"], 4, "{p}");
        assert_eq!(
            p["unique_blocks"], whole["unique_blocks"],
            "the whole trace's capacity"
        );
        assert_eq!(p["capacity_bytes"], whole["capacity_bytes"]);
    }
    let blocks: u64 = parts.iter().map(|p| p["blocks"].as_u64().unwrap()).sum();
    assert_eq!(
        blocks,
        whole["blocks"].as_u64().unwrap(),
        "every request once"
    );
    for bad in ["3/3", "1", "a/b", "0/0"] {
        let (code, _, err) =
            kvtier(&["bench", "--trace", t, "--block-size", "4KiB", "--node", bad]);
        assert_eq!(code, 2, "{bad}: {err}");
        assert!(err.contains("--node"), "{err}");
    }
}

/// A replay whose store cannot be opened is a runtime failure (exit 1, as the README's table
/// says), not a usage error; a bad flag is still exit 2.
#[test]
fn a_replay_on_a_store_that_cannot_open_exits_1() {
    let dir = tempfile::tempdir().unwrap();
    let trace = conversations_trace(dir.path());
    let t = trace.to_str().unwrap();
    let file = dir.path().join("not-a-dir");
    std::fs::write(&file, b"x").unwrap();
    let adapter = format!(
        r#"{{"type": "fs", "base_path": {:?}}}"#,
        file.to_str().unwrap()
    );
    let (code, _, err) = kvtier(&[
        "bench",
        "--trace",
        t,
        "--block-size",
        "4KiB",
        "--l2-adapter",
        &adapter,
    ]);
    assert_eq!(code, 1, "{err}");
    assert!(err.contains("not-a-dir"), "the error names the path: {err}");
    let (code, _, err) = kvtier(&["bench", "--trace", t, "--block-size", "lots"]);
    assert_eq!(code, 2, "{err}");
}

/// `bench --trace --simulate --json`: one row per policy, capacity and Belady, LMCache's
/// default named `LRU`; an adapter's own eviction settings add a `(configured)` row, and the
/// bounds hold (no policy above Belady, Belady not above the infinite cache).
#[test]
fn simulate_rows_and_the_configured_policy() {
    let dir = tempfile::tempdir().unwrap();
    let trace = conversations_trace(dir.path());
    let t = trace.to_str().unwrap();
    let run = |extra: &[&str]| {
        let mut args = vec!["bench", "--trace", t, "--simulate", "--json"];
        args.extend_from_slice(extra);
        let (code, out, err) = kvtier(&args);
        assert_eq!(code, 0, "{err}");
        serde_json::from_str::<Vec<serde_json::Value>>(out.trim()).unwrap()
    };
    let rows = run(&["--capacity-fraction", "0.3"]);
    let ratio = |rows: &[serde_json::Value], p: &str| {
        let r = rows
            .iter()
            .find(|r| r["policy"] == p)
            .unwrap_or_else(|| panic!("{p}: {rows:?}"));
        assert_eq!(r["capacity_fraction"], 0.3);
        r["block_hit_ratio"].as_f64().unwrap()
    };
    let names: Vec<&str> = rows.iter().map(|r| r["policy"].as_str().unwrap()).collect();
    assert_eq!(
        names,
        ["LRU", "ARC", "IsolatedLRU", "FLRU", "noop", "Belady"]
    );
    let belady = ratio(&rows, "Belady");
    assert!(belady <= ratio(&rows, "noop") + 1e-9);
    for p in ["LRU", "ARC", "FLRU"] {
        assert!(ratio(&rows, p) <= belady + 1e-9, "{p}: {rows:?}");
    }
    assert!(ratio(&rows, "LRU") > 0.0, "{rows:?}");
    let configured = run(&[
        "--capacity-fraction",
        "0.3",
        "--l2-adapter",
        r#"{"type": "memory", "eviction": {"eviction_policy": "FLRU", "flru_bonus_per_use": 0}}"#,
    ]);
    assert_eq!(configured.len(), rows.len() + 1);
    assert!(ratio(&configured, "FLRU (configured)") <= belady + 1e-9);
    // Settings that are the policy's defaults add no row.
    let same = run(&[
        "--capacity-fraction",
        "0.3",
        "--l2-adapter",
        r#"{"type": "memory", "eviction": {"eviction_policy": "FLRU"}}"#,
    ]);
    assert_eq!(same.len(), rows.len());
    // The text table: every column fits its name, so the rows line up with the header.
    let (code, out, err) = kvtier(&[
        "bench",
        "--trace",
        t,
        "--simulate",
        "--capacity-fraction",
        "0.005",
        "--l2-adapter",
        r#"{"type": "memory", "eviction": {"eviction_policy": "FLRU", "flru_admission": "rates"}}"#,
    ]);
    assert_eq!(code, 0, "{err}");
    let lines: Vec<&str> = out.lines().collect();
    let header = lines
        .iter()
        .position(|l| l.starts_with("block hit ratio"))
        .unwrap_or_else(|| panic!("{out}"));
    assert!(lines[header].contains("  FLRU (configured)"), "{out}");
    assert!(lines[header + 1].starts_with("0.5 % "), "{out}");
    assert_eq!(lines[header].len(), lines[header + 1].len(), "{out}");
}

/// Runs `kvtier args` with a stdout whose reader has already closed its end, and asserts it
/// ends quietly: no panic or backtrace on stderr, and exit 0 (nothing was written) or 141 (the
/// closed pipe ended it, as a shell reports for a Unix tool).
fn with_a_closed_stdout(dir: &std::path::Path, args: &[&str]) {
    let (reader, writer) = std::io::pipe().unwrap();
    drop(reader);
    let out = Command::new(env!("CARGO_BIN_EXE_kvtier"))
        .args(args)
        .current_dir(dir)
        .env_remove("KVTIER_L2_ADAPTER")
        .stdout(writer)
        .stderr(std::process::Stdio::piped())
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        !err.contains("panicked") && !err.contains("Broken pipe"),
        "{args:?}: {err}"
    );
    let code = out.status.code();
    assert!(
        code == Some(0) || code == Some(141),
        "{args:?}: {code:?}: {err}"
    );
}

/// Every subcommand that prints to stdout, into a reader that closed early
/// (`kvtier ls | head -5` on a busy machine).
#[test]
fn a_closed_stdout_ends_every_subcommand_quietly() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("kv");
    let fs = format!(
        r#"{{"type": "fs", "base_path": {:?}}}"#,
        data.to_str().unwrap()
    );
    // Objects for `ls` to list.
    let (code, _, err) = kvtier(&[
        "bench",
        "--chunks",
        "8",
        "--chunk-size",
        "4KiB",
        "--batch",
        "4",
        "--l2-adapter",
        &fs,
    ]);
    assert_eq!(code, 0, "{err}");
    let cfg = dir.path().join("kvtier.toml");
    std::fs::write(
        &cfg,
        "[[adapters]]\ntype = \"memory\"\n[adapters.eviction]\neviction_policy = \"IsolatedLRU\"\n\
         [adapters.eviction.quotas]\n\"a\" = 1024\n",
    )
    .unwrap();
    let trace = conversations_trace(dir.path());
    let (c, t) = (cfg.to_str().unwrap(), trace.to_str().unwrap());
    let runs: &[&[&str]] = &[
        &["check-config", "--l2-adapter", &fs],
        &["ls", "--l2-adapter", &fs],
        &["ls", "--json", "--l2-adapter", &fs],
        &["usage", "--l2-adapter", &fs],
        &["usage", "--json", "--l2-adapter", &fs],
        &["status", "--l2-adapter", &fs],
        &["scrub", "--l2-adapter", &fs],
        &["scrub", "--json", "--l2-adapter", &fs],
        &["quota", "get", "--config", c],
        &[
            "bench",
            "--chunks",
            "8",
            "--chunk-size",
            "4KiB",
            "--batch",
            "4",
            "--json",
        ],
        &[
            "bench",
            "--chunks",
            "8",
            "--chunk-size",
            "4KiB",
            "--batch",
            "4",
        ],
        &["bench", "--trace", t, "--block-size", "4KiB", "--json"],
        &["bench", "--trace", t, "--block-size", "4KiB", "--simulate"],
        &["--help"],
    ];
    for args in runs {
        with_a_closed_stdout(dir.path(), args);
    }
}
