"""kvviz.viz.node and kvviz.viz.torchsnap: pure figure builders for the Node page."""
from __future__ import annotations

import json

import numpy as np
import pandas as pd
import pytest

from kvviz.node import FleetNode
from kvviz.torchsnap import loads_snapshot, snapshot_cells, summarize
from kvviz.torchsnap.summary import CELL_ACTIVE, CELL_HOLE, CELL_UNMAPPED, CELL_WASTE
from kvviz.viz import node as vn
from kvviz.viz import torchsnap as vs
from tests.torchsnap.snaps import MiB, dumps, make_snapshot


def samples() -> pd.DataFrame:
    return pd.DataFrame({
        "t": [0.0, 1.0, 2.0, 3.0, 4.0],
        "status": ["ok", "unreachable", "ok", "timeout", "ok"],
        "message": ["", "refused", "", "no answer within 3s", ""],
        "kv_usage": [0.1, None, 0.5, None, 0.9],
        "num_running": [1, None, 4, None, 8], "num_waiting": [0, None, 2, None, 5],
        "preemptions_per_s": [None, None, 0.0, None, 1.5],
        "prefix_hit_rate": [0.2, None, 0.3, None, 0.4],
        "prefix_hit_rate_interval": [None, None, 0.35, None, 0.45],
        "block_size": [16, None, 16, None, 16], "num_gpu_blocks": [100, None, 100, None, 100],
        "kv_capacity_tokens": [1600, None, 1600, None, 1600],
    })


def spec(fig) -> dict:
    return json.loads(fig.to_json())


def test_node_figure_draws_ok_samples_only_and_marks_failures():
    fig = spec(vn.node_figure(samples()))
    by_name = {tr["name"]: tr for tr in fig["data"]}
    assert {"KV usage %", "running", "waiting", "preemptions/s", "hit rate (interval) %",
            "hit rate (since start) %", "unreachable", "timeout"} == set(by_name)
    usage = by_name["KV usage %"]
    assert isinstance(usage["y"], dict)  # a typed array, not a Python list
    assert by_name["unreachable"]["customdata"] == ["refused"]


def test_headlines_from_the_latest_ok_sample():
    row = vn.latest_ok(samples())
    got = {h.label: h.value for h in vn.headlines(row)}
    assert got == {"KV usage": "90.0%", "KV capacity (blocks)": "100",
                   "KV capacity (tokens)": "1,600", "Running": "8", "Waiting": "5",
                   "Preemptions/s": "1.50", "Prefix hit rate": "45.0%",
                   "Prefix hit rate (since start)": "40.0%"}


def test_missing_numbers_are_dashes_and_failed_runs_have_no_ok_row():
    down = pd.DataFrame({"t": [0.0], "status": ["garbled"], "message": ["html"]})
    assert vn.latest_ok(down) is None
    assert {h.value for h in vn.headlines(None)} == {"n/a"}
    fig = spec(vn.node_figure(down))
    assert [tr["name"] for tr in fig["data"]] == ["garbled"]
    assert vn.status_counts(samples()) == {"ok": 3, "unreachable": 1, "timeout": 1}


def test_fleet_table_in_percent_and_every_unknown_says_why():
    nodes = [FleetNode("a:1", "vllm", "vllm", True, kv_usage=0.25, series=1,
                       usage_basis="one pool"),
             FleetNode("b:2", "kvviz", "kvviz", False),
             FleetNode("c:3", "node", "unknown", None)]
    t = vn.fleet_table(nodes)
    assert list(t.columns) == vn.FLEET_COLUMNS
    assert t["KV usage"].tolist() == ["25.0%", "n/a", "n/a"]
    assert t["up"].tolist() == ["up", "down", "n/a"]
    assert t["notes"].tolist() == [
        "usage: one pool; capacity in slots not exported; fragmentation: kvviz collectors only",
        "node down: Prometheus's last scrape of it failed, so no KV numbers",
        "no vLLM, SGLang or kvviz KV series for this node"]
    cells = t.drop(columns=["KV series"]).to_numpy().ravel().tolist()
    assert not any(c is None or str(c) in ("None", "nan", "") for c in cells)
    assert set(vn.FLEET_HELP) <= set(t.columns) == {*vn.FLEET_WIDTHS, "notes"}
    assert vn.fleet_table([]).empty


def test_headlines_say_why_a_number_is_missing():
    assert {h.value for h in vn.headlines(None)} == {"n/a"}
    assert all("no successful scrape yet" in h.help for h in vn.headlines(None))
    heads = {h.label: h for h in vn.headlines({"kv_usage": 0.5})}
    assert heads["KV usage"].value == "50.0%" and "capacity" in heads["KV usage"].help
    assert "does not export it" in heads["Preemptions/s"].help


@pytest.fixture(scope="module")
def snap():
    return loads_snapshot(dumps(make_snapshot()))


def test_snapshot_heatmap_is_segments_by_cells_with_exact_hover_bytes(snap):
    fig = vs.snapshot_figure(snap, cell_bytes=MiB)
    tr = fig.data[0]
    z, custom = np.asarray(tr.z), np.asarray(tr.customdata)
    assert z.dtype == np.int8 and z.shape == (2, 20)  # segments by address: 20 MiB, 2 MiB
    # segment 0: 4 MiB active, 2 MiB hole, 6 MiB active, 3 MiB hole, 1 MiB pending, 4 MiB hole
    assert z[0].tolist() == [CELL_ACTIVE] * 4 + [CELL_HOLE] * 2 + [CELL_ACTIVE] * 6 + \
        [CELL_HOLE] * 3 + [CELL_ACTIVE] + [CELL_HOLE] * 4
    assert (z[1, 2:] == CELL_UNMAPPED).all()  # past the 2 MiB segment's end
    assert custom.shape == (2, 20, 4)
    assert custom[..., :3].sum() == sum(s.total_size for s in snap.segments)
    assert custom[0, 3, 1] == 1000  # rounding waste of the first 4 MiB block, in its last cell
    cells = snapshot_cells(snap, MiB)
    assert custom[..., 0].sum() == cells.active_bytes.sum()


def test_rounding_waste_dominates_a_cell_when_it_is_most_of_it(snap):
    z = np.asarray(vs.snapshot_figure(snap, cell_bytes=512).data[0].z)
    assert z[1, 0] == CELL_WASTE  # a 512 B block holding 100 requested bytes


def test_cell_size_keeps_the_grid_small(snap):
    cell = vs.cell_bytes_for(snap)
    widest = max(s.total_size for s in snap.segments)
    assert cell >= 512 and cell & (cell - 1) == 0
    assert -(-widest // cell) <= vs.MAX_COLS and -(-widest // (cell // 2)) > vs.MAX_COLS


def test_many_segments_are_capped(snap):
    import dataclasses

    many = dataclasses.replace(snap, segments=snap.segments * 200)
    fig = vs.snapshot_figure(many, max_rows=50)
    assert np.asarray(fig.data[0].z).shape[0] == 50 and "350 more" in fig.layout.title.text


def test_headlines_and_segment_table(snap):
    s = summarize(snap)
    got = {h.label: h.value for h in vs.headlines(s)}
    assert got["Allocated"] == "10.0 MiB" and got["Rounding waste"] == "1.4 KiB"
    assert got["External fragmentation"] == f"{s.external_fragmentation:.2f}"
    t = vs.segment_table(s)
    assert list(t["largest free block MiB"])[0] == 4.0 and list(t["pool"]) == ["large", "small"]
    assert t["ext. fragmentation"].between(0, 1).all()
    assert vs.human_bytes(512) == "512 B" and vs.human_bytes(3 * 2**30) == "3.0 GiB"


def test_the_capacity_headlines_count_the_blocks_that_hold_kv_for_vllm():
    """vLLM's num_gpu_blocks counts its null block; both capacity tiles count only the blocks
    that hold KV (blocks x block size = tokens, as "0 of 71 blocks in use" beside them), and
    the blocks tile names num_gpu_blocks and the null block."""
    import dataclasses

    from kvviz.node.promtext import sample_from_text
    from tests.node.fakes import VLLM_TEXT

    s = sample_from_text(VLLM_TEXT, url="http://n/metrics", time=100.0)
    heads = {h.label: h for h in vn.headlines(dataclasses.asdict(s))}
    blocks, tokens = heads["KV capacity (blocks)"], heads["KV capacity (tokens)"]
    engines = 2  # the fixture's two engines
    # the tile counts the blocks that hold KV, as the usage and the KV events tab do
    assert int(blocks.value.replace(",", "")) * 16 == int(tokens.value.replace(",", ""))
    assert int(blocks.value.replace(",", "")) + engines == s.num_gpu_blocks
    assert f"num_gpu_blocks ({s.num_gpu_blocks:,})" in blocks.help and \
        "null block" in blocks.help and "num_gpu_blocks - 1" in tokens.help
