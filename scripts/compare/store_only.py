"""Store phase of scripts/compare/peer_lmcache.py alone, repeated --reps times, for profiling: with PERF_CTL and
PERF_ACK set (perf record --control=fifo:CTL,ACK -D -1) only the store phases are sampled.
Prints one JSON line per repetition (MiB/s, client CPU-s/GiB, minor page faults per GiB, RSS
after the repetition in MiB, failed tasks)."""
import argparse, json, os, sys, time, resource
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import peer_lmcache as P

ap = argparse.ArgumentParser()
ap.add_argument("--spec", required=True)
ap.add_argument("--chunks", type=int, default=128)
ap.add_argument("--chunk-size", type=int, default=4 << 20)
ap.add_argument("--batch", type=int, default=16)
ap.add_argument("--tasks", type=int, default=4)
ap.add_argument("--reps", type=int, default=1)
ap.add_argument("--fp16", action="store_true")
args = ap.parse_args()
import numpy as np, torch
from lmcache.v1.distributed.api import ObjectKey
from lmcache.v1.memory_management import MemoryObjMetadata, TensorMemoryObj
n, size = args.chunks, args.chunk_size
def rss_mib():
    with open("/proc/self/status") as f:
        return next(int(l.split()[1]) for l in f if l.startswith("VmRSS:")) / 1024
a = P.build(json.loads(args.spec))
for rep in range(args.reps):
    if args.fp16:
        src = torch.from_numpy(np.random.default_rng().standard_normal(n * size // 2).astype(np.float16).view(np.uint8).copy())
    else:
        src = torch.from_numpy(np.frombuffer(np.random.default_rng().bytes(n * size), dtype=np.uint8).copy())
    def mobj(t, i):
        meta = MemoryObjMetadata(shape=torch.Size([size]), dtype=torch.uint8, address=0, phy_size=size, ref_count=1)
        return TensorMemoryObj(t[i * size:(i + 1) * size], meta, None)
    keys = [ObjectKey(chunk_hash=(rep * n + i).to_bytes(8, "big") + b"\xab", model_name="bench/model",
                      kv_rank=0, object_group_id=0, cache_salt="") for i in range(n)]
    objs = [mobj(src, i) for i in range(n)]
    idx = [list(range(s, min(s + args.batch, n))) for s in range(0, n, args.batch)]
    ctl = os.environ.get("PERF_CTL")
    def perf(cmd):
        if ctl:
            with open(ctl, "w") as f: f.write(cmd + "\n")
            with open(os.environ["PERF_ACK"]) as f: f.readline()
    perf("enable")
    f0 = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
    c0 = P.cpu_seconds(); t0 = time.perf_counter()
    res = P.drive(idx, lambda b: a.submit_store_task([keys[i] for i in b], [objs[i] for i in b]),
                  lambda ids: a.pop_completed_store_tasks(), a.get_store_event_fd(), args.tasks)
    t1 = time.perf_counter(); c1 = P.cpu_seconds()
    faults = resource.getrusage(resource.RUSAGE_SELF).ru_minflt - f0
    perf("disable")
    bad = sum(1 for r in res.values() if not r.is_successful())
    gib = n * size / 2**30
    print(json.dumps({"rep": rep, "mib_s": n * size / 2**20 / (t1 - t0), "cpu_gib": (c1 - c0) / gib,
                      "minor_faults_per_gib": faults / gib, "rss_mib": rss_mib(), "failed": bad}), flush=True)
a.close()
os._exit(0)
