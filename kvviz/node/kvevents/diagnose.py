"""Plain-sentence diagnoses of rebuilt prefix caches (pure functions of a CacheModel).

Each answers a question people ask about real nodes: why is the prefix hit rate 0 although
prompts share a system prompt (a block larger than the shared prefix; different hash seeds
across instances), which prefixes are evicted and recomputed (churn), and what the stream
itself lost (sequence gaps, restarts); and "usage looks low, why are requests waiting?"
(`usage_and_waiting`, from the events plus the node's scraped gauges when there are some).

What events can and cannot show: they name content blocks by hash (stored, evicted, cleared),
never a physical block, a request, a reference count or a partly filled block. So the stream
says how many blocks are cached and how fast they are stored, evicted and recomputed; only the
node's gauges (usage, running, waiting) say how many blocks requests hold and who waits.
"""
from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from kvviz.node.kvevents.model import CacheModel, Forest

CHURN_MIN_RESTORES = 3  # a block stored again this many times after eviction is "churning"
MIN_SHARED_TOKENS = 4  # a common start shorter than this is not called a shared prefix
LOW_USAGE = 0.8  # below this KV usage, waiting requests are not waiting for memory
RECOMPUTE_SHARE = 0.2  # this share of stores being re-stores of evicted blocks is heavy churn
RECOMPUTE_MIN_STORES = 50  # fewer stores than this say nothing about churn
FLAT_MIN_SCRAPES = 3  # running flat at its peak over this many scrapes looks like a limit


@dataclass(frozen=True)
class Gauges:
    """The node's scraped numbers at the latest scrape (None: the node does not report it).
    `max_running`: a max-num-seqs style limit when known (kvviz's own engine);
    `running_flat`: num_running was at its peak in every recent scrape (>= FLAT_MIN_SCRAPES).
    `usable_blocks`: blocks that can hold KV (vLLM keeps a null block out of num_gpu_blocks);
    `waiting_capacity` / `waiting_deferred`: the engine's own reasons for waiting (vLLM 0.32's
    num_requests_waiting_by_reason); `preempted_recent`: preemptions over the recent scrapes."""
    kv_usage: float | None = None
    num_gpu_blocks: int | None = None
    num_running: int | None = None
    num_waiting: int | None = None
    max_running: int | None = None
    running_flat: bool = False
    usable_blocks: int | None = None
    waiting_capacity: int | None = None
    waiting_deferred: int | None = None
    preempted_recent: int | None = None
    recent_s: float | None = None  # seconds the recent scrapes span
    preempt_rate: float | None = None  # preemptions/s over the latest interval (Node headline)


def gauges_from_scrapes(rows: Sequence[dict], max_running: int | None = None) -> Gauges | None:
    """Gauges from a node recording's recent ok scrapes, oldest first (dicts of node_samples
    columns); None when there is none."""
    ok = [r for r in rows if r.get("status") == "ok"]
    if not ok:
        return None
    last = ok[-1]
    running = [v for v in (_num(r.get("num_running"), int) for r in ok) if v is not None]
    flat = len(running) >= FLAT_MIN_SCRAPES and running[-1] > 0 and \
        all(v == running[-1] for v in running[-FLAT_MIN_SCRAPES:])
    cap, bs = _num(last.get("kv_capacity_tokens"), int), _num(last.get("block_size"), int)
    pre = [(r.get("t"), _num(r.get("preemptions_total"), float)) for r in ok]
    pre = [(t, v) for t, v in pre if v is not None and isinstance(t, (int, float))]
    recent = span = None
    if len(pre) >= 2 and pre[-1][1] >= pre[0][1]:
        recent, span = int(pre[-1][1] - pre[0][1]), float(pre[-1][0] - pre[0][0])
    return Gauges(_num(last.get("kv_usage"), float), _num(last.get("num_gpu_blocks"), int),
                  _num(last.get("num_running"), int), _num(last.get("num_waiting"), int),
                  max_running, flat, cap // bs if cap and bs else None,
                  _num(last.get("num_waiting_capacity"), int),
                  _num(last.get("num_waiting_deferred"), int), recent, span,
                  _num(last.get("preemptions_per_s"), float))


def _num(v, kind):
    """A scraped number, or None when it is missing, NaN, negative, huge or not a number."""
    try:
        return None if v is None or v != v else kind(v) if 0 <= float(v) < 1e18 else None
    except (TypeError, ValueError, OverflowError):
        return None


def shared_prefix_tokens(roots: Sequence[tuple]) -> tuple[int, int]:
    """(longest token prefix shared by >= 2 distinct first blocks, how many blocks share it)."""
    uniq = sorted(set(roots))
    best, count = 0, 0
    for a, b in zip(uniq, uniq[1:]):
        n = 0
        for x, y in zip(a, b):
            if x != y:
                break
            n += 1
        if n > best:
            best, count = n, 2
        elif n == best and n:
            count += 1
    return best, count


def _block_too_large(name: str, f: Forest) -> str | None:
    if len(f.root_tokens) < 2 or not f.block_size:
        return None
    shared, count = shared_prefix_tokens(list(f.root_tokens.values()))
    if MIN_SHARED_TOKENS <= shared < f.block_size:
        return (f"{name}: {count} distinct first blocks start with the same {shared} tokens, but "
                f"a block holds {f.block_size} tokens; only full blocks are cached, so this "
                f"shared prefix is never reused (its hit rate is 0). A block size of {shared} or "
                f"less, or a longer common prompt, would let requests share it.")
    return None


def _churn(name: str, f: Forest) -> str | None:
    hot = {h: n for h, n in f.restores.items() if n >= CHURN_MIN_RESTORES}
    if not hot:
        return None
    total = sum(hot.values())
    worst = max(hot.values())
    what = "1 block was" if len(hot) == 1 else f"{len(hot)} blocks were"
    return (f"{name}: {what} evicted and stored again {CHURN_MIN_RESTORES} times or more "
            f"({total} re-stores in all, at most {worst} for one block): hot prefixes are "
            f"evicted and then recomputed. The cache is smaller than the working set of "
            f"shared prefixes.")


def diagnoses(model: CacheModel, names: dict[int, str], gaps: dict[int, tuple[int, int]] | None
              = None, restarts: dict[int, int] | None = None) -> list[str]:
    """names: stream id -> label; gaps: stream id -> (gaps, lost batches); restarts: count."""
    out: list[str] = []
    for key, f in sorted(model.forests.items()):
        name = names.get(key.stream, f"stream {key.stream}")
        if key.dp_rank or key.group or key.medium != "GPU":
            name += f" (dp rank {key.dp_rank}, {key.medium}, group {key.group})"
        for msg in (_block_too_large(name, f), _churn(name, f)):
            if msg:
                out.append(msg)
        if f.unknown_removals:
            out.append(f"{name}: {f.unknown_removals} removals named blocks that were never "
                       "stored while kvviz listened (it joined late or lost batches).")
    out += _seeds(model, names)
    for sid, (n, lost) in sorted((gaps or {}).items()):
        if n:
            out.append(f"{names.get(sid, sid)}: {n} sequence gaps, {lost} batches lost; the "
                       "rebuilt cache may miss blocks (give --replay to fill gaps).")
    for sid, n in sorted((restarts or {}).items()):
        if n:
            out.append(f"{names.get(sid, sid)}: the publisher restarted {n} times (seq back "
                       "to 0); its cache was rebuilt from the restart on.")
    return out


def _seeds(model: CacheModel, names: dict[int, str]) -> list[str]:
    """Streams whose first blocks hold the same tokens but share no root hash."""
    roots: dict[int, dict[tuple, set]] = {}
    for key, f in model.forests.items():
        by_tok = roots.setdefault(key.stream, {})
        for h, tok in f.root_tokens.items():
            if tok:
                by_tok.setdefault(tok, set()).add(h)
    out = []
    ids = sorted(roots)
    for i, a in enumerate(ids):
        for b in ids[i + 1:]:
            same = roots[a].keys() & roots[b].keys()
            if same and not any(roots[a][t] & roots[b][t] for t in same):
                out.append(f"{names.get(a, a)} and {names.get(b, b)}: {len(same)} first blocks "
                           "hold the same token ids but no root hash is shared, so the two "
                           "instances hash with different seeds (set the same PYTHONHASHSEED / "
                           "hash seed) and a KV-aware router cannot match their prefixes.")
    return out


def overlap(model: CacheModel, streams: Sequence[int]) -> list[list[float]]:
    """Share of stream a's cached blocks also cached by stream b (a row per a, by hash)."""
    sets = {s: set().union(*(f.parent.keys() for _, f in model.of_stream(s))) for s in streams}
    return [[(len(sets[a] & sets[b]) / len(sets[a])) if sets[a] else 0.0 for b in streams]
            for a in streams]


def recent_counts(timeline: Sequence[tuple], end_s: float, window_s: float
                  ) -> tuple[int, int]:
    """(blocks stored, blocks evicted) over all streams in the seconds (end_s - window_s,
    end_s]; `timeline`: (stream, whole second, stored, removed) rows
    (kvviz.store.kv_reader.timeline)."""
    rows = [r for r in timeline if end_s - window_s <= r[1] + 1 <= end_s + 1]
    return sum(int(r[2] or 0) for r in rows), sum(int(r[3] or 0) for r in rows)


def usage_and_waiting(model: CacheModel, gauges: Gauges | None = None,
                      recent: tuple[int, int] | None = None, window_s: float = 30.0
                      ) -> list[str]:
    """"Usage looks low, why are requests waiting?" in plain sentences, for all GPU caches of
    the model together (one node). `recent`: (blocks stored, blocks evicted) in the last
    `window_s` seconds of the stream, when known."""
    gpu = [f for k, f in model.forests.items() if k.medium == "GPU"]
    cached = sum(len(f.parent) for f in gpu)
    out = []
    g = gauges or Gauges()
    blocks = g.usable_blocks or g.num_gpu_blocks
    if g.kv_usage is not None and blocks:
        used = round(g.kv_usage * blocks)
        if cached > used:
            idle = cached - used
            out.append(f"KV usage is {g.kv_usage:.0%} ({used:,} of {blocks:,} blocks "
                       f"in use, from /metrics), yet the event stream holds {cached:,} "
                       f"cached blocks: at least {idle:,} ({idle / cached:.0%}) of them are "
                       "held by no running request. "
                       "They are evictable prefix-cache blocks (stored, not removed, no longer "
                       "referenced); usage counts them as free, and the engine reuses them "
                       "(evicting them) as soon as it needs memory.")
    elif cached:
        tokens = sum(f.cached_tokens for f in gpu)
        out.append(f"The event stream holds {cached:,} cached blocks ({tokens:,} tokens). Events "
                   "carry no request ids or reference counts, so they cannot tell blocks in use "
                   "from evictable ones; scrape the node's /metrics (Node tab) to compare with "
                   "its KV usage.")
    if g.num_waiting:
        out.append(_waiting(g, recent, window_s))
    out += _recompute(gpu, g)
    return out


def _engine_says(g: Gauges) -> str:
    """The engine's own words on waiting and preemption (from /metrics), when it publishes
    them; "" when it does not."""
    out = []
    if g.waiting_capacity is not None or g.waiting_deferred is not None:
        out.append(f"The engine itself (vllm:num_requests_waiting_by_reason, /metrics) counts "
                   f"{g.waiting_capacity or 0} waiting for scheduling capacity (free KV blocks "
                   f"or a scheduler limit) and {g.waiting_deferred or 0} deferred by transient "
                   "constraints (LoRA budget, KV transfer).")
    if g.preempted_recent:
        over = f" over the last {g.recent_s:.0f} s of scrapes" if g.recent_s else ""
        if g.preempt_rate is not None:
            over += (f" ({g.preempted_recent / g.recent_s:.2f}/s on average; the latest "
                     f"interval alone: {g.preempt_rate:.2f}/s, the Preemptions/s figure)"
                     if g.recent_s else "")
        out.append(f"It preempted {g.preempted_recent} running request(s){over} "
                   "(vllm:num_preemptions, /metrics): a preemption happens only when a running "
                   "request needs a block and none is free, so memory did run out; a preempted "
                   "request waits to be admitted again.")
    return " ".join(out)


def _waiting(g: Gauges, recent: tuple[int, int] | None, window_s: float) -> str:
    own = _engine_says(g)
    ours = _kvviz_reading(g, recent, window_s)
    return f"{own} kvviz's reading: {ours}" if own else ours


def _kvviz_reading(g: Gauges, recent: tuple[int, int] | None, window_s: float) -> str:
    w = g.num_waiting
    if g.kv_usage is None:
        msg = f"{w} requests wait; the node reports no KV usage, so memory cannot be ruled out."
    elif g.kv_usage >= LOW_USAGE:
        msg = (f"{w} requests wait with KV usage at {g.kv_usage:.0%}: memory is the limit "
               "(admission needs free blocks")
        msg += (f"; {recent[1]:,} cached blocks were evicted in the last {window_s:.0f} s)."
                if recent and recent[1] else ").")
        return msg
    elif g.preempted_recent:
        msg = (f"{w} requests wait and KV usage is {g.kv_usage:.0%} now, but the recent "
               "preemptions show memory ran short moments ago: usage is a snapshot, and "
               "preempted requests freed their blocks when they were sent back to the queue.")
    elif g.waiting_capacity:
        free = round((1 - g.kv_usage) * g.usable_blocks) if g.usable_blocks else None
        have = f" ({free:,} blocks free)" if free is not None else ""
        msg = (f"{w} requests wait with KV usage at {g.kv_usage:.0%}{have}, and the engine "
               "says they wait for capacity: ")
        msg += _binding_limit(g) or (
            "a waiting request may need more free blocks than there are (a long prompt is "
            "admitted only when all its blocks fit), or a scheduler limit (max-num-seqs, "
            "max-num-batched-tokens) holds it; the gauges cannot tell which.")
    else:
        msg = (f"{w} requests wait while KV usage is only {g.kv_usage:.0%}: memory is not "
               "what holds them back")
        limit = _binding_limit(g)
        if limit:
            msg += "; " + limit
        else:
            msg += ("; a scheduler limit (max-num-seqs, max-num-batched-tokens, the prefill "
                    "budget) is the likely cause.")
    if recent is not None and recent[0] == 0:
        msg += (f" No block was stored in the last {window_s:.0f} s: no new full block of "
                "prompt or output was computed, so admission has stalled, not slowed.")
    return msg


def _binding_limit(g: Gauges) -> str:
    """The scheduler limit that binds, named from the node's config (max_running) or, without
    it, from a flat running count; "" when neither says."""
    run = g.num_running
    if g.max_running and run is not None and run >= g.max_running:
        return (f"{run} requests run, the node's max-num-seqs of {g.max_running} (its config): "
                "that limit binds, and admission waits for a running request to finish.")
    if g.max_running and run is not None:
        return ""
    if g.running_flat and run:
        return (f"{run} requests have run in every recent scrape, a flat maximum, as a "
                f"max-num-seqs of {run} would give: that limit most likely binds.")
    return ""


def _recompute(gpu: list[Forest], g: Gauges) -> list[str]:
    stored = sum(f.stored for f in gpu)
    again = sum(sum(f.restores.values()) for f in gpu)
    if stored < RECOMPUTE_MIN_STORES or again < RECOMPUTE_SHARE * stored:
        return []
    msg = (f"{again:,} of {stored:,} stored blocks ({again / stored:.0%}) had been stored "
           "before and evicted: their prefill was computed again (remove churn).")
    if g.num_waiting and g.kv_usage is not None and g.kv_usage < LOW_USAGE:
        msg += (" Usage is low, so running requests are not short of memory: free blocks "
                "are reused oldest first, and these prefixes were not used again before their "
                "turn came. A larger KV pool or fewer distinct prefixes would keep them.")
    else:
        msg += " The cache is smaller than the prefixes in use; more KV memory would keep them."
    return [msg]
