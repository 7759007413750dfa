"""The Node page draws a `kvviz attach --blocks` recording's real block pool (the vLLM
plugin's lane) on the Live page's canvas heatmap, and answers "why are requests waiting?"
with the scheduler's own reason (pages/node_blocks.py)."""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from kvviz.node.blocks_lane import BlockLane
from kvviz.plugin import wire
from kvviz.runs import process
from kvviz.store.writer import RunWriter
from tests.pages.pagehelpers import canvases, figures, no_exception, page
from tests.plugin.stream import frames

PAGE = "pages/node.py"


@pytest.fixture
def node_runs(runs: Path):
    yield runs
    process.stop_all()


def write_blocks_run(path: Path, samples: int = 3) -> None:
    w = RunWriter(path, {"mode": "node", "url": "http://n:8000/metrics", "lanes": []})
    lane = BlockLane(f"ipc://{path.parent}/b.ipc", w, 0.0)
    try:
        for i in range(samples):
            lane.handle(*wire.decode(frames(i + 1, step=3 + i)))
        w.commit()
    finally:
        lane.close()
        w.close("finished")


def test_the_plugin_lane_is_drawn_with_the_schedulers_waiting_reason(node_runs):
    write_blocks_run(node_runs / "node-blocks.db")
    at = page(PAGE)
    no_exception(at)
    (meta, cells), = canvases(at)
    assert meta["num_blocks"] == 8
    assert np.array_equal(cells["owner"].to_numpy()[:3], [0, 0, 1])
    text = " ".join(m.value for m in at.markdown)
    assert "Block pool (vllm), step 5" in text
    assert "**no free blocks**" in text and "needs 24 slots; 20 were free" in text


def test_a_node_recording_without_the_lane_draws_no_pool(node_runs):
    w = RunWriter(node_runs / "node-plain.db", {"mode": "node", "lanes": []})
    w.close("finished")
    at = page(PAGE)
    no_exception(at)
    assert not canvases(at)
    assert not any("Block pool" in m.value for m in at.markdown)


def test_replay_opens_the_recording_and_draws_the_lane(node_runs):
    write_blocks_run(node_runs / "node-blocks.db")
    at = page("pages/replay.py", run="node-blocks.db")
    no_exception(at)
    assert not at.error, [e.value for e in at.error]
    drawn = canvases(at) or figures(at)
    assert drawn, "Replay drew nothing for the plugin's lane"
