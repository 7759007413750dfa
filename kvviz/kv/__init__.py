"""Real KV memory: torch KV pools, decode attention over them, and the engine's real mode.

torch is imported here and below only; triton only in attention_triton (on demand).
"""
from kvviz.kv.attention import (
    contiguous_decode_attention,
    get_backend,
    paged_decode_attention,
)
from kvviz.kv.cache import ContiguousKVCache, PagedKVCache

__all__ = [
    "ContiguousKVCache", "PagedKVCache", "RealKV", "contiguous_decode_attention", "get_backend",
    "paged_decode_attention",
]


def __getattr__(name: str):
    if name == "RealKV":  # real mode pulls in the allocator interface; load it on first use
        from kvviz.kv.real import RealKV

        return RealKV
    raise AttributeError(f"module 'kvviz.kv' has no attribute {name!r}")
