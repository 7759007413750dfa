"""Live's collector settings take a trace file from the runs directory (listing and name
checks: tests/runs/test_directory.py)."""
from __future__ import annotations

from kvviz.runs import directory, jobs
from kvviz.settings.collector import CollectorConfig
from tests.traces import samples as S


def test_a_chosen_trace_is_passed_to_the_collector(tmp_path):
    (tmp_path / "az.csv").write_bytes(S.azure(S.AZURE_ROWS))
    path = directory.resolve_trace(tmp_path, "az.csv")
    coll = jobs.Collector(tmp_path, module="kvviz_no_such_collector")  # only its config counts
    out = coll.start(jobs.demo_config(mode="sim", trace=str(path)))
    coll.stop()
    assert CollectorConfig.load(out.with_suffix(directory.CONFIG_SUFFIX)).trace == str(path)
    assert jobs.DEMO.trace is None
