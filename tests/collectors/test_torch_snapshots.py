"""--torch-snapshot-every: CUDA only; on CPU the collector says so once and keeps recording."""
from __future__ import annotations

from pathlib import Path

import pytest

from collectors.torch_snapshots import TorchSnapshots, snapshot_path
from kvviz.store.reader import RunReader
from tests.collectors.conftest import FAST_SIM, collect


def test_cpu_run_says_unavailable_once_and_records(tmp_path: Path, capsys) -> None:
    out = tmp_path / "run.db"
    assert collect(*FAST_SIM, "--duration", "0.5", "--torch-snapshot-every", "0.1",
                   "--out", str(out)) == 0
    err = capsys.readouterr().err
    assert err.count("torch memory snapshots unavailable") == 1 and "not CUDA" in err
    assert RunReader(out).status == "finished"
    assert not list(tmp_path.glob("*.pickle"))


def test_snapshot_names_and_bad_interval(tmp_path: Path) -> None:
    assert snapshot_path(tmp_path / "live-1.db", 3).name == "live-1-torchsnap-3.pickle"
    with pytest.raises(ValueError, match="> 0"):
        TorchSnapshots(tmp_path / "r.db", 0, "cpu")


def test_cuda_path_with_torch_stubbed(tmp_path: Path, monkeypatch) -> None:
    """No GPU here: torch's CUDA calls are stubbed to check timing, naming and read-back."""

    torch = pytest.importorskip("torch")
    from kvviz.torchsnap import load_snapshot
    from tests.torchsnap.snaps import make_snapshot

    calls = []
    monkeypatch.setattr("collectors.torch_memory.cuda_available", lambda: True)
    monkeypatch.setattr(torch.cuda.memory, "_record_memory_history",
                        lambda **kw: calls.append(kw))
    monkeypatch.setattr(torch.cuda.memory, "_snapshot", make_snapshot)
    snaps = TorchSnapshots(tmp_path / "live-1.db", 1.0, "cuda")
    assert snaps.enabled and calls == [{"max_entries": 100_000}]
    for t in (0.0, 0.4, 0.9, 1.1, 1.5, 2.2):
        snaps.hook({"t": t, "lane": "paged:16"})
    assert snaps.written == 3
    files = sorted(p.name for p in tmp_path.iterdir())
    assert files == [f"live-1-torchsnap-{i}.pickle" for i in range(3)]
    assert len(load_snapshot(tmp_path / files[0]).segments) == 2
