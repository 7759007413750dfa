"""The prefix cache's side of a window's replay (kvviz/alloc/paged_window.py).

Which released blocks are cached (those held from before with a key, those a registration in
the window gave one), where they go (the FIFO, a release's tail first) and what the key dicts
end as: as `register` at each fill and `take`'s evictions one by one would leave them. A key
stored and evicted inside the window leaves no trace when every key is new; keys of a
request's own tokens in its first life are stored lazily (kvviz/alloc/lazykeys.py). A mixin
over PagedAllocator's state (kvviz/alloc/paged.py), apart from the replay itself to keep each
file one concern.
"""
from __future__ import annotations

from typing import NamedTuple

import numpy as np

from kvviz.alloc.freequeue import blocks_of


class Keyed(NamedTuple):
    """A window's released blocks with prefix caching (WindowKeys._keyed_frees)."""
    ki: np.ndarray  # the cached ones (indices into e_ref), in FIFO order
    pi: np.ndarray  # the plain ones, in order
    pc: np.ndarray  # per release: how many plain
    e_f: np.ndarray  # per released block: its release (index among the FREE_SEQ ops)
    e_pos: np.ndarray  # per released block: its position in its table
    reg: tuple  # registrations: life, position, op, reference


class WindowKeys:
    def _keyed_frees(self, fill, adm, arg, inv, fop, flen, e_ref, pre, row0, by_seq, first
                     ) -> Keyed:
        """With prefix caching: the registrations (FILL ops and admissions' full blocks, in
        order; fill, adm: those ops) and which released blocks (e_ref) are cached at their
        release: those held from before with a key, those taken here and registered; the
        FIFO gets them a release's tail first."""
        pool, bs, T = self._pool, self.block_size, by_seq.size

        def table_refs(u: np.ndarray, pos: np.ndarray) -> np.ndarray:
            """References (kvviz/alloc/freequeue.py) of sequence u's block at pos: a block
            held before the window by its id, else the take that got it."""
            since = pos - pre[u]  # < 0: held before
            out = by_seq[np.clip(first[u] + since, 0, T - 1)] if T else np.zeros(u.size,
                                                                                 np.int64)
            old = np.flatnonzero(since < 0)
            if old.size:
                out[old] = ~self._table[row0[u[old]], pos[old]].astype(np.int64)
            return out

        adm = adm[arg[adm] >= bs]
        na = arg[adm] // bs
        r_op = np.concatenate([fill, np.repeat(adm, na)])
        r_pos = np.concatenate([arg[fill], np.arange(int(na.sum())) - np.repeat(
            np.cumsum(na) - na, na)])
        o = np.lexsort((r_pos, r_op))
        reg_op, reg_pos = r_op[o], r_pos[o]
        reg_u = inv[reg_op]
        reg_ref = table_refs(reg_u, reg_pos)
        e_f = np.repeat(np.arange(fop.size), flen)
        e_pos = np.arange(e_f.size) - np.repeat(np.cumsum(flen) - flen, flen)
        keyed = np.zeros(e_ref.size, np.bool_)
        base = e_ref < 0
        keyed[base] = pool.has_key[~e_ref[base]]
        done = np.zeros(T, np.bool_)
        done[reg_ref[reg_ref >= 0]] = True
        keyed[~base] = done[e_ref[~base]]
        keyed[base] |= np.isin(e_ref[base], reg_ref[reg_ref < 0])
        ki = np.flatnonzero(keyed)
        ki = ki[np.lexsort((-e_pos[ki], e_f[ki]))]
        pi = np.flatnonzero(~keyed)
        pc = flen - np.bincount(e_f[ki], minlength=fop.size)  # plain blocks per release
        return Keyed(ki, pi, pc, e_f, e_pos, (reg_u, reg_pos, reg_op, reg_ref))

    def _replay_keys(self, keys, useq, new, reg, got, evicted_refs, ev, ev_op) -> None:
        """The keys' side of a replay: as `register` at each fill and `take`'s evictions one
        by one would leave the dicts. When every key stored is new (no block holds it, none
        repeats), a key stored and evicted inside the window leaves no trace: the evicted
        blocks that held keys from before forget them, the others are stored at once; those
        naming their request's own tokens in its first life lazily (kvviz/alloc/lazykeys.py)."""
        pool = self._pool
        reg_u, reg_pos, reg_op, reg_ref = reg
        chains = [keys(r) for r in useq.tolist()]
        src = getattr(chains[0], "source", None) if chains else None
        lazy_u = np.zeros(useq.size, np.bool_)
        if src is not None:  # first lives: new here and never seen, or storing lazily now
            lz, ids = pool.lazy, useq.tolist()
            now = np.fromiter((r in lz.requests for r in ids), bool, useq.size)
            seen = np.fromiter((r in lz.ever or src.known(r) for r in ids), bool, useq.size)
            lazy_u = np.where(new, ~seen, now)
            if (new & now).any():  # a request storing lazily comes back: read them all
                pool.materialize()
                lazy_u[:] = False
        lazy = lazy_u[reg_u] & (reg_pos >= (src.own_from(useq)[reg_u] if src else 0))
        gone = np.isin(reg_ref, evicted_refs)  # stored, then evicted inside the window
        eager = np.flatnonzero(~lazy)
        key = [chains[u][p] for u, p in zip(reg_u[eager].tolist(), reg_pos[eager].tolist())]
        stamp0 = pool.stamps(reg_ref.size)
        blocks = blocks_of(reg_ref, got)
        if pool.all_new(key):
            ev_base = evicted_refs[evicted_refs < 0]
            pool.forget_many(~ev_base[~np.isin(ev_base, reg_ref)])
            keep = np.flatnonzero(~gone[eager]).tolist()
            pool.store_new([key[i] for i in keep], blocks[eager[keep]], [
                chains[u][p - 1] if p else None
                for u, p in zip(reg_u[eager[keep]].tolist(), reg_pos[eager[keep]].tolist())],
                (stamp0 + eager[keep]).tolist())
            lz = np.flatnonzero(lazy & ~gone)
            pool.lazy.store(blocks[lz], useq[reg_u[lz]], reg_pos[lz], stamp0 + lz, src)
            pool.has_key[blocks[lz]] = True
            return
        # some key repeats or is held already: every store and eviction, in order
        pool.materialize()
        key = [chains[u][p] for u, p in zip(reg_u.tolist(), reg_pos.tolist())]
        op = np.concatenate([ev_op, reg_op])
        phase = np.repeat([0, 1], [ev.size, reg_op.size])  # an admission evicts, then stores
        sub = np.concatenate([ev, np.arange(reg_op.size)])
        blk = np.concatenate([got[ev], blocks]).tolist()
        for i in np.lexsort((sub, phase, op)).tolist():
            if i < ev.size:
                pool.forget_many(np.asarray([blk[i]]))
            else:
                j = i - ev.size
                p = int(reg_pos[j])
                pool.register(key[j], blk[i], chains[reg_u[j]][p - 1] if p else None)
