#!/usr/bin/env python3
"""Two more levers on the rate score, checked on a trace: admission by share, and request length.

A prototype of an exact-capacity tier (bench/rate_scores.py's `replay`), not kvtier's code.
Every row starts from FLRU's low-prior rate score (`rate`, a = 0.1):

  share S        a request's never-seen blocks are admitted for a share S of requests (a hash
                 of the first never-seen block decides, so a branch goes in or stays out whole)
  length, hind.  the rate score times P(used again | length class, uses)^2, where the length
                 class is that of the request a block first came in (up to 3 blocks, 4-15, 16-63,
                 64+) and uses is capped at 3: twelve shares counted on the whole trace
  length, online the same twelve shares counted every 100 requests on the uses older than 300
                 requests, a reuse counted once it has happened
  table+length   rate_scores.py's hazard table with the length class as a fourth key, fitted in
                 hindsight; and fitted on the first half, scored on the second half against
                 exact-capacity LRU on that half
  unfinished     not the rate score: the chance that a block's chain (its request's first
                 block) is unfinished, were every next request drawn from a chain picked
                 uniformly among the unfinished ones. q S / (q S + 1 - q), q the share of blocks
                 used again at this use count (by length class too in `unfinished+length`),
                 S = exp(-sum of 1/U over the requests since the block's last use), U the number
                 of unfinished chains: all counted on the whole trace

Usage:  python3 bench/length_signal.py [TRACE] [FRACTIONS]
        # default ../shared/traces/synthetic_trace.jsonl 0.02,0.05,0.1,0.2
Needs numpy. About 1 minute on the synthetic trace.
"""

import collections
import sys

import numpy as np

from rate_scores import hazard_table, length_class, lmcache_lru, lru, rate, replay, trace_from_argv

WINDOW = 300


def use_events(reqs):
    """Per use of a block: request index, length class, uses capped at 3, index of its next use."""
    first_len, uses, at = {}, collections.Counter(), collections.defaultdict(list)
    for i, r in enumerate(reqs):
        for h in r:
            at[h].append(i)
    ev = []
    for i, r in enumerate(reqs):
        for h in r:
            first_len.setdefault(h, len(r))
            uses[h] += 1
            u = uses[h]
            ev.append((i, length_class(first_len[h]), min(u, 3), at[h][u] if u < len(at[h]) else 1 << 50))
    return np.array(ev)


def shares(ev, now):
    """P(used again | length class, uses) from the uses before `now - WINDOW`, reuses before `now`."""
    old = ev[ev[:, 0] < now - WINDOW]
    cell = old[:, 1] * 4 + old[:, 2]
    seen = np.bincount(cell, minlength=16)
    again = np.bincount(cell, weights=old[:, 3] < now, minlength=16)
    return ((again + 1) / (seen + 2)).reshape(4, 4)


def length_score(reqs, online):
    ev, base = use_events(reqs), rate(0.1)
    cached = {"at": -1, "p": shares(ev, 1 << 45)}

    def score(st, r, cap, now, i):
        if online and i // 100 != cached["at"]:
            cached["at"], cached["p"] = i // 100, shares(ev, i)
        p = cached["p"][length_class(st["flen"][r]), np.minimum(st["uses"][r], 3).astype(int)]
        return base(st, r, cap, now, i) * p ** 2
    return score


def unfinished_score(reqs, by_length):
    last = {}
    for i, r in enumerate(reqs):
        last[r[0]] = i
    ends = np.bincount(list(last.values()), minlength=len(reqs))
    unfinished = len(last) - np.concatenate([[0], np.cumsum(ends)[:-1]])
    hazard = np.concatenate([[0], np.cumsum(1.0 / np.maximum(unfinished, 1))])
    ev = use_events(reqs)
    cell = ev[:, 1] * 4 + ev[:, 2]
    seen, again = np.bincount(cell, minlength=16), np.bincount(cell, weights=ev[:, 3] < 1 << 45, minlength=16)
    q = ((again + 1) / (seen + 2)).reshape(4, 4)
    if not by_length:
        q[:] = (again.reshape(4, 4).sum(0) + 1) / (seen.reshape(4, 4).sum(0) + 2)

    def score(st, r, cap, now, i):
        p = q[length_class(st["flen"][r]), np.minimum(st["uses"][r], 3).astype(int)]
        s = np.exp(-(hazard[i + 1] - hazard[st["last_req"][r].astype(int) + 1]))
        return p * s / (p * s + 1 - p) + st["last"][r] * 1e-15
    return score


def main():
    fractions = [float(f) for f in (sys.argv[2] if len(sys.argv) > 2 else "0.02,0.05,0.1,0.2").split(",")]
    reqs, unique, half = trace_from_argv()
    print("block hit ratio (x LMCache's LRU 0.8/0.2); last two: second half (x exact LRU there)")
    for f in fractions:
        cap = int(unique * f)
        base = lmcache_lru(reqs, cap)
        cells = []
        for name, score, share in (("rate", rate(0.1), 1.0), ("share 0.5", rate(0.1), 0.5),
                                   ("share 0.25", rate(0.1), 0.25),
                                   ("length, hind.", length_score(reqs, False), 1.0),
                                   ("length, online", length_score(reqs, True), 1.0),
                                   ("table+length, hind.", hazard_table(reqs, 150, len(reqs), True), 1.0),
                                   ("unfinished", unfinished_score(reqs, False), 1.0),
                                   ("unfinished+length", unfinished_score(reqs, True), 1.0)):
            v = replay(reqs, cap, score, share=share)
            cells.append("%s %.3f (%.2f)" % (name, v, v / base))
        lru_half = replay(reqs, cap, lru, half)
        for name, score in (("rate", rate(0.1)), ("table+length, 1st half", hazard_table(reqs, 150, half, True))):
            v = replay(reqs, cap, score, half)
            cells.append("2nd half %s %.3f (%.2f)" % (name, v, v / lru_half))
        print("%2d %%  LMCache %.3f  " % (round(f * 100), base) + "  ".join(cells), flush=True)


if __name__ == "__main__":
    main()
