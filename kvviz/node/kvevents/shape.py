"""The shape of a Forest's cached blocks, derived on demand (kvviz.node.kvevents.model keeps
`parent`, `nkids` and `lifetimes` up to date; these read them)."""
from __future__ import annotations

from typing import Any


class ForestShape:
    parent: dict[Any, Any]
    nkids: dict[Any, int]
    lifetimes: list[float]

    def depths(self) -> dict[Any, int]:
        """Depth of every cached block (1 = a root or an orphan whose parent is not cached)."""
        out: dict[Any, int] = {}
        n = len(self.parent)
        for h in self.parent:
            chain = []
            x = h
            while x not in out:
                chain.append(x)
                p = self.parent.get(x)
                if p is None or p not in self.parent or len(chain) > n:  # a root, or a cycle
                    out[x] = 1
                    chain.pop()
                    break
                x = p
            d = out[x]
            for y in reversed(chain):
                d += 1
                out[y] = d
        return out

    def median_lifetime(self) -> float | None:
        """Median seconds from store to eviction of the recent evictions (None: none yet)."""
        if not self.lifetimes:
            return None
        return sorted(self.lifetimes)[len(self.lifetimes) // 2]

    def divergence_depths(self) -> list[int]:
        """Depths (in blocks) at which cached prompts diverge: each cached block with >= 2
        cached children contributes its depth."""
        d = self.depths()
        return [d[p] for p, k in self.nkids.items() if p in d and k >= 2]

    def subtree_blocks(self) -> dict[Any, int]:
        """Cached blocks in each cached block's subtree (itself included): how much cached
        content depends on that prefix (its reuse)."""
        d = self.depths()
        size = dict.fromkeys(self.parent, 1)
        for h in sorted(self.parent, key=d.__getitem__, reverse=True):
            p = self.parent[h]
            if p in size and p != h:
                size[p] += size[h]
        return size
