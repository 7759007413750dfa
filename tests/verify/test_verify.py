"""kvviz.verify: standalone, and clean on real recordings of every lane kind; it reports
tampering and refuses what is not a recording."""
from __future__ import annotations

import ast
import importlib.util
import json
import os
import shutil
import sqlite3
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from kvviz.core.blockmap import BlockMap
from kvviz.verify import verify
from kvviz.verify.__main__ import main as verify_main

ROOT = Path(__file__).resolve().parents[2]
VERIFY_DIR = ROOT / "kvviz" / "verify"
FAST_SIM = ["--mode", "sim", "--quiet", "--steps-per-s", "0", "--hz", "20"]
ALL_LANES = ["--lane", "contiguous:first-fit:max", "--lane", "contiguous:best-fit:exact",
             "--lane", "contiguous:buddy:pow2", "--lane", "paged:16", "--lane",
             "paged:16:prefix", "--prefix-sharing", "0.5"]


def collect(*argv: str) -> int:
    """`kvviz collect` in a child process run from this tree: under pytest the name
    `collectors` can resolve to tests/collectors or to another checkout's package."""
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    out = subprocess.run([sys.executable, "-m", "kvviz", "collect", *argv], cwd=ROOT, env=env,
                         capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr[-2000:]
    return out.returncode


def clean(path: Path) -> dict:
    rep = verify(path)
    assert rep.mismatch_count == 0, rep.mismatches[:10]
    return rep.lanes


@pytest.fixture(scope="module")
def sim_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """All lane kinds under memory pressure: failures of each class, preemptions, sharing."""
    out = tmp_path_factory.mktemp("verify") / "sim.db"
    assert collect(*FAST_SIM, *ALL_LANES, "--rate", "inf", "--requests", "200",
                   "--duration", "30", "--out", str(out)) == 0  # until exhausted: cached blocks
    return out


def test_verifier_imports_only_the_standard_library_and_numpy() -> None:
    files = sorted(VERIFY_DIR.glob("*.py"))
    assert len(files) >= 3
    for f in files:
        for node in ast.walk(ast.parse(f.read_text())):
            names = ([a.name for a in node.names] if isinstance(node, ast.Import) else
                     [node.module or ""] if isinstance(node, ast.ImportFrom) else [])
            for name in names:
                top = name.split(".")[0]
                ok = (top in sys.stdlib_module_names or top in ("numpy", "__future__")
                      or name == "kvviz.verify" or name.startswith("kvviz.verify."))
                assert ok, f"{f.name} imports {name}"


def test_running_the_verifier_loads_no_other_kvviz_module() -> None:
    code = ("import sys, kvviz.verify.__main__; print(sorted(m for m in sys.modules if "
            "m.split('.')[0] in ('kvviz', 'collectors', 'pandas', 'torch')))")
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True,
                         env={**os.environ, "PYTHONPATH": str(ROOT)}, timeout=60)
    loaded = json.loads(out.stdout.replace("'", '"'))
    assert loaded and all(m == "kvviz" or m.startswith("kvviz.verify") for m in loaded), loaded


def test_every_lane_kind_in_sim_mode_verifies_clean(sim_run: Path) -> None:
    lanes = clean(sim_run)
    assert len(lanes) == 5
    assert all(s["maps_decoded"] == s["maps"] == s["samples"] > 10 for s in lanes.values())
    db = sqlite3.connect(sim_run)
    have = dict(db.execute("SELECT lane, MAX(preemptions) + MAX(admit_failures_capacity) "
                           "+ MAX(admit_failures_fragmentation) FROM samples GROUP BY lane"))
    assert all(v > 0 for v in have.values())  # the replay had failures to count
    shared = db.execute("SELECT MAX(shared_savings_tokens), MAX(cached_tokens) FROM samples "
                        "WHERE lane = 'paged:16:prefix'").fetchone()
    assert min(shared) > 0


def test_paged_maps_carry_block_tables_that_verify(sim_run: Path) -> None:
    lanes = verify(sim_run).lanes
    for name, s in lanes.items():
        if name.endswith(":prefix"):
            # with chunked prefill on, a shared map's lengths from events are bounds: its
            # tables are checked only at samples where every live length is exact
            assert 0 < s.get("tables_checked", 0) <= s["maps"]
        else:
            assert s.get("tables_checked", 0) == (s["maps"] if name.startswith("paged") else 0)


def test_cli_exit_codes_and_json(sim_run: Path, tmp_path: Path, capsys) -> None:
    assert verify_main([str(sim_run), "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["ok"] and out["mismatch_count"] == 0 and out["checks"] > 1000
    junk = tmp_path / "junk.db"
    junk.write_bytes(b"not a database at all" * 10)
    assert verify_main([str(junk)]) == 2
    other = tmp_path / "other.db"
    sqlite3.connect(other).execute("CREATE TABLE t (x)").connection.commit()
    assert verify_main([str(other)]) == 2
    assert verify_main([str(tmp_path / "missing.db")]) == 2
    err = capsys.readouterr().err
    assert err.count("kvviz verify: error: ") == 3 and "application_id" in err


def test_loop_streams_keep_steps_monotonic_and_verify(tmp_path: Path) -> None:
    out = tmp_path / "loop.db"
    assert collect(*FAST_SIM, "--rate", "inf", "--requests", "20", "--loop", "--duration",
                   "2", "--out", str(out)) == 0
    clean(out)
    db = sqlite3.connect(out)
    for table in ("samples", "events"):
        for (lane,) in db.execute(f"SELECT DISTINCT lane FROM {table}"):
            steps = [s for (s,) in db.execute(
                f"SELECT step FROM {table} WHERE lane = ? ORDER BY rowid", (lane,))]
            assert steps == sorted(steps), f"{table} {lane}"
    starts = db.execute("SELECT COUNT(*) FROM event_chunks WHERE kind = 'finished'").fetchone()
    assert starts[0] > 0


def test_rejections_and_evictions_verify(tmp_path: Path) -> None:
    """A pool smaller than the contiguous reservation (every request rejected) and a prefix
    cache under pressure (evictions)."""
    out = tmp_path / "tight.db"
    assert collect(*FAST_SIM, "--rate", "inf", "--requests", "200", "--duration", "3",
                   "--capacity-tokens", "3072", "--max-seq-len", "4096", "--lane",
                   "contiguous:first-fit:max", "--lane", "paged:16:prefix", "--prefix-sharing",
                   "0.8", "--out", str(out)) == 0
    clean(out)
    kinds = {k for (k,) in sqlite3.connect(out).execute("SELECT DISTINCT kind FROM events")}
    assert {"rejected", "evicted", "preempted"} <= kinds


def test_thinned_recording_verifies(tmp_path: Path) -> None:
    out = tmp_path / "thin.db"
    assert collect(*FAST_SIM, "--rate", "inf", "--requests", "300", "--duration", "2",
                   "--blockmap-budget-mb", "0.01", "--out", str(out)) == 0
    lanes = clean(out)
    assert all(s["maps"] < s["samples"] for s in lanes.values())
    db = sqlite3.connect(out)
    kept = db.execute("SELECT COUNT(*) FROM blockmaps WHERE lane = 'paged:16'").fetchone()
    assert kept == db.execute("SELECT COUNT(*) FROM block_tables").fetchone()


def test_a_zero_budget_keeps_only_each_lanes_newest_map(tmp_path: Path) -> None:
    """The retention rule as documented: once the stride passes every idx, the idx-0 maps go
    too; the verifier's retention check accepts exactly what FORMAT.md says is kept."""
    out = tmp_path / "none.db"
    assert collect(*FAST_SIM, "--rate", "inf", "--requests", "100", "--duration", "1",
                   "--blockmap-budget-mb", "0", "--out", str(out)) == 0
    lanes = clean(out)
    assert all(s["maps"] == 1 for s in lanes.values())
    db = sqlite3.connect(out)
    for idx, samples in db.execute("SELECT b.idx, (SELECT COUNT(*) FROM samples s WHERE "
                                   "s.lane = b.lane) FROM blockmaps b"):
        assert idx == samples - 1 > 0  # the newest map; idx 0 is gone


@pytest.mark.skipif(importlib.util.find_spec("torch") is None, reason="torch not installed")
def test_real_mode_tiny_cpu_verifies(tmp_path: Path) -> None:
    out = tmp_path / "real.db"
    assert collect("--mode", "real", "--device", "cpu", "--quiet", "--duration", "2",
                   "--rate", "50", "--requests", "60", "--steps-per-s", "0", "--hz", "10",
                   "--lane", "contiguous:first-fit:max", "--lane", "paged:16:prefix",
                   "--prefix-sharing", "0.5", "--out", str(out)) == 0
    lanes = clean(out)
    assert all(s["maps_decoded"] > 3 and s["events"] > 0 for s in lanes.values())


# ---- tampering is reported ---------------------------------------------------------------------
def tampered(src: Path, tmp_path: Path, sql: str, args: tuple = ()) -> list[str]:
    path = tmp_path / "t.db"
    shutil.copy(src, path)
    with sqlite3.connect(path) as db:
        db.execute(sql, args)
    rep = verify(path)
    assert rep.mismatch_count > 0
    assert verify_main([str(path)]) == 1
    return rep.mismatches


def _mid(src: Path, lane: str = "paged:16") -> int:
    db = sqlite3.connect(src)
    ids = [i for (i,) in db.execute("SELECT sample_id FROM blockmaps WHERE lane = ? "
                                    "ORDER BY sample_id", (lane,))]
    return ids[len(ids) // 2]


def test_a_changed_metric_is_reported(sim_run: Path, tmp_path: Path) -> None:
    sid = _mid(sim_run)
    got = tampered(sim_run, tmp_path, "UPDATE samples SET used_tokens = used_tokens + 1 "
                   "WHERE sample_id = ?", (sid,))
    assert any(f"sample {sid} " in m and "used_tokens" in m for m in got)


def test_a_changed_counter_is_reported(sim_run: Path, tmp_path: Path) -> None:
    got = tampered(sim_run, tmp_path, "UPDATE samples SET preemptions = preemptions + 1 "
                   "WHERE sample_id = ?", (_mid(sim_run),))
    assert any("preemptions stored" in m for m in got)


def test_an_altered_blob_is_reported(sim_run: Path, tmp_path: Path) -> None:
    sid = _mid(sim_run)
    blob = sqlite3.connect(sim_run).execute("SELECT owner FROM blockmaps WHERE sample_id = ?",
                                            (sid,)).fetchone()[0]
    bad = bytearray(blob)
    bad[len(bad) // 2] ^= 0x5A
    got = tampered(sim_run, tmp_path, "UPDATE blockmaps SET owner = ? WHERE sample_id = ?",
                   (bytes(bad), sid))
    assert any(f"sample {sid} " in m for m in got)


def test_a_rewritten_map_is_reported(sim_run: Path, tmp_path: Path) -> None:
    """A well-formed map that differs from the metrics stored with it: one block less
    written."""
    from kvviz.store.mapcodec import encode
    from kvviz.store.reader import RunReader

    sid = _mid(sim_run)
    r = RunReader(sim_run)
    bm = r.blockmap(sid)
    r.close()
    i = int(np.flatnonzero((bm.filled > 0) & (bm.owner >= 0))[0])
    filled = bm.filled.copy()
    filled[i] -= 1
    e = encode(BlockMap(bm.owner, filled, bm.allocated, bm.refcount, bm.cached, bm.block_size,
                        bm.bytes_per_token, bm.label, bm.contiguous, bm.final_seq,
                        bm.final_len, bm.final_held))
    got = tampered(sim_run, tmp_path, "UPDATE blockmaps SET runs = ?, layout = ?, lengths = ?, "
                   "filled = ?, owner = ?, allocated = ?, refcount = ?, cached = ? "
                   "WHERE sample_id = ?", (e.runs, e.layout, e.blobs["lengths"],
                                          e.blobs["filled"], e.blobs["owner"],
                                          e.blobs["allocated"], e.blobs["refcount"],
                                          e.blobs["cached"], sid))
    assert any("used_tokens" in m for m in got)


def test_a_deleted_event_is_reported(sim_run: Path, tmp_path: Path) -> None:
    got = tampered(sim_run, tmp_path, "DELETE FROM events WHERE event_id = (SELECT MIN("
                   "event_id) FROM events WHERE kind = 'admit_failed')")
    assert any("without gaps" in m for m in got)
    assert any("admit_failures_" in m for m in got)


def test_a_swapped_block_table_entry_is_reported(sim_run: Path, tmp_path: Path) -> None:
    """Two blocks of one sequence's table in the wrong logical order: a partly written block
    no longer at the end (or a full one past it)."""
    from kvviz.store import arraycodec as ac
    from kvviz.verify import decode

    sid = _mid(sim_run)
    row = dict(zip(("encoding", "layout", "table_len", "table_blocks"), sqlite3.connect(
        sim_run).execute("SELECT encoding, layout, table_len, table_blocks FROM block_tables "
                         "WHERE sample_id = ?", (sid,)).fetchone()))
    t = decode.block_tables(row)
    from kvviz.store.reader import RunReader

    r = RunReader(sim_run)
    filled = r.blockmap(sid).filled
    r.close()
    ends = np.cumsum(t["table_len"])
    blocks = t["table_blocks"].copy()
    # a sequence whose first and last blocks hold different fills
    k = next(i for i, (n, e) in enumerate(zip(t["table_len"].tolist(), ends.tolist()))
             if n >= 2 and filled[blocks[e - n]] != filled[blocks[e - 1]])
    at, last = int(ends[k] - t["table_len"][k]), int(ends[k] - 1)
    blocks[[at, last]] = blocks[[last, at]]
    blob, spec = ac.pack(blocks)
    layout = json.loads(row["layout"])
    layout["table_blocks"] = spec
    got = tampered(sim_run, tmp_path, "UPDATE block_tables SET table_blocks = ?, layout = ? "
                   "WHERE sample_id = ?", (blob, json.dumps(layout), sid))
    assert any("logical block" in m for m in got)


def test_steps_restarting_as_in_old_loop_recordings_are_reported(sim_run: Path,
                                                                 tmp_path: Path) -> None:
    """Recordings from before steps continued across --loop streams fail the rule."""
    got = tampered(sim_run, tmp_path, "UPDATE samples SET step = step - (SELECT MAX(step) "
                   "FROM samples) - 1 WHERE sample_id > (SELECT MAX(sample_id) - 10 "
                   "FROM samples)")
    assert any("went back" in m for m in got)
