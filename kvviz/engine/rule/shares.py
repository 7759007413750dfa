"""Where a lane's memory goes, as running sums over steps (kvviz/engine/shares.py reads
them): every step into row 0 of p.shares, a memory-pressure step into row 1 too. Columns:
steps, used, reserved, internal, free, tail (slot-steps); the external fragmentation index
(contiguous lanes) summed as a float per step, in step order."""
from __future__ import annotations

import numpy as np
from numba import njit

from kvviz.engine.rule import placement
from kvviz.engine.rule.events import emit
from kvviz.engine.rule.state import (
    EVICTIONS,
    EVICTIONS_SEEN,
    HELD_CELLS,
    INTERNAL,
    K_EVICTED,
    NUM_HELD,
    NUM_RUNNING,
    NUM_USED,
    R_NONE,
    STEP,
)

EXACT_FLOAT_REPEATS = 1 << 20  # kvviz/engine/shares.py's add_repeated


@njit(cache=True, inline="always")  # where a row's blocks (cells) change
def held_changed(p, cfg, req, r, before, after):
    """Request r's row went from `before` to `after` blocks (cells): the internal
    fragmentation sum (blocks past the request's last slot) follows."""
    final = req.kv_final[r]
    bs = cfg.block_size
    p.c[INTERNAL] += max(0, after * bs - final) - max(0, before * bs - final)


@njit(cache=True)
def fill(p, cfg, req):
    """(used, reserved, internal, free, tail, efi) of the lane now."""
    bs = cfg.block_size
    used = p.c[NUM_USED]
    internal = p.c[INTERNAL]
    tail = np.int64(0)
    efi = 0.0
    if cfg.paged:
        allocated = p.c[NUM_HELD] * bs
        tail = allocated - used
    else:
        allocated = p.c[HELD_CELLS] * bs
        if bs > 1:  # the unwritten end of each range's last cell
            for i in range(p.c[NUM_RUNNING]):
                tail += (-p.run_num_computed_tokens[i]) % bs
    free = cfg.capacity - allocated
    if not cfg.paged and free > 0:
        efi = 1.0 - placement.largest_hole(p, cfg) * bs / free
    return used, allocated - used - internal, internal, free, tail, efi


@njit(cache=True)
def account(p, cfg, req, pressure, times, time_s):
    """Add `times` equal steps (the last at `time_s`) to the sums; log the cached blocks
    evicted since the last account (one event, at this step)."""
    c = p.c
    if c[EVICTIONS] != c[EVICTIONS_SEEN]:
        emit(p, time_s, c[STEP], K_EVICTED, -1, R_NONE, 0, 0, 0,
             c[EVICTIONS] - c[EVICTIONS_SEEN])
        c[EVICTIONS_SEEN] = c[EVICTIONS]
    used, reserved, internal, free, tail, efi = fill(p, cfg, req)
    for acc in range(2 if pressure else 1):
        row = 1 - acc if pressure else 0
        s = p.shares[row]
        s[0] += times
        s[1] += used * times
        s[2] += reserved * times
        s[3] += internal * times
        s[4] += free * times
        s[5] += tail * times
        if efi == 0.0 or times > EXACT_FLOAT_REPEATS:
            p.efi[row] += efi * times
        else:
            for _ in range(times):
                p.efi[row] += efi
