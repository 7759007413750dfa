"""Paged allocator: fixed blocks, a free list, a block table per sequence.

Block order is vLLM's (kvviz/alloc/blockpool.py): a sequence's blocks are freed tail first.
Optional prefix caching (full blocks keyed by their content chain, kvviz/engine/tokens.py or
kvviz/alloc/prefix.py; refcounts, freed cached blocks kept and evicted LRU on demand) and fork
with copy-on-write.

Fill levels of blocks held by live sequences are not stored: they follow from each sequence's
length (a block j of a sequence of length L holds clip(L - j*block_size, 0, block_size)), so the
decode step only bumps lengths. The BlockPool keeps the content of cached-free blocks.

Invariants (checked by tests/alloc):
  free blocks = stack[:nfree] + cached LRU; every other block has refcount >= 1 and an owner;
  a sequence holds ceil(len / block_size) blocks or more (reservation), never fewer;
  only the last written block of a sequence is partly filled.

The engine's own paged pool is compiled (kvviz/engine/rule/pool.py, the same order); this one
serves Learn's demos and real mode's unit tests. Shared blocks (hits held, forks,
copy-on-write) are kvviz/alloc/paged_share.py's; the views (block tables, snapshots)
kvviz/alloc/paged_view.py's.
"""
from __future__ import annotations

import numpy as np

from kvviz.alloc.base import Admission, Allocator, PrefixKey, Reason, Usage
from kvviz.alloc.blockpool import BlockPool
from kvviz.alloc.paged_share import PagedShareVerbs
from kvviz.alloc.paged_view import PagedViewVerbs
from kvviz.alloc.prefix import PrefixChain, prefix_keys
from kvviz.alloc.rows import RowTable, grow_to
from kvviz.core.blockmap import FREE


class PagedAllocator(PagedShareVerbs, PagedViewVerbs, Allocator):
    contiguous = False

    def __init__(
        self, num_blocks: int, block_size: int, *, prefix_caching: bool = False,
        bytes_per_token: int = 0, label: str | None = None,
    ) -> None:
        if block_size < 1:
            raise ValueError(f"block_size must be >= 1, got {block_size}")
        if num_blocks < 1:
            raise ValueError(f"num_blocks must be >= 1, got {num_blocks}")
        self.block_size = block_size
        self.num_blocks = num_blocks
        self.prefix_caching = prefix_caching
        self.bytes_per_token = bytes_per_token
        self.label = label or f"paged:{block_size}" + (":prefix" if prefix_caching else "")
        self._owner = np.full(num_blocks, FREE, np.int32)
        self._ref = np.zeros(num_blocks, np.int16)
        self._pool = BlockPool(num_blocks)  # free blocks + prefix cache
        self._holders: dict[int, set[int]] = {}  # shared blocks only: block -> live seqs
        self._rows = RowTable()
        self._len = np.zeros(self._rows.capacity, np.int64)  # per row: tokens written
        self._nb = np.zeros(self._rows.capacity, np.int64)  # per row: blocks held
        self._table = np.zeros((self._rows.capacity, 8), np.int32)
        self._used = 0
        self._held = 0  # blocks with refcount >= 1
        self._sharing = False  # any fork or prefix hit so far: take the slow, careful path
        self.prefix_hit_tokens = 0  # prompt tokens served from the prefix cache, all admits

    # ---- queries ---------------------------------------------------------------------------
    def _free_blocks(self) -> int:
        return self._pool.free_count

    @property
    def block_pool(self) -> BlockPool:
        """The free queue and prefix cache, for readers of its event log (start_log,
        drain_log, cached_keys); allocating goes through the allocator's verbs only."""
        return self._pool

    @property
    def free_blocks(self) -> int:
        """Blocks in the free queue (plain and cached)."""
        return self._pool.free_count

    def _answer(self, ok: bool, need_tokens: int, reason: Reason | None = None) -> Admission:
        """need_tokens is reported rounded up to whole blocks (what must be placed)."""
        bs = self.block_size
        free = self._free_blocks() * bs
        return Admission(ok, reason, -(-need_tokens // bs) * bs, free, free)

    def usage(self) -> Usage:
        bs = self.block_size
        return Usage(self.num_blocks * bs, self._used, self._held * bs,
                     self._pool.cached_count * bs, self._pool.evictions)

    def seq_allocated_tokens(self, seq_ids: np.ndarray) -> np.ndarray:
        return self._nb[self._rows.rows(seq_ids)] * self.block_size

    def seq_len(self, seq_id: int) -> int:
        return int(self._len[self._rows.row(seq_id)])

    def check(self, num_tokens: int, reserve_tokens: int | None = None) -> Admission:
        need = self._need(num_tokens, reserve_tokens)
        nblocks = -(-need // self.block_size)
        if nblocks > self._free_blocks():
            return self._answer(False, need, Reason.CAPACITY)
        return self._answer(True, need)

    def footprint_tokens(self, num_tokens: int, reserve_tokens: int | None = None) -> int:
        need = max(num_tokens, reserve_tokens or 0)
        return -(-need // self.block_size) * self.block_size

    def footprints(self, tokens: np.ndarray) -> np.ndarray:
        return -(-np.asarray(tokens, np.int64) // self.block_size) * self.block_size

    @staticmethod
    def _need(num_tokens: int, reserve_tokens: int | None) -> int:
        if num_tokens < 1:
            raise ValueError(f"num_tokens must be >= 1, got {num_tokens}")
        if reserve_tokens is not None and reserve_tokens < num_tokens:
            raise ValueError(
                f"reserve_tokens {reserve_tokens} is smaller than num_tokens {num_tokens}")
        return num_tokens if reserve_tokens is None else reserve_tokens

    # ---- block supply ----------------------------------------------------------------------
    def _take(self, n: int) -> np.ndarray:
        return self._pool.take(n)

    def _fills(self, length: int, first: int, count: int) -> np.ndarray:
        """Fill levels of a sequence's blocks first..first+count-1, from its length."""
        bs = self.block_size
        out = np.zeros(count, np.int32)
        written = length - first * bs  # slots written from block `first` on
        full = min(count, max(0, written // bs))
        out[:full] = bs
        if full < count and written > full * bs:
            out[full] = written - full * bs
        return out

    def _give_back(self, blocks: np.ndarray, fills: np.ndarray) -> None:
        """Blocks whose refcount reached 0 (with their fill levels) go back to the pool."""
        self._owner[blocks] = FREE
        self._ref[blocks] = 0
        self._held -= int(blocks.size)
        self._used -= int(fills.sum())
        self._pool.put(blocks, fills)

    def _own(self, blocks, owners) -> None:
        """`blocks` (an index or an array) become held, refcount 1, by `owners` (one sequence
        id, or one per block): the one place a block is taken into a sequence's keeping."""
        self._owner[blocks] = owners
        self._ref[blocks] = 1
        self._held += blocks.size if isinstance(blocks, np.ndarray) else np.size(blocks)

    def _ensure_width(self, width: int) -> None:
        if width > self._table.shape[1]:
            new = max(width, 2 * self._table.shape[1])
            table = np.zeros((self._table.shape[0], new), np.int32)
            table[:, : self._table.shape[1]] = self._table
            self._table = table

    def _new_row(self, seq_id: int) -> int:
        row, grew = self._rows.add(seq_id)
        if grew:
            n = self._rows.capacity
            self._len = grow_to(self._len, n)
            self._nb = grow_to(self._nb, n)
            self._table = grow_to(self._table, n)
        self._len[row] = 0
        self._nb[row] = 0
        return row

    def _attach(self, row: int, seq_id: int, blocks: np.ndarray) -> None:
        nb = int(self._nb[row])
        self._ensure_width(nb + blocks.size)
        self._table[row, nb : nb + blocks.size] = blocks
        self._nb[row] = nb + blocks.size

    def _fill(self, row: int, start: int, end: int) -> None:
        """Mark positions [start, end) of the row's sequence as written."""
        self._len[row] = end
        self._used += end - start

    # ---- verbs -----------------------------------------------------------------------------
    def admit(
        self, seq_id: int, num_tokens: int, reserve_tokens: int | None = None,
        prefix: PrefixKey | PrefixChain | None = None,
    ) -> Admission:
        need = self._need(num_tokens, reserve_tokens)
        if self._rows.is_live(np.asarray([seq_id]))[0]:
            raise ValueError(f"seq_id {seq_id} is already live")
        bs = self.block_size
        nblocks = -(-need // bs)
        hits: list[int] = []
        keys = []
        if self.prefix_caching and prefix is not None:
            keys = prefix_keys(prefix, bs, num_tokens)
            hits = self._pool.lookup_run(keys)
        # cached-free hits come out of the free pool too
        free_after_hits = self._free_blocks() - sum(map(self._pool.is_cached, hits))
        if nblocks - len(hits) > free_after_hits:
            return self._answer(False, need, Reason.CAPACITY)
        row = self._new_row(seq_id)
        self._hold_hits(seq_id, hits)
        hit_arr = np.asarray(hits, np.int32)
        fresh = self._take(nblocks - len(hits))
        self._own(fresh, seq_id)
        self._attach(row, seq_id, np.concatenate([hit_arr, fresh]))
        written = len(hits) * bs
        self._len[row] = written
        if num_tokens > written:
            self._fill(row, written, num_tokens)
        for i in range(len(hits), len(keys)):
            parent = keys[i - 1] if i else None
            self._pool.register(keys[i], int(self._table[row, i]), parent)
        self.prefix_hit_tokens += len(hits) * bs
        return self._answer(True, need)

    def append(self, seq_id: int, num_tokens: int = 1) -> Admission:
        if num_tokens < 1:
            raise ValueError(f"num_tokens must be >= 1, got {num_tokens}")
        row = self._rows.row(seq_id)
        length = int(self._len[row])
        end = length + num_tokens
        bs = self.block_size
        need_blocks = max(0, -(-end // bs) - int(self._nb[row]))
        cow: list[int] = []  # held blocks this append writes into that others share
        if self._sharing:
            held = int(self._nb[row])
            cow = [i for i in range(length // bs, min(held, -(-end // bs)))
                   if self._ref[self._table[row, i]] > 1]
        if need_blocks + len(cow) > self._free_blocks():
            return self._answer(False, num_tokens, Reason.CAPACITY)
        for i in cow:
            self._copy_on_write(row, seq_id, i)
        if need_blocks:
            fresh = self._take(need_blocks)
            self._own(fresh, seq_id)
            self._attach(row, seq_id, fresh)
        self._fill(row, length, end)
        return self._answer(True, num_tokens)

    def release(self, seq_id: int) -> None:
        row = self._rows.row(seq_id)
        blocks = self._table[row, : self._nb[row]][::-1].copy()  # vLLM frees tail first
        length = int(self._len[row])
        self._rows.remove(seq_id)
        self._nb[row] = 0
        self._len[row] = 0
        if not self._sharing and not self._pool.keyed:  # no content to keep: plain blocks
            self._owner[blocks] = FREE
            self._ref[blocks] = 0
            self._held -= blocks.size
            self._used -= length
            self._pool.put(blocks, None)  # no block holds a key: no fill level is read
            return
        fills = self._fills(length, 0, blocks.size)[::-1].copy()
        if self._sharing:
            self._drop_ref(blocks, seq_id, fills)
        else:
            self._give_back(blocks, fills)
