"""The Learn story's later steps: prefix sharing, preemption and POLICY.

Each is produced like the first steps: prefix sharing by a paged KVPool with its prefix
cache; preemption and POLICY by the engine itself (kvviz.engine.Simulation, one lane of
blocks of 4, stepped one step at a time), so the pictures, the evicted sequence and the
refusal record are what the engine did, not a drawing.
"""
from __future__ import annotations

import numpy as np

from kvviz.core.admission import Admission, Reason
from kvviz.core.blockmap import BlockMap
from kvviz.core.config import CacheConfig, EngineConfig, LaneSpec
from kvviz.core.workload import Workload
from kvviz.engine import Simulation
from kvviz.engine.kvpool import KVPool, Prefix
from kvviz.story.record import Step

PAGE, SLOTS = 4, 32
PREFIX = 8  # tokens of the shared system prompt (two blocks of 4)
E, F, G = 4, 5, 6
PREFIX_NAMES = {E: "E", F: "F", G: "G"}
PREEMPT_NAMES = {0: "P", 1: "Q", 2: "R"}
POLICY_NAMES = {0: "K", 1: "L", 2: "M"}
BATCH_LIMIT = 2  # max_num_seqs of the POLICY step
M_PROMPT = 9  # tokens of M's prompt


def _blocks(bm: BlockMap, seq: int) -> str:
    return ", ".join(str(b) for b in np.flatnonzero(bm.owner == seq))


def prefix_step() -> Step:
    p = KVPool(LaneSpec("paged", PAGE, prefix_caching=True), SLOTS, chain_block=PREFIX)
    key = Prefix((0,), PREFIX)  # one chain block: the system prompt's PREFIX tokens
    p.admit(E, 11, prefix=key)
    p.admit(F, 10, prefix=key)
    shared = p.snapshot()
    hit_f = p.prefix_hit_tokens
    p.release(E)
    p.release(F)
    cached = p.snapshot()
    p.admit(G, 9, prefix=key)
    reused = p.snapshot()
    both = np.flatnonzero(shared.refcount > 1)
    kept = np.flatnonzero(cached.cached)
    text = (
        f"E and F start with the same {PREFIX}-token system prompt. With a prefix cache, "
        f"F does not write those {PREFIX} tokens again: its block table points at E's blocks "
        f"{', '.join(map(str, both))} (purple, **shared prefix**: two holders, refcount 2; "
        "labelled E+1, E and one more), "
        f"and F takes only one block of its own. {hit_f} of F's 10 prompt tokens came from "
        "the cache. When E and F finish, the shared blocks are free but keep their content "
        f"(green, **cached**: blocks {', '.join(map(str, kept))}); G arrives with the same "
        f"prompt and reuses them: {p.prefix_hit_tokens - hit_f} of its 9 tokens are hits. "
        "A cached block is free memory: a request that needs the room evicts it.")
    return Step("prefix", "Prefix sharing: one copy of a common prompt", text,
                pictures=((f"E and F share blocks {', '.join(map(str, both))}", shared),
                          ("E and F finished: their prompt stays cached", cached),
                          (f"G reuses the cached blocks: G holds {_blocks(reused, G)}",
                           reused)),
                names=PREFIX_NAMES)


def _workload(prompt: list[int], output: list[int]) -> Workload:
    n = len(prompt)
    return Workload(np.zeros(n), np.array(prompt, np.int64), np.array(output, np.int64),
                    np.full(n, -1, np.int64))


def _engine(w: Workload, **engine) -> Simulation:
    return Simulation(w, [LaneSpec("paged", PAGE)], CacheConfig(SLOTS),
                      EngineConfig(watermark=0.0, max_seq_len=64, **engine), advance="step")


def _step_events(sim: Simulation) -> list:
    return [e for e in sim.events.events if e.step == sim.step_no]


def preemption_step() -> Step:
    sim = _engine(_workload([11, 7, 11], [8, 8, 8]))
    lane = sim.lanes[0]
    full = None
    evicted: list = []
    while not evicted and sim.step_no < 20:
        before = lane.snapshot()
        sim.step()
        evicted = [e for e in _step_events(sim) if e.kind == "preempted"]
        if evicted:
            full = before
    if full is None:  # the engine's rule changed: the story's numbers must change with it
        raise RuntimeError("story: the preemption step saw no preemption")
    after = lane.snapshot()
    victim = PREEMPT_NAMES[evicted[0].seq_id]
    free = np.flatnonzero(after.is_free)
    grew = "; ".join(
        f"{name} took block {', '.join(map(str, new))}" for seq, name in PREEMPT_NAMES.items()
        if (new := np.flatnonzero((after.owner == seq) & (full.owner != seq))).size)
    text = (
        f"P, Q and R run; every one of the {SLOTS // PAGE} blocks is full. The next decode "
        "step needs one more slot for each of them, and no block is free. The engine "
        "(the same rule as vLLM's) **preempts** the request admitted last, "
        f"**{victim}**: it releases all of {victim}'s blocks and puts {victim} back in the "
        f"queue, to be written again (recomputed) when memory frees up. The others grow "
        f"into {victim}'s blocks ({grew}); block{'s' if free.size != 1 else ''} "
        f"{', '.join(map(str, free)) or 'none'} stay{'s' if free.size == 1 else ''} free. "
        "Preemption is the price of admitting without reserving: more requests run at once, "
        "and sometimes one has to give its memory back.")
    return Step("preempt", "Preemption: when running requests outgrow the free blocks", text,
                pictures=(("Every block full: each request needs one more slot", full),
                          (f"{victim} preempted: {grew}", after)),
                names=PREEMPT_NAMES)


def policy_step() -> Step:
    sim = _engine(_workload([6, 5, M_PROMPT], [8, 8, 8]), max_num_seqs=BATCH_LIMIT)
    sim.step()
    refused = next(e for e in _step_events(sim) if e.kind == "admit_failed")
    if refused.reason != "POLICY":
        raise RuntimeError(f"story: M was refused for {refused.reason}, not POLICY")
    adm = Admission(False, Reason.POLICY, int(refused.need_tokens), int(refused.free_tokens),
                    int(refused.largest_hole_tokens))
    text = (
        f"K, L and M arrive together. The scheduler runs at most {BATCH_LIMIT} requests at "
        f"once (vLLM's max_num_seqs), so it refuses M although M's {adm.need_tokens} slots "
        f"({M_PROMPT} tokens rounded up to blocks) fit easily: {adm.free_tokens} slots are "
        f"free and the largest hole has {adm.largest_hole_tokens}. That is a **POLICY** refusal: "
        "memory was there, a rule of the scheduler said no (a batch limit, or a watermark of "
        "free blocks kept back for running requests to grow into). More memory would not "
        "help; a different limit would.")
    return Step("policy", "POLICY: memory is free, the scheduler says no", text,
                pictures=((f"K and L run; M waits ({adm.free_tokens} slots free)",
                           sim.lanes[0].snapshot()),),
                names=POLICY_NAMES, admission=adm, asked_tokens=M_PROMPT, who="M")


def steps() -> list[Step]:
    return [prefix_step(), preemption_step(), policy_step()]
