"""Build a lane's compiled state (state.py) from its spec, the workload and the engine."""
from __future__ import annotations

import numpy as np

from kvviz.core.config import EngineConfig, LaneSpec
from kvviz.core.errors import KvvizError
from kvviz.core.workload import Workload
from kvviz.engine.eventlog import MAX_STEP
from kvviz.engine.rule import state as S

EVENTS0 = 4096  # initial event columns (grown on demand)
# and room from the start for about three events per request (an admission, a finish, a
# refusal or preemption), so that a run rarely stops to grow them (their pages are mapped
# as events are written); at most EVENTS_AHEAD (a longer run grows them)
EVENTS_AHEAD = 1 << 20


def next_pow2(n: np.ndarray) -> np.ndarray:
    """Smallest power of two >= n, elementwise (n >= 1)."""
    n = np.maximum(np.asarray(n, np.int64), 1)
    return np.left_shift(1, np.ceil(np.log2(n)).astype(np.int64))


def _pow2_cells(cells: np.ndarray) -> np.ndarray:
    """1 << (cells - 1).bit_length(), elementwise (buddy's rounding)."""
    x, order = np.asarray(cells, np.int64) - 1, np.zeros(np.shape(cells), np.int64)
    while x.size and x.max() > 0:
        order += x > 0
        x = x >> 1
    return np.left_shift(1, order)


def _late(a: np.ndarray, step_ms: float) -> np.ndarray:
    with np.errstate(over="ignore", invalid="ignore"):
        raw = np.ceil(a * 1000.0 / step_ms)
    return raw, ~(raw < float(MAX_STEP))


def arrival_steps(arrival_s: np.ndarray, step_ms: float) -> np.ndarray:
    """Per request, the first step (>= 1) whose clock (step * step_ms / 1000.0) reaches its
    arrival time; MAX_STEP where that lies past it (`check_arrivals` says so)."""
    a = np.asarray(arrival_s, np.float64)
    raw, big = _late(a, step_ms)
    s = np.where(big, 1, np.maximum(raw, 1)).astype(np.int64)
    for _ in range(4):  # the float clock may sit a step off the exact quotient
        low = (s.astype(np.float64) * step_ms / 1000.0) < a
        s = s + low
        high = (s > 1) & ((s - 1).astype(np.float64) * step_ms / 1000.0 >= a)
        s = s - high
    return np.where(big, MAX_STEP, s)


def check_arrivals(arrival_s: np.ndarray, step_ms: float) -> None:
    """Simulation's error for a request that arrives past the last step events can store."""
    late = np.flatnonzero(_late(np.asarray(arrival_s, np.float64), step_ms)[1])
    if late.size:
        t = float(arrival_s[late[0]])
        raise KvvizError(f"the next request arrives at {t:g} s, more than {MAX_STEP} engine "
                         f"steps of {step_ms:g} ms away: lower its arrival time or raise the "
                         "rate")


def build(spec: LaneSpec, w: Workload, engine: EngineConfig, capacity_tokens: int,
          steps: np.ndarray | None = None) -> tuple[S.Config, S.Requests, S.Pool]:
    """The lane's (Config, Requests, Pool) before its first step. Raises ValueError for a
    capacity below one block or cell."""
    n = len(w)
    bs = spec.block_size
    paged = spec.allocator == "paged"
    num_blocks = capacity_tokens // bs
    if num_blocks < 1:
        raise ValueError(f"capacity_tokens: {capacity_tokens} is below one block of {bs}"
                         if paged else f"capacity_tokens {capacity_tokens} is below one cell")
    capacity = num_blocks * bs
    prompt = np.asarray(w.prompt, np.int64)
    output = np.asarray(w.output, np.int64)
    final_len = prompt + output
    kv_final = np.maximum(final_len - 1, 1)  # its last token never gets a slot
    if paged:
        reserve = np.zeros(n, np.int64)
        whole = kv_final
        need = -(-whole // bs) * bs
    else:
        reserve = {"max": np.full(n, engine.max_seq_len, np.int64),
                   "pow2": np.minimum(next_pow2(final_len), engine.max_seq_len),
                   "exact": final_len.copy()}[spec.reserve].astype(np.int64)
        whole = np.maximum(kv_final, reserve)
        cells = -(-whole // bs)
        need = (_pow2_cells(cells) if spec.placement == "buddy" else cells) * bs
    too_big = need > capacity
    ptr, ids, cb = w.chains()
    ptr = np.asarray(ptr, np.int64)
    cover = np.minimum(np.diff(ptr) * cb, prompt)
    if steps is None:
        steps = arrival_steps(w.arrival_s, engine.step_ms)
    cfg = S.Config(
        n=n, paged=paged, prefix_caching=bool(spec.prefix_caching), placement=
        S.PLACEMENT_CODE[spec.placement], block_size=bs, num_blocks=num_blocks,
        capacity=capacity, max_num_seqs=engine.max_num_seqs,
        max_num_batched_tokens=engine.max_batched_tokens,
        enable_chunked_prefill=bool(engine.enable_chunked_prefill),
        watermark_blocks=int(engine.watermark * (num_blocks + 1)) if paged else 0,
        step_ms=float(engine.step_ms), chain_block=int(max(cb, 1)))
    req = S.Requests(
        arrival_step=np.asarray(steps, np.int64), prompt=prompt, max_tokens=output,
        kv_final=kv_final, too_big=too_big, reserve=reserve, num_tokens=prompt.copy(),
        num_computed_tokens=np.zeros(n, np.int64), final_tokens=prompt + output,
        row=np.full(n, -1, np.int64), chain_ptr=ptr, chain_ids=np.asarray(ids, np.int64),
        chain_cover=cover.astype(np.int64))
    rows = max(1, min(cfg.max_num_seqs, n))
    width = int(-(-int(final_len.max(initial=1)) // bs)) + 1 if paged else 1
    return cfg, req, pool(cfg, rows, min(width, num_blocks + 1), n, int(too_big.sum()))


def pool(cfg: S.Config, rows: int, width: int, n: int = 0, too_big: int = 0) -> S.Pool:
    """An empty Pool: `rows` block tables (ranges) of `width` blocks for n requests (`too_big`
    of them rejected ahead); a contiguous lane's width is 1."""
    nb = cfg.num_blocks if cfg.paged else 1
    width = width if cfg.paged else 1
    hsize = 1 << max(4, (2 * nb).bit_length()) if cfg.prefix_caching else 2
    c = np.zeros(S.NUM_COUNTERS, np.int64)
    c[S.LAST_FAIL_SEQ] = -1
    c[S.LRU_HEAD] = c[S.LRU_TAIL] = -1
    c[S.NUM_FREE_STACK] = nb if cfg.paged else 0
    c[S.NUM_FREE_ROWS] = rows
    c[S.TOO_BIG_LEFT] = too_big
    cells = cfg.num_blocks
    holes = rows + 2 if not cfg.paged else 1
    hole_start = np.zeros(holes, np.int64)
    hole_size = np.zeros(holes, np.int64)
    orders = max(1, cells.bit_length()) if cfg.placement == S.BUDDY and not cfg.paged else 1
    buddy_cap = np.array([(cells >> o) + 1 for o in range(orders)], np.int64)
    buddy_off = np.concatenate([[0], np.cumsum(buddy_cap)[:-1]]).astype(np.int64)
    buddy_list = np.zeros(int(buddy_cap.sum()), np.int64)
    buddy_count = np.zeros(orders, np.int64)
    regions = []
    if not cfg.paged:
        if cfg.placement == S.BUDDY:
            base = 0
            for o in range(cells.bit_length() - 1, -1, -1):
                if cells >> o & 1:
                    regions.append((base, o))
                    buddy_list[buddy_off[o] + buddy_count[o]] = base  # one region per order
                    buddy_count[o] += 1
                    base += 1 << o
        else:
            hole_size[0] = cells
            c[S.NUM_HOLES] = 1
    return S.Pool(
        c=c, shares=np.zeros((2, 6), np.int64), efi=np.zeros(2, np.float64),
        running=np.zeros(rows, np.int64), run_num_tokens=np.zeros(rows, np.int64),
        run_num_computed_tokens=np.zeros(rows, np.int64),
        run_final_tokens=np.zeros(rows, np.int64), run_row=np.zeros(rows, np.int64),
        front=np.zeros(max(n, 1), np.int64),
        sched_ids=np.zeros(rows, np.int64), sched_starts=np.zeros(rows, np.int64),
        sched_counts=np.zeros(rows, np.int64), preempted=np.zeros(rows, np.int64),
        finished=np.zeros(rows, np.int64), finished_at=np.zeros(rows, np.int64),
        ref_cnt=np.zeros(nb, np.int32),
        block_hash=np.zeros(nb, np.uint64), dup_next=np.full(nb, -1, np.int32),
        block_end=np.zeros(nb, np.int64), block_parent=np.zeros(nb, np.uint64),
        content=np.zeros(nb, np.int64),
        free_stack=np.arange(nb - 1, -1, -1, dtype=np.int32),
        lru_prev=np.full(nb, -1, np.int32), lru_next=np.full(nb, -1, np.int32),
        in_lru=np.zeros(nb, np.bool_), hash_keys=np.zeros(hsize, np.uint64),
        hash_blocks=np.zeros(hsize, np.int32),
        block_table=np.zeros((rows, width), np.int32),
        row_hashes=np.zeros((rows + 1, width if cfg.prefix_caching else 1), np.uint64),
        row_num_blocks=np.zeros(rows, np.int64), row_len=np.zeros(rows, np.int64),
        row_num_cached=np.zeros(rows, np.int64), row_start=np.zeros(rows, np.int64),
        row_seq=np.full(rows, -1, np.int64),
        free_rows=np.arange(rows - 1, -1, -1, dtype=np.int64),
        scratch=np.zeros(width, np.int32), hits=np.zeros(width, np.int64),
        admitted_free=np.zeros(rows, np.int64),
        hole_start=hole_start, hole_size=hole_size, buddy_list=buddy_list,
        buddy_off=buddy_off, buddy_count=buddy_count,
        buddy_region=np.array(regions or [(0, 0)], np.int64).reshape(-1, 2),
        **events(min(max(EVENTS0, 3 * n + 2 * rows), EVENTS_AHEAD)), **kv_events(0),
        **held_log(0))


def kept(cols: dict, p: S.Pool, n: int) -> dict:
    """Fresh (larger) columns `cols` holding the first n entries of p's columns of their names."""
    for f, a in cols.items():
        a[:n] = getattr(p, f)[:n]
    return cols


def kv_events(k: int) -> dict:
    """Empty KV cache event columns for k events."""
    return {"kv_kind": np.zeros(k, np.int8), "kv_hash": np.zeros(k, np.uint64),
            "kv_end": np.zeros(k, np.int64), "kv_parent": np.zeros(k, np.uint64)}


def held_log(k: int) -> dict:
    """Empty occupancy log columns for k entries."""
    return {"held_step": np.zeros(k, np.int64), "held_blocks": np.zeros(k, np.int64)}


def events(k: int) -> dict:
    """Event columns for k events, not initialised: the rule writes an entry before anyone
    reads it (readers take [:c[NUM_EVENTS]]), and a page is only mapped when written."""
    return {"ev_time": np.empty(k, np.float64), "ev_step": np.empty(k, np.int64),
            "ev_kind": np.empty(k, np.int8), "ev_seq": np.empty(k, np.int64),
            "ev_reason": np.empty(k, np.int8), "ev_need": np.empty(k, np.int64),
            "ev_free": np.empty(k, np.int64), "ev_largest": np.empty(k, np.int64),
            "ev_count": np.empty(k, np.int64)}
