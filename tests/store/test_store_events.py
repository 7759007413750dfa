"""Events in the store: rows plus compressed chunks come back as one ordered stream."""
from __future__ import annotations

import sqlite3
import zlib
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from kvviz.core.errors import StoreError
from kvviz.engine.eventlog import Event, EventColumns
from kvviz.store.eventcodec import CHUNK_COLS, decode_chunk
from kvviz.store.reader import RunReader
from kvviz.store.writer import RunWriter

COLS = ["t", "step", "lane", "kind", "seq_id", "reason", "need_tokens", "free_tokens",
        "largest_hole_tokens", "count"]


def stream(n_steps: int = 30) -> list[list[Event]]:
    """Per sample, events of two lanes with every kind interleaved in engine order."""
    out, seq = [], 0
    for s in range(n_steps):
        t, batch = 0.1 * s, []
        for lane in ("a", "b"):
            batch += [Event(t, s, lane, "admitted", seq + i, None, 10 + i, 500 - i)
                      for i in range(3)]
            batch.append(Event(t, s, lane, "admit_failed", seq + 3, "FRAGMENTATION", 64, 80, 32))
            batch += [Event(t, s, lane, "finished", seq - 3 + i) for i in range(2)]
            if s % 4 == 0:
                batch += [Event(t, s, lane, "preempted", seq + 1),
                          Event(t, s, lane, "evicted", -1, count=3)]
        seq += 4
        out.append(batch)
    return out


def frame(evs: list[Event]) -> pd.DataFrame:
    return pd.DataFrame([tuple(e) for e in evs], columns=COLS)


@pytest.fixture()
def run(tmp_path: Path) -> tuple[Path, list[Event]]:
    path = tmp_path / "ev.db"
    w = RunWriter(path, {"mode": "sim", "lanes": []})
    allev: list[Event] = []
    for i, batch in enumerate(stream()):
        w.add_events(EventColumns.from_events(batch) if i % 2 else batch)  # both input forms
        w.commit()
        allev += batch
    w.close("finished")
    return path, allev


def same(got: pd.DataFrame, want: list[Event]) -> None:
    exp = frame(want)
    assert len(got) == len(exp)
    assert list(got.columns) == COLS
    for c in COLS:
        if c == "reason":
            assert [None if pd.isna(x) else x for x in got[c]] == [e.reason for e in want]
        elif c == "t":
            assert np.allclose(got[c].to_numpy(float), exp[c].to_numpy(float))
        else:
            assert list(got[c]) == list(exp[c]), c


def test_every_event_comes_back_in_engine_order(run) -> None:
    path, allev = run
    r = RunReader(path)
    same(r.events(), allev)
    assert r.summary()["events"] == len(allev)
    db = sqlite3.connect(path)
    rows = db.execute("SELECT COUNT(*) FROM events").fetchone()[0]
    bulk = db.execute("SELECT SUM(n) FROM event_chunks").fetchone()[0]
    assert rows == sum(e.kind not in ("admitted", "finished") for e in allev)
    assert bulk == sum(e.kind in ("admitted", "finished") for e in allev)


@pytest.mark.parametrize("limit", [1, 5, 17, 400])
def test_limit_is_the_newest_events_across_both_tables(run, limit: int) -> None:
    path, allev = run
    same(RunReader(path).events(limit=limit), allev[-limit:])


def test_filters_by_lane_kind_and_time(run) -> None:
    path, allev = run
    r = RunReader(path)
    same(r.events(lane="b", kinds=["finished", "preempted"]),
         [e for e in allev if e.lane == "b" and e.kind in ("finished", "preempted")])
    same(r.events(since_t=1.45), [e for e in allev if e.time_s > 1.45])
    same(r.events(kinds=["admitted"], since_t=2.0, limit=4),
         [e for e in allev if e.kind == "admitted" and e.time_s > 2.0][-4:])
    assert r.events(kinds=["rejected"]).empty


def test_a_chunk_reads_with_numpy_alone(run) -> None:
    path, allev = run
    db = sqlite3.connect(path)
    n, data = db.execute("SELECT n, data FROM event_chunks WHERE lane = 'a' AND "
                         "kind = 'admitted' ORDER BY chunk_id LIMIT 1").fetchone()
    raw = zlib.decompress(data)
    cols = {c: np.frombuffer(raw, d, n, 8 * n * k) for k, (c, d) in enumerate(CHUNK_COLS)}
    first = [e for e in allev if e.lane == "a" and e.kind == "admitted"][:n]
    assert cols["seq_id"].tolist() == [e.seq_id for e in first]
    assert cols["need_tokens"].tolist() == [e.need_tokens for e in first]


def test_a_damaged_chunk_is_a_store_error_naming_it(run) -> None:
    path, _ = run
    db = sqlite3.connect(path)
    db.execute("UPDATE event_chunks SET data = x'0001' WHERE chunk_id = 2")
    db.commit()
    db.close()
    with pytest.raises(StoreError, match=r"ev\.db: damaged events .*not zlib"):
        RunReader(path).events()
    with pytest.raises(ValueError, match="holds 48 bytes, expected 480 for 10 events"):
        decode_chunk(10, "cols-zlib-1", zlib.compress(b"0" * 48))
    with pytest.raises(ValueError, match="unknown event chunk encoding"):
        decode_chunk(1, "lz4", b"")


def test_a_format_1_recording_without_chunks_still_reads(run, tmp_path: Path) -> None:
    path, allev = run
    db = sqlite3.connect(path)
    db.execute("DROP TABLE event_chunks")
    db.execute("UPDATE run SET format_version = 1")
    db.commit()
    db.close()
    r = RunReader(path)
    same(r.events(), [e for e in allev if e.kind not in ("admitted", "finished")])
    assert r.summary()["events"] == len(r.events())
