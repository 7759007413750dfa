"""The recording store: what goes in comes out, bounded, and readable by metrics alone."""
from __future__ import annotations

import sqlite3
from pathlib import Path

import numpy as np
import pytest

from kvviz.core.errors import StoreError
from kvviz.core.metrics import compute
from kvviz.store.reader import RunReader
from kvviz.store.writer import RunWriter
from tests.store.conftest import record


def test_stored_metrics_equal_metrics_of_stored_blockmap(recording) -> None:
    path, _ = recording
    r = RunReader(path)
    df = r.samples()
    assert len(df) == 80
    for lane in r.lanes():
        idx = r.blockmap_index(lane)
        assert len(idx) == 40
        for sid in idx.sample_id.iloc[::7]:
            row = df[df.sample_id == sid].iloc[0]
            m = compute(r.blockmap(int(sid))).as_dict()
            for key, val in m.items():
                assert (val is None and np.isnan(row[key])) or row[key] == pytest.approx(val), key


def test_latest_blockmap_is_the_final_state(recording) -> None:
    path, sim = recording
    r = RunReader(path)
    for ln in sim.lanes:
        bm, t = r.latest_blockmap(ln.name)
        assert bm == ln.snapshot() and t == pytest.approx(sim.time_s)
        assert np.array_equal(bm.final_seq, ln.snapshot().final_seq)


def test_blockmap_at_picks_at_or_before(recording) -> None:
    path, _ = recording
    r = RunReader(path)
    idx = r.blockmap_index("paged:16")
    _, t = r.blockmap_at("paged:16", float(idx.t.iloc[3]) + 1e-6)
    assert t == pytest.approx(idx.t.iloc[3])
    assert r.blockmap_at("paged:16", -1.0) is None


def test_summary_and_filters(recording) -> None:
    path, _ = recording
    r = RunReader(path)
    s = r.summary()
    assert s["status"] == "finished" and s["samples"] == 80 and set(s["lanes"]) == {
        "contiguous:first-fit:max", "paged:16"}
    ev = r.events(lane="paged:16", kinds=["admitted", "finished"])
    assert set(ev.kind) <= {"admitted", "finished"} and set(ev.lane) == {"paged:16"}
    assert len(r.events(limit=5)) == 5
    assert list(r.events(limit=5).t) == sorted(r.events(limit=5).t)
    t_mid = float(r.samples().t.median())
    assert (r.samples(since_t=t_mid).t > t_mid).all()
    assert list(r.device_memory().columns) == ["t", "nvml_status", "rss"]


def test_retention_keeps_the_bound(tmp_path: Path) -> None:
    budget = 40_000
    path = tmp_path / "small.db"
    record(path, steps=1200, every=2, budget=budget)
    r = RunReader(path)
    assert len(r.samples()) == 1200  # metrics always kept
    maps = r.blockmap_rows()[["lane", "idx", "nbytes"]].itertuples(index=False)
    maps = [tuple(m) for m in maps]
    biggest = max(n for _, _, n in maps)
    assert sum(n for _, _, n in maps) <= budget + 2 * biggest  # + each lane's latest
    assert r.blockmap_stride > 1
    for lane in r.lanes():  # thinned evenly, and the newest map is always there
        kept = sorted(i for ln, i, _ in maps if ln == lane)
        assert kept[-1] == 599
        assert all(i % r.blockmap_stride == 0 for i in kept[:-1])
        assert r.latest_blockmap(lane)[1] == pytest.approx(r.samples(lane).t.max())


def test_writer_refuses_existing_file_and_leaves_no_partial(tmp_path: Path) -> None:
    path = tmp_path / "a.db"
    RunWriter(path, {}).close()
    with pytest.raises(StoreError, match="already exists"):
        RunWriter(path, {})
    with pytest.raises(StoreError, match="does not exist"):
        RunWriter(tmp_path / "nope" / "b.db", {})
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a.db"]
    RunWriter(path, {"x": 1}, overwrite=True).close("stopped", "bye")
    r = RunReader(path)
    assert (r.meta, r.status, r.status_message) == ({"x": 1}, "stopped", "bye")


def test_bad_status_and_column_names(tmp_path: Path) -> None:
    w = RunWriter(tmp_path / "c.db", {})
    with pytest.raises(ValueError, match="status"):
        w.set_status("exploded")
    with pytest.raises(ValueError, match="identifier"):
        w.add_device_memory(0.0, {"bad name; DROP TABLE run": 1})
    w.close()


def _assert_store_error(path: Path, words: str) -> None:
    with pytest.raises(StoreError) as info:
        RunReader(path)
    assert str(path) in str(info.value) and words in str(info.value)


def test_foreign_and_broken_files(tmp_path: Path, recording) -> None:
    text = tmp_path / "notes.db"
    text.write_text("hello, this is not a database\n")
    _assert_store_error(text, "not a SQLite database")
    empty = tmp_path / "empty.db"
    empty.write_bytes(b"")
    _assert_store_error(empty, "empty file")
    other = tmp_path / "other.db"
    with sqlite3.connect(other) as conn:
        conn.execute("CREATE TABLE t (x)")
    _assert_store_error(other, "another application")
    _assert_store_error(tmp_path / "missing.db", "no such file")
    data = recording[0].read_bytes()
    cut = tmp_path / "cut.db"
    cut.write_bytes(data[: len(data) // 2])
    _assert_store_error(cut, "truncated")
    cut.write_bytes(data[:60])
    _assert_store_error(cut, "truncated")


def test_last_t_is_the_newest_sample_and_bounds_a_window(recording) -> None:
    path, _ = recording
    r = RunReader(path)
    samples = r.samples()
    assert r.last_t() == pytest.approx(float(samples["t"].max()))
    window = r.samples(since_t=r.last_t() - 0.5)
    assert not window.empty and (window["t"] >= r.last_t() - 0.5).all()
    assert len(window) < len(samples)
    r.close()


def test_seek_queries_agree_with_the_full_table(recording) -> None:
    path, _ = recording
    r = RunReader(path)
    s = r.samples()
    assert r.span() == (s.t.min(), s.t.max())
    lane = r.lanes()[1]
    for t in (s.t.min(), float(s.t.median()), s.t.max(), s.t.min() - 1):
        at = r.sample_at(lane, t)
        want = s[(s.lane == lane) & (s.t <= t)].tail(1)
        assert at.sample_id.tolist() == want.sample_id.tolist()
    ev = r.events(kinds=["admit_failed"])
    assert r.count_events("admit_failed") == len(ev) > 0


@pytest.mark.parametrize("points", [1, 7, 40, 10_000])
def test_thinned_samples_are_the_last_sample_of_each_time_bucket(recording, points) -> None:
    path, _ = recording
    r = RunReader(path)
    s = r.samples()
    got = r.samples_thinned(points)
    t0, t1 = s.t.min(), s.t.max()
    width = (t1 - t0) / points
    ends = [t0 + width * (b + 1) for b in range(points - 1)] + [t1]
    want = set()
    for _lane, g in s.groupby("lane"):
        lo = t0 - 1
        for end in ends:
            inside = g[(g.t > lo) & (g.t <= end)]
            if len(inside):
                want.add(int(inside.sample_id.iloc[-1]))
            lo = end
    assert set(got.sample_id) == want
    assert got.groupby("lane").size().max() <= points
    assert got.t.is_monotonic_increasing and list(got.columns) == list(s.columns)
