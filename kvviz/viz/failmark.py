"""Mark a refused request on a lane's heatmap: its need against the largest hole.

For a contiguous lane the largest hole is outlined (solid) and the request's need is drawn
from the hole's start (dashed): where first-fit would have put it, running past the hole's
end into what is held there. For a paged lane every free block serves, so the free blocks
are outlined against the need. The geometry is that of kvviz.viz.heatmap.blockmap_figure:
`mark_failure` takes the same block range and max_cells, so outlines sit on the same cells.
"""
from __future__ import annotations

from typing import NamedTuple

import numpy as np
import plotly.graph_objects as go

from kvviz.core.blockmap import BlockMap
from kvviz.core.metrics import hole_sizes, hole_starts
from kvviz.viz.heatmap import DEFAULT_MAX_CELLS, blockmap_cells

HOLE_COLOUR = "#d4a017"  # FRAGMENTATION's colour (theme.FAILURE_COLOURS)
NEED_COLOUR = "#c0392b"
MAX_OUTLINES = 200  # runs of free blocks outlined on a paged map (the largest first)


class Failure(NamedTuple):
    reason: str  # CAPACITY | FRAGMENTATION | POLICY
    need_tokens: int
    free_tokens: int
    largest_hole_tokens: int
    seq_id: int
    t: float


class Mark(NamedTuple):
    """Slot ranges [start, stop) to outline, and the sentence that explains them."""
    hole: tuple[int, int] | None  # the largest hole on the map shown
    need: tuple[int, int] | None  # the need laid from the hole's start
    text: str
    free: tuple[tuple[int, int], ...] = ()  # paged: runs of free blocks, as slot ranges


def mark_for(bm: BlockMap, f: Failure) -> Mark:
    """What to outline on `bm` for failure `f`, and one sentence (numbers of the event)."""
    bs = bm.block_size
    head = (f"Request {f.seq_id} refused at {f.t:.2f} s, {f.reason}: needs {f.need_tokens:,} "
            f"slots; {f.free_tokens:,} free in total, largest hole {f.largest_hole_tokens:,}.")
    if not bm.contiguous:
        sizes, starts = hole_sizes(bm), hole_starts(bm) * bs
        keep = np.argsort(-sizes, kind="stable")[:MAX_OUTLINES]
        free = tuple((int(starts[k]), int(starts[k] + sizes[k])) for k in sorted(keep))
        why = {"CAPACITY": " Any free block serves a paged request, but the free blocks "
                           "(outlined) add up to less than the need.",
               "POLICY": " The free blocks (outlined) would have held it; the scheduler held "
                         "it back (watermark or batch limit)."}.get(f.reason, "")
        return Mark(None, None, head + why, free)
    sizes, starts = hole_sizes(bm), hole_starts(bm)
    if sizes.size == 0:
        return Mark(None, None, head + " No hole at all on this map: every slot is held.")
    i = int(np.argmax(sizes))
    start = int(starts[i]) * bs
    hole = (start, start + int(sizes[i]))
    need = (start, start + f.need_tokens)  # drawn clipped to the map
    if f.reason == "POLICY":
        fits = np.flatnonzero(sizes >= f.need_tokens)
        if fits.size:
            s0 = int(starts[fits[0]]) * bs
            return Mark((s0, s0 + int(sizes[fits[0]])), (s0, s0 + f.need_tokens),
                        head + " It would have fit in the outlined hole (dashed: where it "
                        "would have gone); the scheduler held it back.")
    past = "the end of the cache" if need[1] > bm.capacity_tokens else "held slots"
    why = (" Solid: the largest hole; dashed: the need laid from its start, running past the "
           f"hole's end into {past}: the hole was too small.")
    if f.reason == "CAPACITY":
        why = " Solid: the largest hole; dashed: the need. Even all free slots together are " \
              "fewer than the need: a true out-of-memory."
    return Mark(hole, need, head + why)


def _cell_rects(first_slot: int, stop_slot: int, bm: BlockMap, start_block: int, run: int,
                cols: int) -> list[tuple[float, float, float, float]]:
    """(x0, x1, y0, y1) per grid row that slots [first_slot, stop_slot) cover, in the
    heatmap's coordinates (x: slot offset in the row, y: slot address of the row)."""
    bs = bm.block_size
    w = run * bs  # slots per cell
    lo = max(first_slot // bs - start_block, 0) // run
    hi = (max(stop_slot - 1, first_slot) // bs - start_block) // run
    out = []
    for row in range(lo // cols, hi // cols + 1):
        c0 = max(lo, row * cols) - row * cols
        c1 = min(hi, row * cols + cols - 1) - row * cols
        y = (start_block + row * cols * run) * bs
        out.append((c0 * w - w / 2, c1 * w + w / 2, y - cols * w / 2, y + cols * w / 2))
    return out


def _hole_label(hole: int, need: int) -> str:
    if hole < need:
        return f"largest hole {hole:,} &lt; need {need:,}"
    return f"hole {hole:,} ≥ need {need:,}: it would fit here"


def mark_failure(fig: go.Figure, bm: BlockMap, f: Failure, start: int = 0,
                 stop: int | None = None, *, max_cells: int = DEFAULT_MAX_CELLS) -> Mark:
    """Outline the failure's hole and need on a blockmap_figure of the same range."""
    c = blockmap_cells(bm, start, stop, max_cells=max_cells)
    m = mark_for(bm, f)
    lo_slot, hi_slot = c.start * bm.block_size, c.stop * bm.block_size

    def outline(rng, colour, dash, name):
        s0, s1 = max(rng[0], lo_slot), min(rng[1], hi_slot)
        if s1 <= s0:
            return None
        rects = _cell_rects(s0, s1, bm, c.start, c.run, c.cols)
        for x0, x1, y0, y1 in rects:
            fig.add_shape(type="rect", x0=x0, x1=x1, y0=y0, y1=y1, name=name,
                          line=dict(color=colour, width=3, dash=dash))
        return rects[0]

    if m.hole is not None:
        first = outline(m.hole, HOLE_COLOUR, "solid", "largest hole")
        if first is not None:  # the numbers beside the hole, above its first row
            fig.add_annotation(x=first[0], y=first[2], xanchor="left", yanchor="bottom",
                               showarrow=False, bgcolor="rgba(255,255,255,0.85)",
                               font=dict(size=11, color=NEED_COLOUR),
                               text=_hole_label(m.hole[1] - m.hole[0], f.need_tokens))
    if m.need is not None:
        outline(m.need, NEED_COLOUR, "dash", "need")
    for rng in m.free:
        outline(rng, HOLE_COLOUR, "solid", "free blocks")
    return m
