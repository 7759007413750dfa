"""Quiet spans in prefix-caching lanes while requests wait (kvviz/engine/span.py,
kvviz/engine/prefixhead.py) give exactly stepping's results: the head of the queue, refused
at every step of the span for the same reason, its prefix hits in the cache the span's
decodes evict from (block maps, free queue and prefix cache in their order, events)."""
from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from kvviz.core.config import CacheConfig, EngineConfig, WorkloadConfig
from kvviz.core.workload import generate
from kvviz.engine import span
from tests.engine.test_span_equivalence import SETTINGS, assert_same

# (prefix_share, capacity, max_num_seqs, watermark, rate, block): heads refused for memory
# (CAPACITY) and for the watermark or max_num_seqs (POLICY) while the decodes evict
CASES = [(0.9, 8192, 256, 0.05, 40.0, 16), (0.9, 8192, 256, 0.2, 40.0, 1),
         (0.5, 4096, 16, 0.0, 5.0, 16), (0.9, 2048, 256, 0.2, 5.0, 16),
         (0.5, 8192, 16, 0.05, 40.0, 1)]


def _waiting_spans(monkeypatch) -> list[int]:
    """Counts the quiet spans taken while someone waits (not an equivalence check)."""
    seen = []
    real = span.advance

    def advance(lane, m, pressure, time_s):
        if lane.sched.caching and lane.waiting_count:
            seen.append(m)
        real(lane, m, pressure, time_s)

    monkeypatch.setattr(span, "advance", advance)
    return seen


def test_prefix_spans_while_the_head_waits(monkeypatch):
    seen = _waiting_spans(monkeypatch)
    for share, cap, seqs, wm, rate, bs in CASES:
        for seed in (1, 2):
            w = generate(WorkloadConfig("sharegpt-like", num_requests=60, rate=rate, seed=seed,
                                        prefix_share=share, max_seq_len=1024))
            assert_same(w, [f"paged:{bs}:prefix"], CacheConfig(capacity_tokens=cap),
                        EngineConfig(max_seq_len=1024, max_num_seqs=seqs, watermark=wm),
                        [30, 200])
    assert len(seen) > 50 and max(seen) > 10


@settings(SETTINGS, max_examples=25)
@given(st.data())
def test_prefix_lanes_under_pressure_give_the_step_engines_results(data):
    w = generate(WorkloadConfig(
        data.draw(st.sampled_from(["sharegpt-like", "alpaca-like", "uniform"])),
        num_requests=data.draw(st.integers(5, 50)),
        rate=data.draw(st.sampled_from([float("inf"), 5.0, 40.0])),
        prefix_share=data.draw(st.sampled_from([0.5, 0.9, 1.0])),
        prefix_tokens=data.draw(st.sampled_from([16, 64, 256])), max_seq_len=1024,
        seed=data.draw(st.integers(0, 99))))
    engine = EngineConfig(max_seq_len=1024, max_num_seqs=data.draw(st.sampled_from([8, 256])),
                          watermark=data.draw(st.sampled_from([0.0, 0.05, 0.2])))
    cap = data.draw(st.sampled_from([1024, 2048, 4096, 8192]))
    lane = data.draw(st.sampled_from(["paged:1:prefix", "paged:4:prefix", "paged:16:prefix"]))
    assert_same(w, [lane], CacheConfig(capacity_tokens=cap), engine,
                data.draw(st.lists(st.integers(1, 2000), max_size=3)))
