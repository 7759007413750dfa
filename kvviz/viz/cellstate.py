"""Block states for the heatmap: a pure numpy function of a BlockMap (no plotly, no streamlit).

Each block is in exactly one state; the order below is also the precedence:
  owned and refcount > 1              -> SHARED   (a prefix held by several sequences)
  owned and filled >= allocated       -> USED     (fully written)
  owned and filled == 0               -> RESERVED (held for the owner, nothing written yet)
  owned and 0 < filled < allocated    -> TAIL     (partly written last block: tail waste)
  free and cached                     -> CACHED   (free, still holding reusable prefix KV)
  free                                -> FREE     (part of a hole)
"""
from __future__ import annotations

import numpy as np

from kvviz.core.blockmap import FREE as _FREE_OWNER
from kvviz.core.blockmap import BlockMap

FREE, CACHED, USED, TAIL, RESERVED, SHARED = range(6)
PAD = 6  # grid cells past the end of the map (only in grids, never in classify's output)
NUM_STATES = 6
STATE_NAMES = ("free", "cached", "used", "tail", "reserved", "shared")


def _lookup() -> np.ndarray:
    """State for every combination of the five flags classify() computes (bit order below)."""
    lut = np.empty(32, np.int8)
    for code in range(32):
        cached, owned, empty, full, shared = ((code >> b) & 1 for b in range(5))
        if not owned:
            lut[code] = CACHED if cached else FREE
        elif shared:
            lut[code] = SHARED
        elif full:
            lut[code] = USED
        elif empty:
            lut[code] = RESERVED
        else:
            lut[code] = TAIL
    return lut


_LUT = _lookup()


def classify(bm: BlockMap, start: int = 0, stop: int | None = None) -> np.ndarray:
    """int8 [stop - start]: the state code of blocks [start, stop), in address order."""
    sl = slice(start, stop)
    filled, allocated = bm.filled[sl], bm.allocated[sl]
    code = bm.cached[sl].view(np.uint8).copy()
    code |= (bm.owner[sl] != _FREE_OWNER).view(np.uint8) << 1
    code |= (filled == 0).view(np.uint8) << 2
    code |= ((filled >= allocated) & (allocated > 0)).view(np.uint8) << 3
    code |= (bm.refcount[sl] > 1).view(np.uint8) << 4
    return _LUT[code]


def state_counts(state: np.ndarray) -> np.ndarray:
    """int64 [NUM_STATES]: how many blocks are in each state."""
    return np.bincount(state.astype(np.int64), minlength=NUM_STATES)[:NUM_STATES]


def run_counts(state: np.ndarray, run: int) -> np.ndarray:
    """int32 [ceil(n / run), NUM_STATES]: state counts over consecutive runs of `run` blocks.

    The last run may be short; its missing blocks count in no state.
    """
    n = state.shape[0]
    cells = -(-n // run)
    padded = np.full(cells * run, PAD, np.int8)
    padded[:n] = state
    runs = padded.reshape(cells, run)
    out = np.empty((cells, NUM_STATES), np.int32)
    for s in range(NUM_STATES):  # six passes over int8 data (cost: docs/BENCHMARKS.md)
        out[:, s] = (runs == s).sum(axis=1, dtype=np.int32)
    return out
