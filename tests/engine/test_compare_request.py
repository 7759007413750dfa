"""kvviz.engine.compare: a typed request in, one summary per lane out; uploads are validated."""
from __future__ import annotations

import numpy as np
import pytest

from kvviz.core.config import CacheConfig, LaneSpec
from kvviz.core.errors import TraceError
from kvviz.engine import Simulation
from kvviz.engine import compare as cmp

LANES = ("contiguous:first-fit:max", "paged:16")
SMALL = cmp.SyntheticWorkload("sharegpt-like", num_requests=60, rate=30.0, seed=4)


def test_compare_returns_the_simulations_summaries_in_lane_order() -> None:
    result = cmp.compare(cmp.CompareRequest(SMALL, 8192, LANES))
    loaded = cmp.load_workload(SMALL)
    direct = Simulation(loaded.workload, [LaneSpec.parse(x) for x in LANES],
                        CacheConfig(capacity_tokens=8192), loaded.engine).run()
    assert result.lanes == LANES and [s["lane"] for s in result.summaries] == list(LANES)
    for got, want in zip(result.summaries, direct):
        assert got["steps"] == want["steps"] and got["finished"] == want["finished"] == 60
        assert got["admit_failures"] == want["admit_failures"]
    assert result.step_ms == cmp.ENGINE.step_ms


def test_a_lane_alone_gives_the_same_summary_as_beside_others() -> None:
    both = cmp.compare(cmp.CompareRequest(SMALL, 4096, LANES))
    alone = cmp.compare(cmp.CompareRequest(SMALL, 4096, LANES[1:]))
    for key in ("steps", "finished", "preemptions", "admit_failures", "used_share"):
        assert alone.summaries[0][key] == both.summaries[1][key]


def test_rate_zero_puts_every_arrival_at_t0_and_requests_are_frozen() -> None:
    w = cmp.load_workload(cmp.SyntheticWorkload(num_requests=20, rate=0.0)).workload
    assert np.all(w.arrival_s == 0.0)
    with pytest.raises(AttributeError):
        SMALL.seed = 1  # frozen: a request never changes once built


def test_a_trace_runs_under_its_own_max_seq_len() -> None:
    data = b'{"arrival_s": 0, "prompt_tokens": 3000, "output_tokens": 9}\n' * 3
    loaded = cmp.load_workload(cmp.UploadedTrace("t.jsonl", data))
    assert loaded.engine.max_seq_len == 3009 and loaded.upload.info.rows_kept == 3
    clipped = cmp.load_workload(cmp.UploadedTrace("t.jsonl", data, max_seq_len=1024))
    assert clipped.engine.max_seq_len == 1024 and clipped.workload.clipped == 3


def test_the_scheduler_limits_are_the_lanes_engine() -> None:
    """A request's limits reach every lane: the same run as a Simulation under that engine,
    and a tighter batch limit or a watermark changes what the paged lane does."""
    from dataclasses import replace

    from kvviz.core.config import EngineConfig

    loaded = cmp.load_workload(SMALL)
    assert cmp.engine_for(cmp.CompareRequest(SMALL, 4096), loaded) == loaded.engine  # vLLM's
    tight = cmp.SchedulerLimits(max_num_seqs=4, max_num_batched_tokens=2048,
                                enable_chunked_prefill=False, watermark=0.1)
    got = cmp.compare(cmp.CompareRequest(SMALL, 4096, ("paged:16",), tight)).summaries[0]
    engine = EngineConfig(max_num_seqs=4, max_batched_tokens=2048, enable_chunked_prefill=False,
                          watermark=0.1, max_seq_len=loaded.engine.max_seq_len)
    direct = Simulation(loaded.workload, [LaneSpec.parse("paged:16")],
                        CacheConfig(capacity_tokens=4096), engine).run()[0]
    for key in ("steps", "finished", "preemptions", "admit_failures"):
        assert got[key] == direct[key]
    plain = cmp.compare(cmp.CompareRequest(SMALL, 4096, ("paged:16",))).summaries[0]
    assert got["steps"] > plain["steps"]  # 4 at a time take longer than 256
    with pytest.raises(ValueError, match="^max_batched_tokens: 100 is below max_seq_len"):
        cmp.compare(cmp.CompareRequest(SMALL, 4096, ("paged:16",), replace(
            tight, max_num_batched_tokens=100)))


def test_a_bad_lane_is_one_value_error() -> None:
    with pytest.raises(ValueError, match="paged:zero"):
        cmp.compare(cmp.CompareRequest(SMALL, 4096, ("paged:zero",)))


# ---- uploads ----------------------------------------------------------------------------
GOOD = b"arrival_s,prompt_tokens,output_tokens\n0.0,10,20\n0.5,30,5\n"


def test_a_good_upload_parses() -> None:
    w = cmp.read_upload_info("t.csv", GOOD).workload
    assert len(w) == 2 and w.prompt.tolist() == [10, 30]
    jl = b'{"arrival_s": 0, "prompt_tokens": 4, "output_tokens": 2}\n'
    assert len(cmp.read_upload_info("t.jsonl", jl).workload) == 1


@pytest.mark.parametrize("name, data, words", [
    ("t.csv", GOOD + b"1.0,abc,3\n", "line 4: column 'prompt_tokens': not a valid value"),
    ("t.csv", b"arrival_s,prompt_tokens\n0,1\n", "line 1: header lacks output_tokens"),
    ("t.jsonl", b'{"arrival_s": 0, "prompt_tokens": 4}\n', "line 1: column 'output_tokens'"),
    ("t.csv", GOOD + b"\xff\xfe,1,1\n", "line 4: not UTF-8"),
    ("t.txt", GOOD, "expected a .csv or .jsonl"),
    ("t.csv", b"arrival_s,prompt_tokens,output_tokens\n", "no requests"),
])
def test_bad_uploads_name_line_and_field(name, data, words) -> None:
    with pytest.raises(TraceError, match=words):
        cmp.read_upload_info(name, data)


def test_upload_size_and_row_caps() -> None:
    with pytest.raises(TraceError, match="over the 0 MB limit"):
        cmp.read_upload_info("t.csv", GOOD, max_bytes=10)
    rows = b"arrival_s,prompt_tokens,output_tokens\n" + b"0,1,1\n" * (cmp.MAX_UPLOAD_ROWS + 2)
    with pytest.raises(TraceError, match="more than"):
        cmp.read_upload_info("t.csv", rows)


