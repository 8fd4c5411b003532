"""kvtier: an L2 tier for LLM KV caches (S3, Hugging Face buckets, a local directory).

The Rust runtime is in ``kvtier._native``. ``kvtier.lmcache.KvtierL2Adapter`` is an LMCache 0.5
L2 adapter plugin built on it; importing ``kvtier`` alone does not need LMCache.
"""

from kvtier._native import Core, __version__, allocator, check_adapter

__all__ = ["Core", "allocator", "check_adapter", "__version__"]
