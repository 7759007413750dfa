"""A paged allocator's window replay: many steps' takes and frees in one call.

kvviz/engine/window.py hands over, in execution order, what a window of engine steps does to
a paged lane without prefix caching: one block for a decode that opens a block, an
admission's blocks, a finished sequence's release. `replay_window` replays them on the free
queue as a Python list (vLLM's order, kvviz/alloc/blockpool.py: takes from the front, a
release pushes its blocks tail first to the front) and writes the final tables, owners and
counters once: block for block what the verbs one by one would leave. A mixin over
PagedAllocator's state (kvviz/alloc/paged.py).
"""
from __future__ import annotations

import numpy as np

from kvviz.blockmap import FREE

TAKE, ADMIT, FREE_SEQ = 0, 1, 2  # op kinds


class PagedWindowVerbs:
    def replay_window(self, kind: np.ndarray, seq: np.ndarray, blocks: np.ndarray,
                      live: np.ndarray, live_len: np.ndarray) -> list[int]:
        """Apply the ops (kind TAKE: one block for seq; ADMIT: a new seq with `blocks`
        blocks; FREE_SEQ: release seq), then set the live sequences `live` to lengths
        `live_len`. Returns the free blocks after each ADMIT, in order. Only while no block
        is shared or keyed (the caller checked that the free blocks suffice)."""
        if self._sharing or self._pool.keyed:
            raise ValueError("replay_window: blocks are shared or cached")
        stack = self._pool.plain_list()
        pop = stack.pop
        rows = self._rows
        tables: dict[int, list[int]] = {}
        freed: list[int] = []
        after: list[int] = []

        def table(r: int) -> list[int]:
            row = rows.row_of_seq[r]
            return self._table[row, :self._nb[row]].tolist()

        for k, r, n in zip(kind.tolist(), seq.tolist(), blocks.tolist()):
            if k == TAKE:
                t = tables.get(r)
                if t is None:
                    t = tables[r] = table(r)
                t.append(pop())
            elif k == ADMIT:
                self._new_row(r)
                t = stack[-n:]
                del stack[-n:]
                t.reverse()
                tables[r] = t
                after.append(len(stack))
            else:
                t = tables.pop(r, None)
                if t is None:
                    t = table(r)
                row = rows.remove(r)
                self._nb[row] = 0
                self._len[row] = 0
                stack.extend(t)
                freed.extend(t)
        self._pool.set_plain(stack)
        if freed:
            f = np.asarray(freed, np.int64)
            self._owner[f] = FREE
            self._ref[f] = 0
        for r, t in tables.items():
            row = int(rows.row_of_seq[r])
            self._ensure_width(len(t))
            self._table[row, :len(t)] = t
            self._nb[row] = len(t)
            self._owner[t] = r
            self._ref[t] = 1
        if live.size:
            self._len[rows.rows(live)] = live_len
        held = rows.seq_of_row >= 0
        self._used = int(self._len[: held.size][held].sum())
        self._held = self.num_blocks - len(stack)
        return after
