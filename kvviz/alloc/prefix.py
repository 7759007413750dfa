"""Prefix-cache keys of a prompt at a lane's own block size.

A prompt's content comes as a hash chain (PrefixChain): ids[i] names the prompt's tokens
[0, (i+1)*block), as far as the prompt goes, so equal ids mean equal tokens up to there. A lane
block of `bs` tokens ending at token e is keyed (id of the chain block holding token e-1, e):

    trace blocks  |   id0   |   id1   |   id2   |        (block = 4)
    lane bs=2     | k | k | k | k | k |              keys (id0,2) (id0,4) (id1,6) ...
    lane bs=6     |     k     |     k     |          keys (id1,6) (id2,12)

Only whole lane blocks inside the prompt and inside the chain get a key; because ids are chained,
a lane block straddling trace blocks matches only when all of them do.
"""
from __future__ import annotations

from typing import NamedTuple

import numpy as np

from kvviz.alloc.base import PrefixKey


class PrefixChain(NamedTuple):
    ids: np.ndarray  # int64 hash ids of consecutive `block`-token blocks of the prompt
    block: int  # tokens per id
    length: int  # prompt tokens the chain describes (later tokens are the sequence's own)


def prefix_keys(prefix: PrefixKey | PrefixChain, block_size: int,
                num_tokens: int) -> list[tuple[int, int]]:
    """Keys of the sequence's leading full lane blocks whose content the prefix names."""
    if isinstance(prefix, PrefixChain):
        ids, block, length = prefix.ids, prefix.block, prefix.length
    else:  # PrefixKey(group, length): the first `length` tokens are the group's
        ids, block, length = (prefix.group,), max(1, prefix.length), prefix.length
    limit = min(length, num_tokens, len(ids) * block)
    if limit < block_size:
        return []
    ends = np.arange(1, limit // block_size + 1, dtype=np.int64) * block_size
    chain = np.asarray(ids, np.int64)[(ends - 1) // block]
    return list(zip(chain.tolist(), ends.tolist()))
