"""The four places where FORMAT.md states what is stored rather than what a reader might
assume, each checked by the verifier: a paged lane's external_frag_index (0), meta.collector's
fields, retention that has removed a lane's first map, and a buddy lane's largest_hole_tokens
(the largest aligned free power-of-two block, not the longest free run)."""
from __future__ import annotations

import json
import shutil
import sqlite3
from pathlib import Path

import numpy as np
import pytest

from kvviz.core.blockmap import BlockMap
from kvviz.core.metrics import compute
from kvviz.store import mapcodec
from kvviz.store.writer import RunWriter
from kvviz.verify import checks, decode, verify
from kvviz.verify.stored import collector, retention
from tests.verify.test_verify import FAST_SIM, clean, collect


def _pressured(out: Path, *budget: str) -> Path:
    """A paged and a buddy lane under pressure (all requests at once)."""
    collect(*FAST_SIM, "--lane", "paged:16", "--lane", "contiguous:buddy:pow2", "--rate", "inf",
            "--requests", "300", "--duration", "30", *budget, "--out", str(out))
    return out


@pytest.fixture(scope="module")
def thinned(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Block maps thinned hard: a 2 KB budget holds no two maps (the issue's stride 64)."""
    return _pressured(tmp_path_factory.mktemp("stored") / "thin.db", "--blockmap-budget-mb",
                      "0.002")


@pytest.fixture(scope="module")
def pressured(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return _pressured(tmp_path_factory.mktemp("stored") / "kept.db")


@pytest.fixture(scope="module")
def floored(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Two large maps, then small ones, under a budget that holds one large map: the first
    thinning deletes every map but the newest (idx 0 too), later ones keep multiples of 4."""
    out = tmp_path_factory.mktemp("stored") / "floor.db"
    rng = np.random.default_rng(0)
    n = 4096
    full = np.full(n, 16, np.int32)
    big = BlockMap(rng.permutation(n).astype(np.int32), full, full, np.ones(n, np.int16),
                   np.zeros(n, bool), 16, 2, "paged:16", False)
    empty = BlockMap(np.full(n, -1, np.int32), *(np.zeros(n, np.int32),) * 2,
                     np.zeros(n, np.int16), np.zeros(n, bool), 16, 2, "paged:16", False)
    w = RunWriter(out, {"mode": "sim", "lanes": [{"name": "paged:16"}]},
                  blockmap_budget_bytes=mapcodec.encode(big).nbytes * 3 // 2)
    for i in range(40):
        bm = big if i < 2 else empty
        w.add_sample(float(i), i, "paged:16", compute(bm).as_dict(), bm)
    w.close("finished")
    return out


def _edited(src: Path, tmp_path: Path, sql: str, args: tuple = ()) -> list[str]:
    path = tmp_path / "edited.db"
    shutil.copy(src, path)
    with sqlite3.connect(path) as db:
        db.execute(sql, args)
    return verify(path).mismatches


def _maps(path: Path, lane: str):
    db = sqlite3.connect(path)
    db.row_factory = sqlite3.Row
    for row in db.execute("SELECT * FROM blockmaps WHERE lane = ?", (lane,)):
        yield int(row["sample_id"]), decode.block_map(dict(row))


def test_retention_that_removed_the_first_map_verifies(thinned: Path) -> None:
    clean(thinned)
    db = sqlite3.connect(thinned)
    (stride,) = db.execute("SELECT blockmap_stride FROM run").fetchone()
    idxs = [i for (i,) in db.execute("SELECT idx FROM blockmaps WHERE lane = 'paged:16'")]
    assert stride > 1 and 0 not in idxs  # FORMAT.md: idx 0 may be gone, and it is here
    assert retention(idxs, stride) == []


@pytest.mark.parametrize("idxs, stride, wrong", [
    ([0, 64, 128, 130], 64, None), ([128, 192, 200], 64, None), ([7], 64, None),
    ([0, 5, 64], 64, "idx 5 kept"), ([0, 128, 130], 64, "[64]"),
])
def test_retention_rule(idxs, stride, wrong) -> None:
    got = retention(idxs, stride)
    assert (got == []) if wrong is None else any(wrong in m for m in got)


def test_a_hole_in_the_kept_maps_is_reported(floored: Path, tmp_path: Path) -> None:
    clean(floored)
    db = sqlite3.connect(floored)
    (stride,) = db.execute("SELECT blockmap_stride FROM run").fetchone()
    idxs = sorted(i for (i,) in db.execute("SELECT idx FROM blockmaps"))
    assert 0 not in idxs and len(idxs) >= 3 and idxs[1] - idxs[0] == stride
    assert _edited(floored, tmp_path, "DELETE FROM blockmaps WHERE idx = ?", (idxs[0],)) == []
    got = _edited(floored, tmp_path, "DELETE FROM blockmaps WHERE idx = ?", (idxs[1],))
    assert any("retention" in m and f"[{idxs[1]}]" in m for m in got)


def test_paged_external_frag_index_is_stored_as_0(pressured: Path, tmp_path: Path) -> None:
    """Where FORMAT.md's contiguous formula would give more than 0, a paged lane stores 0."""
    def holes(m) -> np.ndarray:
        return checks.free_runs(m.planes["owner"] == -1)[1]

    found = next(((sid, m) for sid, m in _maps(pressured, "paged:16") if holes(m).size > 1),
                 None)
    assert found is not None, "no paged map with two holes"
    sid, m = found
    formula = 1 - holes(m).max() / holes(m).sum()
    stored = sqlite3.connect(pressured).execute(
        "SELECT external_frag_index FROM samples WHERE sample_id = ?", (sid,)).fetchone()[0]
    assert stored == 0 and formula > 0
    got = _edited(pressured, tmp_path, "UPDATE samples SET external_frag_index = ? "
                  "WHERE sample_id = ?", (formula, sid))
    assert any(f"sample {sid} " in m and "external_frag_index" in m for m in got)


def test_buddy_largest_hole_is_the_largest_aligned_block(pressured: Path,
                                                        tmp_path: Path) -> None:
    lane = "contiguous:buddy:pow2"
    def longest(m) -> int:
        lens = checks.free_runs(m.planes["owner"] == -1)[1]
        return int(lens.max()) if lens.size else 0

    found = next(((sid, m) for sid, m in _maps(pressured, lane)
                  if longest(m) != checks.buddy_largest(m.planes["owner"] == -1)), None)
    if found is None:
        pytest.skip("no buddy map whose longest free run is not an aligned block")
    sid, m = found
    got = _edited(pressured, tmp_path, "UPDATE samples SET largest_hole_tokens = ? "
                  "WHERE sample_id = ?", (longest(m) * m.block_size, sid))
    assert any(f"sample {sid} " in m and "largest_hole_tokens" in m for m in got)


GOOD = {"hz": 20.0, "steps_per_s": 0, "loop": False, "duration_s": None, "max_steps": 100}


@pytest.mark.parametrize("change, wrong", [
    ({}, None), ({"duration_s": 30.0, "max_steps": None}, None),
    ({"pacing": 1}, "documents"), ({"hz": 0}, "collector.hz"), ({"loop": 1}, "collector.loop"),
    ({"max_steps": 1.5}, "collector.max_steps"), ({"duration_s": -1}, "collector.duration_s"),
])
def test_collector_fields(change, wrong) -> None:
    got = collector({"collector": {**GOOD, **change}})
    assert (got == []) if wrong is None else any(wrong in m for m in got)


def test_a_recording_whose_collector_fields_differ_is_reported(thinned: Path,
                                                              tmp_path: Path) -> None:
    meta = json.loads(sqlite3.connect(thinned).execute("SELECT meta FROM run").fetchone()[0])
    assert set(meta["collector"]) == set(GOOD)  # what the collector writes: FORMAT.md's list
    meta["collector"] = {"hz": 20, "pacing": 1, "loop": False, "duration": 5}
    got = _edited(thinned, tmp_path, "UPDATE run SET meta = ?", (json.dumps(meta),))
    assert any("meta.collector" in m for m in got)
