"""docs/FORMAT.md's sqlite3 + numpy example runs against a real recording."""
from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

DOC = Path(__file__).resolve().parents[2] / "docs" / "FORMAT.md"


def run_example(path: Path) -> subprocess.CompletedProcess:
    """The doc's first Python block, run on `path` in a fresh interpreter; it must succeed."""
    blocks = re.findall(r"```python\n(.*?)```", DOC.read_text(), flags=re.S)
    assert blocks, "docs/FORMAT.md lost its Python example"
    out = subprocess.run([sys.executable, "-c", blocks[0], str(path)], capture_output=True,
                         text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    return out


def test_format_example_reads_a_recording(recording) -> None:
    path, sim = recording
    out = run_example(path)
    assert "finished ['contiguous:first-fit:max', 'paged:16']" in out.stdout
    assert f"{sim.lanes[0].name}: {sim.lanes[0].capacity} blocks" in out.stdout
    want = [e for e in sim.events.events if e.lane == sim.lanes[0].name]
    assert (f"{sim.lanes[0].name}: {len(want)} events, the first {want[0].kind} (sequence "
            f"{want[0].seq_id})") in out.stdout


def test_format_example_reads_per_plane_maps(tmp_path) -> None:
    """The example's rle-zlib-2 "planes" branch, on a pool where every block is a run and
    owners are in random order (large arrays: one zlib stream per byte plane, some stored,
    the owners' high bytes nibble-packed)."""
    from kvviz.core.config import CacheConfig, LaneSpec, WorkloadConfig
    from kvviz.core.metrics import compute
    from kvviz.core.workload import generate
    from kvviz.engine import Simulation
    from kvviz.store.writer import RunWriter
    from tests.store.test_codec import lockstep

    sim = Simulation(generate(WorkloadConfig(num_requests=50, rate=50.0, seed=3)),
                     [LaneSpec.parse("paged:16")], CacheConfig(capacity_tokens=16384))
    for _ in range(20):
        sim.step()
    import numpy as np

    from kvviz.core.blockmap import BlockMap
    ls = lockstep(1 << 18, 4096)
    perm = np.random.default_rng(0).permutation(1 << 18)
    bm = BlockMap(ls.owner[perm], ls.filled[perm], ls.allocated, ls.refcount, ls.cached, 16, 2,
                  "paged:16", False)
    path = tmp_path / "planes.db"
    w = RunWriter(path, {"mode": "sim", "lanes": [{"name": "paged:16"}]})
    w.add_sample(1.0, 20, "paged:16", compute(bm).as_dict(), bm)
    w.add_events(sim.events.since(0)[0])
    w.close("finished")
    from kvviz.store.mapcodec import encode
    assert json.loads(encode(bm).layout)["arrays"]["owner"]["nibbles"] == [1]  # format 4
    out = run_example(path)
    used = int(bm.filled.sum())
    assert f"paged:16: {1 << 18} blocks, 0 free, used {used}" in out.stdout


def test_format_example_reads_format_2_maps(recording, tmp_path) -> None:
    """The example's rle-zlib-1 branch: the recording with its block maps rewritten as a
    format-2 writer stored them."""
    import shutil
    import sqlite3

    from kvviz.store.reader import RunReader
    from tests.store.test_codec import store_as_format_2

    src, sim = recording
    path = tmp_path / "old.db"
    shutil.copy(src, path)
    r = RunReader(path)
    ids = r.blockmap_index()["sample_id"].tolist()
    maps = {int(i): r.blockmap(int(i)) for i in ids}
    r.close()
    with sqlite3.connect(path) as db:
        store_as_format_2(db, maps)
    out = run_example(path)
    assert f"{sim.lanes[0].name}: {sim.lanes[0].capacity} blocks" in out.stdout


def test_every_column_and_meta_key_a_collector_writes_is_documented(tmp_path) -> None:
    """Each table column and meta key of a real `kvviz collect` recording is named in
    FORMAT.md (the collector runs as a child from this tree)."""
    import os
    import sqlite3

    root = DOC.parents[1]
    out = tmp_path / "doc.db"
    env = {**os.environ, "PYTHONPATH": str(root)}
    done = subprocess.run([sys.executable, "-m", "kvviz", "collect", "--mode", "sim", "--quiet",
                           "--steps-per-s", "0", "--hz", "20", "--rate", "inf", "--requests",
                           "30", "--duration", "5", "--lane", "paged:16:prefix",
                           "--prefix-sharing", "0.5", "--out", str(out)], cwd=root, env=env,
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    words = set(re.findall(r"[A-Za-z_][A-Za-z0-9_]*", DOC.read_text()))
    db = sqlite3.connect(out)
    for (table,) in db.execute("SELECT name FROM sqlite_master WHERE type = 'table'"):
        cols = [r[1] for r in db.execute(f"PRAGMA table_info({table})")]
        missing = [c for c in cols if c not in words]
        assert table in words and not missing, f"{table}: {missing} are not in FORMAT.md"
    meta = json.loads(db.execute("SELECT meta FROM run").fetchone()[0])
    keys = [*meta, *meta["collector"], *meta["nvml"], *meta["lanes"][0]]
    assert [k for k in keys if k not in words] == []
    assert meta["nvml"]["status"] == "not used" and meta["nvml"]["reason"]
