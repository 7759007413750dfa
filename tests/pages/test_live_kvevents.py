"""Live shows kvviz's own engine both ways: under a prefix lane's block map, the KV-event stream
the collector recorded for that lane (forest numbers, rates, diagnoses); other lanes and runs
without a stream show none."""
from __future__ import annotations

import re
from pathlib import Path

from kvviz.commands.cli import main
from kvviz.runs import jobs
from kvviz.settings.collector import parse_lanes
from tests.pages.pagehelpers import canvases, no_exception, page

LANES = ["--lane", "paged:16:prefix", "--lane", "paged:16"]


def _own_run(path: Path, *flags: str) -> None:
    assert main(["collect", "--mode", "sim", "--quiet", "--steps-per-s", "0", "--hz", "20",
                 *LANES, "--prefix-sharing", "0.8", "--rate", "inf", "--max-steps", "1500",
                 "--out", str(path), *flags]) == 0


def _texts(at) -> str:
    return " ".join(t.value for t in at.text)


def test_a_prefix_lane_shows_its_event_stream_beside_its_block_map(runs: Path):
    _own_run(runs / "own.db", "--kv-events-record")
    at = page("pages/live.py", run="own.db")
    at.sidebar.multiselect[0].set_value(["paged:16:prefix", "paged:16"]).run()
    no_exception(at)
    assert len(canvases(at)) == 2
    heads = [m.value for m in at.markdown if "KV events of this lane" in m.value]
    assert len(heads) == 1  # the prefix lane only
    html = " ".join(str(h.proto.body) for h in at.get("html"))
    got = re.search(r'aria-label="Cached blocks: ([\d,]+)"', html)
    assert got and int(got.group(1).replace(",", "")) > 0, html[:400]
    # all 1,000 requests arrive at once: the cache fills, the rest wait; 1,500 steps (not a
    # wall-clock span) end the run with about a seventh of them finished, on any machine
    text = _texts(at)
    assert "requests wait with KV usage at" in text and "memory is the limit" in text


def test_a_run_without_an_event_stream_shows_no_event_view(runs: Path):
    _own_run(runs / "plain.db")
    at = page("pages/live.py", run="plain.db")
    no_exception(at)
    assert not [m for m in at.markdown if "KV events of this lane" in m.value]


def test_the_live_collector_records_events_for_a_prefix_lane(tmp_path: Path):
    out = tmp_path / "x.db"
    prefix = jobs.run_config(jobs.demo_config(lanes=parse_lanes(["paged:16:prefix"])), out)
    plain = jobs.run_config(jobs.demo_config(lanes=parse_lanes(["paged:16"])), out)
    assert prefix.kv_events_record and not plain.kv_events_record
    assert prefix.out == plain.out == str(tmp_path / "x.db")
