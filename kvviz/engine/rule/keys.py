"""Prefix-cache keys: the hash of a full block chains the previous block's hash with what
fills the block (vLLM's hash_block_tokens, vllm/v1/core/kv_cache_utils.py), so two blocks
hash equal iff their requests have equal tokens from position 0 to the block's end.

A trace names prompt content only by hash chains (kvviz.core.workload): tokens inside a
request's chain are named by the chain ids covering them, every other token (its own prompt
text, every output) by the request itself. Block k of request r hashes, after its parent's
hash: the chain ids its tokens read, then 0 (it lies inside the chain) or r + 1 (its
own tokens), then its end position (kvviz/engine/tokens.py keeps the same content rule).
"""
from __future__ import annotations

import numpy as np
from numba import njit
from numba.core import config

_MUL = np.uint64(0x9E3779B97F4A7C15)
_MIX = np.uint64(0xBF58476D1CE4E5B9)
_S29 = np.uint64(29)
_S32 = np.uint64(32)
MASK = (1 << 63) - 1
ROOT = np.uint64(0x2545F4914F6CDD1D)  # the parent hash of a request's first block


def _mix(h, x):
    """One step of a 64-bit chained hash (splitmix64's finalizer over h ^ x); never 0, the
    empty mark of the hash table."""
    h = (h ^ np.uint64(x)) * _MUL
    h = (h ^ (h >> _S29)) * _MIX
    h = h ^ (h >> _S32)
    return h if h != np.uint64(0) else np.uint64(1)


if config.DISABLE_JIT:  # interpreted: the same source, without numpy's warning where the
    def mix(h, x):      # uint64 products wrap (as they do, silently, compiled)
        with np.errstate(over="ignore"):
            return _mix(h, x)
else:
    mix = njit(cache=True)(_mix)


@njit(cache=True)
def block_hash(cfg, req, r, k, parent):
    """The hash of block k of request r, after its parent's hash (ROOT for k = 0)."""
    bs, cb = cfg.block_size, cfg.chain_block
    s, e = k * bs, (k + 1) * bs
    cover = req.chain_cover[r]
    h = parent
    if s < cover:
        base = req.chain_ptr[r]
        for i in range(s // cb, (min(e, cover) - 1) // cb + 1):
            h = mix(h, req.chain_ids[base + i] & MASK)
    h = mix(h, 0 if e <= cover else r + 1)  # inside the chain, or r's own tokens
    return mix(h, np.uint64(e))
