"""Fragmentation of a torch CUDA caching-allocator snapshot, and a cell map for a heatmap.

The caching allocator cudaMallocs segments and splits each into blocks. An inactive block is
free memory inside a segment: a hole. A request is served from one block, so the largest
hole bounds the largest allocation that fits without a new cudaMalloc; the gap between that
and the free total is external fragmentation. Allocated blocks are rounded up (512 B, and
more for large sizes): size - requested_size is rounding waste, the allocator's tail waste.
"""
from __future__ import annotations

from dataclasses import asdict, dataclass

import numpy as np

from kvviz.core.blockmap import FREE, BlockMap
from kvviz.torchsnap.safe_pickle import (
    ALLOCATED,
    INACTIVE,
    MIN_BLOCK,
    PENDING_FREE,
    SnapSegment,
    Snapshot,
)

CELL_UNMAPPED, CELL_ACTIVE, CELL_WASTE, CELL_HOLE = 0, 1, 2, 3  # SnapshotCells.state codes


@dataclass(frozen=True)
class SegmentSummary:
    index: int
    device: int | None
    address: int
    segment_type: str
    total: int  # bytes reserved from CUDA
    allocated: int  # active_allocated bytes (includes rounding waste)
    pending_free: int  # freed by the program, waiting for a stream
    requested: int  # what the program asked for (allocated - rounding waste)
    rounding_waste: int
    free: int  # inactive bytes: holes inside the segment
    holes: int
    largest_hole: int
    uncovered: int  # bytes no block describes (normally 0)

    @property
    def external_fragmentation(self) -> float:
        return 1.0 - self.largest_hole / self.free if self.free else 0.0


@dataclass(frozen=True)
class SnapshotSummary:
    segments: tuple[SegmentSummary, ...]
    reserved: int
    allocated: int
    pending_free: int
    requested: int
    rounding_waste: int
    free: int
    holes: int
    largest_hole: int
    uncovered: int
    requested_known: bool  # every allocated block carried requested_size
    trace_entries: int
    pools: dict[str, dict]  # segment_type -> {reserved, free, largest_hole, ...}

    @property
    def external_fragmentation(self) -> float:
        """1 - largest hole / free: 0 when all free memory is one hole, near 1 when shattered."""
        return 1.0 - self.largest_hole / self.free if self.free else 0.0

    def to_dict(self) -> dict:
        d = asdict(self)
        d["external_fragmentation"] = self.external_fragmentation
        for seg_d, seg in zip(d["segments"], self.segments):
            seg_d["external_fragmentation"] = seg.external_fragmentation
        return d


def summarize_segment(i: int, seg: SnapSegment) -> SegmentSummary:
    holes = [b.size for b in seg.blocks if b.state == INACTIVE]
    allocated = sum(b.size for b in seg.blocks if b.state == ALLOCATED)
    waste = sum(b.waste for b in seg.blocks)
    return SegmentSummary(
        index=i, device=seg.device, address=seg.address, segment_type=seg.segment_type,
        total=seg.total_size, allocated=allocated,
        pending_free=sum(b.size for b in seg.blocks if b.state in PENDING_FREE),
        requested=allocated - waste, rounding_waste=waste, free=sum(holes), holes=len(holes),
        largest_hole=max(holes, default=0),
        uncovered=seg.total_size - sum(b.size for b in seg.blocks),
    )


def _pool(segs: list[SegmentSummary]) -> dict:
    free, largest = sum(s.free for s in segs), max((s.largest_hole for s in segs), default=0)
    return {"segments": len(segs), "reserved": sum(s.total for s in segs), "free": free,
            "largest_hole": largest,
            "external_fragmentation": 1.0 - largest / free if free else 0.0}


def summarize(snap: Snapshot) -> SnapshotSummary:
    segs = tuple(summarize_segment(i, s) for i, s in enumerate(snap.segments))
    types = sorted({s.segment_type for s in segs})
    return SnapshotSummary(
        segments=segs, reserved=sum(s.total for s in segs),
        allocated=sum(s.allocated for s in segs), pending_free=sum(s.pending_free for s in segs),
        requested=sum(s.requested for s in segs),
        rounding_waste=sum(s.rounding_waste for s in segs),
        free=sum(s.free for s in segs), holes=sum(s.holes for s in segs),
        largest_hole=max((s.largest_hole for s in segs), default=0),
        uncovered=sum(s.uncovered for s in segs),
        requested_known=all(b.requested_size is not None for s in snap.segments
                            for b in s.blocks if b.state == ALLOCATED),
        trace_entries=snap.trace_entries,
        pools={t: _pool([s for s in segs if s.segment_type == t]) for t in types},
    )


def _category_bytes(seg: SnapSegment, base: int, edges: np.ndarray) -> dict[int, np.ndarray]:
    """Bytes of each cell category between consecutive `edges` (virtual byte positions)."""
    starts, lens, cats = [], [], []
    for b in seg.blocks:
        s = base + b.offset
        if b.state == INACTIVE:
            starts.append(s), lens.append(b.size), cats.append(CELL_HOLE)
        else:
            used = b.size - b.waste
            starts += [s, s + used]
            lens += [used, b.waste]
            cats += [CELL_ACTIVE, CELL_WASTE]
    st, ln, ct = (np.asarray(a, np.float64) for a in (starts, lens, cats))
    out = {}
    for c in (CELL_ACTIVE, CELL_WASTE, CELL_HOLE):
        # F_c(x) = bytes of category c below x: piecewise linear, exact in float64 < 2**53
        xs = np.stack([st, st + ln], axis=1).ravel()
        grow = np.where(ct == c, ln, 0.0)
        fs = np.stack([np.cumsum(grow) - grow, np.cumsum(grow)], axis=1).ravel()
        f = np.interp(edges, xs, fs) if xs.size else np.zeros_like(edges)
        out[c] = np.rint(np.diff(f)).astype(np.int64)
    return out


@dataclass(frozen=True, eq=False)
class SnapshotCells:
    """Segments laid end to end in address order, each from a fresh cell, cut into cells of
    `cell_bytes`. Addresses are not to scale between segments (they can be GBs apart)."""

    state: np.ndarray  # int8 [n]: CELL_ACTIVE / CELL_WASTE / CELL_HOLE / CELL_UNMAPPED, by bytes
    active_bytes: np.ndarray  # int64 [n]
    waste_bytes: np.ndarray  # int64 [n]
    hole_bytes: np.ndarray  # int64 [n]
    segment: np.ndarray  # int32 [n]: index into Snapshot.segments
    segment_start: np.ndarray  # int64 [num_segments]: first cell of each segment
    cell_bytes: int

    def grid(self) -> np.ndarray:
        """int8 [num_segments, widest segment in cells]: one row per segment, padded unmapped."""
        counts = np.diff(np.append(self.segment_start, self.state.size))
        out = np.full((counts.size, int(counts.max(initial=0))), CELL_UNMAPPED, np.int8)
        for i, (s, c) in enumerate(zip(self.segment_start, counts)):
            out[i, :c] = self.state[s:s + c]
        return out


def snapshot_cells(snap: Snapshot, cell_bytes: int | None = None, *,
                   max_cells: int = 1 << 16) -> SnapshotCells:
    """Cell map for a heatmap; cell_bytes=None picks the smallest power of two >= 512 B that
    keeps the map within max_cells."""
    sizes = np.array([s.total_size for s in snap.segments], np.int64)
    cell = cell_bytes or MIN_BLOCK
    while cell_bytes is None and int(-(-sizes // cell).sum()) > max_cells:
        cell *= 2
    counts = -(-sizes // cell)
    if cell < 1 or int(counts.sum()) > max(max_cells, 1 << 24):
        raise ValueError(f"cell size {cell} B gives {int(counts.sum())} cells; choose a larger one")
    starts = np.concatenate([[0], np.cumsum(counts)[:-1]]).astype(np.int64)
    parts = {c: [] for c in (CELL_ACTIVE, CELL_WASTE, CELL_HOLE)}
    for seg, s0, n in zip(snap.segments, starts, counts):
        edges = (s0 + np.arange(n + 1, dtype=np.float64)) * cell
        for c, arr in _category_bytes(seg, float(s0 * cell), edges).items():
            parts[c].append(arr)
    act, waste, hole = (np.concatenate(parts[c]) if parts[c] else np.zeros(0, np.int64)
                        for c in (CELL_ACTIVE, CELL_WASTE, CELL_HOLE))
    unmapped = cell - act - waste - hole
    codes = np.array([CELL_ACTIVE, CELL_WASTE, CELL_HOLE, CELL_UNMAPPED], np.int8)
    state = codes[np.argmax(np.stack([act, waste, hole, unmapped]), axis=0)] if act.size else \
        np.zeros(0, np.int8)
    segment = np.repeat(np.arange(len(snap.segments), dtype=np.int32), counts)
    return SnapshotCells(state, act, waste, hole, segment, starts, cell)


def segment_blockmap(seg: SnapSegment, cell_bytes: int = MIN_BLOCK, *,
                     label: str = "") -> BlockMap:
    """One segment as a BlockMap (slot = byte, block = cell), so kvviz.core.metrics applies.

    owner is the block's ordinal in the segment (FREE for holes); allocated - filled is the
    rounding waste. Exact at the default 512 B cells, where no cell straddles two blocks.
    """
    if cell_bytes < 1 or seg.total_size % cell_bytes:
        raise ValueError(f"cell size {cell_bytes} B does not divide the segment's "
                         f"{seg.total_size} B (torch segments are multiples of 512 B)")
    n = seg.total_size // cell_bytes
    cat = _category_bytes(seg, 0.0, np.arange(n + 1, dtype=np.float64) * cell_bytes)
    allocated = cat[CELL_ACTIVE] + cat[CELL_WASTE]
    ends = np.array([b.offset + b.size for b in seg.blocks], np.int64)
    active = np.array([b.state != INACTIVE for b in seg.blocks] + [False])
    j = np.searchsorted(ends, np.arange(n, dtype=np.int64) * cell_bytes, side="right")
    j = np.where(active[np.minimum(j, len(seg.blocks))], j, j + 1)
    owner = np.where(allocated > 0, j, FREE).astype(np.int32)
    return BlockMap(
        owner=owner, filled=cat[CELL_ACTIVE].astype(np.int32), allocated=allocated.astype(np.int32),
        refcount=(owner != FREE).astype(np.int16), cached=np.zeros(n, np.bool_),
        block_size=cell_bytes, bytes_per_token=1, contiguous=True,
        label=label or f"torch:{seg.segment_type}@{seg.address:#x}",
    )
