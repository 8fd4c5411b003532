"""kvtier as an LMCache 0.5 L2 adapter plugin (tested with LMCache 0.5.6 and 0.5.7rc2).

Use it from LMCache's own configuration (no change to LMCache)::

    --l2-adapter '{"type": "plugin", "module_path": "kvtier.lmcache",
                   "class_name": "KvtierL2Adapter",
                   "adapter_params": {"type": "s3", "s3_endpoint": "s3://my-bucket", ...}}'

``adapter_params`` is exactly one kvtier adapter object (the JSON ``kvtier --l2-adapter``
takes: ``memory``, ``fs``, ``s3``, ``hfbucket`` or ``fault_inject``), checked by kvtier's strict
parser: a bad field raises ``ValueError`` naming the adapter and the field before anything is
opened. Two defaults differ from the ``kvtier`` command line, both because LMCache is the host:

* ``object_name_format`` defaults to ``"grouped"``: LMCache 0.5's own adapters name objects
  ``<model>@<kv_rank>@<group>@<hash>[@<salt>]``, and LMCache issues keys of several groups.
* Eviction: LMCache's eviction controller evicts (it reads ``get_usage`` and calls ``delete``);
  kvtier's evictor runs only if ``adapter_params`` has an ``eviction`` table. Then kvtier
  evicts, and the adapter declares no capacity to LMCache (``supports_global_eviction`` is
  false), so the two evictors never both run on one adapter.

LMCache versions. The class implements the interface of both 0.5.6 and 0.5.7rc2; what 0.5.7
added is there on 0.5.6 too, unused:

* ``get_memory_tags()`` (abstract in 0.5.7: without it LMCache cannot build the adapter) answers
  as LMCache's own adapters of the same stores do: ``(STORAGE, LOCAL)`` for ``memory`` and
  ``fs``, ``(STORAGE, REMOTE)`` for ``s3`` and ``hfbucket``; a ``fault_inject`` answers for the
  adapter it wraps. ``MemoryTags`` is imported only if LMCache has it, so the module loads on
  0.5.6 (where the method raises ``NotImplementedError``; nothing calls it there).
* ``submit_touch(keys)`` (0.5.7 calls it on lookups, to keep a cached prefix recent) reaches
  kvtier's evictor as a recency update, exactly as a lookup hit does, with no storage call and
  no lock; LMCache's listeners then hear ``accessed`` for the keys kvtier holds.
* 0.5.7 refuses an ``affinity_tag`` key in adapter configurations; nothing here writes one.

Invariants (the Rust side, ``kvtier._native``, documents its own):

* No Python thread and no asyncio loop: kvtier's runtime thread writes the three eventfds.
* Stores read from and loads write into each ``MemoryObj``'s own memory (zero copy); the
  runtime holds a reference to every ``MemoryObj`` until its task has finished.
* Listeners and byte accounting go through the base class (``_notify_keys_stored`` /
  ``_accessed`` / ``_deleted``), fed by kvtier's own usage events: stores of new keys, keys a
  lookup found, lookup hits and touches of held keys, deletions and evictions. They are
  delivered on the caller's thread, at the next call into the adapter (every public method
  drains them first; a result is only handed out after the events of its task have been
  delivered; a touch's own ``accessed`` comes at a later call, as ``submit_touch`` never waits).
"""

from __future__ import annotations

import json
import threading
from typing import TYPE_CHECKING, Any, Optional

from lmcache.lmcache_native import Bitmap
from lmcache.v1.distributed.api import KeyEntry, KeyListPage, ObjectKey
from lmcache.v1.distributed.internal_api import L2StoreResult
from lmcache.v1.distributed.l2_adapters.base import L2AdapterInterface, L2TaskId

from kvtier._native import Core, allocator

try:  # LMCache >= 0.5.7; 0.5.6 has no memory tags (and never asks for them).
    from lmcache.v1.distributed.api import MemoryResidency, MemorySegment, MemoryTags
except ImportError:  # pragma: no cover - depends on the LMCache installed
    MemoryResidency = MemorySegment = MemoryTags = None  # type: ignore[assignment,misc]

if TYPE_CHECKING:
    from lmcache.v1.distributed.api import MemoryLayoutDesc
    from lmcache.v1.memory_management import MemoryObj

__all__ = ["KvtierL2Adapter"]

_GIB = 1024**3

# Where the bytes of each kind of kvtier store live, as LMCache's own adapters answer
# ``get_memory_tags``: its s3 and hfbucket adapters are REMOTE, its mock (memory) adapter and its
# fs adapter (unless configured ``shared``, which kvtier's fs adapter has no notion of) LOCAL.
_RESIDENCY = {"memory": "LOCAL", "fs": "LOCAL", "s3": "REMOTE", "hfbucket": "REMOTE"}


def _py_key(t: tuple) -> ObjectKey:
    chunk_hash, model_name, kv_rank, object_group_id, cache_salt = t
    return ObjectKey(
        chunk_hash=bytes(chunk_hash),
        model_name=model_name,
        kv_rank=kv_rank,
        object_group_id=object_group_id,
        cache_salt=cache_salt,
    )


def _bitmap(bits: bytes) -> Bitmap:
    bm = Bitmap(len(bits))
    for i, b in enumerate(bits):
        if b:
            bm.set(i)
    return bm


class KvtierL2Adapter(L2AdapterInterface):
    """An LMCache L2 adapter running on kvtier. See the module docs."""

    def __init__(
        self,
        adapter_params: dict[str, Any] | None = None,
        l1_memory_desc: Any = None,
    ) -> None:
        if not isinstance(adapter_params, dict):
            raise ValueError(
                "kvtier plugin: adapter_params must be a kvtier adapter object "
                f"(a dict with a 'type'), got {type(adapter_params).__name__}"
            )
        params = dict(adapter_params)
        params.setdefault("object_name_format", "grouped")
        text = json.dumps(params)
        # Strict parse first: a bad field raises ValueError before any thread or network call.
        resolved = json.loads(_check(text))
        self._kvtier_evicts = params.get("eviction") is not None
        capacity = int(float(resolved.get("max_capacity_gb", 0) or 0) * _GIB)
        super().__init__(max_capacity_bytes=0 if self._kvtier_evicts else capacity)
        self._capacity_bytes = capacity
        # Keys the base class accounts for, with their sizes. kvtier's `stored` events also
        # report re-stores (they refresh recency); LMCache counts and announces new keys only.
        self._sizes: dict[ObjectKey, int] = {}
        # Serialises event delivery: events must reach the accounting and the listeners in
        # kvtier's order (a `stored` before the `deleted` of the same key), and two LMCache
        # controller threads call in at once. The one lock of the plugin; held only while
        # handing one drained batch to the base class, never while kvtier works. Re-entrant,
        # as a listener may call back into the adapter.
        self._delivering = threading.RLock()
        self._core = Core(text)
        self._seed_accounting()

    # -- events ---------------------------------------------------------------------------

    def wait_for_events(self, timeout: float) -> bool:
        """Waits up to ``timeout`` seconds for usage events kvtier publishes on its own (the
        deletions of kvtier's evictor, when ``adapter_params`` has an ``eviction`` table), and
        hands them to the accounting and the listeners. LMCache's calls deliver pending events
        anyway; this is for a host (or a test) that wants them without issuing work. Other
        threads' deliveries wait meanwhile (events must reach listeners in kvtier's order), so
        call it when no work is being issued. Returns whether any event arrived."""
        return self._deliver_events(wait_s=timeout)

    def _deliver_events(self, wait_s: Optional[float] = None) -> bool:
        """Hands kvtier's usage events to the base class (accounting and listeners)."""
        with self._delivering:
            events = self._core.drain_events(wait_s)
            for kind, keys, sizes in events:
                pkeys = [_py_key(k) for k in keys]
                if kind == "stored":
                    new = [(k, n) for k, n in zip(pkeys, sizes) if k not in self._sizes]
                    if new:
                        self._sizes.update(new)
                        self._notify_keys_stored([k for k, _ in new], [n for _, n in new])
                elif kind == "deleted":
                    gone = [(k, self._sizes.pop(k)) for k in pkeys if k in self._sizes]
                    if gone:
                        self._notify_keys_deleted([k for k, _ in gone], [n for _, n in gone])
                elif kind == "accessed":
                    self._notify_keys_accessed(pkeys)
            return bool(events)

    def _seed_accounting(self) -> None:
        """Objects kvtier found at start (``recover_on_start`` / ``rebuild_index_on_start``)
        count in the base class's usage and reach the listeners, as if just stored."""
        usage = json.loads(self._core.usage_json() or "null")
        if not usage or not usage.get("adapters") or usage["adapters"][0]["keys"] == 0:
            return
        cursor: Optional[str] = None
        while True:
            entries, cursor = self._core.list_keys(None, 1000, cursor)
            new = [(_py_key(k), n) for k, n in entries]
            new = [(k, n) for k, n in new if k not in self._sizes]
            if new:
                self._sizes.update(new)
                self._notify_keys_stored([k for k, _ in new], [n for _, n in new])
            if cursor is None:
                break

    # -- event fds ------------------------------------------------------------------------

    def get_store_event_fd(self) -> int:
        return self._core.store_fd()

    def get_lookup_and_lock_event_fd(self) -> int:
        return self._core.lookup_fd()

    def get_load_event_fd(self) -> int:
        return self._core.load_fd()

    # -- store ------------------------------------------------------------------------------

    def submit_store_task(self, keys: list[ObjectKey], objects: list[MemoryObj]) -> L2TaskId:
        return self._core.submit_store(keys, objects)

    def pop_completed_store_tasks(self) -> dict[L2TaskId, L2StoreResult]:
        done = self._core.pop_stores()
        self._deliver_events()
        return {task: L2StoreResult(ok, nbytes) for task, ok, nbytes in done}

    # -- lookup and lock ------------------------------------------------------------------

    def submit_lookup_and_lock_task(
        self,
        keys: list[ObjectKey],
        group_layout_descs: dict[int, MemoryLayoutDesc] | None = None,
    ) -> L2TaskId:
        return self._core.submit_lookup(keys)

    def query_lookup_and_lock_result(self, task_id: L2TaskId) -> Bitmap | None:
        bits = self._core.take_lookup(task_id)
        self._deliver_events()
        return None if bits is None else _bitmap(bits)

    def submit_unlock(self, keys: list[ObjectKey]) -> None:
        self._core.unlock(keys)

    def submit_touch(self, keys: list[ObjectKey]) -> None:
        """Marks keys as just used, moving no bytes (LMCache >= 0.5.7 calls it to keep a cached
        prefix's recency). kvtier's evictor takes it as a lookup hit, with no storage call and
        no lock; LMCache's listeners hear ``accessed`` for the keys kvtier holds (others are
        ignored), delivered like every kvtier event at the next call into the adapter. Never
        waits for the runtime."""
        self._deliver_events()
        if keys:
            self._core.touch(keys)

    # -- load -------------------------------------------------------------------------------

    def submit_load_task(self, keys: list[ObjectKey], objects: list[MemoryObj]) -> L2TaskId:
        return self._core.submit_load(keys, objects)

    def query_load_result(self, task_id: L2TaskId) -> Bitmap | None:
        bits = self._core.take_load(task_id)
        self._deliver_events()
        return None if bits is None else _bitmap(bits)

    # -- eviction, listing, status --------------------------------------------------------

    def get_memory_tags(self) -> MemoryTags:
        """Where the bytes live (LMCache >= 0.5.7, for prefetch filtering and L1 affinity):
        ``(STORAGE, LOCAL)`` for ``memory`` and ``fs``, ``(STORAGE, REMOTE)`` for ``s3`` and
        ``hfbucket``; a ``fault_inject`` answers for the adapter it wraps."""
        if MemoryTags is None:
            raise NotImplementedError("memory tags need LMCache >= 0.5.7")
        residency = _RESIDENCY[self._core.storage_kind]
        return MemoryTags(MemorySegment.STORAGE, MemoryResidency[residency])

    def delete(self, keys: list[ObjectKey]) -> None:
        """Removes keys; locked keys and keys with a store in flight are skipped, and
        ``deleted`` fires only for keys actually removed."""
        if keys:
            self._core.delete(keys)
        self._deliver_events()

    def get_usage(self):  # type: ignore[override]
        self._deliver_events()
        return super().get_usage()

    def list_l2_keys(
        self,
        model_name: str | None = None,
        page_size: int = 500,
        cursor: str | None = None,
    ) -> KeyListPage:
        if page_size <= 0:
            raise ValueError(f"page_size must be positive (got {page_size})")
        entries, next_cursor = self._core.list_keys(model_name, page_size, cursor)
        return KeyListPage(
            entries=tuple(
                KeyEntry(key=_py_key(k).to_encoded_object_key(), size_bytes=size)
                for k, size in entries
            ),
            next_page_token=next_cursor,
        )

    def report_status(self) -> dict:
        self._deliver_events()
        usage = super().get_usage()
        status = {
            "is_healthy": False,
            "type": "KvtierL2Adapter",
            "kvtier_adapter": self._core.kind,
            "closed": self._core.closed,
            "eviction": "kvtier" if self._kvtier_evicts else "lmcache",
            "current_size_bytes": usage.total_bytes_used,
            "max_capacity_bytes": self._capacity_bytes,
            # The module's allocator and its decay settings (docs/lmcache.md, "Memory allocator").
            "allocator": allocator(),
        }
        if self._core.closed:
            return status
        report = json.loads(self._core.status_json() or "null")
        if report and report.get("adapters"):
            adapter = report["adapters"][0]
            status["is_healthy"] = bool(adapter.get("is_healthy"))
            status["locked_key_count"] = adapter.get("locked_keys", 0)
            status["details"] = adapter.get("details")
            if adapter.get("fleet") is not None:
                # adapter_params.fleet: the node's standing in the fleet index.
                status["fleet"] = adapter["fleet"]
        return status

    def close(self) -> None:
        """Stops kvtier: later submits fail at once; tasks in flight finish first, so no
        MemoryObj is read or written after this returns; then the eventfds are closed."""
        self._core.close()
        self._deliver_events()


def _check(text: str) -> str:
    # Local import keeps the module namespace to the plugin class.
    from kvtier._native import check_adapter

    return check_adapter(text)
