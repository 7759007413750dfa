"""The advisor's kernel side (kvviz/runs/kernelbench.py): command, output, disk cache."""
from __future__ import annotations

import json
import subprocess

import pytest

from kvviz.runs import kernelbench
from kvviz.runs.kernelbench import BenchError, KernelPoint

KERNEL = {1: 10.0, 4: 3.0, 16: 1.05, 64: 1.0, 256: 1.0}  # block size -> ms


def test_bench_command_fixes_and_names_threads_and_rounds() -> None:
    cmd = kernelbench.bench_command("cpu", threads=3)
    assert cmd[cmd.index("--threads") + 1] == "3" and "--rounds" in cmd
    res = kernelbench.BenchResult((), {"machine": "x86_64", "torch": "2.13.0"}, "", False)
    assert kernelbench.describe(cmd, res) == ("cpu (x86_64, torch 2.13.0, 3 torch threads, median "
                                          "of 60 runs per block size)")


def test_parse_bench_output_skips_noise_and_sorts() -> None:
    text = "\n".join([
        "warming up", json.dumps({"block_size": 16, "paged_ms": 2.0, "contiguous_ms": 1.0}),
        "{not json", json.dumps({"block_size": 1, "paged_ms": 9.0, "contiguous_ms": 1.0}),
        json.dumps({"other": 1})])
    assert kernelbench.parse_bench_output(text) == (KernelPoint(1, 9.0, 1.0),
                                                KernelPoint(16, 2.0, 1.0))
    with pytest.raises(BenchError):
        kernelbench.parse_bench_output("nothing here\n")


class FakeRunner:
    def __init__(self, stdout: str = "", returncode: int = 0, exc: Exception | None = None):
        self.calls = 0
        self.stdout, self.returncode, self.exc = stdout, returncode, exc

    def __call__(self, cmd, **kw) -> subprocess.CompletedProcess:
        self.calls += 1
        if self.exc is not None:
            raise self.exc
        return subprocess.CompletedProcess(cmd, self.returncode, self.stdout, "boom: no torch")


GOOD = "\n".join(json.dumps({"block_size": b, "paged_ms": t, "contiguous_ms": 1.0})
                 for b, t in KERNEL.items())


def test_measure_runs_once_then_reads_the_cache(tmp_path) -> None:
    cmd = kernelbench.bench_command("cpu")
    run = FakeRunner(GOOD)
    first = kernelbench.measure(cmd, tmp_path, runner=run)
    second = kernelbench.measure(cmd, tmp_path, runner=run)
    assert run.calls == 1 and not first.from_cache and second.from_cache
    assert second.points == first.points and len(first.points) == len(KERNEL)
    assert second.key["torch"] == kernelbench.cache_key(cmd)["torch"]
    kernelbench.measure(cmd, tmp_path, refresh=True, runner=run)
    assert run.calls == 2


def test_cache_is_keyed_by_arguments(tmp_path) -> None:
    run = FakeRunner(GOOD)
    kernelbench.measure(kernelbench.bench_command("cpu"), tmp_path, runner=run)
    kernelbench.measure(kernelbench.bench_command("cuda"), tmp_path, runner=run)
    assert run.calls == 2
    cpu = kernelbench.bench_command("cpu")
    assert kernelbench.load_cached(kernelbench.cache_key(cpu), tmp_path)


def test_a_corrupt_cache_file_is_measured_again(tmp_path) -> None:
    cmd = kernelbench.bench_command("cpu")
    kernelbench.cache_path(kernelbench.cache_key(cmd), tmp_path).write_text("{", encoding="utf-8")
    run = FakeRunner(GOOD)
    assert not kernelbench.measure(cmd, tmp_path, runner=run).from_cache and run.calls == 1


@pytest.mark.parametrize("runner, words", [
    (FakeRunner(returncode=2), "status 2: boom: no torch"),
    (FakeRunner(exc=FileNotFoundError("no python")), "could not run"),
    (FakeRunner(exc=subprocess.TimeoutExpired("x", 1)), "could not run"),
    (FakeRunner("no results"), "no block-size results"),
])
def test_bench_failures_raise_bench_error(tmp_path, runner, words) -> None:
    with pytest.raises(BenchError, match=words):
        kernelbench.measure(kernelbench.bench_command("cpu"), tmp_path, runner=runner)
    assert not list(tmp_path.iterdir())  # nothing cached


def test_cache_dir_follows_the_environment(monkeypatch, tmp_path) -> None:
    monkeypatch.setenv("KVVIZ_CACHE_DIR", str(tmp_path))
    assert kernelbench.cache_dir() == tmp_path


def test_cuda_timings_name_the_gpu_and_the_threads_they_ran_with(tmp_path) -> None:
    out = "\n".join(json.dumps({"block_size": b, "paged_ms": t, "contiguous_ms": 1.0,
                                "paged_ms_p10": t * 0.9, "paged_ms_p90": t * 1.1,
                                "device_name": "NVIDIA H200", "threads": 3})
                    for b, t in KERNEL.items())
    cmd = kernelbench.bench_command("cuda", threads=3)
    first = kernelbench.measure(cmd, tmp_path, runner=FakeRunner(out))
    again = kernelbench.measure(cmd, tmp_path, runner=FakeRunner(""))  # from the cache
    for res in (first, again):
        assert (res.device_name, res.threads) == ("NVIDIA H200", 3)
        assert kernelbench.describe(cmd, res).startswith("cuda NVIDIA H200 (")
        assert res.points[0].paged_p90 == pytest.approx(KERNEL[1] * 1.1)
