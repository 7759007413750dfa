"""kvviz.store.kv_reader: per-stream counts and the timeline equal a plain recount of the rows
while the recording fits the window; past it they cover the newest `window` batches (or a
finished stream's own summary), and what a call reads does not grow with the recording."""
from __future__ import annotations

import sqlite3
from collections import defaultdict

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from kvviz.store import kv_reader
from kvviz.store.kv_writer import KvEventWriter
from tests.examples import examples

batch = st.tuples(st.integers(1, 3), st.floats(0, 50), st.integers(0, 9), st.integers(0, 9),
                  st.integers(0, 2), st.booleans(), st.sampled_from(["ok", "undecodable"]))
gap = st.tuples(st.integers(1, 3), st.sampled_from(["gap", "restart"]),
                st.integers(0, 2**40), st.integers(0, 2**40), st.booleans())


def record(path, batches, gaps=(), summaries=None) -> sqlite3.Connection:
    conn = sqlite3.connect(path)
    kv = KvEventWriter(conn)
    for sid in (1, 2, 3):
        assert kv.add_stream(f"tcp://127.0.0.1:{5000 + sid}", 0, "", None) == sid
        if summaries and sid in summaries:
            kv.set_stream(sid, "map", 0.0, summaries[sid])
    for i, (sid, t, ns, nr, nc, rep, status) in enumerate(batches):
        ok = status == "ok"
        kv.add_batch((sid, i, t, None, 0, (ns + nr + nc) * ok, ns * ok, nr * ok, nc * ok, 0,
                      int(rep), status, b"", b"x"))
    kv.flush()
    for sid, kind, first, last, filled in gaps:
        kv.add_gap(sid, 1.0, kind, first, last, filled)
    conn.commit()
    return conn


def recount(batches, gaps) -> dict[int, dict]:
    out: dict[int, dict] = {}
    for sid, _t, ns, nr, nc, rep, status in batches:
        ok = status == "ok"
        d = out.setdefault(sid, dict.fromkeys(kv_reader.SUMMED, 0))
        for k, v in zip(kv_reader.SUMMED, (ok, (ns + nr + nc) * ok, ns * ok, nr * ok, nc * ok,
                                           rep, not ok)):
            d[k] += int(v)
    for sid, kind, first, last, filled in gaps:
        d = out.setdefault(sid, {})
        if kind == "gap":
            d["gaps"] = d.get("gaps", 0) + 1
            d["lost_batches"] = d.get("lost_batches", 0) + (0 if filled else
                                                            max(0, last - first + 1))
        else:
            d["restarts"] = d.get("restarts", 0) + 1
    return out


def per_second(batches) -> list[tuple]:
    line: dict = defaultdict(lambda: [0, 0])
    for sid, t, ns, nr, _nc, _rep, status in batches:
        ok = status == "ok"
        line[(sid, int(t))][0] += ns * ok
        line[(sid, int(t))][1] += nr * ok
    return [(s, sec, a, b) for (s, sec), (a, b) in sorted(line.items())]


@settings(max_examples=examples(40), deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(batches=st.lists(batch, max_size=40), gaps=st.lists(gap, max_size=8))
def test_within_the_window_counts_and_timeline_are_a_recount(tmp_path_factory, batches, gaps):
    conn = record(tmp_path_factory.mktemp("w") / "r.db", batches, gaps)
    assert kv_reader.stream_counts(conn) == recount(batches, gaps)
    assert kv_reader.timeline(conn) == per_second(batches)
    assert not kv_reader.timeline_is_partial(conn)


@settings(max_examples=examples(40), deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(batches=st.lists(batch, min_size=2, max_size=40), data=st.data())
def test_past_the_window_only_the_newest_batches_count(tmp_path_factory, batches, data):
    window = data.draw(st.integers(1, len(batches) - 1))
    own = {k: 7 for k in kv_reader.SUMMED + kv_reader.GAP_COUNTS}  # stream 3 finished
    conn = record(tmp_path_factory.mktemp("w") / "r.db", batches, summaries={3: own})
    newest = batches[-window:]
    assert kv_reader.timeline(conn, window) == per_second(newest)
    assert kv_reader.timeline_is_partial(conn, window)
    counts = kv_reader.stream_counts(conn, window)
    assert counts[3] == own  # the stream's own totals, not a partial count
    for sid, d in recount(newest, ()).items():
        if sid != 3:
            assert counts[sid] == {**d, "partial": True}
    assert all(counts[s].get("partial") for s in (1, 2))


def _steps(conn: sqlite3.Connection, call) -> int:
    """SQLite virtual-machine steps (in thousands) that `call` takes on `conn`."""
    n = [0]

    def tick() -> int:
        n[0] += 1
        return 0
    conn.set_progress_handler(tick, 1000)
    try:
        call(conn)
    finally:
        conn.set_progress_handler(None, 1000)
    return n[0]


def test_what_a_call_reads_does_not_grow_with_the_recording(tmp_path):
    rows = [(1 + i % 3, i / 100, 2, 1, 0, False, "ok") for i in range(60_000)]
    gaps = [(1, "gap", i, i + 1, False) for i in range(20_000)]
    small = record(tmp_path / "s.db", rows[:6_000], gaps[:2_000])
    large = record(tmp_path / "l.db", rows, gaps)
    for call in (lambda c: kv_reader.stream_counts(c, 2_000),
                 lambda c: kv_reader.timeline(c, 2_000),
                 lambda c: kv_reader.ok_batches(c, 100, limit=500),
                 lambda c: kv_reader.batches_after(c, 10), kv_reader.timeline_is_partial):
        a, b = _steps(small, call), _steps(large, call)
        assert b <= 1.5 * a + 20, (call, a, b)  # 10x the rows, about the same work
