"""Live's collector settings take a trace file from the runs directory."""
from __future__ import annotations

import pytest

from kvviz import live
from kvviz.errors import KvvizError
from tests.traces import samples as S


def test_traces_in_the_runs_directory_are_listed_recordings_are_not(tmp_path):
    (tmp_path / "az.csv").write_bytes(S.azure(S.AZURE_ROWS))
    (tmp_path / "m.jsonl").write_bytes(S.mooncake([(0, 5, 5, [])]))
    (tmp_path / "run.db").write_bytes(b"")
    (tmp_path / "sub.csv").mkdir()
    assert sorted(t.name for t in live.list_traces(tmp_path)) == ["az.csv", "m.jsonl"]


@pytest.mark.parametrize("name", ["../az.csv", "run.db", "missing.csv", "", "sub.csv"])
def test_only_a_trace_file_inside_the_runs_directory_resolves(tmp_path, name):
    (tmp_path / "run.db").write_bytes(b"")
    (tmp_path / "sub.csv").mkdir()
    with pytest.raises(KvvizError):
        live.resolve_trace(tmp_path, name)


def test_a_chosen_trace_is_passed_to_the_collector(tmp_path):
    (tmp_path / "az.csv").write_bytes(S.azure(S.AZURE_ROWS))
    path = live.resolve_trace(tmp_path, "az.csv")
    argv = live.CollectorOptions(mode="sim", trace=str(path)).argv(tmp_path / "r.db")
    assert argv[argv.index("--trace") + 1] == str(path)
    assert "--trace" not in live.CollectorOptions().argv(tmp_path / "r.db")
