"""kvtier as LMCache's L2 adapter, driven only through LMCache: its ``--l2-adapter`` parser and
factory build the adapter (``{"type": "plugin", "module_path": "kvtier.lmcache", ...}``), and
every call is one of ``L2AdapterInterface``'s. Completions are awaited on the adapter's eventfds
(poll with a generous timeout), never by sleeping.

The suite runs on whichever LMCache the interpreter has: ``scripts/test-all.sh`` runs all of it
on 0.5.6 and on 0.5.7rc2 (``scripts/lmcache-venv.sh --lmcache 0.5.7rc2``). What only 0.5.7 has
(memory tags, ``StorageManager.touch_cached_keys``) is checked where it exists, and its absence
where it does not: nothing is skipped.
"""

from __future__ import annotations

import json
import os
import select
import socket
import threading
import time

import pytest
import torch
from conftest import _wait_until, lmcache_adapter, plugin_spec, unique
from lmcache.v1.distributed.api import ObjectKey
from lmcache.v1.memory_management import MemoryObjMetadata, TensorMemoryObj

TIMEOUT = 120.0

try:  # LMCache >= 0.5.7
    from lmcache.v1.distributed.api import MemoryResidency, MemorySegment, MemoryTags
except ImportError:  # LMCache 0.5.6
    MemoryTags = None


# -- helpers ----------------------------------------------------------------------------------


def mobj(n: int, fill: int | None = None, seed: int | None = None) -> TensorMemoryObj:
    """A CPU MemoryObj of n bytes: zeros, one byte value, or seeded random bytes."""
    if seed is not None:
        g = torch.Generator().manual_seed(seed)
        t = torch.randint(0, 256, (n,), dtype=torch.uint8, generator=g)
    else:
        t = torch.full((n,), fill or 0, dtype=torch.uint8)
    meta = MemoryObjMetadata(shape=torch.Size([n]), dtype=torch.uint8, address=0, phy_size=n,
                             ref_count=1)
    return TensorMemoryObj(t, meta, None)


def data(o) -> bytes:
    return bytes(o.byte_array)


def keys_for(model: str, n: int, salt: str = "", group: int = 0, start: int = 0):
    return [ObjectKey(chunk_hash=(start + i).to_bytes(8, "big") + b"\xab", model_name=model,
                      kv_rank=3, object_group_id=group, cache_salt=salt)
            for i in range(n)]


def wait_fd(fd: int, timeout: float = TIMEOUT) -> None:
    p = select.poll()
    p.register(fd, select.POLLIN)
    if not p.poll(timeout * 1000):
        raise AssertionError(f"no completion signalled on fd {fd} within {timeout} s")
    try:
        os.eventfd_read(fd)
    except BlockingIOError:
        pass


def store(a, keys, objs):
    task = a.submit_store_task(keys, objs)
    while True:
        wait_fd(a.get_store_event_fd())
        done = a.pop_completed_store_tasks()
        if task in done:
            return done[task]


def lookup(a, keys) -> list[bool]:
    task = a.submit_lookup_and_lock_task(keys, {})
    while True:
        bm = a.query_lookup_and_lock_result(task)
        if bm is not None:
            assert a.query_lookup_and_lock_result(task) is None, "a result is given once"
            return [bm.test(i) for i in range(len(keys))]
        wait_fd(a.get_lookup_and_lock_event_fd())


def load(a, keys, objs) -> list[bool]:
    task = a.submit_load_task(keys, objs)
    while True:
        bm = a.query_load_result(task)
        if bm is not None:
            assert a.query_load_result(task) is None, "a result is given once"
            return [bm.test(i) for i in range(len(keys))]
        wait_fd(a.get_load_event_fd())


class Recorder:
    """An L2AdapterListener that records what it hears."""

    def __init__(self) -> None:
        self.stored: list = []
        self.accessed: list = []
        self.deleted: list = []

    def on_l2_keys_stored(self, keys, sizes):
        self.stored += list(zip(keys, sizes))

    def on_l2_keys_accessed(self, keys):
        self.accessed += list(keys)

    def on_l2_keys_deleted(self, keys):
        self.deleted += list(keys)


# -- construction and configuration -----------------------------------------------------------


def test_built_by_lmcache_factory_is_an_l2_adapter(make_adapter):
    from lmcache.v1.distributed.l2_adapters.base import L2AdapterInterface

    a = make_adapter(plugin_spec({"type": "memory"}))
    assert isinstance(a, L2AdapterInterface)
    assert type(a).__module__ == "kvtier.lmcache"


def test_import_kvtier_does_not_need_lmcache():
    import subprocess
    import sys

    code = ("import sys; sys.modules['lmcache'] = None; import kvtier; "
            "print(kvtier.check_adapter('{\"type\": \"memory\"}'))")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    assert '"type":"memory"' in r.stdout
    code = "import sys; sys.modules['lmcache'] = None; import kvtier.lmcache"
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert r.returncode != 0 and "lmcache" in r.stderr


def test_module_allocator_keeps_freed_pages_unless_the_environment_says_otherwise():
    # The wheel's default build: jemalloc with decay off (python/src/alloc.rs); an operator's
    # _RJEM_MALLOC_CONF wins over it.
    import subprocess
    import sys

    code = "import json, kvtier; print(json.dumps(kvtier.allocator()))"
    env = {k: v for k, v in os.environ.items() if k != "_RJEM_MALLOC_CONF"}
    runs = {}
    for conf in (None, "dirty_decay_ms:10000,muzzy_decay_ms:0"):
        e = dict(env, **({"_RJEM_MALLOC_CONF": conf} if conf else {}))
        r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=e)
        assert r.returncode == 0, r.stderr
        runs[conf] = json.loads(r.stdout)
    assert runs[None] == {"name": "jemalloc", "malloc_conf": "dirty_decay_ms:-1,muzzy_decay_ms:-1",
                          "dirty_decay_ms": -1, "muzzy_decay_ms": -1}
    over = runs["dirty_decay_ms:10000,muzzy_decay_ms:0"]
    assert (over["dirty_decay_ms"], over["muzzy_decay_ms"]) == (10000, 0)


@pytest.mark.parametrize("params, field", [
    ({"type": "fs", "base_path": "/tmp/x", "fsync": "true"}, "fsync"),
    ({"type": "fs", "base_path": "/tmp/x", "num_wokers": 2}, "num_wokers"),
    ({"type": "s3", "s3_region": "garage"}, "s3_endpoint"),
    ({"type": "s3", "s3_endpoint": "http://127.0.0.1:{port}", "s3_bucket": "b", "s3_region": "r",
      "disable_tls": True, "s3_num_io_threads": 0}, "s3_num_io_threads"),
    ({"type": "hfbucket", "bucket_handle": "hf://buckets/a/b", "metadata_cache_ttl_secs": -1,
      "hf_endpoint": "http://127.0.0.1:{port}"}, "metadata_cache_ttl_secs"),
    ({"type": "memory", "eviction": {"eviction_policy": "FIFO"}}, "eviction.eviction_policy"),
    ({"type": "tape"}, "type"),
])
def test_bad_field_is_a_value_error_naming_it(params, field):
    # The strict parse fails before anything is opened: the endpoint the adapter names (a
    # listener of ours) never sees a connection, and no secret reaches the message.
    secret = "kvtier-plugin-very-secret-9f8e7d"
    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen(8)
        listener.setblocking(False)
        port = listener.getsockname()[1]
        params = {k: v.format(port=port) if isinstance(v, str) else v for k, v in params.items()}
        if params["type"] == "s3":
            params = {**params, "aws_access_key_id": "GKx", "aws_secret_access_key": secret}
        with pytest.raises(ValueError) as e:
            lmcache_adapter(plugin_spec(params))
        assert f"`{field}`" in str(e.value), str(e.value)
        assert secret not in str(e.value)
        with pytest.raises(BlockingIOError):
            listener.accept()


def test_lmcache_version_under_test():
    import importlib.metadata

    import lmcache

    version = importlib.metadata.version("lmcache")
    print(f"\nLMCache {version} from {lmcache.__file__}")
    assert version in ("0.5.6", "0.5.7rc2"), version
    assert (MemoryTags is None) == (version == "0.5.6")


def test_event_fds_are_distinct(make_adapter, tmp_path):
    a = make_adapter(plugin_spec({"type": "memory"}))
    b = make_adapter(plugin_spec({"type": "fs", "base_path": str(tmp_path)}))
    fds = [f() for x in (a, b) for f in (x.get_store_event_fd, x.get_lookup_and_lock_event_fd,
                                         x.get_load_event_fd)]
    assert len(set(fds)) == 6 and all(fd >= 0 for fd in fds)


# -- the contract, on every backend ------------------------------------------------------------


def test_store_lookup_load(make_adapter, backend):
    a = make_adapter(plugin_spec(backend))
    model = unique("m/")
    keys = keys_for(model, 4)
    objs = [mobj(4096 + 512 * i, seed=i) for i in range(4)]
    r = store(a, keys, objs)
    assert r.is_successful() and r.bytes_transferred() == sum(o.get_size() for o in objs)
    # Storing again succeeds and transfers no new bytes (bytes of new keys only).
    r = store(a, keys[:2] + keys_for(model, 1, start=10),
              objs[:2] + [mobj(1000, fill=7)])
    assert r.is_successful() and r.bytes_transferred() == 1000
    unknown = keys_for(model, 2, start=100)
    assert lookup(a, keys + unknown) == [True] * 4 + [False] * 2
    outs = [mobj(o.get_size()) for o in objs]
    assert load(a, keys, outs) == [True] * 4
    assert [data(o) for o in outs] == [data(o) for o in objs]
    # A buffer of another size is a miss (bit 0), whatever the others do.
    wrong = [mobj(4095), mobj(objs[1].get_size())]
    assert load(a, keys[:2], wrong) == [False, True]
    assert data(wrong[1]) == data(objs[1])
    if backend["type"] in ("memory", "fs"):
        assert data(wrong[0]) == bytes(4095), "a size mismatch leaves the buffer untouched"
    a.submit_unlock(keys)


def test_listeners_usage_locks_and_delete(make_adapter, backend):
    a = make_adapter(plugin_spec(backend))
    rec = Recorder()
    a.register_listener(rec)
    model = unique("m/")
    keys = keys_for(model, 3) + keys_for(model, 1, salt="tenant-a", start=3)
    sizes = [2048, 3072, 4096, 1024]
    assert store(a, keys, [mobj(n, fill=1) for n in sizes]).is_successful()
    assert sorted(rec.stored, key=lambda p: p[1]) == sorted(zip(keys, sizes), key=lambda p: p[1])
    u = a.get_usage()
    assert u.total_bytes_used == sum(sizes)
    assert dict(u.bytes_by_cache_salt) == {"": 9216, "tenant-a": 1024}
    # Storing again: no new stored notification, no change in usage.
    store(a, keys[:1], [mobj(2048, fill=2)])
    assert len(rec.stored) == 4 and a.get_usage().total_bytes_used == sum(sizes)

    # accessed fires on lookup hits only: not for misses, not for loads.
    missing = keys_for(model, 1, start=50)
    assert lookup(a, [keys[0], missing[0], keys[1]]) == [True, False, True]
    assert sorted(rec.accessed, key=lambda k: k.chunk_hash) == [keys[0], keys[1]]
    assert load(a, keys[:2], [mobj(2048), mobj(3072)]) == [True, True]
    assert len(rec.accessed) == 2

    # Locks are reference counts; delete skips locked keys and fires deleted only for removed.
    assert lookup(a, [keys[0]]) == [True]  # keys[0] now locked twice, keys[1] once
    a.delete([keys[0], keys[1], keys[2], missing[0]])
    assert rec.deleted == [keys[2]]
    assert a.get_usage().total_bytes_used == 2048 + 3072 + 1024
    a.submit_unlock([keys[0], keys[1]])
    a.delete([keys[0], keys[1]])
    assert sorted(rec.deleted, key=lambda k: k.chunk_hash) == [keys[1], keys[2]]
    a.submit_unlock([keys[0]])
    a.delete([keys[0], keys[3]])
    assert len(rec.deleted) == 4
    u = a.get_usage()
    assert u.total_bytes_used == 0 and dict(u.bytes_by_cache_salt) == {}
    assert lookup(a, keys) == [False] * 4


def test_groups_and_salts_round_trip(make_adapter, backend):
    a = make_adapter(plugin_spec(backend))
    model = unique("m/")
    keys = keys_for(model, 2, group=1) + keys_for(model, 2, salt="s", group=2)
    objs = [mobj(1500, seed=10 + i) for i in range(4)]
    assert store(a, keys, objs).is_successful()
    assert lookup(a, keys) == [True] * 4
    # Same hash, other group: another object.
    assert lookup(a, keys_for(model, 1, group=5)) == [False]
    outs = [mobj(1500) for _ in keys]
    assert load(a, keys, outs) == [True] * 4
    assert [data(o) for o in outs] == [data(o) for o in objs]


def test_list_and_status(make_adapter, backend):
    a = make_adapter(plugin_spec(backend))
    model = unique("m/")
    keys = keys_for(model, 5)
    assert store(a, keys, [mobj(1000 + i) for i in range(5)]).is_successful()
    status = a.report_status()
    assert status["is_healthy"] is True and status["kvtier_adapter"] == backend["type"]
    assert status["current_size_bytes"] == sum(1000 + i for i in range(5))
    assert status["allocator"]["name"] == "jemalloc" and status["allocator"]["dirty_decay_ms"] == -1
    seen, cursor = [], None
    while True:
        page = a.list_l2_keys(model_name=model, page_size=2, cursor=cursor)
        assert len(page.entries) <= 2
        seen += [(e.key, e.size_bytes) for e in page.entries]
        cursor = page.next_page_token
        if cursor is None:
            break
    assert sorted(seen, key=lambda p: p[1]) == [
        (k.to_encoded_object_key(), 1000 + i) for i, k in enumerate(keys)]
    with pytest.raises(ValueError):
        a.list_l2_keys(page_size=0)


def test_submits_after_close_fail_at_once(backend):
    a = lmcache_adapter(plugin_spec(backend))
    model = unique("m/")
    keys = keys_for(model, 2)
    assert store(a, keys, [mobj(100, fill=1), mobj(100, fill=2)]).is_successful()
    a.close()
    a.close()  # idempotent
    t = a.submit_store_task(keys, [mobj(100), mobj(100)])
    assert not a.pop_completed_store_tasks()[t].is_successful()
    t = a.submit_lookup_and_lock_task(keys, {})
    bm = a.query_lookup_and_lock_result(t)
    assert bm is not None and not bm.test(0) and not bm.test(1)
    outs = [mobj(100, fill=9), mobj(100, fill=9)]
    t = a.submit_load_task(keys, outs)
    bm = a.query_load_result(t)
    assert bm is not None and not bm.test(0)
    assert data(outs[0]) == bytes([9]) * 100
    assert a.report_status()["is_healthy"] is False


# -- memory tags (LMCache >= 0.5.7) ----------------------------------------------------------


def wait_until_heard(a, what, timeout: float = 30.0) -> None:
    """Delivers kvtier's events (``wait_for_events`` returns as soon as one arrives) until
    ``what()`` is true: for events kvtier publishes on its own, after the call that caused them."""
    deadline = time.monotonic() + timeout
    while not what() and time.monotonic() < deadline:
        a.wait_for_events(timeout=max(0.0, deadline - time.monotonic()))
    assert what(), "the expected events never arrived"


@pytest.mark.parametrize("wrapped", [False, True], ids=["plain", "fault_inject"])
def test_memory_tags_per_backend(make_adapter, backend, wrapped):
    """Where the bytes live, as LMCache's own adapters of the same stores answer: memory and fs
    are local storage, s3 and hfbucket remote; a fault_inject answers for what it wraps. On
    0.5.6 (no memory tags) the method exists and says it is not available."""
    params = {"type": "fault_inject", "inner": backend} if wrapped else backend
    a = make_adapter(plugin_spec(params))
    if MemoryTags is None:
        with pytest.raises(NotImplementedError):
            a.get_memory_tags()
        return
    local = backend["type"] in ("memory", "fs")
    want = MemoryTags(MemorySegment.STORAGE,
                      MemoryResidency.LOCAL if local else MemoryResidency.REMOTE)
    assert a.get_memory_tags() == want
    if backend["type"] == "memory":
        # The in-memory store LMCache ships ("mock") answers the same.
        mock = make_adapter({"type": "mock", "max_size_gb": 0.01, "mock_bandwidth_gb": 10})
        assert mock.get_memory_tags() == want


def _same_tags(kv, lm) -> None:
    """On LMCache >= 0.5.7: kvtier's adapter and LMCache's adapter of the same store agree."""
    if MemoryTags is not None:
        assert kv.get_memory_tags() == lm.get_memory_tags()


# -- touch: recency without I/O ---------------------------------------------------------------


@pytest.mark.parametrize("touch", [False, True], ids=["untouched", "touched"])
def test_touch_keeps_a_key_through_kvtiers_eviction(make_adapter, touch):
    """kvtier evicts (an eviction table): five 100-byte keys stored one by one into 500 bytes,
    LRU, watermark 1.0, ratio 0.2, so the fifth store evicts the least recently used key. A
    submit_touch of the oldest key before that store saves it and the next oldest goes;
    without the touch the oldest goes."""
    a = make_adapter(plugin_spec({"type": "memory", "max_capacity_gb": 500 / 1024**3,
                                  "eviction": {"eviction_policy": "LRU",
                                               "trigger_watermark": 1.0,
                                               "eviction_ratio": 0.2}}))
    rec = Recorder()
    a.register_listener(rec)
    keys = keys_for(unique("m/"), 5)
    for k in keys[:4]:
        assert store(a, [k], [mobj(100, fill=1)]).is_successful()
    if touch:
        a.submit_touch([keys[0]])
    assert store(a, [keys[4]], [mobj(100, fill=1)]).is_successful()
    # The touch's `accessed` came before the store's events, which are delivered with its result.
    assert rec.accessed == ([keys[0]] if touch else [])
    wait_until_heard(a, lambda: rec.deleted)
    gone = keys[1] if touch else keys[0]
    assert rec.deleted == [gone]
    assert lookup(a, keys) == [k != gone for k in keys]
    a.submit_unlock([k for k in keys if k != gone])
    assert a.get_usage().total_bytes_used == 400


def test_touch_is_accessed_for_held_keys_without_io(make_adapter, backend):
    """LMCache's listeners hear `accessed` for the touched keys kvtier holds (not for others),
    and the store is never called: every probe, read, removal and listing of the wrapped store
    would fail (and be counted), yet nothing is injected."""
    a = make_adapter(plugin_spec({"type": "fault_inject", "inner": backend, "error_rates": {
        "head": 1.0, "get": 1.0, "remove": 1.0, "list": 1.0}}))
    rec = Recorder()
    a.register_listener(rec)
    model = unique("m/")
    keys = keys_for(model, 2)
    assert store(a, keys, [mobj(1000, fill=1), mobj(1000, fill=2)]).is_successful()
    injected = a.report_status()["details"]["injected_total"]
    a.submit_touch([keys[1], keys_for(model, 1, start=50)[0]])
    a.submit_touch([])
    wait_until_heard(a, lambda: rec.accessed)
    assert rec.accessed == [keys[1]]
    assert a.report_status()["details"]["injected_total"] == injected
    assert a.get_usage().total_bytes_used == 2000


# -- eviction: one evictor per adapter --------------------------------------------------------


def test_lmcache_evicts_by_default(make_adapter, tmp_path):
    a = make_adapter(plugin_spec({"type": "fs", "base_path": str(tmp_path),
                                  "max_capacity_gb": 1}))
    assert a.supports_global_eviction
    assert a.get_usage().total_capacity_bytes == 1024**3
    assert a.report_status()["eviction"] == "lmcache"


def test_kvtier_evicts_when_asked_and_lmcache_does_not(make_adapter):
    cap_gb = 8192 / 1024**3  # 8 KiB
    a = make_adapter(plugin_spec({"type": "memory", "max_capacity_gb": cap_gb,
                                  "eviction": {"eviction_policy": "LRU",
                                               "trigger_watermark": 0.5,
                                               "eviction_ratio": 0.5}}))
    assert not a.supports_global_eviction
    assert a.report_status()["eviction"] == "kvtier"
    rec = Recorder()
    a.register_listener(rec)
    keys = keys_for(unique("m/"), 8)
    for k in keys:
        assert store(a, [k], [mobj(1024, fill=3)]).is_successful()
    # kvtier's evictor runs on its own thread after the store events: wait for its deletions
    # to be published (each wait returns as soon as an event arrives).
    deadline = time.monotonic() + 30
    while not rec.deleted and time.monotonic() < deadline:
        a.wait_for_events(timeout=max(0.0, deadline - time.monotonic()))
    assert rec.deleted, "kvtier's evictor removed nothing"
    assert a.get_usage().total_bytes_used == 1024 * (8 - len(rec.deleted))


# -- restart: what kvtier finds at start counts ---------------------------------------------


def test_objects_found_at_start_are_accounted(tmp_path):
    params = {"type": "fs", "base_path": str(tmp_path)}
    keys = keys_for("m/restart", 3)
    a = lmcache_adapter(plugin_spec(params))
    assert store(a, keys, [mobj(777, fill=1)] * 3).is_successful()
    a.close()
    b = lmcache_adapter(plugin_spec(params))
    try:
        assert b.get_usage().total_bytes_used == 3 * 777
        assert lookup(b, keys) == [True] * 3
    finally:
        b.close()


# -- interoperability with LMCache's built-in adapters ----------------------------------------


def _interop(kv, lm, model=None):
    model = model or unique("m/")
    a_keys = keys_for(model, 3)
    a_objs = [mobj(3000, seed=i) for i in range(3)]
    assert store(kv, a_keys, a_objs).is_successful()
    assert lookup(lm, a_keys) == [True] * 3
    outs = [mobj(3000) for _ in a_keys]
    assert load(lm, a_keys, outs) == [True] * 3
    assert [data(o) for o in outs] == [data(o) for o in a_objs]
    lm.submit_unlock(a_keys)
    # And the reverse, salted and grouped.
    b_keys = keys_for(model, 3, salt="tenant", group=1, start=20)
    b_objs = [mobj(2500, seed=50 + i) for i in range(3)]
    assert store(lm, b_keys, b_objs).is_successful()
    assert lookup(kv, b_keys) == [True] * 3
    outs = [mobj(2500) for _ in b_keys]
    assert load(kv, b_keys, outs) == [True] * 3
    assert [data(o) for o in outs] == [data(o) for o in b_objs]
    kv.submit_unlock(b_keys)
    # Same names: both list the same keys with the same sizes.
    listed = {(e.key, e.size_bytes) for e in kv.list_l2_keys(model_name=model).entries}
    assert listed == {(k.to_encoded_object_key(), 3000) for k in a_keys} | {
        (k.to_encoded_object_key(), 2500) for k in b_keys}
    _same_tags(kv, lm)


def test_interop_with_lmcache_s3(make_adapter, garage):
    kv = make_adapter(plugin_spec(garage.kvtier_params()))
    lm = make_adapter(garage.lmcache_params())
    assert type(lm).__name__ == "S3L2Adapter"
    _interop(kv, lm)


def test_interop_with_lmcache_hfbucket(make_adapter, hub, monkeypatch, tmp_path):
    import huggingface_hub.constants as hf_constants

    monkeypatch.setattr(hf_constants, "ENDPOINT", hub.endpoint)
    bucket = unique("interop")
    kv = make_adapter(plugin_spec(hub.kvtier_params(bucket)))
    lm = make_adapter({"type": "hfbucket", "bucket_handle": f"hf://buckets/kvtier/{bucket}",
                       "token": "hf_kvtier_plugin_test_token",
                       "download_tmp_dir": str(tmp_path / "lm"),
                       "create_bucket_if_missing": True})
    assert type(lm).__name__ == "HFBucketL2Adapter"
    _interop(kv, lm)
    # kvtier read LMCache's objects (chunks compressed as hf_xet's "auto" chose) through its
    # direct Xet reader, not through the `resolve` fallback.
    loads = kv.report_status()["details"]["loads"]
    assert loads["xet_load_path"] == "direct", loads
    assert loads["xet"] >= 3 and loads["resolve"] == 0 and loads["xet_fallbacks"] == 0, loads
    # Objects of many Xet chunks from kvtier's own writer (the default, with Xet's chunker, and
    # with fixed chunks), read back by LMCache through huggingface_hub.
    stores = kv.report_status()["details"]["stores"]
    assert (stores["xet_store_path"], stores["xet_chunking"]) == ("direct", "cdc"), stores
    fixed = make_adapter(plugin_spec(hub.kvtier_params(bucket, xet_chunking="fixed")))
    assert fixed.report_status()["details"]["stores"]["xet_chunking"] == "fixed"
    for n, writer in enumerate((kv, fixed)):
        keys = keys_for(unique("m/large"), 2)
        objs = [mobj(1 << 20, seed=100 + 2 * n + i) for i in range(2)]
        assert store(writer, keys, objs).is_successful()
        outs = [mobj(1 << 20) for _ in keys]
        assert lookup(lm, keys) == [True] * 2
        assert load(lm, keys, outs) == [True] * 2
        assert [data(o) for o in outs] == [data(o) for o in objs], n
        lm.submit_unlock(keys)


def test_hfbucket_stores_reuse_freed_memory(make_adapter, hub):
    # Each Xet commit serializes its xorb into a fresh 64 MiB buffer. With the module's jemalloc
    # keeping freed pages (python/src/alloc.rs), later stores reuse them; with glibc's malloc
    # or jemalloc's defaults, every 4 KiB stored is a page fault (docs/benchmarks.md,
    # "hfbucket"). Run with _RJEM_MALLOC_CONF=dirty_decay_ms:10000,muzzy_decay_ms:0 to see
    # this fail.
    import resource

    a = make_adapter(plugin_spec(hub.kvtier_params(unique("alloc"))))
    n, size = 16, 4 << 20
    faults = []
    for rep in range(3):
        # New bytes every time: Xet would deduplicate a repeat, and build no xorb for it.
        objs = [mobj(size, seed=rep * n + i) for i in range(n)]
        keys = keys_for("alloc/model", n, start=rep * n)
        f0 = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
        r = store(a, keys, objs)
        faults.append(resource.getrusage(resource.RUSAGE_SELF).ru_minflt - f0)
        assert r.is_successful() and r.bytes_transferred() == n * size
    pages = n * size // 4096
    assert min(faults[1:]) < pages // 4, (faults, pages)


def test_interop_with_lmcache_fs(make_adapter, tmp_path):
    """One directory, both adapters: a model name with '/' (LMCache's fs adapter writes it as
    "-SEP-") is found and read both ways, and both list the same keys."""
    params = {"type": "fs", "base_path": str(tmp_path)}
    kv = make_adapter(plugin_spec(params))
    lm = make_adapter({"type": "fs", "base_path": str(tmp_path)})
    assert type(lm).__name__ == "FSL2Adapter"
    _interop(kv, lm, model=unique("org/") + "/model-v1")
    # The names are LMCache's own: its codec reads every file back as the key it holds.
    from lmcache.v1.distributed.l2_adapters.fs_l2_adapter import _filename_to_object_key

    names = [p.name for p in tmp_path.iterdir() if p.suffix == ".data"]
    assert len(names) == 6
    assert all(_filename_to_object_key(n) is not None for n in names), names


def test_fs_model_names_containing_lmcache_separator(make_adapter, tmp_path):
    """A model name containing "-SEP-" (how LMCache's fs adapter writes '/'): LMCache gives
    `org-SEP-x` the file of `org/x`, and reads it back as `org/x`. kvtier keeps the two apart
    (an escaped name of its own for `org-SEP-x`, which LMCache's codec skips rather than
    misreads), reads LMCache's objects of `org/x`, and lists each key under its own model
    after a restart."""
    from lmcache.v1.distributed.l2_adapters.fs_l2_adapter import (
        _filename_to_object_key,
        _object_key_to_filename,
    )

    params = {"type": "fs", "base_path": str(tmp_path)}
    kv = make_adapter(plugin_spec(params))
    lm = make_adapter({"type": "fs", "base_path": str(tmp_path)})
    tag = unique("x")
    sep_model, slash_model = f"org-SEP-{tag}", f"org/{tag}"
    sep_keys = keys_for(sep_model, 1) + keys_for(sep_model, 1, salt="t", group=2, start=1)
    slash_keys = keys_for(slash_model, 1) + keys_for(slash_model, 1, salt="t", group=2, start=1)
    # LMCache's own spelling cannot tell them apart.
    assert [_object_key_to_filename(k) for k in sep_keys] == [
        _object_key_to_filename(k) for k in slash_keys]
    sep_objs = [mobj(2000, seed=i) for i in range(2)]
    slash_objs = [mobj(3000, seed=10 + i) for i in range(2)]
    assert store(lm, slash_keys, slash_objs).is_successful()
    assert store(kv, sep_keys, sep_objs).is_successful()

    names = sorted(p.name for p in tmp_path.iterdir() if p.suffix == ".data")
    assert len(names) == 4, names
    decoded = {n: _filename_to_object_key(n) for n in names}
    # LMCache's files read back as its keys; kvtier's escaped ones are not LMCache names.
    assert sorted((k for k in decoded.values() if k is not None),
                  key=lambda k: k.chunk_hash) == slash_keys
    escaped = [n for n, k in decoded.items() if k is None]
    assert len(escaped) == 2 and all(n.startswith(sep_model + "@~0x") for n in escaped), names

    # kvtier reads LMCache's objects of the '/' model, and its own of the "-SEP-" model.
    for keys, objs in ((slash_keys, slash_objs), (sep_keys, sep_objs)):
        assert lookup(kv, keys) == [True, True]
        outs = [mobj(o.get_size()) for o in objs]
        assert load(kv, keys, outs) == [True, True]
        assert [data(o) for o in outs] == [data(o) for o in objs]
        kv.submit_unlock(keys)
    # LMCache's lookup of the "-SEP-" keys lands on the '/' model's files (its own spelling).
    outs = [mobj(3000) for _ in sep_keys]
    assert lookup(lm, sep_keys) == [True, True]
    assert load(lm, sep_keys, outs) == [True, True]
    assert [data(o) for o in outs] == [data(o) for o in slash_objs]
    lm.submit_unlock(sep_keys)

    # After a restart kvtier finds every object under its own model.
    kv.close()
    again = make_adapter(plugin_spec(params))
    for model, keys, size in ((sep_model, sep_keys, 2000), (slash_model, slash_keys, 3000)):
        listed = {(e.key, e.size_bytes) for e in again.list_l2_keys(model_name=model).entries}
        assert listed == {(k.to_encoded_object_key(), size) for k in keys}, model
    assert again.get_usage().total_bytes_used == 2 * 2000 + 2 * 3000


# -- two controller threads at once -----------------------------------------------------------


@pytest.mark.parametrize("kind", ["fs", "s3"])
def test_stress_two_threads(make_adapter, kind, tmp_path, request):
    """LMCache's store controller (stores, deletes) and prefetch controller (lookups, loads,
    unlocks) call the adapter at once, each on its own eventfds. For >= 10 s: every task gets
    exactly one result, every locked key loads its exact bytes, nothing deadlocks."""
    if kind == "fs":
        params = {"type": "fs", "base_path": str(tmp_path)}
    else:
        params = request.getfixturevalue("garage").kvtier_params(s3_key_prefix=unique("stress"))
    a = make_adapter(plugin_spec(params))
    model = unique("m/")
    size = 8192
    stored: list = []  # (key, seed), appended by the store thread (list.append is atomic)
    stats = {"stores": 0, "deletes": 0, "lookups": 0, "loads": 0, "hits": 0, "keys_stored": 0}
    errors: list = []
    stop_at = time.monotonic() + float(os.environ.get("KVTIER_PLUGIN_STRESS_SECS", "10"))

    def writer():
        try:
            i = 0
            while time.monotonic() < stop_at:
                keys = keys_for(model, 8, start=i)
                seeds = list(range(i, i + 8))
                r = store(a, keys, [mobj(size, seed=s) for s in seeds])
                assert r.is_successful(), "store failed"
                stats["stores"] += 1
                stats["keys_stored"] += 8
                stored.extend(zip(keys, seeds))
                i += 8
                if i % 32 == 0:
                    a.delete([k for k, _ in stored[-32:-16]])
                    stats["deletes"] += 1
        except BaseException as e:  # noqa: BLE001
            errors.append(e)

    def reader():
        try:
            n = 0
            while time.monotonic() < stop_at:
                if len(stored) < 8:
                    lookup(a, keys_for(model, 1, start=10**9))
                    continue
                picks = [stored[(n * 7 + j * 13) % len(stored)] for j in range(6)]
                picks = list(dict(picks).items())
                n += 1
                keys = [k for k, _ in picks]
                bits = lookup(a, keys)
                stats["lookups"] += 1
                hit = [(k, s) for (k, s), b in zip(picks, bits) if b]
                if hit:
                    outs = [mobj(size) for _ in hit]
                    got = load(a, [k for k, _ in hit], outs)
                    stats["loads"] += 1
                    assert got == [True] * len(hit), "a locked key did not load"
                    for (k, s), o in zip(hit, outs):
                        assert data(o) == data(mobj(size, seed=s)), "wrong bytes"
                    stats["hits"] += len(hit)
                    a.submit_unlock([k for k, _ in hit])
        except BaseException as e:  # noqa: BLE001
            errors.append(e)

    threads = [threading.Thread(target=writer), threading.Thread(target=reader)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=TIMEOUT + 60)
    assert not any(t.is_alive() for t in threads), "deadlock: a controller thread hangs"
    assert not errors, errors
    print(f"\nstress[{kind}]: {stats}")
    assert stats["stores"] > 10 and stats["loads"] > 10 and stats["hits"] > 0
    # Nothing lost: every key stored and not deleted is still there and accounted.
    live = {k: s for k, s in stored}
    deleted = a.get_usage().total_bytes_used
    bits = lookup(a, list(live))
    assert a.get_usage().total_bytes_used == size * sum(bits) == deleted
    a.submit_unlock([k for k, b in zip(live, bits) if b])


# -- end to end: LMCache's storage manager, store and prefetch controllers --------------------


def test_end_to_end_through_lmcache_storage_manager(tmp_path):
    """L1 write -> LMCache's store controller stores to kvtier; L1 dropped -> LMCache's
    prefetch controller looks up, locks and loads from kvtier back into L1. CPU only."""
    import argparse
    import json

    from lmcache.v1.distributed.api import (
        GroupedObjectKeys,
        MemoryLayoutDesc,
        PrefetchTaskSpec,
    )
    from lmcache.v1.distributed.config import add_storage_manager_args, parse_args_to_config
    from lmcache.v1.distributed.storage_manager import StorageManager

    parser = argparse.ArgumentParser()
    add_storage_manager_args(parser)
    spec = plugin_spec({"type": "fs", "base_path": str(tmp_path / "l2")})
    cfg = parse_args_to_config(parser.parse_args(
        ["--l1-size-gb", "0.05", "--eviction-policy", "LRU", "--l2-adapter", json.dumps(spec)]))
    sm = StorageManager(cfg)
    try:
        ((_, adapter),) = sm.l2_adapters()
        assert type(adapter).__name__ == "KvtierL2Adapter"
        keys = keys_for(unique("m/"), 4)
        all_stored = threading.Event()
        seen: set = set()
        accessed: list = []

        class Listener:
            def on_l2_keys_stored(self, ks, sizes):
                seen.update(ks)
                if set(keys) <= seen:
                    all_stored.set()

            def on_l2_keys_accessed(self, ks):
                accessed.extend(ks)

            def on_l2_keys_deleted(self, ks):
                pass

        sm.register_l2_listener(Listener())
        n = 4096
        layout = MemoryLayoutDesc(shapes=[torch.Size([n])], dtypes=[torch.uint8])
        reserved = sm.reserve_write(keys, layout)
        want = {}
        for i, k in enumerate(keys):
            src = mobj(n, seed=100 + i)
            reserved[k].tensor.view(torch.uint8).view(-1).copy_(src.tensor)
            want[k] = data(src)
        sm.finish_write(keys)
        assert all_stored.wait(TIMEOUT), "the store controller never stored into kvtier"
        assert adapter.get_usage().total_bytes_used == 4 * n

        deleted, _ = sm.delete_l1_keys(keys, force=True)
        assert deleted == 4
        handle = sm.submit_prefetch_task(PrefetchTaskSpec(
            key_groups=[GroupedObjectKeys(keys=keys, object_group_id=0, layout_desc=layout)]))
        assert sm.wait_prefetch_status(handle, TIMEOUT), "prefetch did not finish"
        result = sm.query_prefetch_status(handle)
        assert result is not None
        assert [result.l2_hit_cells[0].test(i) for i in range(4)] == [True] * 4
        with sm.read_prefetched_results(keys) as objs:
            assert objs is not None
            assert [data(o) for o in objs] == [want[k] for k in keys]

        # LMCache >= 0.5.7 keeps a cached prefix recent in L1 and L2 without I/O: kvtier's
        # submit_touch, heard by LMCache's listeners as `accessed`.
        if MemoryTags is None:
            assert not hasattr(sm, "touch_cached_keys")
        else:
            heard = len(accessed)
            sm.touch_cached_keys(keys)
            wait_until_heard(adapter, lambda: len(accessed) > heard)
            assert accessed[heard:] == keys
    finally:
        sm.close()


def test_failed_store_is_a_failed_task(make_adapter):
    # kvtier's "seed" names have no group field: a key of group 1 is refused, so the task fails
    # (LMCache reports store failures per task), and the key is not found afterwards.
    a = make_adapter(plugin_spec({"type": "memory", "object_name_format": "seed"}))
    model = unique("m/")
    ok, bad = keys_for(model, 1), keys_for(model, 1, group=1, start=1)
    r = store(a, ok + bad, [mobj(100, fill=1), mobj(100, fill=2)])
    assert not r.is_successful()
    assert lookup(a, ok + bad) == [True, False]
    assert a.get_usage().total_bytes_used == 100


def test_adapter_dropped_without_close_stops_its_runtime():
    import gc

    a = lmcache_adapter(plugin_spec({"type": "memory"}))
    keys = keys_for(unique("m/"), 2)
    assert store(a, keys, [mobj(64, fill=1), mobj(64, fill=2)]).is_successful()
    fds = [a.get_store_event_fd(), a.get_lookup_and_lock_event_fd(), a.get_load_event_fd()]
    assert all(os.readlink(f"/proc/self/fd/{fd}") == "anon_inode:[eventfd]" for fd in fds)
    del a
    gc.collect()
    # Dropping it waited for its runtime to stop, then closed its eventfds (a number may have
    # been reused since, but not by three eventfds at once).
    still = []
    for fd in fds:
        try:
            still.append(os.readlink(f"/proc/self/fd/{fd}") == "anon_inode:[eventfd]")
        except OSError:
            still.append(False)
    assert not all(still)


def test_two_plugins_in_a_fleet_share_one_index(make_adapter, redis_url, tmp_path):
    """adapter_params.fleet: two adapters (as two serving processes would be) on one directory
    and one index; each sees the other in its status, and usage is the fleet's."""
    def params(node):
        return {"type": "fs", "base_path": str(tmp_path), "max_capacity_gb": 1,
                "eviction": {"eviction_policy": "LRU"},
                "fleet": {"index": redis_url, "node_id": node}}

    a = make_adapter(plugin_spec(params("a")))
    b = make_adapter(plugin_spec(params("b")))

    def both_joined():
        sa, sb = a.report_status(), b.report_status()
        return all(s.get("fleet", {}).get("joined") and s["fleet"]["nodes"] == 2
                   for s in (sa, sb))

    _wait_until("both adapters joined the fleet index", both_joined, TIMEOUT)
    assert a.report_status()["fleet"]["node"] == "a"
    model = unique("m/")
    keys = keys_for(model, 3)
    objs = [mobj(2048, seed=i) for i in range(3)]
    assert store(a, keys, objs).is_successful()
    assert lookup(b, keys) == [True] * 3
    outs = [mobj(2048) for _ in objs]
    assert load(b, keys, outs) == [True] * 3
    assert [data(o) for o in outs] == [data(o) for o in objs]
    b.submit_unlock(keys)
    usage = json.loads(b._core.usage_json())["adapters"][0]
    assert usage["used_bytes"] == 3 * 2048 and "node_used_bytes" in usage, usage
