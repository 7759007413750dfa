"""#37.5: numba wraps integers silently, so the compiled rule's counters are int64. A 10M-request
run whose token counts pass 2^31 (prompt tokens, prefix-cache queries and hits, slot-steps)
must count every one of them: each counter is checked against what the stream implies."""
from __future__ import annotations

import numpy as np

from kvviz.core.config import EngineConfig, LaneSpec
from kvviz.core.workload import Workload
from kvviz.engine.lane import Lane
from kvviz.engine.rule import state as S

N = 10_000_000
# every prompt starts with one 240-token system prompt: 15 blocks of 16 shared by every
# running request, 1,024 holders each, all leaving together each step
BLOCK = 16
PROMPT, SHARED, OUTPUT = 256, 240, 1
SEQS = 1024  # admitted per step: one step each, prefill and its one output token
INT32 = 2**31


def test_ten_million_requests_count_past_two_to_the_31() -> None:
    w = Workload(arrival_s=np.zeros(N), prompt=np.full(N, PROMPT, np.int64),
                 output=np.full(N, OUTPUT, np.int64), prefix_group=np.zeros(N, np.int64),
                 prefix_tokens=SHARED)
    engine = EngineConfig(max_num_seqs=SEQS, max_batched_tokens=SEQS * PROMPT,
                          max_seq_len=PROMPT + OUTPUT)
    capacity = SEQS * (PROMPT + BLOCK)  # every running request fits: no preemption
    spec = f"paged:{BLOCK}:prefix"
    lane = Lane(spec, LaneSpec.parse(spec), w, engine, capacity,
                steps=np.zeros(N, np.int64))
    until = 0
    while not lane.finished:
        until += 2_000
        lane.run(until_step=until)
        lane.drain(0, (spec,))  # keep the event columns small

    c = lane.pool.c
    steps = -(-N // SEQS)
    assert lane.step_no == steps
    assert (lane.done, lane.rejected, lane.preemptions) == (N, 0, 0)
    assert lane.tokens_generated == N * OUTPUT
    # every admission looks its whole prompt up; all but the first step's requests find the
    # shared prefix cached (the first request of the run stores it: vLLM caches full blocks
    # as it allocates them, so the ones after it in the same step hit too)
    assert int(c[S.QUERY_TOKENS]) == N * PROMPT > INT32
    assert (N - 1) * SHARED <= lane.prefix_hit_tokens <= N * SHARED
    assert lane.prefix_hit_tokens > INT32
    # slot-steps: each step's used + reserved + internal + free + tail is the capacity
    every = lane.pool.shares[0]
    assert int(every[0]) == steps
    assert int(every[1:].sum()) == steps * lane.capacity > INT32
    assert (every >= 0).all() and int(lane.pool.c.min()) >= -1  # -1: "none" markers only
