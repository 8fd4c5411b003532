#!/usr/bin/env python3
"""Can a learned reuse predictor reach issue 15's goal? A prototype, not kvtier's code.

Replays a trace (one JSON request per line with `hash_ids`, as `kvtier bench --trace`
reads) against a tier of C blocks that evicts down to exactly C after every request, with
the prefix rule of the runtime (hits = longest cached prefix). Each touched block gets the
priority

    request index + beta * W * P(class)

(lowest evicted first; a block never ranks above the blocks before it in its request, so
prefixes are kept before suffixes), where W = 4 * C / (mean blocks per request) is a reuse
window in requests and P(class) is the probability that a block of that class is used again
within W. The class is what a policy can see when the block is touched: its use count so far
(capped at 6), the log2 gap in requests since its previous use, and the log2 length of the
request. P comes from one of:

  hindsight   the whole trace's outcomes (a table fitted on the future: not an online policy)
  first-half  the outcomes of the first half only, scored on the second half
  online      outcomes learned as the trace goes (a label arrives W requests late)

and `LRU` is the same tier ordered by recency alone. Usage:

    python3 bench/reuse_predictor.py [TRACE]      # default ../shared/traces/synthetic_trace.jsonl
"""

import collections
import heapq
import json
import math
import sys

FRACTIONS = (0.02, 0.05, 0.10)
BETA = 2.0
WINDOW_CAPACITIES = 4


def load(path):
    with open(path) as f:
        return [json.loads(line)["hash_ids"] for line in f if line.strip()]


def cls(uses, gap, n):
    return (min(uses, 6), -1 if gap is None else min(int(math.log2(gap + 1)), 10),
            min(int(math.log2(n)), 7))


def fit(reqs, window):
    """P(used again within `window` requests | class), from the trace's own future."""
    nxt, last = {}, {}
    for i in range(len(reqs) - 1, -1, -1):
        for h in reqs[i]:
            nxt[(i, h)] = last.get(h)
        for h in reqs[i]:
            last[h] = i
    hit, seen = collections.Counter(), collections.Counter()
    uses, prev = collections.Counter(), {}
    for i, r in enumerate(reqs):
        for h in r:
            uses[h] += 1
            c = cls(uses[h], None if h not in prev else i - prev[h], len(r))
            seen[c] += 1
            nu = nxt[(i, h)]
            hit[c] += nu is not None and nu - i <= window
            prev[h] = i
    mean = sum(hit.values()) / max(1, sum(seen.values()))
    return collections.defaultdict(lambda: mean, {c: hit[c] / seen[c] for c in seen})


def replay(reqs, capacity, window, table=None, online=False, score_from=0):
    """Block hit ratio of requests from `score_from` on. `table`: fixed P; `online`: learnt."""
    cache, heap = {}, []
    uses, prev, prev_cls = collections.Counter(), {}, {}
    ok, n_obs = collections.Counter(), collections.Counter()
    pending = collections.deque()
    hits = total = 0
    for i, r in enumerate(reqs):
        k = 0
        while k < len(r) and r[k] in cache:
            k += 1
        if i >= score_from:
            hits, total = hits + k, total + len(r)
        if online:
            while pending and pending[0][0] < i - window:
                t0, h = pending.popleft()
                if prev.get(h) == t0:
                    n_obs[prev_cls[h]] += 1
        prios = []
        for h in r:
            if online and h in prev and prev[h] != i and i - prev[h] <= window:
                ok[prev_cls[h]] += 1
                n_obs[prev_cls[h]] += 1
            uses[h] += 1
            c = cls(uses[h], None if h not in prev else i - prev[h], len(r))
            if table is None and not online:
                p = 0.0
            elif online:
                mean = (sum(ok.values()) + 1) / (sum(n_obs.values()) + 2)
                p = (ok[c] + 4 * mean) / (n_obs[c] + 4)
            else:
                p = table[c]
            prio = i + BETA * window * p
            prios.append(min(prio, prios[-1]) if prios else prio)
            prev_cls[h] = c
        for j in reversed(range(len(r))):
            h = r[j]
            key = (prios[j], -j)
            cache[h] = key
            heapq.heappush(heap, (key, h))
            if prev.get(h) != i:
                prev[h] = i
                pending.append((i, h))
        while len(cache) > capacity:
            key, h = heapq.heappop(heap)
            if cache.get(h) == key:
                del cache[h]
    return hits / max(1, total)


def main():
    reqs = load(sys.argv[1] if len(sys.argv) > 1 else "../shared/traces/synthetic_trace.jsonl")
    unique = len({h for r in reqs for h in r})
    per_req = sum(len(r) for r in reqs) / len(reqs)
    half = len(reqs) // 2
    print("| capacity | LRU | hindsight | online | LRU, 2nd half | first-half table, 2nd half |")
    print("|---|---|---|---|---|---|")
    for f in FRACTIONS:
        c = int(unique * f)
        w = WINDOW_CAPACITIES * c / per_req
        row = [
            replay(reqs, c, w),
            replay(reqs, c, w, table=fit(reqs, w)),
            replay(reqs, c, w, online=True),
            replay(reqs, c, w, score_from=half),
            replay(reqs, c, w, table=fit(reqs[:half], w), score_from=half),
        ]
        print(f"| {f:.0%} | " + " | ".join(f"{x:.3f}" for x in row) + " |", flush=True)


if __name__ == "__main__":
    main()
