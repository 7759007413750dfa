"""The self-check: the replay at the node's own settings against what the node did, per step.

Both sides are a `StepRecord`, numbered by engine step (the replay's arrivals are the
node's own arrival steps, so its steps are the node's): the busy steps (a request running
or preempted in them: neither the node nor the replay steps while idle), per step the
requests admitted (new or resumed), preempted and finished, so the running set of every
step, and, where a side also knows them, the requests scheduled; where the node's block maps
were sampled, each running request's block ids after the step (vLLM's numbering: kvviz's
block b is vLLM's b + 1, its block 0 the null block). The verdict names the first step
where they differ and in what; it never hides a difference.
"""
from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from kvviz.twin.blockids import Renumbering, Tables, shown, tables_differ

LISTS = ("admitted", "preempted", "finished", "scheduled")
WHAT = {"admitted": "requests admitted", "preempted": "requests preempted",
        "finished": "requests finished", "scheduled": "requests scheduled"}
TABLE_BUDGET = 1 << 24  # block ids kept per side for the sampled steps (int64: 128 MiB)


@dataclass(frozen=True)
class StepRecord:
    """One side's run, step by step (see the module's docstring)."""

    busy: np.ndarray  # int64 [m, 2]: the busy steps as inclusive runs [first, last], in order
    lists: dict[str, tuple[np.ndarray, np.ndarray]]  # name -> (steps, ids), by (step, id)
    tables: dict[int, Tables] = field(default_factory=dict)  # step -> tables after it
    block_ids: str = "exact"  # or "renumbered": the node's pool began in an unknown order
    end_step: int | None = None  # the record stops here (the node's run went on): why
    end_reason: str = ""
    notes: tuple[str, ...] = ()  # what the replay cannot reproduce, named
    seq_ids: np.ndarray | None = None  # the node's id of the replay's request i (None: i)

    @property
    def steps(self) -> int:
        return int((self.busy[:, 1] - self.busy[:, 0] + 1).sum()) if self.busy.size else 0

    @property
    def preemptions(self) -> int:
        return int(self.lists["preempted"][0].size)

    def has(self, name: str) -> bool:
        return name in self.lists

    def at(self, name: str, step: int) -> np.ndarray:
        steps, ids = self.lists[name]
        lo, hi = np.searchsorted(steps, [step, step + 1])
        return ids[lo:hi]

    def busy_before(self, step: int) -> int:
        """Busy steps < `step`."""
        if not self.busy.size:
            return 0
        first, last = self.busy[:, 0], self.busy[:, 1]
        return int((np.minimum(last, step - 1) - first + 1).clip(0).sum())

    @classmethod
    def from_steps(cls, steps: list[int], admitted: list, preempted: list, finished: list,
                   scheduled: list | None = None, tables: list | None = None,
                   **kw) -> StepRecord:
        """From one entry per listed step (engine step numbers, increasing; each list one
        list of ids per step; tables: {request: block ids} or None per step). A step is
        busy when a request runs or is preempted in it: the running set carries over
        between the steps listed."""
        lists = {"admitted": admitted, "preempted": preempted, "finished": finished}
        if scheduled is not None:
            lists["scheduled"] = scheduled
        if any(len(v) != len(steps) for v in lists.values()) or (
                tables is not None and len(tables) != len(steps)):
            raise ValueError("step record: one entry per step in every list")
        out = {k: _pairs(steps, v) for k, v in lists.items()}
        busy, live = [], set()
        for i, s in enumerate(steps):
            if busy and live and busy[-1][1] < s - 1:  # the steps between, running on
                busy.append([busy[-1][1] + 1, s - 1])
            during = (live - set(preempted[i])) | set(admitted[i])
            if during or len(preempted[i]):
                busy.append([s, s])
            live = during - set(finished[i])
        tabs = {} if tables is None else {int(s): Tables.of(t) for s, t in zip(steps, tables)
                                          if t is not None}
        return cls(merge_runs(busy), out, tabs, **kw)


def _pairs(steps: list[int], per_step: list) -> tuple[np.ndarray, np.ndarray]:
    st = [s for s, ids in zip(steps, per_step) for _ in range(len(ids))]
    ids = [int(r) for x in per_step for r in x]
    a, b = np.asarray(st, np.int64), np.asarray(ids, np.int64)
    order = np.lexsort((b, a))
    return a[order], b[order]


def merge_runs(runs: list) -> np.ndarray:
    """[[first, last], ...] in order -> touching or overlapping runs merged, int64 [m, 2]."""
    out: list[list[int]] = []
    for a, b in runs:
        if out and a <= out[-1][1] + 1:
            out[-1][1] = max(out[-1][1], b)
        else:
            out.append([int(a), int(b)])
    return np.asarray(out, np.int64).reshape(-1, 2)


@dataclass(frozen=True)
class RecordSpec:
    """What the replay's record keeps (kvviz/twin/logged.py): `seq_ids[i]` is the node's id
    of the replay's request i (None: the index itself); the tables after the steps in
    `table_steps` (None: every busy step); the scheduled requests of every step."""

    seq_ids: np.ndarray | None = None
    table_steps: frozenset | None = None
    scheduled: bool = True


def _first_pair_diff(a: tuple[np.ndarray, np.ndarray], b: tuple[np.ndarray, np.ndarray],
                     upto: float) -> int | None:
    """The first step (<= upto) whose (step, id) pairs differ between a and b, else None."""
    (sa, ia), (sb, ib) = a, b
    sa, ia = sa[sa <= upto], ia[sa <= upto]
    sb, ib = sb[sb <= upto], ib[sb <= upto]
    n = min(sa.size, sb.size)
    bad = np.flatnonzero((sa[:n] != sb[:n]) | (ia[:n] != ib[:n]))
    if bad.size:
        return int(min(sa[bad[0]], sb[bad[0]]))
    if sa.size != sb.size:
        return int(sa[n] if sa.size > n else sb[n])
    return None


def _first_busy_diff(a: np.ndarray, b: np.ndarray, upto: float) -> int | None:
    """The first step (<= upto) busy on one side only, else None."""
    edges = sorted({int(x) for x in a.ravel()} | {int(x) + 1 for x in a[:, 1]}
                   | {int(x) for x in b.ravel()} | {int(x) + 1 for x in b[:, 1]})

    def busy(runs: np.ndarray, s: int) -> bool:
        i = int(np.searchsorted(runs[:, 0], s, side="right")) - 1
        return i >= 0 and runs[i, 1] >= s

    for s in edges:
        if s > upto:
            return None
        if busy(a, s) != busy(b, s):
            return s
    return None


def compare(node: StepRecord, twin: StepRecord) -> dict:
    """`self_check`: equal, steps_compared (busy steps), block_steps_compared,
    first_difference (None when equal), not_replayed (the node record's notes), verdict."""
    upto = np.inf if node.end_step is None else node.end_step
    names = [k for k in LISTS if node.has(k) and twin.has(k)]
    found = [(s, k) for k, s in ((k, _first_pair_diff(node.lists[k], twin.lists[k], upto))
                                 for k in names) if s is not None]
    busy = _first_busy_diff(node.busy, twin.busy, upto)
    if busy is not None:
        found.append((busy, "busy"))
    first = None
    if found:
        s, k = min(found, key=lambda x: (x[0], -1 if x[1] == "busy" else names.index(x[1])))
        if k == "busy":
            first = {"step": s, "what": "whether the step ran",
                     "node": "busy" if node.busy_before(s + 1) > node.busy_before(s) else "idle",
                     "replay": "busy" if twin.busy_before(s + 1) > twin.busy_before(s)
                     else "idle"}
        else:
            first = {"step": s, "what": WHAT[k], "node": shown(node.at(k, s)),
                     "replay": shown(twin.at(k, s))}
    stop = first["step"] if first else np.inf  # tables after a difference: not compared
    renum = None if node.block_ids == "exact" else Renumbering()
    sampled = 0
    for s in sorted(node.tables):
        if s >= stop or s > upto:
            break
        if s not in twin.tables:
            continue
        sampled += 1
        diff = tables_differ(s, node.tables[s], twin.tables[s], renum)
        if diff is not None:
            first = diff
            break
    equal = first is None
    n = node.busy_before(int(min(upto, 2**62)) + 1) if equal else node.busy_before(
        first["step"])
    return {"equal": equal, "steps_compared": n, "block_steps_compared": sampled,
            "first_difference": first, "not_replayed": list(node.notes),
            "verdict": _verdict(node, first, n, sampled, names, upto)}


def _verdict(node: StepRecord, first: dict | None, n: int, sampled: int, names: list[str],
             upto: float) -> str:
    said = [k for k in ("scheduled", *LISTS[:3]) if k in names]
    said = ", ".join(said[:-1]) + (" and " if len(said) > 1 else "") + said[-1] if said else ""
    lists = (f"the same requests {said} at every step" + (
        "" if "scheduled" in names or not said else
        " (so the same running set; the node's record holds no per-step scheduled lists)"))
    if first is None:
        pre = int((node.lists["preempted"][0] <= upto).sum())
        blocks = "; no block map sampled to compare block ids"
        if sampled:
            blocks = f", every block id at the {sampled} steps whose maps were sampled"
            if node.block_ids != "exact":
                blocks += (" under one renumbering of the pool's blocks (the node had served "
                           "requests before its log began: its free-block order then is not "
                           "recorded)")
        text = (f"replay equals the node: {n} busy steps, {pre} preemption{'s' * (pre != 1)}, "
                f"{lists}{blocks}")
    else:
        text = (f"replay differs from the node at engine step {first['step']} "
                f"({first['what']}: node {first['node']}; replay {first['replay']}); the "
                f"{n} busy steps before it are equal")
    if node.end_step is not None:
        text += f"; compared up to engine step {node.end_step} ({node.end_reason})"
    if node.notes:
        text += ". Not replayed as the node ran: " + "; ".join(node.notes)
    return text


def no_node_run(what: str) -> dict:
    """`self_check` for an input without a node run (a trace): nothing to compare."""
    return {"equal": None, "steps_compared": 0, "block_steps_compared": 0,
            "first_difference": None, "not_replayed": [],
            "verdict": f"{what} is a request stream, not a node's run: there is no node run to "
                       "compare the replay with; the baseline is the rule at the settings "
                       "given (--node-* flags, vLLM's defaults)"}
