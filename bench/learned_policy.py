#!/usr/bin/env python3
"""A learned eviction policy on a Mooncake-format trace: what the features know in hindsight,
and what a policy that learns them online gets.

A prototype of an exact-capacity tier (after every request, the lowest-scored blocks go until
C are left; hits are the longest cached prefix, as `kvtier bench --simulate` counts them), not
kvtier's code. The score of a resident block is a gradient-boosted classifier's probability
that the block is used again within H = 3 x C / 30.5 requests (3 tier-fulls of requests of the
trace's mean length), from what a tier sees at that moment:

  u        use count so far (capped at 32)
  sil      requests since the last use          age    requests since the first use
  gap      the last gap between two uses        cls    new blocks in the request that stored it
  depth    position in its prefix chain         docu   uses of its chain's first block
  docsil   silence of its chain's first block   last   was the last block of its last request

Three fits, and one score without a classifier:
  alive       the chance that the block's chain has requests left if every live chain is
              equally likely to be asked next: q e^(-sil/g) / (q e^(-sil/g) + 1 - q), with q
              the share of blocks used u times that are used again (counted on the whole
              trace) and g an EWMA of recent gaps between two requests of the same first block
  hindsight   trained on samples of the whole trace (the trace's own future), then replayed
  online      retrained every 400 requests on the samples whose window H has closed
              (LRU-like FLRU priority until the first model)
  scale-free  online, with times divided by an EWMA of recent gaps between two requests of the
              same first block, plus the rate score's own terms, so a shift in the workload's
              pace does not move the features

Usage:  python3 bench/learned_policy.py TRACE [FRACTION] [FIT ...]
        e.g. python3 bench/learned_policy.py ../shared/traces/synthetic_trace.jsonl 0.05 online
Needs numpy and scikit-learn. Each fit takes about 4 CPU-minutes at 5 % on the synthetic trace.

Also prints the facts behind the "equal hazard" reading of the trace (see BENCHMARKS.md):
among first blocks that still have a request to come, the chance of one within 150 requests
by quartile of their own request rate.
"""

import bisect
import collections
import sys

import numpy as np
from sklearn.ensemble import HistGradientBoostingClassifier

from rate_scores import lmcache_lru, load

MODES = ("alive", "hindsight", "online", "scale-free")


class Trace:
    """Requests as dense block ids, each block's chain depth and chain head."""

    def __init__(self, reqs):
        ids = {}
        self.reqs = [np.array([ids.setdefault(h, len(ids)) for h in r]) for r in reqs]
        self.n = len(ids)
        self.depth, self.head = np.zeros(self.n), np.zeros(self.n, int)
        for r in self.reqs:
            self.depth[r] = np.arange(len(r))
            self.head[r] = r[0]


class State:
    """What a tier sees of each block, updated per request."""

    def __init__(self, n):
        self.uses, self.first, self.last, self.prev = (np.zeros(n) for _ in range(4))
        self.lastflag, self.cls, self.touch = np.zeros(n), np.zeros(n), np.zeros(n)
        self.clock, self.pace, self.head_last = 0, 300.0, {}

    def touch_request(self, i, r):
        head = r[0]
        if head in self.head_last:
            self.pace = 0.98 * self.pace + 0.02 * (i - self.head_last[head])
        self.head_last[head] = i
        new = r[self.uses[r] == 0]
        self.cls[new] = len(new)
        self.first[new], self.prev[new] = i, i
        old = r[self.uses[r] > 0]
        self.prev[old] = self.last[old]
        self.uses[r] += 1
        self.last[r] = i
        self.lastflag[r] = 0.0
        self.lastflag[r[-1]] = 1.0
        self.touch[r[::-1]] = self.clock + np.arange(1, len(r) + 1)
        self.clock += len(r)

    def features(self, t, b, now, cap, scale_free):
        u, sil, age = self.uses[b], now - self.last[b], now - self.first[b]
        gap, head = self.last[b] - self.prev[b], t.head[b]
        g = self.pace if scale_free else 1.0
        cols = [np.minimum(u, 32), np.log1p(sil / g), np.log1p(age / g), np.log1p(gap / g),
                np.log2(self.cls[b] + 1), np.log1p(t.depth[b]), np.minimum(self.uses[head], 32),
                np.log1p((now - self.last[head]) / g), self.lastflag[b]]
        if scale_free:
            lam = (u - 1 + 0.1) / (age + 2 * cap / 30.5)
            cols += [sil * lam, np.log(lam * g)]
        return np.stack(cols, 1)


def sample(st, rng):
    """A 5 % sample of the blocks seen so far: the training rows taken every 4 requests."""
    b = np.nonzero(st.uses > 0)[0]
    return b[rng.random(len(b)) < 0.05]


def fit(x, y):
    # random_state: the early-stopping split is random otherwise, and so are the results.
    model = HistGradientBoostingClassifier(max_iter=100, max_leaf_nodes=15, random_state=0)
    return model.fit(x, y)


def replay(t, cap, horizon, mode, rng):
    """Block hit ratio of the tier scored by `mode` (one of MODES)."""
    scale_free = mode == "scale-free"
    model = hindsight_model(t, cap, horizon, rng) if mode == "hindsight" else None
    alive = continuation(t) if mode == "alive" else None
    st, resident = State(t.n), np.zeros(t.n, bool)
    pending, xs, ys = collections.deque(), [], []
    hits = total = n_res = 0
    for i, r in enumerate(t.reqs):
        p = 0
        while p < len(r) and resident[r[p]]:
            p += 1
        hits, total = hits + p, total + len(r)
        st.touch_request(i, r)
        if mode not in ("hindsight", "alive"):
            while pending and pending[0][0] + horizon <= i:
                _, b, x, u0 = pending.popleft()
                xs.append(x)
                ys.append(st.uses[b] > u0)
            if i % 4 == 0:
                b = sample(st, rng)
                pending.append((i, b, st.features(t, b, i + 1, cap, scale_free), st.uses[b].copy()))
            if i % 400 == 0 and ys and np.concatenate(ys).sum() > 50:
                model = fit(np.concatenate(xs), np.concatenate(ys))
        n_res += int((~resident[r]).sum())
        resident[r] = True
        if n_res > cap:
            b = np.nonzero(resident)[0]
            if alive is not None:
                q = alive[np.minimum(st.uses[b], 16).astype(int)]
                e = q * np.exp(-(i - st.last[b]) / st.pace)
                s = e / (e + 1 - q) + st.touch[b] * 1e-12
            elif model is None:
                s = st.touch[b] + 0.4 * cap * (np.minimum(st.uses[b], 16) - 1)
            else:
                s = model.predict_proba(st.features(t, b, i + 1, cap, scale_free))[:, 1]
                s = s + st.touch[b] * 1e-12
            k = n_res - cap
            resident[b[np.argpartition(s, k - 1)[:k]]] = False
            n_res -= k
    return hits / total


def nxt_use(times, i):
    """The first of the sorted request indices `times` after `i` (far away if none)."""
    k = bisect.bisect_right(times, i)
    return times[k] if k < len(times) else 1 << 30


def continuation(t):
    """S[k] = P(a block used k times is used again), counted on the whole trace."""
    total = np.zeros(t.n)
    for r in t.reqs:
        total[r] += 1
    s = np.zeros(18)
    for k in range(1, 17):
        s[k] = (total > k).sum() / max((total >= k).sum(), 1)
    s[17] = s[16]
    return s


def hindsight_model(t, cap, horizon, rng):
    """A classifier trained on samples of the whole trace, labelled by its own future."""
    uses_at = collections.defaultdict(list)
    for i, r in enumerate(t.reqs):
        for b in r:
            uses_at[b].append(i)
    st, xs, ys = State(t.n), [], []
    for i, r in enumerate(t.reqs):
        st.touch_request(i, r)
        if i % 4 == 0:
            b = sample(st, rng)
            nxt = np.array([nxt_use(uses_at[x], i) for x in b])
            xs.append(st.features(t, b, i + 1, cap, False))
            ys.append(nxt - i <= horizon)
    return fit(np.concatenate(xs), np.concatenate(ys))


def equal_hazard(t):
    """P(next request within 150 | a request is still to come) by quartile of the head's rate."""
    at = collections.defaultdict(list)
    for i, r in enumerate(t.reqs):
        at[r[0]].append(i)
    rows = []
    for now in range(0, len(t.reqs), 5):
        for times in at.values():
            k = int(np.searchsorted(times, now, side="right"))
            if 2 <= k < len(times):
                rows.append((now * 4 // len(t.reqs), (k - 1) / (now - times[0] + 100),
                             times[k] - now <= 150))
    a = np.array(rows, float)
    print("chains still active: P(next request within 150) by quartile of their own rate")
    for q in range(4):
        m = a[:, 0] == q
        cut = np.digitize(a[m, 1], np.quantile(a[m, 1], [0.25, 0.5, 0.75]))
        print("  quarter %d of the trace: %s" % (q + 1, " ".join(
            "%.2f" % a[m][cut == j, 2].mean() for j in range(4))))


def main():
    path = sys.argv[1] if len(sys.argv) > 1 else "../shared/traces/synthetic_trace.jsonl"
    frac = float(sys.argv[2]) if len(sys.argv) > 2 else 0.05
    modes = sys.argv[3:] or list(MODES)
    unknown = [m for m in modes if m not in MODES]
    if unknown:
        sys.exit("learned_policy.py: unknown fit %s (one of: %s)"
                 % (", ".join(unknown), ", ".join(MODES)))
    reqs = load(path)
    t = Trace(reqs)
    equal_hazard(t)
    cap = int(t.n * frac)
    horizon = max(int(3 * cap / 30.5), 20)
    base = lmcache_lru(reqs, cap)
    print("%d %% capacity (%d blocks), window %d requests, LMCache LRU %.3f"
          % (round(frac * 100), cap, horizon, base))
    for mode in modes:
        v = replay(t, cap, horizon, mode, np.random.default_rng(0))
        print("  %-10s %.3f (%.2fx)" % (mode, v, v / base), flush=True)


if __name__ == "__main__":
    main()
