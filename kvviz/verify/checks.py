"""Per-map checks: plane invariants and every stored metric recomputed (docs/FORMAT.md).

Written from the documented definitions, not from kvviz.core.metrics.
"""
from __future__ import annotations

import numpy as np

from kvviz.verify.decode import Map

FREE = -1
METRICS = ("capacity_tokens", "used_tokens", "slack_tokens", "free_tokens", "cached_tokens",
           "reserved_tokens", "internal_tokens", "hole_count", "largest_hole_tokens",
           "external_frag_index", "tail_waste_tokens", "shared_savings_tokens",
           "live_sequences")


def free_runs(free: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(start, length) in blocks of every maximal run of free blocks, in address order."""
    edge = np.diff(np.concatenate(([0], free.astype(np.int8), [0])))
    starts, ends = np.flatnonzero(edge == 1), np.flatnonzero(edge == -1)
    return starts, ends - starts


def buddy_largest(free: np.ndarray) -> int:
    """Blocks in the largest wholly free aligned power-of-two block. The pool is cut into
    regions, one per set bit of num_blocks, largest first; a block of 2^j lies inside one
    region at an offset from the region's start that is a multiple of 2^j."""
    n, base, best = free.size, 0, 0
    for order in range(max(n.bit_length() - 1, 0), -1, -1):
        if not (n >> order) & 1:
            continue
        region = free[base:base + (1 << order)]
        base += 1 << order
        for j in range(order + 1):  # smallest first: fine for the sizes in tests and CI
            size = 1 << j
            if size > best and region.reshape(-1, size).all(axis=1).any():
                best = size
    return best


def per_owner(owner: np.ndarray, values: np.ndarray, ids: np.ndarray) -> np.ndarray:
    """Sum of `values` over the blocks each id in `ids` owns."""
    owned = owner != FREE
    order = np.argsort(ids)
    pos = np.searchsorted(ids[order], owner[owned])
    pos = np.minimum(pos, max(ids.size - 1, 0))
    out = np.zeros(ids.size, np.int64)
    if ids.size:
        hit = ids[order][pos] == owner[owned]
        np.add.at(out, order[pos[hit]], values[owned][hit])
    return out


def metrics(m: Map) -> dict:
    """Every metric of a samples row, from the map alone."""
    p, bs = m.planes, m.block_size
    owner, filled, alloc, ref, cached = (p[k] for k in ("owner", "filled", "allocated",
                                                         "refcount", "cached"))
    owned = owner != FREE
    free = ~owned
    used = int(filled[owned].sum())
    slack = int(alloc.sum()) - used
    free_tokens = int(free.sum()) * bs
    starts, lens = free_runs(free)
    largest = int(lens.max()) * bs if lens.size else 0
    if m.buddy:
        largest = buddy_largest(free) * bs
    efi = 0.0
    if m.contiguous and free_tokens:
        efi = 1.0 - largest / free_tokens
    reserved = internal = None
    fs, fl, fh = (m.finals[k] for k in ("final_seq", "final_len", "final_held"))
    if fs is not None and fl is not None:
        if not owned.any():
            reserved = internal = 0
        elif fh is not None:
            internal = int(np.maximum(0, fh - fl).sum())
            reserved = slack - internal
        else:  # older files: each sequence's own blocks only
            held = per_owner(owner, alloc, fs)
            wrote = per_owner(owner, filled, fs)
            internal = int(np.maximum(0, held - np.maximum(fl, wrote)).sum())
            reserved = slack - internal
    gap = alloc - filled
    shared = owned & (ref > 1)
    return {
        "capacity_tokens": m.num_blocks * bs, "used_tokens": used, "slack_tokens": slack,
        "free_tokens": free_tokens, "cached_tokens": int(cached.sum()) * bs,
        "reserved_tokens": reserved, "internal_tokens": internal, "hole_count": int(lens.size),
        "largest_hole_tokens": largest, "external_frag_index": efi,
        "tail_waste_tokens": int(gap[(filled > 0) & (gap > 0)].sum()),
        "shared_savings_tokens": int(((ref[shared] - 1) * filled[shared]).sum()),
        "live_sequences": int(np.unique(owner[owned]).size),
    }


def invariants(m: Map) -> list[str]:
    """What in the map breaks the documented plane rules (empty when none)."""
    p, bs, bad = m.planes, m.block_size, []
    owner, filled, alloc, ref, cached = (p[k] for k in ("owner", "filled", "allocated",
                                                         "refcount", "cached"))
    owned, free = owner != FREE, owner == FREE

    def rule(mask: np.ndarray, what: str) -> None:
        if mask.any():
            i = int(np.flatnonzero(mask)[0])
            bad.append(f"{int(mask.sum())} blocks break '{what}' (first: block {i}, owner "
                       f"{owner[i]}, filled {filled[i]}, allocated {alloc[i]}, refcount "
                       f"{ref[i]}, cached {bool(cached[i])})")

    rule(owner < FREE, "owner >= -1")
    rule(owned & ((alloc != bs) | (filled < 0) | (filled > bs)),
         "an owned block: allocated = block size, 0 <= filled <= allocated")
    rule(owned & ((ref < 1) | cached), "an owned block: refcount >= 1, not cached")
    rule(free & ((alloc != 0) | (ref != 0)), "a free block: allocated = refcount = 0")
    rule(free & ~cached & (filled != 0), "a free uncached block: filled = 0")
    rule(free & cached & (filled != bs), "a cached block: filled = block size")
    if m.contiguous:
        rule(cached | (ref > 1), "contiguous: no caching, no sharing")
        bad += _ranges(m)
    else:
        bad += _paged_tails(m)
    bad += _finals(m)
    return bad


def _ranges(m: Map) -> list[str]:
    """Contiguous: each owner holds one range, written from its start (full cells, at most
    one partial cell, then unwritten ones); buddy ranges are aligned powers of two."""
    owner, filled, bs = m.planes["owner"], m.planes["filled"], m.block_size
    out = []
    idx = np.flatnonzero(owner != FREE)
    if not idx.size:
        return out
    change = np.flatnonzero(np.diff(owner[idx]) != 0) + 1
    starts = np.concatenate(([0], change))
    ends = np.concatenate((change, [idx.size]))
    ids = owner[idx[starts]]
    if np.unique(ids).size != ids.size:
        out.append("contiguous: a sequence holds more than one range")
    for s, e in zip(starts.tolist(), ends.tolist()):
        cells = idx[s:e]
        if cells[-1] - cells[0] != e - s - 1:
            out.append(f"contiguous: sequence {owner[cells[0]]} has a gap in its range")
            continue
        f = filled[cells]
        if (np.diff(f) > 0).any() or ((f > 0) & (f < bs)).sum() > 1:
            out.append(f"contiguous: sequence {owner[cells[0]]} is not written from the start "
                       f"of its range (fill {f.tolist()[:8]}...)")
        if m.buddy and not _aligned(int(cells[0]), e - s, m.num_blocks):
            out.append(f"buddy: sequence {owner[cells[0]]} holds cells {cells[0]}..{cells[-1]}, "
                       "not an aligned power-of-two block")
    return out


def _aligned(start: int, size: int, n: int) -> bool:
    if size & (size - 1):
        return False
    base = 0
    for order in range(n.bit_length() - 1, -1, -1):
        if (n >> order) & 1:
            if base <= start < base + (1 << order):
                return (start - base) % size == 0 and start + size <= base + (1 << order)
            base += 1 << order
    return False


def _paged_tails(m: Map) -> list[str]:
    """Paged: a sequence has at most one partly written block among those it owns."""
    owner, filled = m.planes["owner"], m.planes["filled"]
    part = (owner != FREE) & (filled > 0) & (filled < m.block_size)
    ids, counts = np.unique(owner[part], return_counts=True)
    many = ids[counts > 1]
    if many.size:
        return [f"paged: {many.size} sequences own more than one partly written block "
                f"(first: sequence {many[0]})"]
    return []


def _finals(m: Map) -> list[str]:
    fs, fl, fh = (m.finals[k] for k in ("final_seq", "final_len", "final_held"))
    if fs is None:
        return [] if fl is None else ["final_len without final_seq"]
    out = []
    if fl is None or fl.size != fs.size or (fh is not None and fh.size != fs.size):
        return ["final_seq / final_len / final_held differ in length"]
    if np.unique(fs).size != fs.size:
        out.append("final_seq repeats a sequence")
    owners = np.unique(m.planes["owner"][m.planes["owner"] != FREE])
    stray = np.setdiff1d(owners, fs)
    if stray.size:
        out.append(f"{stray.size} owners are not live sequences in final_seq (first "
                   f"{stray[0]})")
    if fh is not None:
        mine = per_owner(m.planes["owner"], m.planes["allocated"], fs)
        shared = (m.planes["refcount"] > 1).any()
        wrong = (fh < mine) if shared else (fh != mine)
        if wrong.any():
            i = int(np.flatnonzero(wrong)[0])
            out.append(f"final_held of sequence {fs[i]} is {fh[i]}, its own blocks hold "
                       f"{mine[i]}")
    return out


def tables(m: Map, lengths: np.ndarray) -> list[str]:
    """Paged block tables against the planes: each table's blocks, in logical order, hold
    min(B, max(0, L - j*B)) slots at logical index j (L: the sequence's length), so a
    partly written block is only ever a sequence's last written one; every block is in as
    many tables as its refcount (free blocks in none), and each owned block's owner is one
    of the sequences whose table holds it."""
    fs, nb, blocks = m.finals["final_seq"], m.tables["table_len"], m.tables["table_blocks"]
    bs, n = m.block_size, m.num_blocks
    if fs is None or nb.size != fs.size or int(nb.sum()) != blocks.size or (nb < 0).any():
        return ["block tables: their lengths do not fit final_seq and table_blocks"]
    if blocks.size and (blocks.min() < 0 or blocks.max() >= n):
        return ["block tables: a block id outside the pool"]
    out = []
    fh = m.finals["final_held"]
    if fh is not None and not np.array_equal(nb.astype(np.int64) * bs, fh):
        out.append("block tables: table lengths x block size differ from final_held")
    hits = np.bincount(blocks, minlength=n)
    bad = hits != m.planes["refcount"]
    if bad.any():
        i = int(np.flatnonzero(bad)[0])
        out.append(f"block tables: {int(bad.sum())} blocks are in a number of tables other "
                   f"than their refcount (first: block {i}, in {hits[i]} tables, refcount "
                   f"{m.planes['refcount'][i]})")
    holder = np.repeat(fs, nb)
    j = np.arange(blocks.size) - np.repeat(np.cumsum(nb) - nb, nb)  # logical index
    owned = np.flatnonzero(m.planes["owner"] != FREE)
    pair = np.int64(1) << np.int64(32)  # (block, sequence) as one int64 key
    held = blocks.astype(np.int64) * pair + holder.astype(np.int64)
    stray = owned[~np.isin(owned * pair + m.planes["owner"][owned], held)]
    if stray.size:
        out.append(f"block tables: {stray.size} owned blocks are not in their owner's table "
                   f"(first: block {stray[0]})")
    want = np.clip(np.repeat(lengths, nb) - j * bs, 0, bs)
    wrong = m.planes["filled"][blocks] != want
    if wrong.any():
        k = int(np.flatnonzero(wrong)[0])
        out.append(f"block tables: sequence {holder[k]}'s logical block {j[k]} (block "
                   f"{blocks[k]}) holds {m.planes['filled'][blocks[k]]} slots, its length "
                   f"gives {want[k]}")
    return out
