#!/usr/bin/env python3
"""Host-arena bench: `kvtier bench` with owned buffers vs `--host-arena`, in alternating rounds.

Usage: scripts/compare/arena.py --kvtier target/release/kvtier [--rounds 3] [-- extra kvtier bench args]
  e.g. (fs, the embedded default)  scripts/compare/arena.py --rounds 3
       (s3, a throwaway Garage)     scripts/garage-local.sh sh -c \
           'scripts/compare/arena.py --rounds 3 -- --l2-adapter "$KVTIER_S3_ADAPTER" --no-baseline --cleanup'

Prints, per mode, the median over rounds of each phase's GB/s, client CPU-s per GiB, and the
large (>= 64 KiB) and chunk-sized heap blocks allocated in the phase, then the arena/owned ratios and the bytes
of host memcpy the arena saved. One JSON object per run goes to stderr, for the record.
"""
import argparse
import json
import statistics
import subprocess
import sys


def run(kvtier, extra, arena):
    cmd = [kvtier, "bench", "--json"] + (["--host-arena"] if arena else []) + extra
    out = subprocess.run(cmd, check=True, capture_output=True, text=True).stdout
    report = json.loads(out)
    if not report["verified"] or report["errors"]:
        sys.exit(f"run not verified or had errors: {cmd}")
    return report


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--kvtier", default="target/release/kvtier")
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("extra", nargs="*")
    a = p.parse_args()
    runs = {False: [], True: []}
    for r in range(a.rounds):
        # Rotate the order so neither mode always runs first.
        for arena in ([False, True] if r % 2 == 0 else [True, False]):
            rep = run(a.kvtier, a.extra, arena)
            print(json.dumps({"round": r, "host_arena": arena, "phases": rep["phases"]}), file=sys.stderr)
            runs[arena].append(rep)

    def med(mode, phase, field):
        vals = []
        for rep in runs[mode]:
            ph = next(x for x in rep["phases"] if x["phase"] == phase)
            if ph.get(field) is not None:
                vals.append(ph[field])
        return statistics.median(vals) if vals else float("nan")

    first = runs[False][0]
    print(f"{a.rounds} rounds, {first['chunks']} x {first['chunk_size']} B, batch {first['batch']}, "
          f"concurrency {first['concurrency']}, adapter {first['adapters'][0]['type']}")
    print(f"{'phase':8} {'mode':6} {'GB/s':>7} {'CPU-s/GiB':>10} {'large allocs':>13} {'large MiB':>10} "
          f"{'chunk-sized':>12}")
    for phase in ("store", "load"):
        for mode in (False, True):
            print(f"{phase:8} {'arena' if mode else 'owned':6} {med(mode, phase, 'gbps'):7.3f} "
                  f"{med(mode, phase, 'cpu_s_per_gib'):10.3f} {med(mode, phase, 'large_allocs'):13.0f} "
                  f"{med(mode, phase, 'large_alloc_mib'):10.1f} {med(mode, phase, 'chunk_allocs'):12.0f}")
        print(f"{phase:8} ratio  {med(True, phase, 'gbps') / med(False, phase, 'gbps'):7.2f} "
              f"{med(True, phase, 'cpu_s_per_gib') / med(False, phase, 'cpu_s_per_gib'):10.2f}")
    saved = runs[True][0]["host_copies_saved_bytes"]
    print(f"host memcpy saved per run: {saved / 2**30:.2f} GiB (each chunk once into Bytes on store, "
          f"once out of BytesMut on load)")


if __name__ == "__main__":
    main()
