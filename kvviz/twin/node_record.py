"""The node's own StepRecord from its block lane: the events the plugin logged (admitted,
preempted, finished, each with the engine step vLLM did it in) and the block tables of the
maps it sampled (docs/FORMAT.md, "A node's block pool as a lane").

The events give the running set of every step, not vLLM's per-step scheduled list (a running
request the token budget leaves out of a step is still running): the record holds the
admitted, preempted and finished requests per step, and the replay's side is compared with
the same lists."""
from __future__ import annotations

import numpy as np

from kvviz.twin.selfcheck import TABLE_BUDGET, StepRecord, Tables, merge_runs

KINDS = ("admitted", "preempted", "finished")


def busy_runs(steps: np.ndarray, kinds: np.ndarray, seqs: np.ndarray, first: int,
              last: int, live0: set[int]) -> np.ndarray:
    """The busy steps in [first, last] (a request running or preempted in them) as runs,
    from events in step order; `live0`: the requests running before `first`."""
    runs, live, prev = [], set(live0), first - 1
    edges = np.flatnonzero(np.diff(steps, prepend=steps[:1] - 1)) if steps.size else []
    for i, j in zip(edges, [*edges[1:], steps.size]):
        s = int(steps[i])
        if live and prev + 1 <= s - 1:  # steps between events, the running set unchanged
            runs.append([prev + 1, s - 1])
        k, q = kinds[i:j], seqs[i:j].tolist()
        pre = {r for r, x in zip(q, k) if x == "preempted"}
        during = (live - pre) | {r for r, x in zip(q, k) if x == "admitted"}
        if during or pre:
            runs.append([s, s])
        live = during - {r for r, x in zip(q, k) if x == "finished"}
        prev = s
    if live and prev < last:
        runs.append([prev + 1, last])
    return merge_runs(runs)


def from_events(steps: np.ndarray, kinds: np.ndarray, seqs: np.ndarray, first: int,
                last: int, tables: dict[int, Tables], **kw) -> StepRecord:
    """The node's record over engine steps [first, last] from its events (in engine order,
    any kinds; those in KINDS are used). Requests whose first event in the range is a finish
    or a preemption were running when it began."""
    keep = (steps >= first) & (steps <= last) & np.isin(kinds, KINDS)
    steps, kinds, seqs = steps[keep], kinds[keep], seqs[keep]
    _, at = np.unique(seqs, return_index=True)
    live0 = {int(seqs[i]) for i in at if kinds[i] != "admitted"}
    lists = {}
    for k in KINDS:
        m = kinds == k
        a, b = steps[m], seqs[m]
        order = np.lexsort((b, a))
        lists[k] = (a[order].astype(np.int64), b[order].astype(np.int64))
    busy = busy_runs(steps, kinds, seqs, first, last, live0)
    return StepRecord(busy, lists, tables, **kw)


def is_busy(busy: np.ndarray, step: int) -> bool:
    i = int(np.searchsorted(busy[:, 0], step, side="right")) - 1
    return i >= 0 and busy[i, 1] >= step


def sampled_tables(reader, lane: str, first: int, last: int, busy: np.ndarray
                   ) -> dict[int, Tables]:
    """{step: the tables after it} for the lane's kept maps at busy steps in [first, last],
    vLLM's block ids (address + 1); at most TABLE_BUDGET block ids in all (the first steps)."""
    from kvviz.store import lane_log

    idx = reader.blockmap_index(lane)
    out: dict[int, Tables] = {}
    total = 0
    for sid, step in zip(idx["sample_id"].tolist(), idx["step"].tolist()):
        if not (first <= step <= last) or step in out or not is_busy(busy, int(step)):
            continue
        bm = reader.blockmap(int(sid))
        seqs = np.asarray(bm.final_seq if bm.final_seq is not None else [], np.int64)
        got = lane_log.tables(reader._q, str(reader.path), int(sid), seqs.size, bm.num_blocks)
        if got is None:
            continue
        lens, blocks = got
        order = np.argsort(seqs, kind="stable")
        starts = np.concatenate([[0], np.cumsum(lens)])
        parts = [blocks[starts[i]:starts[i + 1]] + 1 for i in order.tolist()]
        t = Tables(seqs[order], lens[order],
                   np.concatenate(parts) if parts else np.zeros(0, np.int64))
        total += int(t.blocks.size)
        if total > TABLE_BUDGET:
            break
        out[int(step)] = t
    return out
