#!/usr/bin/env python3
"""Writes three synthetic prefix-cache traces in the Mooncake JSONL format, for checking that an
eviction policy tuned on one trace does not fall below LRU on other reuse patterns.

    python3 bench/synth_traces.py OUT_DIR [MOONCAKE_TRACE]

- conv.jsonl:  multi-turn conversations. Each request either continues a recent conversation
  (its whole history plus 5 new blocks) or starts one (10 blocks); 70 % of requests stay open
  for a later turn. Recency is what predicts reuse here.
- twice.jsonl: every 20-block chain is requested exactly twice, 1-200 requests apart. A block
  used twice is dead: frequency misleads, recency is right.
- zipf.jsonl:  2,000 shared 16-block documents with Zipf(0.9) popularity, each request one
  document plus 8 private blocks. Frequency is what predicts reuse here.

Deterministic (fixed seeds); 6,000 requests each; `hash_ids` are block ids, 512 tokens per block.

With MOONCAKE_TRACE (e.g. ../shared/traces/synthetic_trace.jsonl) it also writes
- phases.jsonl: a workload that changes twice: that trace, then conv.jsonl, then that trace
  again, each phase with block ids of its own. An adaptive policy must follow the changes.
"""
import json
import random
import sys
from pathlib import Path


def conv(seed=8):
    rng, out, nid, open_ = random.Random(seed), [], 0, []
    for _ in range(6000):
        if open_ and rng.random() < 0.6:
            chain = open_.pop(rng.randrange(len(open_))) + list(range(nid, nid + 5))
            nid += 5
        else:
            chain = list(range(nid, nid + 10))
            nid += 10
        out.append(chain)
        if rng.random() < 0.7:
            open_.append(chain)
        if len(open_) > 150:
            open_.pop(0)
    return out


def twice(seed=7):
    rng, out, nid, pending = random.Random(seed), [], 0, []
    for j in range(6000):
        due = [p for p in pending if p[0] <= j]
        if due and rng.random() < 0.5:
            out.append(due[0][1])
            pending.remove(due[0])
        else:
            chain = list(range(nid, nid + 20))
            nid += 20
            out.append(chain)
            pending.append((j + rng.randint(1, 200), chain))
    return out


def zipf(seed=9):
    rng, out = random.Random(seed), []
    docs = [list(range(i * 16, (i + 1) * 16)) for i in range(2000)]
    weights = [1 / (i + 1) ** 0.9 for i in range(2000)]
    nid = 2000 * 16
    for _ in range(6000):
        d = rng.choices(range(2000), weights=weights)[0]
        out.append(docs[d] + list(range(nid, nid + 8)))
        nid += 8
    return out


def main():
    out_dir = Path(sys.argv[1] if len(sys.argv) > 1 else ".")
    out_dir.mkdir(parents=True, exist_ok=True)
    for name, gen in (("conv", conv), ("twice", twice), ("zipf", zipf)):
        path = out_dir / f"{name}.jsonl"
        with path.open("w") as f:
            for j, chain in enumerate(gen()):
                rec = {"timestamp": j * 100, "input_length": 512 * len(chain),
                       "output_length": 10, "hash_ids": chain}
                f.write(json.dumps(rec) + "\n")
        print(f"{path}: 6000 requests")


def phases(out_dir, mooncake):
    first = [json.loads(line) for line in open(mooncake)]
    conv_recs = [json.loads(line) for line in (out_dir / "conv.jsonl").open()]
    path = out_dir / "phases.jsonl"
    offset, t = 0, 0
    with path.open("w") as f:
        for recs in (first, conv_recs, first):
            top = max(h for r in recs for h in r["hash_ids"]) + 1
            t0 = t
            for r in recs:
                rec = dict(r, hash_ids=[h + offset for h in r["hash_ids"]],
                           timestamp=t0 + r["timestamp"])
                t = rec["timestamp"] + 1
                f.write(json.dumps(rec) + "\n")
            offset += top
    print(path)


if __name__ == "__main__":
    main()
    if len(sys.argv) > 2:
        phases(Path(sys.argv[1]), sys.argv[2])
