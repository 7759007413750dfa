"""A paged allocator's window replay: many steps' takes, fills and frees in one call.

kvviz/engine/window.py hands over, in execution order, what a window of engine steps does to
a paged lane: one block for a decode that opens a block, a decode that fills a block (its key
cached), an admission (its blocks, its prompt's full blocks cached), a finished sequence's
release. `replay_window` replays them on the free queue with a Python list for the plain
blocks (vLLM's order, kvviz/alloc/blockpool.py: takes from the front, evicting the least
recently used cached block when no plain one is left; a release puts its blocks tail first,
cached ones to the LRU tail, the rest to the front) and writes the final tables, owners and
counters once: block for block what the verbs one by one would leave. A mixin over
PagedAllocator's state (kvviz/alloc/paged.py).
"""
from __future__ import annotations

from collections.abc import Callable

import numpy as np

from kvviz.core.blockmap import FREE

TAKE, FILL, ADMIT, FREE_SEQ = 0, 1, 2, 3  # op kinds, in a step's order


class PagedWindowVerbs:
    @property
    def replayable(self) -> bool:
        """Whether replay_window serves: no block shared, no KV-event log to keep."""
        return not self._sharing and self._pool.log is None

    def replay_window(self, kind: np.ndarray, seq: np.ndarray, arg: np.ndarray,
                      live: np.ndarray, live_len: np.ndarray,
                      keys: Callable[[int], list] | None = None,
                      ) -> tuple[list[int], list[int]]:
        """Apply the ops: TAKE (one block for seq), FILL (seq's block `arg` is full: cache it
        under its key), ADMIT (a new seq of `arg` tokens: its blocks, its full blocks
        cached), FREE_SEQ (release seq, `arg` tokens written); then set the live sequences
        `live` to lengths `live_len`. keys(seq): the keys of its blocks, as many as it will
        fill (None: no prefix caching). Returns the free blocks after each ADMIT, and per
        evicted block the index of the op that evicted it. The caller checked that free
        blocks suffice and that no admission hits the cache."""
        if not self.replayable:
            raise ValueError("replay_window: blocks are shared or the cache log is on")
        pool, bs = self._pool, self.block_size
        stack = pool.plain_list()
        take, register, rows = pool.replay_take, pool.register, self._rows
        tables: dict[int, list[int]] = {}
        freed: list[int] = []
        after: list[int] = []
        evicted: list[int] = []
        kc: dict[int, list] = {}  # keys per sequence

        def table(r: int) -> list[int]:
            t = tables.get(r)
            if t is None:
                row = rows.row_of_seq[r]
                t = tables[r] = self._table[row, :self._nb[row]].tolist()
            return t

        for i, (k, r, n) in enumerate(zip(kind.tolist(), seq.tolist(), arg.tolist())):
            if k == TAKE:
                b, ev = take(stack)
                table(r).append(b)
                if ev:
                    evicted.append(i)
            elif k == FILL:
                ks = kc.get(r)
                if ks is None:
                    ks = kc[r] = keys(r)
                register(ks[n], table(r)[n], ks[n - 1] if n else None)
            elif k == ADMIT:
                self._new_row(r)
                nb = -(-n // bs)
                if len(stack) >= nb:
                    t = stack[len(stack) - nb:]
                    del stack[len(stack) - nb:]
                    t.reverse()
                else:
                    t = []
                    for _ in range(nb):
                        b, ev = take(stack)
                        t.append(b)
                        if ev:
                            evicted.append(i)
                tables[r] = t
                after.append(len(stack) + pool.cached_count)
                if keys is not None and n >= bs:
                    ks = kc[r] = keys(r)
                    for j in range(n // bs):
                        register(ks[j], t[j], ks[j - 1] if j else None)
            else:
                t = table(r)
                del tables[r]
                row = rows.remove(r)
                self._nb[row] = 0
                self._len[row] = 0
                if keys is None:
                    stack.extend(t)  # tail first to the front: the head ends on top
                else:
                    fills = [min(bs, max(0, n - j * bs)) for j in range(len(t) - 1, -1, -1)]
                    pool.replay_put(stack, t[::-1], fills)
                freed.extend(t)
        pool.set_plain(stack)
        if freed:
            f = np.asarray(freed, np.int64)
            self._owner[f] = FREE
            self._ref[f] = 0
        for r, t in tables.items():
            row = int(rows.row_of_seq[r])
            self._ensure_width(len(t))
            self._table[row, :len(t)] = t
            self._nb[row] = len(t)
            self._own(t, r)
        if live.size:
            lr = rows.rows(live)
            self._len[lr] = live_len
            if keys is not None:
                self._ncached[lr] = live_len // bs
        held = rows.seq_of_row >= 0
        self._used = int(self._len[: held.size][held].sum())
        self._held = self.num_blocks - pool.free_count
        return after, evicted
