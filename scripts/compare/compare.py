#!/usr/bin/env python3
"""One-run comparison of S3 clients against the same server, in alternation.

Runs each client as its own process, in rounds (A B C, B C A, C A B, …: the order rotates
so that no client is always first on a fresh server), so every client sees the same machine
state on average and its CPU figure is its own process's user + system time
for that phase only (not the server's). Clients:

- `kvtier`: the full pipeline (`kvtier bench --client pipeline`: controller → S3 backend
  actor → store / lookup+lock / load / unlock), every byte verified;
- `raw`: plain concurrent aws-sdk-s3 PUT/GET (`kvtier bench --client raw-s3`), no actors;
- `awscrt`: `scripts/compare/peer_awscrt.py`, LMCache's S3 data path rebuilt on awscrt's S3Client;
- `lmcache-s3`: LMCache 0.5's own `s3` L2 adapter (awscrt), built by LMCache's `--l2-adapter`
  parser and factory and driven through `L2AdapterInterface` as its controllers drive it
  (`scripts/compare/peer_lmcache.py`: tasks of `batch` keys, eventfds, lookups from a fresh instance);
- `kvtier-lmcache`: kvtier through its LMCache plugin (`{"type": "plugin", "module_path":
  "kvtier.lmcache", ...}`), driven by the same script the same way; `--plugin-variant
  name=JSON` runs it with these kvtier adapter fields changed, `--plugin-site name=DIR` with the
  `kvtier` package of another build (a `pip install --target DIR` of its wheel);
- `lmcache-hfbucket` and `kvtier-lmcache-hf`: the same two on `hfbucket` (LMCache's own
  `hfbucket` adapter, huggingface_hub; kvtier's through the plugin), each run against a fresh
  loopback Hub emulator (`--hub-emulator`, a release build of `examples/hub_emulator.rs`)
  instead of Garage; `--plugin-variant` and `--plugin-site` clients whose name ends in `-hf`
  are variants of `kvtier-lmcache-hf` (e.g. `--plugin-site before-hf=DIR`,
  `--plugin-variant lz4-hf='{"xet_compression": "lz4"}'`);
- extra kvtier variants (`--variant name='{"s3_checksum": "crc32c"}'`): the pipeline with
  these adapter fields changed; `--binary name=path`: the pipeline of another kvtier build
  (before/after a change, in the same rounds).

Every client uses the same objects sizes, counts and requests in flight, with distinct random
payloads (Garage deduplicates identical blocks), and deletes its objects afterwards.

Every run (one client, one round) gets a fresh single-node Garage (`scripts/garage-local.sh`,
data in a new temporary directory, removed afterwards), after a `sync`: no run inherits the
blocks, metadata, pending deletions (Garage frees deleted blocks only after a delay) or dirty
pages of the one before it. With
`--adapter JSON` every round uses that server instead. Prints a Markdown table of medians and
min–max per phase, plus ratios of medians; `--json-out` also writes every raw result, and `--report FILE` prints the tables of such a
file again.
"""

import argparse
import contextlib
import json
import os
import statistics
import subprocess
import sys

MIB = 1024.0**2
GIB = 1024.0**3


def parse_size(s: str) -> int:
    units = {"k": 1 << 10, "kib": 1 << 10, "m": 1 << 20, "mib": 1 << 20, "g": 1 << 30, "gib": 1 << 30}
    s = s.strip().lower()
    for u in sorted(units, key=len, reverse=True):
        if s.endswith(u):
            return int(float(s[: -len(u)]) * units[u])
    return int(s)


def parse_workload(w: str):
    """`256x4MiB@16` → (chunks, chunk_size, in_flight)."""
    count, rest = w.lower().split("x", 1)
    size, conc = rest.split("@", 1)
    return int(count), parse_size(size), int(conc)


# Clients driven through LMCache's L2AdapterInterface (scripts/compare/peer_lmcache.py).
LMCACHE_CLIENTS = ("lmcache-s3", "kvtier-lmcache", "lmcache-hfbucket", "kvtier-lmcache-hf")
# Clients that run against the Hub emulator instead of Garage.
HF_CLIENTS = ("lmcache-hfbucket", "kvtier-lmcache-hf")
# Clients every kvtier client is compared with, in the same round.
PEERS = ("raw", "awscrt", "lmcache-s3", "lmcache-hfbucket")
HUB_TOKEN = "hf_kvtier_bench_token"


def is_hf(c):
    """Whether client `c` runs against the Hub emulator: the two HF clients, and plugin
    variants or sites whose name ends in `-hf` (e.g. `--plugin-site before-hf=DIR`)."""
    return c in HF_CLIENTS or c.endswith("-hf")


def lmcache_peer(c):
    """The LMCache built-in adapter a plugin client is compared with."""
    return "lmcache-hfbucket" if is_hf(c) else "lmcache-s3"


@contextlib.contextmanager
def hub(args):
    """A fresh loopback Hub emulator for one run: its endpoint and process id."""
    p = subprocess.Popen([args.hub_emulator, "--port", "0", "--token", HUB_TOKEN],
                         stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    try:
        endpoint = p.stdout.readline().strip()
        if not endpoint.startswith("http://127.0.0.1:"):
            raise RuntimeError(f"{args.hub_emulator} printed {endpoint!r}, not its endpoint")
        yield endpoint, p.pid
    finally:
        p.kill()
        p.wait()


def run_json(cmd, env=None):
    p = subprocess.run(cmd, capture_output=True, text=True, env=env)
    line = next((l for l in reversed(p.stdout.splitlines()) if l.startswith("{")), None)
    if line is None:
        raise RuntimeError(f"{cmd[0]} exited {p.returncode} without a report:\n{p.stderr[-2000:]}")
    report = json.loads(line)
    report["_exit"] = p.returncode
    return report


@contextlib.contextmanager
def server(args):
    """The adapter JSON of a fresh Garage for one run (or of `--adapter`), and the server's
    process id (None with `--adapter`)."""
    if args.adapter:
        yield json.loads(args.adapter), None
        return
    env = dict(os.environ, KVTIER_GARAGE_PORT=str(args.port))
    if args.vhost_bucket:
        # LMCache's s3 adapter addresses its bucket virtual-host style, Host = its endpoint:
        # with this root domain, `Host: 127.0.0.1:<port>` is the bucket "127".
        env.update(KVTIER_GARAGE_BUCKET="127", KVTIER_GARAGE_ROOT_DOMAIN=".0.0.1")
    # The script prints the adapter, then holds Garage up until our stdin closes.
    p = subprocess.Popen(
        [args.garage_script, "sh", "-c", 'echo "$KVTIER_S3_ADAPTER"; echo "$KVTIER_GARAGE_PID"; read _ || true'],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
        text=True, env=env,
    )
    line = p.stdout.readline()
    try:
        if not line.startswith("{"):
            raise RuntimeError(f"{args.garage_script} did not start Garage (exit {p.wait()})")
        pid = int(p.stdout.readline().strip())
        yield json.loads(line), pid
    finally:
        p.stdin.close()
        p.wait(timeout=120)


def flags(opts):
    """`{"chunk_size": 4096, "json": None}` → `["--chunk-size", "4096", "--json"]`."""
    out = []
    for k, v in opts.items():
        out.append("--" + k.replace("_", "-"))
        if v is not None:
            out.append(str(v))
    return out


def process_cpu_s(pid):
    """User + system CPU seconds of a process so far (None if unknown)."""
    if pid is None:
        return None
    try:
        with open(f"/proc/{pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    except (OSError, ValueError, IndexError):
        return None


def phases_of(report):
    out = {}
    for ph in report["phases"]:
        if ph["phase"] in ("store", "load") and ph["bytes"] > 0:
            gib = ph["bytes"] / GIB
            out[ph["phase"]] = {
                "mib_s": ph["bytes"] / MIB / ph["seconds"],
                "cpu_gib": ph["cpu_s"] / gib,
            }
    return out


def paired_ratios(runs, plugin_clients=LMCACHE_CLIENTS):
    """Per-round ratios of every kvtier client (the pipeline and its variants) to `raw` and
    `awscrt` from the same round: round-to-round swings of the shared machine and the fresh
    server cancel out of these, which they do not in a ratio of medians."""
    out = {}
    for c in runs:
        if c in PEERS:
            continue
        # Variants and other builds are also paired with the plain pipeline (or plugin) run of
        # their round; the plugin's runs with LMCache's own adapter.
        if c in plugin_clients:
            others = (("lmcache-hfbucket", "kvtier-lmcache-hf") if is_hf(c)
                      else ("lmcache-s3", "kvtier-lmcache"))
        else:
            others = ("raw", "awscrt", "kvtier")
        for other in [b for b in others if b in runs and b != c]:
            cols = []
            for phase in ("store", "load"):
                for metric in ("mib_s", "cpu_gib"):
                    v = [a["phases"][phase][metric] / b["phases"][phase][metric]
                         for a, b in zip(runs[c], runs[other])
                         if phase in a["phases"] and phase in b["phases"] and b["phases"][phase][metric] > 0]
                    cols.append(v)
            out[(c, other)] = cols
    return out


def main():
    ap = argparse.ArgumentParser(description="Compare kvtier, raw aws-sdk-s3 and the awscrt peer.")
    ap.add_argument("--kvtier", default="target/release/kvtier")
    ap.add_argument("--python", default=sys.executable, help="python with awscrt installed")
    ap.add_argument("--peer", default=os.path.join(os.path.dirname(__file__), "peer_awscrt.py"))
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--workload", action="append", help="CHUNKSxSIZE@INFLIGHT, e.g. 256x4MiB@16")
    ap.add_argument("--clients", default="kvtier,raw,awscrt")
    ap.add_argument("--set", default='{"s3_payload_signing": "unsigned"}',
                    help="adapter fields for kvtier and raw (JSON object)")
    ap.add_argument("--variant", action="append", default=[],
                    help="NAME=JSON: an extra kvtier pipeline run with these adapter fields; keys "
                         "starting with '_' set bench options instead, e.g. '{\"_batch\": 1, "
                         "\"_concurrency\": 64}' (keys per request, requests in flight)")
    ap.add_argument("--binary", action="append", default=[],
                    help="NAME=PATH: an extra kvtier pipeline run with another kvtier binary "
                         "(before/after comparisons of a change)")
    ap.add_argument("--plugin-variant", action="append", default=[],
                    help="NAME=JSON: an extra kvtier-lmcache run with these kvtier adapter fields")
    ap.add_argument("--plugin-site", action="append", default=[],
                    help="NAME=DIR: an extra kvtier-lmcache run importing `kvtier` from DIR (a "
                         "`pip install --target DIR` of another build's wheel)")
    ap.add_argument("--lmcache-python",
                    default=os.path.join(os.environ.get("KVTIER_TOOLS_DIR", os.path.expanduser(
                        "~/.cache/kvtier-tools")), "lmcache-venv", "bin", "python"),
                    help="python with lmcache (and, for kvtier-lmcache, the kvtier wheel)")
    ap.add_argument("--lmcache-set", default="{}",
                    help="fields of LMCache's own s3 adapter to change (JSON object)")
    ap.add_argument("--plugin-set", default="{}",
                    help="kvtier adapter fields of every kvtier-lmcache run (JSON object)")
    ap.add_argument("--hub-emulator", default="target/release/examples/hub_emulator",
                    help="the Hub emulator binary, for lmcache-hfbucket and kvtier-lmcache-hf")
    ap.add_argument("--peer-lmcache", default=os.path.join(os.path.dirname(__file__), "peer_lmcache.py"))
    ap.add_argument("--json-out")
    ap.add_argument("--adapter", help="use this s3 adapter JSON for every round (no fresh Garage)")
    ap.add_argument("--garage-script",
                    default=os.path.join(os.path.dirname(__file__), "..", "garage-local.sh"))
    ap.add_argument("--port", type=int, default=int(os.environ.get("KVTIER_GARAGE_PORT", "3960")))
    ap.add_argument("--report", metavar="JSON", help="print the tables of an earlier --json-out file and exit")
    args = ap.parse_args()
    if args.report:
        with open(args.report) as f:
            saved = json.load(f)
        if isinstance(saved, list):  # files written before rounds and fields were saved too
            saved = {"results": saved, "rounds": "?", "set": "?"}
        report(saved["results"], saved["rounds"], saved["set"], saved.get("plugin_clients"))
        return
    workloads = [parse_workload(w) for w in (args.workload or ["256x4MiB@16", "2048x256KiB@32"])]

    overrides = json.loads(args.set)

    clients = args.clients.split(",")
    variants = {}
    binaries = {}
    for v in args.variant:
        name, fields = v.split("=", 1)
        variants[name] = json.loads(fields)
        clients.append(name)
    for b in args.binary:
        name, path = b.split("=", 1)
        binaries[name] = path
        clients.append(name)
    plugin_variants = {}
    plugin_sites = {}
    for v in args.plugin_variant:
        name, fields = v.split("=", 1)
        plugin_variants[name] = json.loads(fields)
        clients.append(name)
    for v in args.plugin_site:
        name, path = v.split("=", 1)
        plugin_sites[name] = os.path.abspath(path)
        clients.append(name)
    plugin_clients = {*LMCACHE_CLIENTS, *plugin_variants, *plugin_sites}
    # LMCache's adapter needs a virtual-host bucket; every run then gets the same server.
    args.vhost_bucket = "lmcache-s3" in clients

    results = []
    for chunks, size, in_flight in workloads:
        wl = f"{chunks} x {size // 1024} KiB @ {in_flight}"
        batch = 16
        # The pipeline submits 4x what the S3 layer lets through, so it is never starved.
        submit = max(1, 4 * in_flight // batch)
        # Bench options every kvtier run shares; variants may override them ("_batch": …).
        bench_opts = {"json": None, "chunks": chunks, "chunk_size": size, "batch": batch,
                      "concurrency": submit}
        # The server's CPU is taken over a whole run: per GiB stored plus loaded.
        server_gib = 2 * chunks * size / GIB
        per = {c: [] for c in clients}
        for rnd in range(args.rounds):
            # Rotate the order every round, so that slow drifts of the machine spread evenly.
            for c in clients[rnd % len(clients):] + clients[:rnd % len(clients)]:
                # Every run gets its own fresh server: no run inherits the blocks, metadata
                # or pending deletions of the one before it.
                os.sync()
                if is_hf(c):
                    with hub(args) as (endpoint, server_pid):
                        server_cpu = process_cpu_s(server_pid)
                        rep = run_hf(args, c, endpoint, chunks, size, batch, submit,
                                     plugin_variants.get(c, {}), plugin_sites.get(c))
                        after = process_cpu_s(server_pid)
                        record(per, c, rep, server_cpu, after, server_gib, wl, rnd)
                    continue
                with server(args) as (base, server_pid):
                    base.update(overrides)
                    lm_endpoint = base["s3_endpoint"].split("://", 1)[1]
                    if args.vhost_bucket:
                        # Path-style clients must not use the virtual-host name.
                        base["s3_endpoint"] = base["s3_endpoint"].replace("127.0.0.1", "localhost")
                    adapter = dict(base, s3_num_io_threads=in_flight)
                    peer_env = dict(os.environ)
                    peer_env["AWS_ACCESS_KEY_ID"] = base["aws_access_key_id"]
                    peer_env["AWS_SECRET_ACCESS_KEY"] = base["aws_secret_access_key"]
                    server_cpu = process_cpu_s(server_pid)
                    if c in plugin_clients:
                        if c == "lmcache-s3":
                            spec = dict({"type": "s3", "s3_endpoint": lm_endpoint,
                                         "s3_region": base["s3_region"], "disable_tls": True,
                                         "s3_prefer_http2": False,
                                         "aws_access_key_id": base["aws_access_key_id"],
                                         "aws_secret_access_key": base["aws_secret_access_key"]},
                                        **json.loads(args.lmcache_set))
                        else:
                            # kvtier's defaults, but for what the server needs.
                            params = {k: base[k] for k in ("type", "s3_endpoint", "s3_bucket", "s3_region",
                                                           "disable_tls", "aws_access_key_id",
                                                           "aws_secret_access_key")}
                            params.update(json.loads(args.plugin_set))
                            params.update(plugin_variants.get(c, {}))
                            spec = {"type": "plugin", "module_path": "kvtier.lmcache",
                                    "class_name": "KvtierL2Adapter", "adapter_params": params}
                        env = dict(os.environ)
                        if c in plugin_sites:
                            env["PYTHONPATH"] = os.pathsep.join(
                                [plugin_sites[c]] + [p for p in [env.get("PYTHONPATH")] if p])
                        cmd = [args.lmcache_python, args.peer_lmcache, "--spec", json.dumps(spec),
                               "--chunks", str(chunks), "--chunk-size", str(size),
                               "--batch", str(batch), "--tasks", str(submit)]
                        rep = run_json(cmd, env=env)
                    elif c == "awscrt":
                        cmd = [args.python, args.peer, "--endpoint", base["s3_endpoint"],
                               "--bucket", base["s3_bucket"], "--region", base["s3_region"],
                               "--chunks", str(chunks), "--chunk-size", str(size),
                               "--concurrency", str(in_flight)]
                        rep = run_json(cmd, env=peer_env)
                    elif c == "raw":
                        cmd = [args.kvtier, "bench", "--client", "raw-s3", *flags(bench_opts),
                               "--l2-adapter", json.dumps(adapter)]
                        rep = run_json(cmd)
                    else:
                        v = variants.get(c, {})
                        a = dict(adapter, **{k: x for k, x in v.items() if not k.startswith("_")})
                        opts = dict(bench_opts, **{k[1:]: x for k, x in v.items() if k.startswith("_")})
                        cmd = [binaries.get(c, args.kvtier), "bench", "--client", "pipeline", "--no-baseline",
                               "--cleanup", *flags(opts), "--l2-adapter", json.dumps(a)]
                        rep = run_json(cmd)
                    after = process_cpu_s(server_pid)
                    record(per, c, rep, server_cpu, after, server_gib, wl, rnd)
        results.append({"workload": wl, "chunks": chunks, "chunk_size": size,
                        "in_flight": in_flight, "runs": per})

    if args.json_out:
        with open(args.json_out, "w") as f:
            json.dump({"rounds": args.rounds, "set": args.set, "results": results,
                       "plugin_clients": sorted(plugin_clients)}, f, indent=1)
    report(results, args.rounds, args.set, plugin_clients)


def run_hf(args, c, endpoint, chunks, size, batch, submit, fields=None, site=None):
    """One run of an hfbucket client against the Hub emulator at `endpoint`; a kvtier client
    gets the adapter `fields` on top of its defaults, and imports `kvtier` from `site` if given."""
    import tempfile

    env = dict(os.environ, HF_ENDPOINT=endpoint, HF_HUB_DISABLE_TELEMETRY="1")
    if site:
        env["PYTHONPATH"] = os.pathsep.join([site] + [p for p in [env.get("PYTHONPATH")] if p])
    with tempfile.TemporaryDirectory(prefix="kvtier-bench-hf-") as tmp:
        if c == "lmcache-hfbucket":
            spec = {"type": "hfbucket", "bucket_handle": "hf://buckets/kvtier/bench",
                    "token": HUB_TOKEN, "download_tmp_dir": tmp, "create_bucket_if_missing": True}
        else:
            spec = {"type": "plugin", "module_path": "kvtier.lmcache", "class_name": "KvtierL2Adapter",
                    "adapter_params": {"type": "hfbucket", "bucket_handle": "hf://buckets/kvtier/bench",
                                       "hf_endpoint": endpoint, "token": HUB_TOKEN,
                                       "create_bucket_if_missing": True, **(fields or {})}}
        cmd = [args.lmcache_python, args.peer_lmcache, "--spec", json.dumps(spec),
               "--chunks", str(chunks), "--chunk-size", str(size),
               "--batch", str(batch), "--tasks", str(submit)]
        return run_json(cmd, env=env)


def record(per, c, rep, server_cpu, after, server_gib, wl, rnd):
    """Adds one run's result to `per[c]` and prints it."""
    # What the client's requests (store, load, clean-up) cost the server.
    server_cpu_gib = (after - server_cpu) / server_gib if after is not None and server_cpu is not None else None
    ok = rep.get("verified") and rep.get("errors", 1) == 0 and rep["_exit"] == 0
    ph = phases_of(rep)
    per[c].append({"ok": ok, "phases": ph, "peak_rss_mib": rep.get("peak_rss_mib"),
                   "server_cpu_gib": server_cpu_gib})
    print(f"[{wl}] round {rnd + 1} {c}: "
          + ", ".join(f"{k} {v['mib_s']:.0f} MiB/s {v['cpu_gib']:.2f} CPU-s/GiB"
                      for k, v in ph.items())
          + (f", server {server_cpu_gib:.2f} CPU-s/GiB" if server_cpu_gib is not None else "")
          + ("" if ok else "  (NOT VERIFIED / ERRORS)"), file=sys.stderr, flush=True)


def report(results, rounds, fields, plugin_clients=None):
    """Prints the Markdown tables; exits 1 if any run was unverified or failed."""
    plugin_clients = set(plugin_clients or LMCACHE_CLIENTS)
    print(f"\nrounds: {rounds}; kvtier/raw adapter fields: {fields}\n")
    for r in results:
        print(f"### {r['workload']} (chunks x size @ requests in flight)\n")
        print("| client | phase | MiB/s median (min–max) | CPU-s/GiB median (min–max) | peak RSS MiB | verified |")
        print("|---|---|---|---|---|---|")
        med = {}
        for c, runs in r["runs"].items():
            for phase in ("store", "load"):
                xs = [x["phases"][phase]["mib_s"] for x in runs if phase in x["phases"]]
                cs = [x["phases"][phase]["cpu_gib"] for x in runs if phase in x["phases"]]
                if not xs:
                    continue
                med[(c, phase)] = (statistics.median(xs), statistics.median(cs))
                rss = max((x["peak_rss_mib"] or 0) for x in runs)
                print(f"| {c} | {phase} | {statistics.median(xs):.0f} ({min(xs):.0f}–{max(xs):.0f}) "
                      f"| {statistics.median(cs):.2f} ({min(cs):.2f}–{max(cs):.2f}) | {rss:.0f} "
                      f"| {all(x['ok'] for x in runs)} |")
        print()
        server = {c: [x["server_cpu_gib"] for x in runs if x.get("server_cpu_gib") is not None]
                  for c, runs in r["runs"].items()}
        if any(server.values()):
            print("Server (Garage, or the Hub emulator for hfbucket clients) CPU-s per GiB stored + loaded, whole run: "
                  + "; ".join(f"{c} {statistics.median(v):.2f} ({min(v):.2f}–{max(v):.2f})"
                              for c, v in server.items() if v))
            print()
        for phase in ("store", "load"):
            k = med.get(("kvtier", phase))
            if not k:
                continue
            parts = []
            for other in ("raw", "awscrt"):
                o = med.get((other, phase))
                if o:
                    parts.append(f"throughput vs {other} {k[0] / o[0]:.2f}x, CPU/GiB vs {other} {k[1] / o[1]:.2f}x")
            print(f"- kvtier {phase}: " + "; ".join(parts))
        for c in sorted(plugin_clients - set(PEERS)):
            for phase in ("store", "load"):
                peer = lmcache_peer(c)
                k, o = med.get((c, phase)), med.get((peer, phase))
                if k and o:
                    print(f"- {c} {phase}: throughput vs {peer} {k[0] / o[0]:.2f}x, "
                          f"CPU/GiB vs {peer} {k[1] / o[1]:.2f}x")
        print()
        paired = paired_ratios(r["runs"], plugin_clients)
        if paired:
            print("Paired ratios (each round's kvtier client ÷ the other client in the same round, on the same "
                  "fresh server; median (min–max) over rounds):\n")
            print("| client | vs | store MiB/s | store CPU/GiB | load MiB/s | load CPU/GiB |")
            print("|---|---|---|---|---|---|")
            for (c, other), cols in paired.items():
                cells = [f"{statistics.median(v):.2f} ({min(v):.2f}–{max(v):.2f})" if v else "–" for v in cols]
                print(f"| {c} | {other} | " + " | ".join(cells) + " |")
            print()
    bad = [(r["workload"], c) for r in results for c, runs in r["runs"].items() if not all(x["ok"] for x in runs)]
    if bad:
        print(f"unverified or failed runs: {bad}", file=sys.stderr)
        sys.exit(1)


if __name__ == "__main__":
    main()
