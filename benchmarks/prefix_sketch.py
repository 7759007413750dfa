"""A sketch of a prefix-aware walk, for its cost only: NOT exact, not kvviz's engine.

bench_prefix_floor.py times it on the vLLM benchmark's prefix-sharing stream, beside kvviz's
engine, to say how fast a pure-Python walk that models the prefix cache step by step could
be at best. It keeps what such a walk would keep and nothing more:

- decoding requests by the residue of the step at which they open a block (each decodes one
  token per step, so it opens a block every block_size steps): a step touches only those;
- the free blocks as vLLM's queue sees them: a stack of plain blocks (taken first) and an
  OrderedDict of cached free blocks, least recently freed first (evicted next);
- key -> block and block -> key; a request's keys past its prompt's shared chain are
  (request, block) pairs, never hashed (they can equal no other request's key);
- a finish step per running request; FCFS admission with hits of whole cached blocks (never
  the last known token), the seat and token limits and recompute preemption of the tail.

What it leaves out (so a real walk costs more): chunked prefill (a prompt is prefilled whole
when the budget allows), a block cached one step late (at the step after it fills), no
watermark, no events, no shares, no block tables, nothing written back.
"""
from __future__ import annotations

from collections import OrderedDict, deque

import numpy as np

from kvviz.core.workload import Workload
from kvviz.engine.tokens import BlockKeys


def walk(w: Workload, arrive: list[int], num_blocks: int, bs: int = 16, seats: int = 256,
         budget: int = 8192) -> dict:
    """Run the stream (arrive: each request's first step) to the end; returns its totals."""
    keys = BlockKeys(w, bs)
    reach = keys._reach  # blocks each request's shared chain reaches
    prompt, output = w.prompt.tolist(), w.output.tolist()
    n = len(prompt)
    known, gen = prompt[:], [0] * n
    blocks: list = [None] * n
    plain = list(range(num_blocks - 1, -1, -1))
    lru: OrderedDict[int, None] = OrderedDict()
    cached: dict = {}
    key_of: list = [None] * num_blocks
    ref = [0] * num_blocks
    running: dict[int, tuple[int, int]] = {}  # r -> (step it joined, slots then)
    bucket: list[dict[int, None]] = [{} for _ in range(bs)]
    fin_of, fin_at = [0] * n, {}
    waiting: deque[int] = deque()
    nxt = t = done = preempted = evicted = hit_tokens = queried = 0
    short = short_need = None

    def take() -> int:
        nonlocal evicted
        if plain:
            return plain.pop()
        b = lru.popitem(last=False)[0]
        k = key_of[b]
        if cached.get(k) == b:
            del cached[k]
        key_of[b] = None
        evicted += 1
        return b

    def release(r: int) -> None:
        for b in reversed(blocks[r]):
            ref[b] -= 1
            if not ref[b]:
                if key_of[b] is not None:
                    lru[b] = None
                else:
                    plain.append(b)
        blocks[r] = None

    def leave(r: int) -> None:
        t0, c0 = running.pop(r)
        bucket[(t0 - c0) % bs].pop(r, None)
        release(r)

    while done < n:
        t += 1
        while nxt < n and arrive[nxt] <= t:
            waiting.append(nxt)
            nxt += 1
        if not running and not waiting:
            t = arrive[nxt] - 1
            continue
        pre = False
        for r in list(bucket[t % bs]):  # the decodes that open a block, in running order
            if r not in running:
                continue
            while not plain and not lru:  # preempt the tail until r fits or leaves
                v = next(reversed(running))
                t0 = running[v][0]
                fin_at[fin_of[v]].discard(v)
                gen[v] += t - 1 - t0
                known[v] = prompt[v] + gen[v]
                leave(v)
                waiting.appendleft(v)
                preempted += 1
                pre = True
                if v == r:
                    break
            if r not in running:
                continue
            bl = blocks[r]
            j = len(bl)
            if j:  # the block it filled at the last step: cached now
                k = (r, j - 1) if j > reach[r] else keys.upto(r, reach[r])[j - 1]
                key_of[bl[-1]] = k
                cached.setdefault(k, bl[-1])
            b = take()
            ref[b] = 1
            bl.append(b)
        while not pre and waiting and len(running) < seats:  # admissions, FCFS
            left = budget - len(running)
            r = waiting[0]
            free = len(plain) + len(lru)
            if short == r and free < short_need:
                break
            kn, rc = known[r], reach[r]
            chain = keys.upto(r, rc) if rc else ()
            hits = []
            for j in range((kn - 1) // bs):
                b = cached.get(chain[j] if j < rc else (r, j))
                if b is None:
                    break
                hits.append(b)
            nblk, full = -(-kn // bs), kn // bs
            need = nblk - len(hits) + sum(1 for b in hits if not ref[b])
            if need > free or kn - len(hits) * bs > left:
                short, short_need = r, need
                break
            short = None
            waiting.popleft()
            queried += kn
            hit_tokens += len(hits) * bs
            for b in hits:
                if not ref[b]:
                    del lru[b]
                ref[b] += 1
            bl = blocks[r] = hits[:]
            for j in range(len(hits), nblk):
                b = take()
                ref[b] = 1
                bl.append(b)
                if j < full:
                    k = chain[j] if j < rc else (r, j)
                    key_of[b] = k
                    cached.setdefault(k, b)
            gen[r] += 1  # the prefill samples the first token; decodes from t + 1
            known[r] = kn + 1
            running[r] = (t, kn - 1)
            bucket[(t - kn + 1) % bs][r] = None
            fin_of[r] = f = t + output[r] - gen[r]
            if f <= t:
                leave(r)
                done += 1
            else:
                fin_at.setdefault(f, set()).add(r)
        for r in fin_at.pop(t, ()):
            leave(r)
            keys.forget(r)
            done += 1
    return {"steps": t, "preemptions": preempted, "finished": done, "evicted": evicted,
            "hit_rate": hit_tokens / max(1, queried)}


def arrival_steps(w: Workload, step_ms: float) -> list[int]:
    """Each request's first step, as bench_engine.py's vLLM case gives them to vLLM."""
    return [max(1, int(np.ceil(t * 1000.0 / step_ms))) for t in w.arrival_s.tolist()]
