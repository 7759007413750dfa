"""PagedAllocator's batch verbs, vectorized: what the engine calls every step.

admit_many places a whole admission wave with one block take and fancy-indexed writes;
release_many returns many sequences' blocks at once; append_batch grows every running
sequence by one token, taking a block only for those whose last block is full. Each falls
back to the per-sequence verbs of `Allocator` when blocks are shared (prefix caching, fork):
copy-on-write and refcounts need the careful path. These verbs are part of PagedAllocator
(kvviz/alloc/paged.py: its state, and `_own`, the one place a block is taken into a
sequence's keeping); they live apart only to keep each file one concern.
"""
from __future__ import annotations

import numpy as np

from kvviz.alloc.base import PrefixKey
from kvviz.alloc.rows import grow_to


class PagedBatchVerbs:
    _forked = False  # a fork shares blocks not full yet (PagedAllocator.fork sets it)

    def admit_many(
        self, seq_ids: np.ndarray, num_tokens: np.ndarray, reserve_tokens: np.ndarray | None = None,
        prefixes: list[PrefixKey | None] | None = None, keep_free_tokens: int = 0,
        out_free: np.ndarray | None = None,
    ) -> int:
        if self.prefix_caching and prefixes and any(p is not None for p in prefixes):
            return super().admit_many(seq_ids, num_tokens, reserve_tokens, prefixes,
                                      keep_free_tokens, out_free)
        seq_ids = np.asarray(seq_ids, np.int64)
        n = np.asarray(num_tokens, np.int64)
        if n.size and n.min() < 1:
            raise ValueError("num_tokens must be >= 1 for every sequence")
        if reserve_tokens is not None and (np.asarray(reserve_tokens) < n).any():
            raise ValueError("reserve_tokens is smaller than num_tokens for some sequence")
        want = n if reserve_tokens is None else np.asarray(reserve_tokens, np.int64)
        bs = self.block_size
        nb = -(-want // bs)
        cum = np.cumsum(nb)
        budget = self._free_blocks() - (-(-keep_free_tokens // bs) if keep_free_tokens else 0)
        k = int(np.searchsorted(cum, budget, side="right"))
        if k == 0:
            return 0
        ids, n, nb = seq_ids[:k], n[:k], nb[:k]
        if self._rows.is_live(ids).any():
            raise ValueError(f"seq_id {int(ids[self._rows.is_live(ids)][0])} is already live")
        total = int(cum[k - 1])
        if out_free is not None:  # no sharing here: each admission takes its blocks from free
            out_free[:k] = (self._free_blocks() - cum[:k]) * bs
        blocks = self._take(total)
        if k <= 8:  # a few sequences: scalar slices beat a dozen vectorized passes
            self._admit_few(ids.tolist(), n.tolist(), nb.tolist(), blocks)
            return k
        rows, grew = self._rows.add_many(ids)
        if grew:
            m = self._rows.capacity
            self._len, self._nb, self._ncached, self._table = (
                grow_to(a, m) for a in (self._len, self._nb, self._ncached, self._table))
        self._ncached[rows] = 0
        self._ensure_width(int(nb.max()))
        starts = cum[:k] - nb
        col = np.arange(total) - np.repeat(starts, nb)
        self._table[np.repeat(rows, nb), col] = blocks
        self._own(blocks, np.repeat(ids, nb))
        self._len[rows] = n
        self._nb[rows] = nb
        self._used += int(n.sum())
        return k

    def _admit_few(self, ids: list[int], lens: list[int], nbs: list[int],
                   blocks: np.ndarray) -> None:
        at = 0
        for sid, n, nb in zip(ids, lens, nbs):
            row = self._new_row(sid)
            blk = blocks[at : at + nb]
            at += nb
            self._ensure_width(nb)
            self._table[row, :nb] = blk
            self._own(blk, sid)
            self._len[row] = n
            self._nb[row] = nb
            self._used += n

    def release_many(self, seq_ids: np.ndarray) -> None:
        if self._sharing or self._pool.keyed:  # cached blocks join the tail request by request
            return super().release_many(seq_ids)
        if len(seq_ids) == 0:
            return
        self._rows.rows(seq_ids)  # raises KeyError before anything changes
        if len(seq_ids) <= 8:
            parts = []
            fills = []
            for sid in np.asarray(seq_ids).tolist():
                row = self._rows.remove(sid)
                nb = int(self._nb[row])
                parts.append(self._table[row, :nb])
                fills.append(self._fills(int(self._len[row]), 0, nb))
                self._nb[row] = 0
                self._len[row] = 0
            if len(parts) == 1:  # vLLM's order: each request's tail first, the last one's first
                self._give_back(parts[0][::-1].copy(), fills[0][::-1].copy())
            else:
                self._give_back(np.concatenate(parts)[::-1], np.concatenate(fills)[::-1])
            return
        rows = self._rows.remove_many(np.asarray(seq_ids, np.int64))
        nb = self._nb[rows]
        width = int(nb.max()) if nb.size else 0
        j = np.arange(width)[None, :]
        mask = j < nb[:, None]
        fills = np.clip(self._len[rows][:, None] - j * self.block_size, 0, self.block_size)
        self._give_back(self._table[rows, :width][mask][::-1], fills[mask][::-1])
        self._nb[rows] = 0
        self._len[rows] = 0

    def append_batch(self, seq_ids: np.ndarray) -> np.ndarray:
        seq_ids = np.asarray(seq_ids, np.int64)
        rows = self._rows.rows(seq_ids)
        lens = self._len[rows]
        if self._sharing and self._writes_shared(rows, lens, 1):
            return super().append_batch(seq_ids)
        ok = None
        q = lens // self.block_size  # index of the block the new token lands in
        need = np.flatnonzero(q >= self._nb[rows])
        if need.size:
            avail = self._free_blocks()
            if need.size > avail:  # later sequences lose: the engine preempts them
                ok = np.ones(seq_ids.size, np.bool_)
                ok[need[avail:]] = False
                need = need[:avail]
            if need.size:
                fresh = self._take(need.size)
                r = rows[need]
                nb = self._nb[r]
                self._ensure_width(int(nb.max()) + 1)
                self._table[r, nb] = fresh
                self._nb[r] = nb + 1
                self._own(fresh, seq_ids[need])
        if ok is not None:
            rows, lens = rows[ok], lens[ok]
        self._len[rows] = lens + 1
        self._used += int(rows.size)
        return np.ones(seq_ids.size, np.bool_) if ok is None else ok

    def _writes_shared(self, rows: np.ndarray, lens: np.ndarray, steps: int) -> bool:
        """Whether `steps` tokens appended to each row (lens: slots written) may write into
        a held block that others share (copy-on-write: the careful path). Only the block
        the next token lands in can be, unless a row holds blocks past it (then: True)."""
        if not self._forked:  # shared blocks are prefix hits, full: no token lands in one
            return False
        bs = self.block_size
        q = lens // bs
        nb = self._nb[rows]
        if steps > 1 and (nb > q + 1).any():
            return True
        held = q < nb
        return bool((self._ref[self._table[rows[held], q[held]]] > 1).any())

    def decode_step(self, seq_ids: np.ndarray, opens: np.ndarray | None) -> None:
        """append_batch(seq_ids) when the caller knows that it succeeds for every one: the
        positions in seq_ids whose token opens a new block (None: all of them), as many free
        blocks as those, every sequence live. Blocks go out in that order."""
        rows = self._rows.row_of_seq[seq_ids]
        if self._sharing and self._writes_shared(rows, self._len[rows], 1):
            self.append_batch(seq_ids)
            return
        if opens is None or opens.size:
            r = rows if opens is None else rows[opens]
            fresh = self._take(int(r.size))
            nb = self._nb[r]
            self._ensure_width(int(nb.max()) + 1)
            self._table[r, nb] = fresh
            self._nb[r] = nb + 1
            self._own(fresh, seq_ids if opens is None else seq_ids[opens])
        self._len[rows] += 1
        self._used += int(rows.size)

    def grow_many(self, seq_ids: np.ndarray, steps: int) -> None:
        """Blocks go out as `steps` append_batch calls would hand them: by step, then by
        position in seq_ids (one take for the whole span)."""
        seq_ids = np.asarray(seq_ids, np.int64)
        rows = self._rows.rows(seq_ids)
        bs = self.block_size
        lens, nb = self._len[rows], self._nb[rows]
        if steps <= 0 or (self._sharing and self._writes_shared(rows, lens, steps)):
            return super().grow_many(seq_ids, steps)
        new = np.maximum(0, -(-(lens + steps) // bs) - nb)  # blocks taken over the span
        total = int(new.sum())
        if total > self._free_blocks():
            raise ValueError("grow_many: not enough free blocks for the span")
        if total:
            who = np.repeat(np.arange(seq_ids.size), new)  # position in seq_ids
            k = np.arange(total) - np.repeat(np.cumsum(new) - new, new)  # k-th new block
            at = (nb[who] + k) * bs - lens[who]  # step (0-based) whose token opens it
            order = np.argsort(at * seq_ids.size + who, kind="stable")
            who, k = who[order], k[order]
            fresh = self._take(total)
            r = rows[who]
            self._ensure_width(int((nb + new).max()))
            self._table[r, nb[who] + k] = fresh
            self._own(fresh, seq_ids[who])
            self._nb[rows] = nb + new
        self._len[rows] = lens + steps
        self._used += int(rows.size) * steps

    # ---- the scheduler's verbs (kvviz/engine/scheduler.py), as vLLM's KVCacheManager -------
    def blocks_to_allocate(self, seq_id: int, num_tokens: int, hits: list[int] = ()) -> int:
        """Free blocks that grow_to(seq_id, num_tokens, hits) takes: the new blocks, plus the
        hits sitting in the free queue (adopting one takes it out). A sequence not live
        starts from nothing."""
        rows = self._rows
        live = 0 <= seq_id < rows.row_of_seq.shape[0] and rows.row_of_seq[seq_id] >= 0
        held = int(self._nb[rows.row_of_seq[seq_id]]) if live else 0
        new = max(0, -(-num_tokens // self.block_size) - held - len(hits))
        return new + sum(map(self._pool.is_cached, hits))

    def grow_to(self, seq_id: int, num_tokens: int, hits: list[int] = ()) -> None:
        """Give the sequence (new if not live, adopting the cached blocks `hits` first)
        ceil(num_tokens / block_size) blocks, new ones from the free queue's front, and
        mark num_tokens slots written. The caller checked blocks_to_allocate <= free."""
        rows = self._rows
        live = 0 <= seq_id < rows.row_of_seq.shape[0] and rows.row_of_seq[seq_id] >= 0
        if live:
            row = int(rows.row_of_seq[seq_id])
        else:
            row = self._new_row(seq_id)
            self._hold_hits(seq_id, hits)
            if hits:
                self._attach(row, seq_id, np.asarray(hits, np.int32))
                self._ncached[row] = len(hits)
                self._len[row] = len(hits) * self.block_size
                self.prefix_hit_tokens += len(hits) * self.block_size
        need = -(-num_tokens // self.block_size) - int(self._nb[row])
        if need > 0:
            fresh = self._take(need)
            self._own(fresh, seq_id)
            self._attach(row, seq_id, fresh)
        length = int(self._len[row])
        if num_tokens > length:
            self._fill(row, length, num_tokens)

    def cache_blocks(self, seq_id: int, keys: list, n: int | None = None) -> None:
        """Register the sequence's leading n blocks (default len(keys)) under keys[:n]
        (vLLM's cache_full_blocks: only blocks not registered yet; each with its parent
        key)."""
        n = len(keys) if n is None else n
        row = self._rows.row(seq_id)
        start = int(self._ncached[row])
        if n <= start:
            return
        self._pool.register_run(keys[start:n], self._table[row, start:n].tolist(),
                                keys[start - 1] if start else None)
        self._ncached[row] = n

    def cache_many(self, seq_ids: np.ndarray, counts: np.ndarray, keys,
                   once: bool = False) -> None:
        """cache_blocks(r, keys(r, n), n) for each (r, n) of seq_ids and counts, in order,
        registered in one pass (a sequence may come again with a larger n; once: none
        does)."""
        rows = self._rows.row_of_seq[seq_ids]
        if once and (self._ncached[rows] == counts - 1).all():  # one new block each
            ns = counts.tolist()
            chains = list(map(keys, seq_ids.tolist(), ns))
            self._pool.register_many([c[n - 1] for c, n in zip(chains, ns)],
                                     self._table[rows, counts - 1].tolist(),
                                     [c[n - 2] if n > 1 else None for c, n in zip(chains, ns)])
            self._ncached[rows] = counts
            return
        starts = self._ncached[rows].tolist()
        last = self._table[rows, np.maximum(counts, 1) - 1].tolist()  # the common case
        table, reached = self._table, {}
        kk, bb, pp = [], [], []
        for i, (sid, row, n) in enumerate(zip(seq_ids.tolist(), rows.tolist(), counts.tolist())):
            start = reached.get(row, starts[i])
            if n <= start:
                continue
            ks = keys(sid, n)
            pp.append(ks[start - 1] if start else None)
            if n == start + 1:
                kk.append(ks[start])
                bb.append(last[i])
            else:
                kk.extend(ks[start:n])
                bb.extend(table[row, start:n].tolist())
                pp.extend(ks[start:n - 1])
            reached[row] = n
        if kk:
            self._pool.register_many(kk, bb, pp)
            self._ncached[list(reached)] = list(reached.values())
