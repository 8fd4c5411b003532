#!/usr/bin/env python3
"""How often the next request of a Mooncake-format trace joins a prompt group, by what a tier
could know about the group: how many requests it has had (`n`) and how long ago its last one
was. A group is the requests that share the first block (a shared document or system prompt).

    python3 bench/group_reuse.py ../shared/traces/synthetic_trace.jsonl

Prints the join rate per 1,000 requests for each (n, time since last use) cell, times in
requests, in powers of two; cells with too little exposure print `-`. Exposure is sampled every
4th request (scaled back), so a run over the synthetic trace takes a few seconds.
"""
import collections
import json
import math
import sys


def main():
    path = sys.argv[1] if len(sys.argv) > 1 else "../shared/traces/synthetic_trace.jsonl"
    first = [json.loads(line)["hash_ids"][0] for line in open(path)]
    count, last = {}, {}
    exposure, joins = collections.Counter(), collections.Counter()

    def cell(n, age):
        return min(n, 12), min(int(math.log2(age)), 11)

    for i, g in enumerate(first):
        if i % 4 == 0:
            for h, n in count.items():
                exposure[cell(n, i - last[h])] += 4
        if g in count:
            joins[cell(count[g], i - last[g])] += 1
        count[g] = count.get(g, 0) + 1
        last[g] = i
    singles = sum(1 for n in count.values() if n == 1)
    print(f"{len(first)} requests, {len(count)} groups, {singles} with one request")
    print("joins per 1,000 requests, by n (rows) and requests since the group's last use")
    print("  n " + " ".join("%6d" % (2**a) for a in range(12)))
    for n in range(1, 13):
        row = []
        for a in range(12):
            e = exposure[(n, a)]
            row.append("%6.1f" % (1000 * joins[(n, a)] / e) if e > 200 else "     -")
        print("%3d " % n + " ".join(row))


if __name__ == "__main__":
    main()
