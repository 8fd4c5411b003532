#!/usr/bin/env python3
"""One LMCache L2 adapter driven the way LMCache's controllers drive it, for `scripts/compare/compare.py`.

The adapter is built only through LMCache 0.5's own `--l2-adapter` parser and factory (so
`{"type": "s3", ...}` is LMCache's built-in S3 adapter, and `{"type": "plugin", "module_path":
"kvtier.lmcache", ...}` is kvtier through its plugin), then used only through
`L2AdapterInterface`, as LMCache's store and prefetch controllers use it:

- store: `submit_store_task` of `--batch` keys at a time, at most `--tasks` tasks outstanding;
  completions are awaited on the store eventfd and collected with `pop_completed_store_tasks`;
- lookup: `submit_lookup_and_lock_task` from a FRESH adapter instance (the store's one is
  closed first), so no in-process cache of the storing instance (LMCache's S3 adapter keeps
  every stored object's size) answers it: every lookup reaches the server;
- load: `submit_load_task` into fresh MemoryObjs on that second instance, then
  `submit_unlock`.

MemoryObjs are LMCache `TensorMemoryObj`s over CPU uint8 tensors, as LMCache's tests (and
kvtier's plugin tests) make them; each object is a slice of one large tensor. Payloads are
distinct random bytes (Garage deduplicates identical blocks); every loaded byte is compared
with what was stored after the load phase (not timed).

CPU figures are this process's user + system time (`getrusage`, every thread: the adapter's
event loop, awscrt's or kvtier's threads, and this driver) over each phase.

Prints one JSON object shaped like `kvtier bench --json`: `phases` (store, lookup, load with
bytes, seconds, cpu_s), `verified`, `errors`, `peak_rss_mib`.

Usage: peer_lmcache.py --spec JSON --chunks 256 --chunk-size 4194304 --batch 16 --tasks 4
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import select
import sys
import time


def cpu_seconds() -> float:
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime


def build(spec: dict):
    """An adapter built exactly as LMCache's MP server builds one: parser, then factory."""
    from lmcache.v1.distributed.l2_adapters import create_l2_adapter
    from lmcache.v1.distributed.l2_adapters.config import (
        add_l2_adapters_args,
        parse_args_to_l2_adapters_config,
    )

    parser = argparse.ArgumentParser()
    add_l2_adapters_args(parser)
    config = parse_args_to_l2_adapters_config(parser.parse_args(["--l2-adapter", json.dumps(spec)]))
    return create_l2_adapter(config.adapters[0])


def wait_fd(fd: int, timeout_s: float = 300.0) -> None:
    p = select.poll()
    p.register(fd, select.POLLIN)
    if not p.poll(timeout_s * 1000):
        raise TimeoutError(f"no completion on fd {fd} within {timeout_s} s")
    try:
        os.eventfd_read(fd)
    except BlockingIOError:
        pass


def drive(batches, submit, poll_done, fd, tasks):
    """Keeps at most `tasks` tasks outstanding until every batch is done; returns
    `{batch index: result}`. `poll_done(ids)` returns the results of finished tasks among
    `ids` as `{task id: result}`."""
    pending = {}
    results = {}
    nxt = 0
    while nxt < len(batches) or pending:
        while nxt < len(batches) and len(pending) < tasks:
            pending[submit(batches[nxt])] = nxt
            nxt += 1
        done = poll_done(list(pending))
        if not done:
            wait_fd(fd)
            continue
        for tid, res in done.items():
            results[pending.pop(tid)] = res
    return results


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--spec", required=True, help="LMCache --l2-adapter JSON")
    ap.add_argument("--chunks", type=int, default=256)
    ap.add_argument("--chunk-size", type=int, default=4 << 20)
    ap.add_argument("--batch", type=int, default=16, help="keys per task")
    ap.add_argument("--tasks", type=int, default=4, help="tasks outstanding at most")
    ap.add_argument("--model", default="bench/model")
    args = ap.parse_args()
    spec = json.loads(args.spec)

    import numpy as np
    import torch
    from lmcache.v1.distributed.api import ObjectKey
    from lmcache.v1.memory_management import MemoryObjMetadata, TensorMemoryObj

    n, size = args.chunks, args.chunk_size
    src = torch.from_numpy(np.frombuffer(np.random.default_rng().bytes(n * size), dtype=np.uint8).copy())
    dst = torch.zeros(n * size, dtype=torch.uint8)

    def mobj(t, i):
        meta = MemoryObjMetadata(shape=torch.Size([size]), dtype=torch.uint8, address=0,
                                 phy_size=size, ref_count=1)
        return TensorMemoryObj(t[i * size:(i + 1) * size], meta, None)

    keys = [ObjectKey(chunk_hash=i.to_bytes(8, "big") + b"\xab", model_name=args.model,
                      kv_rank=0, object_group_id=0, cache_salt="") for i in range(n)]
    src_objs = [mobj(src, i) for i in range(n)]
    dst_objs = [mobj(dst, i) for i in range(n)]
    idx = [list(range(s, min(s + args.batch, n))) for s in range(0, n, args.batch)]
    phases = []
    errors = 0

    def phase(name, nbytes, fn):
        c0, t0 = cpu_seconds(), time.perf_counter()
        out = fn()
        t1, c1 = time.perf_counter(), cpu_seconds()
        phases.append({"phase": name, "keys": n, "bytes": nbytes, "seconds": t1 - t0,
                       "cpu_s": c1 - c0, "keys_per_s": n / (t1 - t0)})
        return out

    # Store, on the first instance.
    a = build(spec)
    stored = phase("store", n * size, lambda: drive(
        idx,
        lambda b: a.submit_store_task([keys[i] for i in b], [src_objs[i] for i in b]),
        lambda ids: a.pop_completed_store_tasks(),
        a.get_store_event_fd(), args.tasks))
    errors += sum(1 for r in stored.values() if not r.is_successful())
    a.close()

    # Lookup and load, on a fresh instance.
    b2 = build(spec)

    def query(q, ids):
        out = {}
        for t in ids:
            r = q(t)
            if r is not None:
                out[t] = r
        return out

    found = phase("lookup", 0, lambda: drive(
        idx,
        lambda b: b2.submit_lookup_and_lock_task([keys[i] for i in b], {}),
        lambda ids: query(b2.query_lookup_and_lock_result, ids),
        b2.get_lookup_and_lock_event_fd(), args.tasks))
    hits = sum(found[j].test(k) for j, b in enumerate(idx) for k in range(len(b)))
    loaded = phase("load", n * size, lambda: drive(
        idx,
        lambda b: b2.submit_load_task([keys[i] for i in b], [dst_objs[i] for i in b]),
        lambda ids: query(b2.query_load_result, ids),
        b2.get_load_event_fd(), args.tasks))
    got = sum(loaded[j].test(k) for j, b in enumerate(idx) for k in range(len(b)))
    b2.submit_unlock(keys)
    b2.close()
    errors += (n - hits) + (n - got)
    verified = bool(torch.equal(src, dst))
    print(json.dumps({"phases": phases, "verified": verified, "errors": errors,
                      "lookup_hits": hits, "loads_ok": got,
                      "peak_rss_mib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0}))
    sys.stdout.flush()
    # LMCache's adapters leave daemon threads behind; do not wait for them.
    os._exit(0 if verified and errors == 0 else 1)


if __name__ == "__main__":
    main()
