"""Synthetic token ids of a workload (what the vLLM reference is fed, tests/engine/vllm_ref.py).

A trace names prompt content only by hash chains (kvviz.core.workload.Workload.chains), never by
token ids, so kvviz makes the ids up, the same way everywhere:

  position p of request r, inside its prompt's chain   -> from (chain id of p's chain block, p)
  any other position (own prompt text, every output)   -> from (r, p)

Equal ids therefore mean equal content exactly where the trace says so, and a request's own
text and outputs are its alone. The compiled rule hashes blocks by the same content rule
(kvviz/engine/rule/keys.py).
"""
from __future__ import annotations

import numpy as np

from kvviz.core.workload import Workload

_MUL = np.uint64(0x9E3779B97F4A7C15)
_MIX = np.uint64(0xBF58476D1CE4E5B9)


def token_ids(w: Workload, r: int, n: int) -> list[int]:
    """The first n token ids of request r (prompt, then outputs), each in [0, 2^31): ids
    inside the prompt's chain are even, the request's own are odd (never equal)."""
    ptr, ids, block = w.chains()
    chain = ids[ptr[r]:ptr[r + 1]]
    cover = min(int(chain.size) * block, int(w.prompt[r]))
    pos = np.arange(n, dtype=np.uint64)
    inside = pos < np.uint64(cover)
    src = np.where(inside, chain[np.minimum(pos // np.uint64(block), max(chain.size - 1, 0))]
                   .astype(np.uint64) if chain.size else np.uint64(0), np.uint64(r))
    with np.errstate(over="ignore"):
        x = (src * _MUL + pos) * _MIX
        x ^= x >> np.uint64(29)
        x *= _MUL
    out = ((x >> np.uint64(34)) & np.uint64((1 << 30) - 1)) * np.uint64(2)
    return (out + (~inside).astype(np.uint64)).astype(np.int64).tolist()
