"""A node's run read from an attach recording (`kvviz attach --blocks`, the kvviz plugin in
vLLM): its requests as a Workload, its settings, its own StepRecord, and what the replay
cannot reproduce, named (docs/NODE.md, "What if?").

What is exact. The replay starts at the first moment the recording shows the node empty (a
sample with nothing running or waiting: the engine ran dry, or attach joined an idle node);
from there every request the node saw is in the log, arriving at the engine step vLLM first
saw it (steps of 1 s on the replay's clock, so its step numbers are the node's), with its
prompt, its prompt's block-hash chain (prefix caching replays) and its output length. The
record is compared up to the last step the recording holds whole. Named instead of hidden:
requests from before that start, a stream that lost messages (block_gaps), requests still
running at the end (replayed with the most tokens they could reach), aborts that are not a
finish of a running request, a pool that had served requests before the log (block ids then
compared under one renumbering), another scheduler class (AsyncScheduler) or vLLM version.
"""
from __future__ import annotations

import numpy as np

from kvviz.core.errors import KvvizError, StoreError
from kvviz.core.workload import Workload
from kvviz.twin import node_record
from kvviz.twin.meta import from_meta, meta_lane
from kvviz.twin.selfcheck import StepRecord
from kvviz.twin.settings import NodeSettings

MAX_EVENTS = 8_000_000  # engine events of the lane read at most
MAX_STEP = 2**52  # engine steps above this do not survive the replay's float clock
ENDED = ("FINISHED_STOPPED", "FINISHED_LENGTH_CAPPED")
REQUEST_LOG_TABLES = ("request_log",)  # the plugin's step-exact request log (docs/FORMAT.md)
NO_REQUEST_LOG = ("this recording has no request log (record it with kvviz attach --blocks, "
                  "docs/NODE.md)")


def _arrays(log: dict) -> dict[str, np.ndarray]:
    ints = ("seq_id", "arrive_step", "prompt_tokens", "max_tokens", "hash_width")
    out = {k: np.asarray(log[k], np.int64) for k in ints}
    for k in ("finish_step", "output_tokens"):
        out[k] = np.asarray([-1 if v is None else v for v in log[k]], np.int64)
    return out


def _check_log(a: dict, log: dict, s: NodeSettings, max_len: int, where: str) -> None:
    def bad(i: int, what: str) -> KvvizError:
        return KvvizError(f"{where}: request_log seq {int(a['seq_id'][i])}: {what}")

    n = a["seq_id"].size
    for i in range(n):
        p, st, f = int(a["prompt_tokens"][i]), int(a["arrive_step"][i]), int(a["finish_step"][i])
        if not 1 <= p <= max_len or not 1 <= st <= MAX_STEP:
            raise bad(i, f"prompt_tokens {p} (1..{max_len}) or arrive_step {st} (1..{MAX_STEP}) "
                         "out of range")
        if f >= 0 and not st <= f <= MAX_STEP:
            raise bad(i, f"finish_step {f} before its arrive_step {st}")
        got, want = len(log["prompt_hashes"][i]), int(a["hash_width"][i]) * (p // s.block_size)
        if got != want and (s.enable_prefix_caching or got):
            raise bad(i, f"{got} bytes of prompt hashes, expected {want} ({p // s.block_size} "
                         f"full blocks of {s.block_size}): a truncated hash chain")
        if i and st < a["arrive_step"][i - 1]:
            raise bad(i, f"arrives at step {st}, before the request logged before it")
    if n and np.unique(a["hash_width"]).size > 1:
        raise KvvizError(f"{where}: request_log mixes hash widths "
                         f"{np.unique(a['hash_width']).tolist()[:4]}")


def _chains(log: dict, keep: np.ndarray, a: dict, bs: int) -> tuple[np.ndarray, np.ndarray]:
    """(chain_ptr, chain_ids) of the kept requests: each distinct block hash one id."""
    blobs = [log["prompt_hashes"][i] for i in keep.tolist()]
    width = int(a["hash_width"][0]) if a["hash_width"].size else 8
    counts = np.array([len(b) // width for b in blobs], np.int64)
    ptr = np.concatenate([[0], np.cumsum(counts)]).astype(np.int64)
    raw = np.frombuffer(b"".join(blobs), np.uint8).reshape(-1, width)
    if not raw.size:
        return ptr, np.zeros(0, np.int64)
    keys = np.ascontiguousarray(raw).view(np.dtype((np.void, width))).ravel()
    _, ids = np.unique(keys, return_inverse=True)
    return ptr, ids.astype(np.int64).ravel()


def read(path) -> tuple[Workload, NodeSettings, StepRecord]:
    """(the node's requests, its settings, its record); KvvizError naming what is missing or
    malformed. Reads the lane's request log, events and samples once, and its sampled maps'
    block tables up to a budget."""
    from kvviz.core.safeio import printable
    from kvviz.store.reader import RunReader

    where = printable(str(path))
    try:
        reader = RunReader(path)
    except StoreError:
        raise
    except Exception as exc:  # noqa: BLE001 - not a recording kvviz can open
        raise KvvizError(f"{where}: not a kvviz recording ({type(exc).__name__})") from None
    try:
        if not any(reader.has_table(t) for t in REQUEST_LOG_TABLES):
            raise KvvizError(f"{where}: {NO_REQUEST_LOG}")
        return _read(reader, where)
    except (ValueError, TypeError, OverflowError, KeyError, IndexError, MemoryError) as exc:
        raise KvvizError(f"{where}: a request log kvviz cannot replay ({type(exc).__name__}: "
                         f"{str(exc)[:200]})") from None
    finally:
        reader.close()


def _read(reader, where: str) -> tuple[Workload, NodeSettings, StepRecord]:
    from kvviz.store import lane_log  # pandas: the store's reader side, loaded when read

    lane, pool, notes = meta_lane(reader.meta, where)
    s, max_len, more = from_meta(reader.meta, pool, where)
    notes += more
    log = lane_log.request_log(reader._q, where, lane)
    a = _arrays(log)
    if not a["seq_id"].size:
        raise KvvizError(f"{where}: the request log of lane {lane} is empty: no request "
                         "arrived while kvviz attach recorded")
    _check_log(a, log, s, max_len, where)
    ev = _events(reader, lane, where)
    samples = reader.samples(lane)
    if not len(samples):
        raise KvvizError(f"{where}: lane {lane} has no sample")
    sstep = samples["step"].to_numpy(np.float64)
    if not np.all(np.isfinite(sstep)) or (np.diff(sstep) < 0).any() or sstep.max() > MAX_STEP:
        raise KvvizError(f"{where}: lane {lane}'s sample steps are not increasing engine steps")
    n_gaps, gap_t, restart_t = lane_log.gaps(reader._q, where, lane)
    if restart_t is not None:
        raise KvvizError(f"{where}: the vLLM server restarted while this was recorded "
                         "(block_gaps kind restart): its request log mixes two runs; record "
                         "each run on its own")
    first, keep, n_before, empty = _start(samples, a)
    if not empty:
        notes.append("the recording never shows the node empty before its last request "
                     "arrived: requests from before attach joined may have run beside the "
                     "logged ones (the replay starts empty at the first logged arrival)")
    if n_before:
        notes.append(f"{n_before} logged requests ran before the node's first idle moment in "
                     f"the recording, beside requests from before attach joined: left out (the "
                     f"replay starts at engine step {first})")
    last, end_reason = int(sstep[-1]), ""
    if n_gaps:
        t = samples["t"].to_numpy(np.float64)
        before = sstep[t < gap_t]
        last = int(before[-1]) if before.size else first - 1
        end_reason = ("the block stream lost messages after it (block_gaps): their events and "
                      "requests are not in the log")
        notes.append(f"{n_gaps} gaps in the block stream: requests announced in lost messages "
                     "are not in the replay")
    out, drop, more = _outputs(a, log, keep, ev, s, max_len)
    notes += more
    keep = keep[~np.isin(keep, drop)]
    running_at_end = [int(a["seq_id"][i]) for i in keep.tolist() if a["finish_step"][i] < 0]
    if running_at_end and not end_reason:
        end_reason = f"{len(running_at_end)} requests were still running when it ended"
    seq = a["seq_id"][keep]
    fresh = _fresh(a, keep, ev)
    if not fresh and s.enable_prefix_caching:
        at = np.flatnonzero(sstep == first - 1)  # the last: after a prefix-cache reset
        cached = samples["cached_tokens"].to_numpy(np.float64)[at[-1:]]
        if cached.size and np.nan_to_num(cached[0]) > 0:
            notes.append(f"the node's prefix cache held {int(cached[0])} "
                         "tokens of earlier requests when the replay starts: hits on them are "
                         "not replayed")
    rec0 = node_record.from_events(ev[0], ev[1], ev[2], first, last, {})
    tables = node_record.sampled_tables(reader, lane, first, last, rec0.busy)
    end = last if end_reason else None
    rec = StepRecord(rec0.busy, rec0.lists, tables, "exact" if fresh else "renumbered", end,
                     end_reason, tuple(notes), seq)
    ptr, ids = _chains(log, keep, a, s.block_size)
    w = Workload(a["arrive_step"][keep].astype(np.float64), a["prompt_tokens"][keep],
                 out[keep], np.full(keep.size, -1, np.int64), chain_ptr=ptr, chain_ids=ids,
                 chain_block=s.block_size)
    return w, s, rec


def _events(reader, lane: str, where: str) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(steps, kinds, seqs) of the lane's admitted / preempted / finished / admit_failed
    events in engine order; steps checked increasing."""
    q = reader._q
    n = q("SELECT COUNT(*) FROM events WHERE lane = ?", (lane,))[0][0]
    if reader.has_table("event_chunks"):
        n += q("SELECT TOTAL(n) FROM event_chunks WHERE lane = ?", (lane,))[0][0]
    if n > MAX_EVENTS:
        raise KvvizError(f"{where}: lane {lane} holds {int(n)} events, more than kvviz "
                         f"whatif reads ({MAX_EVENTS})")
    ev = reader.events(lane, ["admitted", "preempted", "finished", "admit_failed"])
    steps = ev["step"].to_numpy(np.float64)
    if not np.all(np.isfinite(steps)) or (np.diff(steps) < 0).any() or (
            steps.size and (steps.min() < 0 or steps.max() > MAX_STEP)):
        raise KvvizError(f"{where}: lane {lane}'s events are not in engine-step order")
    seqs = ev["seq_id"].to_numpy(np.float64)
    if not np.all(np.isfinite(seqs)) or (seqs.size and np.abs(seqs).max() > 2**62):
        raise KvvizError(f"{where}: lane {lane}'s events hold sequence ids out of range")
    return steps.astype(np.int64), ev["kind"].to_numpy(str), seqs.astype(np.int64)


def _start(samples, a: dict) -> tuple[int, np.ndarray, int, bool]:
    """(the replay's first engine step, the log rows replayed, rows left out before it,
    whether the node was seen empty there): the step after a sample with nothing running or
    waiting (the engine ran dry, or attach joined it idle), the last such at or before the
    first logged arrival, else the first after it; the first arrival when the recording
    never shows the node empty before its last arrival."""
    run = samples["running"].to_numpy(np.float64)
    wait = samples["waiting"].to_numpy(np.float64)
    starts = samples["step"].to_numpy(np.int64)[(run == 0) & (wait == 0)] + 1
    arrive = a["arrive_step"]
    ok = starts[starts <= arrive.max()]
    if not ok.size:
        return int(arrive[0]), np.arange(arrive.size), 0, False
    le = ok[ok <= arrive[0]]
    first = int(le[-1]) if le.size else int(ok[0])
    keep = np.flatnonzero(arrive >= first)
    return first, keep, int(arrive.size - keep.size), True


def _outputs(a: dict, log: dict, keep: np.ndarray, ev, s: NodeSettings, max_len: int):
    """(output length per log row, rows left out, notes)."""
    _, kinds, seqs = ev
    order = np.argsort(seqs, kind="stable")
    uniq, at = np.unique(seqs[order], return_index=True)
    ends = np.append(at[1:], order.size)

    def kinds_of(seq: int) -> np.ndarray:
        j = int(np.searchsorted(uniq, seq))
        if j >= uniq.size or uniq[j] != seq:
            return kinds[:0]
        return kinds[order[at[j]:ends[j]]]

    out = a["output_tokens"].copy()
    most = np.maximum(1, np.minimum(a["max_tokens"], max_len - a["prompt_tokens"]))
    drop, notes, named = [], [], {"running": [], "aborted": [], "other": []}
    for i in keep.tolist():
        status, seq = log["finish_status"][i], int(a["seq_id"][i])
        if status is None:
            out[i] = most[i]
            named["running"].append(seq)
        elif status == "FINISHED_ABORTED":
            mine = kinds_of(seq)
            if "admitted" not in mine and "admit_failed" not in mine:
                drop.append(i)  # never ran, never held the queue's head: it changed nothing
            elif not (mine.size and mine[-1] == "finished" and out[i] >= 1):
                named["aborted"].append(seq)
        elif status not in ENDED or out[i] < 1:
            named["other"].append(seq)
        out[i] = max(1, min(int(out[i]), max_len - int(a["prompt_tokens"][i])))
    for key, text in (("running", "still running when the recording ended: replayed with "
                                  "the most tokens they could reach (max_tokens)"),
                      ("aborted", "aborted while waiting or before their first token: "
                                  "replayed as finishing when they stopped"),
                      ("other", "finished for another reason (status): replayed with their "
                                "output length")):
        if named[key]:
            ids = ", ".join(map(str, named[key][:6])) + (", ..." if len(named[key]) > 6 else "")
            notes.append(f"{len(named[key])} requests {text} (seq {ids})")
    too_big = [int(a["seq_id"][i]) for i in keep.tolist() if -(-(int(a["prompt_tokens"][i])
               + int(out[i]) - 1) // s.block_size) > s.usable_blocks]
    if too_big:
        notes.append(f"{len(too_big)} requests need more blocks than the pool holds: vLLM "
                     "waits on them, the rule refuses them (seq "
                     f"{', '.join(map(str, too_big[:6]))})")
    return out, np.asarray(drop, np.int64), notes


def _fresh(a: dict, keep: np.ndarray, ev) -> bool:
    """Whether the node's pool had served no request before the replay's first: every
    request the plugin numbered before it is in the log and never ran."""
    if not keep.size:
        return True
    first = int(a["seq_id"][keep[0]])
    before = a["seq_id"][a["seq_id"] < first]
    ran = set(ev[2][ev[1] == "admitted"].tolist())
    return before.size == first and not any(int(x) in ran for x in before)
