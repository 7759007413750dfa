"""SampleWriter: the store writer process (and the thread / inline modes) seen from the engine."""
from __future__ import annotations

import os
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from collectors import writer_process
from collectors.launch import build
from collectors.sample import Batch
from collectors.writer_client import SampleWriter, StoreSpec
from kvviz.commands.cli import build_parser
from kvviz.core.errors import StoreError
from kvviz.settings.flags import settings_of
from kvviz.store.reader import RunReader
from tests.collectors.conftest import FAST_SIM, ROOT


def collector(out: Path):
    args = build_parser("collect").parse_args(
        ["collect", *FAST_SIM, "--out", str(out), "--rate", "inf", "--requests", "200",
         "--capacity-tokens", "8192", "--lane", "contiguous:first-fit:max", "--lane", "paged:16"])
    return build(settings_of(args))


def batches(col, n: int, steps: int = 5) -> list[Batch]:
    out = []
    for i in range(n):
        for _ in range(steps):
            col.sim.step(time_s=0.01 * i)
        out.append(col._batch(0.01 * i + 0.005))
    return out


@pytest.mark.parametrize("mode", ["process", "thread", "inline"])
def test_hooks_receive_the_stored_records_on_the_calling_thread(tmp_path: Path,
                                                                mode: str) -> None:
    out = tmp_path / f"{mode}.db"
    col = collector(out)
    seen: list[tuple[int, dict]] = []
    sink = SampleWriter(StoreSpec(out, col.meta()), [lambda r: seen.append(
        (threading.get_ident(), r))], mode=mode)
    bs = batches(col, 6)
    for b in bs:
        sink.put(b)
    assert len(seen) == 12  # right after each put, before any commit is awaited
    sink.close("finished", "done")
    assert sink.samples_written == 12
    assert {tid for tid, _ in seen} == {threading.get_ident()}
    recs = [r for _, r in seen]
    assert [r["sample_id"] for r in recs] == list(range(1, 13))
    assert [r["lane"] for r in recs[:2]] == [s.lane for s in bs[0].lanes]
    r = RunReader(out)
    assert (r.status, r.status_message) == ("finished", "done")
    rows = r.samples().set_index("sample_id")
    for rec in recs:
        row = rows.loc[rec["sample_id"]]
        for key in ("t", "step", "lane", "used_tokens", "free_tokens", "hole_count",
                    "external_frag_index", "running", "waiting", "tokens_generated"):
            assert row[key] == pytest.approx(rec[key]), key
    assert len(r.events()) == sum(len(b.events) for b in bs)
    assert len(r.device_memory()) == 6
    for lane in r.lanes():
        assert r.latest_blockmap(lane) is not None


def test_without_hooks_the_writer_computes_the_same_metrics(tmp_path: Path) -> None:
    got = {}
    for hooks in ([], [lambda r: None]):
        out = tmp_path / f"h{len(hooks)}.db"
        col = collector(out)
        sink = SampleWriter(StoreSpec(out, col.meta()), hooks)
        for b in batches(col, 4):
            sink.put(b)
        sink.close("finished")
        got[len(hooks)] = RunReader(out).samples()
    assert got[0].equals(got[1])
    assert got[0].used_tokens.gt(0).any()


def test_an_error_in_the_writer_process_reaches_put_and_close(tmp_path: Path) -> None:
    out = tmp_path / "err.db"
    col = collector(out)
    sink = SampleWriter(StoreSpec(out, col.meta()))
    good, bad = batches(col, 2)
    sink.put(good)
    sink.sync()
    assert sink.samples_written == 2
    bad.lanes[0].counters["not an identifier"] = 1  # the writer's INSERT refuses it
    sink.put(bad)
    end = time.monotonic() + 20
    with pytest.raises(RuntimeError, match="store writer failed: .*not an identifier"):
        while time.monotonic() < end:
            sink.put(good)
            time.sleep(0.02)
    sink.close("finished")  # the error wins over the status the engine asked for
    assert "not an identifier" in sink.error
    r = RunReader(out)
    assert r.status == "error" and "not an identifier" in r.status_message
    assert len(r.samples()) == 2  # the good batch (the bad one failed at its first row)


def test_unwritable_or_taken_path_fails_at_construction_without_a_file(tmp_path: Path) -> None:
    with pytest.raises(StoreError, match="does not exist"):
        SampleWriter(StoreSpec(tmp_path / "nope" / "x.db", {}))
    (tmp_path / "taken.db").write_text("x")
    with pytest.raises(StoreError, match="already exists"):
        SampleWriter(StoreSpec(tmp_path / "taken.db", {}))
    with pytest.raises(TypeError, match="StoreSpec"):
        SampleWriter(object(), mode="process")  # type: ignore[arg-type]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["taken.db"]


def test_the_writer_process_has_created_the_run_when_construction_returns(
        tmp_path: Path) -> None:
    sink = SampleWriter(StoreSpec(tmp_path / "s.db", {"lanes": []}))
    try:
        r = RunReader(tmp_path / "s.db")  # header written and committed: a readable run
        assert r.status == "running" and r.samples().empty
        r.close()
    finally:
        sink.close("finished")


def _nice(tid: int) -> int:
    return os.getpriority(os.PRIO_PROCESS, tid)


@pytest.mark.skipif(not hasattr(os, "getpriority"), reason="no getpriority here")
def test_the_writer_yields_to_the_engine_once_the_run_has_its_first_sample(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The file and the first batch are written at the engine's priority (a new run shows
    up promptly on a loaded machine); after it the writer process and the sender thread
    run at WRITER_NICE lower, and the engine's own thread keeps its priority."""
    monkeypatch.delenv("KVVIZ_WRITER_NICE", raising=False)
    out = tmp_path / "n.db"
    col = collector(out)
    base = _nice(0)
    want = min(19, base + writer_process.WRITER_NICE)
    sink = SampleWriter(StoreSpec(out, col.meta()))
    try:
        assert _nice(sink._proc.pid) == base  # ready: the file exists, nothing lowered yet
        tid = sink._thread.native_id
        assert _nice(tid) == base
        sink.put(batches(col, 1)[0])
        sink.sync()  # acked: the first batch is in the file
        end = time.monotonic() + 10
        while (_nice(sink._proc.pid), _nice(tid)) != (want, want) and time.monotonic() < end:
            time.sleep(0.01)
        assert (_nice(sink._proc.pid), _nice(tid)) == (want, want)
        assert _nice(0) == base
    finally:
        sink.close("finished")


def test_writer_nice_setting(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("KVVIZ_WRITER_NICE", "0")
    assert writer_process.writer_nice() == 0
    monkeypatch.setenv("KVVIZ_WRITER_NICE", "40")
    assert writer_process.writer_nice() == 19  # clamped to the nice range
    monkeypatch.setenv("KVVIZ_WRITER_NICE", "low")
    with pytest.raises(ValueError, match="KVVIZ_WRITER_NICE: expected an integer"):
        SampleWriter(StoreSpec(tmp_path / "bad.db", {"lanes": []}))
    assert not (tmp_path / "bad.db").exists()


CRASH = """
import os, signal, sys
from pathlib import Path
from collectors.writer_client import SampleWriter, StoreSpec
from tests.collectors.test_sampler import batches, collector
out = Path(sys.argv[1])
col = collector(out)
sink = SampleWriter(StoreSpec(out, col.meta()))
for b in batches(col, 3):
    sink.put(b)
sink.sync()  # all 6 committed; the kill may only lose what is not
print(sink._proc.pid, flush=True)
os.kill(os.getpid(), signal.SIGKILL)
"""


def test_collector_death_closes_the_run_as_error(tmp_path: Path) -> None:
    out = tmp_path / "died.db"
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    proc = subprocess.run([sys.executable, "-c", CRASH, str(out)], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == -9, proc.stderr
    child = int(proc.stdout.split()[0])
    end = time.monotonic() + 20
    r = None
    while time.monotonic() < end:
        if out.exists():
            r = RunReader(out)
            if r.status != "running":
                break
            r.close()
        time.sleep(0.05)
    assert r is not None
    assert (r.status, r.status_message) == ("error", "collector process died")
    assert len(r.samples()) == 6  # every committed sample
    while time.monotonic() < end:  # and the writer process is gone (or a zombie of init)
        try:
            state = Path(f"/proc/{child}/stat").read_text().rsplit(")", 1)[1].split()[0]
        except OSError:
            break
        if state in "ZX":
            break
        time.sleep(0.05)
    else:
        pytest.fail("the writer process outlived the collector")
