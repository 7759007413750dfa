"""Properties over random traces with branching hash chains (hypothesis)."""
from __future__ import annotations

import json

from hypothesis import given, settings
from hypothesis import strategies as st

from kvviz.core.config import CacheConfig, EngineConfig, LaneSpec, model_preset
from kvviz.core.workload import dump_trace
from kvviz.engine import Simulation
from kvviz.traces import read_trace_bytes


@st.composite
def chain_traces(draw, blocks=(4, 8, 12)) -> tuple[bytes, int]:
    """JSONL with hash chains, each request extending an earlier chain: Mooncake for 512-token
    blocks, else kvviz's JSONL with its hash_block."""
    block = draw(st.sampled_from(blocks))
    n = draw(st.integers(2, 18))
    chains: list[list[int]] = []
    rows = []
    fresh = 1000
    for i in range(n):
        base: list[int] = []
        if chains and draw(st.booleans()):
            parent = chains[draw(st.integers(0, len(chains) - 1))]
            base = parent[: draw(st.integers(0, len(parent)))]
        own = draw(st.integers(0 if base else 1, 5))
        chain = base + list(range(fresh, fresh + own))
        fresh += own
        prompt = (len(chain) - 1) * block + draw(st.integers(1, block))
        chains.append(chain)
        rows.append({"timestamp": i * draw(st.integers(0, 300)) + i, "input_length": prompt,
                     "output_length": draw(st.integers(1, 40)), "hash_ids": chain})
    times = sorted(r["timestamp"] for r in rows)
    for r, t in zip(rows, times):
        r["timestamp"] = t
    if block != 512:
        rows = [{"arrival_s": r["timestamp"] / 1000, "prompt_tokens": r["input_length"],
                 "output_tokens": r["output_length"], "hash_ids": r["hash_ids"],
                 "hash_block": block} for r in rows]
    return "".join(json.dumps(r) + "\n" for r in rows).encode(), block


LANES = ["paged:2:prefix", "paged:4:prefix", "paged:8:prefix", "paged:16:prefix",
         "paged:16", "contiguous:first-fit:max"]


LANES_512 = ["paged:16:prefix", "paged:512:prefix", "paged:768:prefix", "paged:1024:prefix",
             "paged:16", "contiguous:first-fit:max"]


def simulation(w, capacity: int, lanes=tuple(LANES)) -> Simulation:
    cache = CacheConfig(capacity_tokens=capacity, model=model_preset("tiny-cpu"))
    return Simulation(w, [LaneSpec.parse(x) for x in lanes], cache,
                      EngineConfig(max_seq_len=int(w.final_len.max()), max_num_seqs=8))


def summaries(sim: Simulation) -> list[dict]:
    rows = sim.run()
    for r in rows:
        r.pop("wall_seconds")
    return rows


@settings(max_examples=25, deadline=None)
@given(chain_traces(blocks=(512, 8)), st.integers(24, 128))
def test_the_same_requests_in_kvviz_format_give_identical_results(tmp_path_factory, trace,
                                                                  blocks):
    raw, block = trace
    w, _ = read_trace_bytes(raw, "m.jsonl")
    path = tmp_path_factory.mktemp("t") / "k.jsonl"
    dump_trace(w, path)
    back, info = read_trace_bytes(path.read_bytes(), "k.jsonl")
    assert info.fmt == "kvviz-jsonl"
    lanes = LANES_512 if block == 512 else LANES
    capacity = blocks * block
    a = summaries(simulation(w, capacity, lanes))
    assert a == summaries(simulation(back, capacity, lanes))


def token(w, chains, seq: int, t: int):
    """What token t of request seq is: named by its chain block, else the request's own."""
    ptr, ids, block = chains
    chain = ids[ptr[seq] : ptr[seq + 1]]
    if t < w.prompt[seq] and t // block < chain.size:
        return (int(chain[t // block]), t)
    return ("own", seq, t)


@settings(max_examples=25, deadline=None)
@given(chain_traces(), st.integers(128, 1024))
def test_a_lane_never_shares_a_block_whose_content_differs(trace, capacity):
    raw, _ = trace
    w, _ = read_trace_bytes(raw, "m.jsonl")
    chains = w.chains()
    sim = simulation(w, capacity)
    first_seen: dict[tuple, tuple] = {}  # per lane and prefix key: content first seen
    while not sim.finished and sim.step_no < 20_000:
        sim.step()
        for lane in sim.lanes:
            if not getattr(lane.alloc, "prefix_caching", False):
                continue
            a, bs = lane.alloc, lane.alloc.block_size
            content: dict[int, tuple] = {}
            for s in lane.run_ids.tolist():
                n = a.seq_len(s)
                for j, b in enumerate(a.block_table(s).tolist()):
                    got = tuple(token(w, chains, s, t) for t in range(j * bs, min(n, (j + 1) * bs)))
                    p = lane.pool
                    if p.ref_cnt[b] > 1:  # shared by live sequences: the same tokens
                        assert content.setdefault(b, got) == got
                    key = (int(p.block_hash[b]), int(p.block_end[b]))  # its prefix key
                    if key[0]:  # a cached prefix block: what its key names
                        assert first_seen.setdefault((lane.name, key), got) == got
    assert sim.finished
