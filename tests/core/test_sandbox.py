"""kvviz.core.sandbox: whatever the parser does, the parent survives and gets one clear message.

The parsers below run in the child; they are module-level so that it can import them.
"""
from __future__ import annotations

import os
import signal

import numpy as np
import pytest

from kvviz.core.errors import KvvizError
from kvviz.core.sandbox import SandboxError, run_limited, run_limited_outcome


def parse_ok(text: str, n: int) -> dict:
    return {"words": text.split(), "squares": np.arange(n, dtype=np.int64) ** 2,
            "pair": (1, 2.5), "nested": {"none": None, "flag": True}}


def grow_forever() -> None:
    chunks = []
    while True:
        chunks.append(bytearray(16 << 20))


def spin_forever() -> None:
    x = 0
    while True:
        x += 1


def sleep_forever() -> None:
    import time

    while True:
        time.sleep(1)


def abort_now() -> None:
    os.abort()


def segfault_now() -> None:
    os.kill(os.getpid(), signal.SIGSEGV)


def refuse_input(name: str) -> None:
    raise ValueError(f"{name}: line 3: expected a number, got 'x'")


def return_object() -> object:
    return object()


def test_normal_parse_returns_plain_data_and_arrays():
    out = run_limited(parse_ok, "a b c", 5)
    assert out["words"] == ["a", "b", "c"]
    assert out["squares"].dtype == np.int64 and out["squares"].tolist() == [0, 1, 4, 9, 16]
    assert out["pair"] == [1, 2.5] and out["nested"] == {"none": None, "flag": True}


def test_unbounded_allocation_is_the_memory_limit():
    with pytest.raises(SandboxError, match="ran out of its 256 MiB memory limit") as e:
        run_limited(grow_forever, mem_mb=256, wall_s=30)
    assert e.value.kind == "memory"


def test_peak_memory_is_the_childs_own_and_stays_near_its_limit():
    out = run_limited_outcome(grow_forever, mem_mb=256, wall_s=30)
    assert out.error is not None and 200 * 2**20 < out.peak_rss_bytes < (256 + 200) * 2**20
    small = run_limited_outcome(parse_ok, "a", 1)  # not the parent's memory (fork + exec)
    assert small.error is None and small.peak_rss_bytes < 200 * 2**20


def test_endless_loop_is_the_cpu_limit():
    with pytest.raises(SandboxError, match="used more than its 1 s of CPU") as e:
        run_limited(spin_forever, cpu_s=1, wall_s=30)
    assert e.value.kind == "cpu"


def test_a_blocked_parser_meets_the_wall_clock_deadline():
    with pytest.raises(SandboxError, match="took longer than 1.5 s") as e:
        run_limited(sleep_forever, wall_s=1.5)
    assert e.value.kind == "timeout"


@pytest.mark.parametrize("func, sig", [(abort_now, "signal 6, SIGABRT"),
                                       (segfault_now, "signal 11, SIGSEGV")])
def test_a_crash_is_a_message_with_the_signal(func, sig):
    with pytest.raises(SandboxError, match=f"^x.bin: the parser crashed \\({sig}\\)") as e:
        run_limited(func, label="x.bin")
    assert e.value.kind == "signal"


def test_the_parsers_own_error_comes_back_unchanged():
    with pytest.raises(SandboxError) as e:
        run_limited(refuse_input, "t.csv", label="upload")
    assert str(e.value) == "t.csv: line 3: expected a number, got 'x'"
    assert e.value.kind == "error" and e.value.error_type == "ValueError"
    assert isinstance(e.value, KvvizError)  # the CLI and the pages show it as a message


def test_a_result_that_is_not_plain_data_is_refused():
    with pytest.raises(SandboxError, match="not plain data"):
        run_limited(return_object)


def test_only_module_level_functions_are_accepted():
    with pytest.raises(ValueError, match="module-level"):
        run_limited(lambda: 1)


@pytest.mark.parametrize("bad", [{"mem_mb": 0}, {"cpu_s": float("inf")},
                                 {"wall_s": float("nan")}])
def test_limits_must_be_finite_and_positive(bad):
    with pytest.raises(ValueError, match="finite number > 0"):
        run_limited(parse_ok, "", 0, **bad)
