#!/usr/bin/env python3
"""Scores that change with time: FLRU's rate modes, and why a fitted hazard table is not one.

A prototype of an exact-capacity tier (after every request, the lowest-scored blocks go until
C are left; hits are the longest cached prefix, as `kvtier bench --simulate` counts them), not
kvtier's code (that is actors/src/eviction/flru.rs). Scores are computed for every resident
block when a request's blocks are evicted, so they may depend on the time now:

  lru        last touch
  flru       last touch + 0.4 x C x (uses - 1)                        (FLRU's static priority)
  rate a     lam = (uses - 1 + a) / (age + 2 C);  lam x exp(-silence x lam / 0.7)
             (FLRU's Rates mode, a = 0.1 or 3; age and silence in touches since the first use
             and since the last)
  table W    P(used again within W requests | uses, log2 silence, log2 age), counted on the
             trace itself (hindsight), or on its first half and scored on the second half

Usage:  python3 bench/rate_scores.py [TRACE]   # default ../shared/traces/synthetic_trace.jsonl
Needs numpy. About 2 minutes on the synthetic trace.
"""

import collections
import json
import sys
import zlib

import numpy as np

FRACTIONS = (0.02, 0.05, 0.10)


def load(path):
    with open(path) as f:
        return [json.loads(line)["hash_ids"] for line in f if line.strip()]


def lmcache_lru(reqs, cap):
    """LMCache's default: LRU, watermark 0.8, evict 20 % of the keys, batch tail first."""
    cache, hits, total = collections.OrderedDict(), 0, 0
    for r in reqs:
        p = 0
        while p < len(r) and r[p] in cache:
            p += 1
        hits, total = hits + p, total + len(r)
        for h in reversed(r):
            cache[h] = 1
            cache.move_to_end(h)
        if len(cache) >= 0.8 * cap:
            for _ in range(int(len(cache) * 0.2)):
                cache.popitem(last=False)
    return hits / total


def replay(reqs, cap, score, score_from=0, share=1.0):
    """Block hit ratio of requests from `score_from` on, for score(state, resident, cap, now, i).

    `share` < 1 admits a request's never-seen blocks only for that share of requests, chosen
    by a hash of the first never-seen block (so a branch is admitted or refused as a whole);
    blocks seen before are always admitted. `st["flen"]` is the length of the request a block
    first came in.
    """
    ids = {}
    n_blocks = sum(len(r) for r in reqs)
    st = {k: np.zeros(n_blocks) for k in ("uses", "first", "last", "first_req", "last_req", "flen")}
    resident = np.zeros(n_blocks, bool)
    hits = total = n_res = clock = 0
    for i, r in enumerate(reqs):
        idx = [ids.setdefault(h, len(ids)) for h in r]
        p = 0
        while p < len(idx) and resident[idx[p]]:
            p += 1
        if i >= score_from:
            hits, total = hits + p, total + len(idx)
        fresh = [j for j, b in enumerate(idx) if st["uses"][b] == 0]
        admit_new = not fresh or zlib.crc32(str(r[fresh[0]]).encode()) < share * 2**32
        for b in reversed(idx):
            clock += 1
            new = st["uses"][b] == 0
            if new:
                st["first"][b], st["first_req"][b], st["flen"][b] = clock, i, len(idx)
            st["uses"][b] += 1
            st["last"][b], st["last_req"][b] = clock, i
            if not resident[b] and (admit_new or not new):
                resident[b] = True
                n_res += 1
        if n_res > cap:
            res = np.nonzero(resident)[0]
            s = score(st, res, cap, clock, i)
            k = n_res - cap
            gone = res[np.argpartition(s, k - 1)[:k]]
            resident[gone] = False
            n_res -= len(gone)
    return hits / total


def lru(st, r, cap, now, i):
    return st["last"][r]


def flru(st, r, cap, now, i):
    return st["last"][r] + 0.4 * cap * (np.minimum(st["uses"][r], 16) - 1)


def rate(a):
    def score(st, r, cap, now, i):
        lam = (st["uses"][r] - 1 + a) / (now - st["first"][r] + 2 * cap)
        return lam * np.exp(-(now - st["last"][r]) * lam / 0.7) + st["last"][r] * 1e-15
    return score


def log2_bin(x):
    return np.minimum(np.floor(np.log2(x + 1)), 12).astype(int)


def length_class(n):
    """The request length classes: up to 3 blocks, 4-15, 16-63, 64 and more."""
    return np.digitize(n, [4, 16, 64])


def hazard_table(reqs, window, upto, by_length=False):
    """P(used again within `window` requests | uses, silence, age), from requests < upto.

    With `by_length`, also by the length class of the request a block first came in.
    """
    ids = {}
    idx = [[ids.setdefault(h, len(ids)) for h in r] for r in reqs]
    uses_at = collections.defaultdict(list)
    for i, r in enumerate(idx):
        for b in r:
            uses_at[b].append(i)
    n = len(ids)
    ptr, uses = np.zeros(n, int), np.zeros(n)
    first, last, nxt, flen = np.full(n, -1.0), np.zeros(n), np.full(n, 1e9), np.zeros(n)
    hit, seen = np.zeros((17, 13, 13, 4)), np.zeros((17, 13, 13, 4))
    for i, r in enumerate(idx[:upto]):
        for b in set(r):
            uses[b] += 1
            last[b] = i
            if first[b] < 0:
                first[b], flen[b] = i, len(r)
            ptr[b] += 1
            nxt[b] = uses_at[b][ptr[b]] if ptr[b] < len(uses_at[b]) else 1e9
        if i % 5 == 0:
            s = np.nonzero(uses > 0)[0]
            cell = (np.minimum(uses[s], 16).astype(int), log2_bin(i - last[s]), log2_bin(i - first[s]),
                    length_class(flen[s]) * by_length)
            np.add.at(seen, cell, 1)
            np.add.at(hit, cell, (nxt[s] - i) <= window)
    table = (hit + 1) / (seen + 20)

    def score(st, r, cap, now, i):
        cell = (np.minimum(st["uses"][r], 16).astype(int), log2_bin(i - st["last_req"][r]),
                log2_bin(i - st["first_req"][r]), length_class(st["flen"][r]) * by_length)
        return table[cell] + st["last"][r] * 1e-12
    return score


def trace_from_argv():
    """The trace named by the first argument (default: the shared synthetic trace): its
    requests, its number of unique blocks, and the index of its second half's first request."""
    path = sys.argv[1] if len(sys.argv) > 1 else "../shared/traces/synthetic_trace.jsonl"
    reqs = load(path)
    return reqs, len({h for r in reqs for h in r}), len(reqs) // 2


def main():
    reqs, unique, half = trace_from_argv()
    print("whole trace, block hit ratio (x LMCache's LRU 0.8/0.2)")
    for f in FRACTIONS:
        cap = int(unique * f)
        base = lmcache_lru(reqs, cap)
        row = [("lru", lru), ("flru", flru), ("rate 0.1", rate(0.1)), ("rate 3", rate(3.0)),
               ("table 150 (hindsight)", hazard_table(reqs, 150, len(reqs)))]
        cells = ["%s %.3f (%.2f)" % (name, v, v / base)
                 for name, v in ((name, replay(reqs, cap, s)) for name, s in row)]
        print("%2d %%  LMCache %.3f  " % (round(f * 100), base) + "  ".join(cells), flush=True)
    print("second half only, block hit ratio (x exact-capacity LRU on the same half)")
    for f in FRACTIONS:
        cap = int(unique * f)
        base = replay(reqs, cap, lru, half)
        row = [("rate 0.1", rate(0.1)), ("table 150 (whole trace)", hazard_table(reqs, 150, len(reqs))),
               ("table 150 (first half)", hazard_table(reqs, 150, half))]
        cells = ["%s %.3f (%.2f)" % (name, v, v / base)
                 for name, v in ((name, replay(reqs, cap, s, half)) for name, s in row)]
        print("%2d %%  lru %.3f  " % (round(f * 100), base) + "  ".join(cells), flush=True)


if __name__ == "__main__":
    main()
