"""Every engine event of a recording, one at a time in event_id order: the `events` rows and
the decoded `event_chunks` merged (docs/FORMAT.md: "decode the chunks and sort the union with
the events rows by event_id"), never the whole history at once.

The rows come from one cursor on event_id; the chunks are opened in (id_first, chunk_id) order
from one sorted cursor (SQLite sorts their headers, spilling to a temporary file). Every event
of a chunk not yet opened has an id >= its id_first, so an event below the next chunk's
id_first is the next in order. kvviz writes one chunk per sample, lane and kind, so only one
sample's chunks are open together; more than `held` events in overlapping chunks at once is
TooMany (exit 2, naming --max-events). Rows and chunks that do not fit FORMAT.md are
mismatches and left out.
"""
from __future__ import annotations

import heapq
import sqlite3
from collections.abc import Iterator

import numpy as np

from kvviz.verify import decode, rows
from kvviz.verify.ids import Ids

KINDS = ("admitted", "admit_failed", "preempted", "finished", "evicted", "rejected",
         "partial")
CHUNK_KINDS = ("admitted", "finished", "partial")  # partial: format 5 on
SLICE = 4096  # chunk events turned into Python values at a time
GROUP = 256  # chunks whose data one query reads
# a chunk's data is read only when its length fits n (decode.stored_cap of 48 n bytes):
# SQLite tells a blob's length without reading it
DATA = ("SELECT chunk_id, CASE WHEN typeof(n) = 'integer' AND length(data) <= 48 * n + 48 * n "
        f"/ {decode.STORED_PER} + {decode.STORED_PLUS} THEN data END FROM event_chunks "
        "WHERE chunk_id IN ({marks})")


class TooMany(Exception):
    """More events of overlapping chunks than the verifier holds at once (--max-events)."""


def table_rows(db: sqlite3.Connection, sql: str, args: tuple = ()):
    """Rows as dicts, one at a time."""
    cur = db.execute(sql, args)
    names = [d[0] for d in cur.description]
    for r in cur:
        yield dict(zip(names, r))


def stream(db: sqlite3.Connection, rep, chunked: bool, held: int, ids: Ids) -> Iterator[dict]:
    """The run's events that fit FORMAT.md in event_id order (a row before a chunk's event of
    the same id), each id also given to `ids`."""
    heap: list = []
    n = 0  # a tiebreak: equal ids leave in the order they were read

    def push(source, rank: int) -> None:
        nonlocal n
        ev = next(source, None)
        if ev is not None:
            n += 1
            heapq.heappush(heap, (ev["event_id"], rank, n, ev, source))

    push(_rows(db, rep, chunked, ids), 0)
    heads = _chunks(db, rep, ids) if chunked else iter(())
    nxt = next(heads, None)
    open_events = 0  # events of opened chunks not yet given out
    while heap or nxt is not None:
        if heap and (nxt is None or heap[0][0] < nxt[0]["id_first"]):
            _, rank, _, ev, source = heapq.heappop(heap)
            open_events -= rank
            push(source, rank)
            yield ev
            continue
        ch, cols = nxt
        nxt = next(heads, None)
        if open_events and open_events + ch["n"] > held:
            raise TooMany(f"event chunks whose event ids overlap hold more than {held} events "
                          f"at once (at event_chunks row {ch['chunk_id']}); kvviz writes one "
                          "chunk per sample, lane and kind")
        open_events += ch["n"]
        push(_chunk_events(ch, cols), 1)


def _rows(db: sqlite3.Connection, rep, chunked: bool, ids: Ids) -> Iterator[dict]:
    for ev in table_rows(db, "SELECT * FROM events ORDER BY event_id"):
        where = f"events row {ev['event_id']}"
        bad = rows.problem("events", ev)
        if bad:
            rep.bad(where, bad)
        elif ev["kind"] not in KINDS or (chunked and ev["kind"] in CHUNK_KINDS):
            rep.bad(where, f"kind {rows.shown(ev['kind'])} is not a row kind")
        else:
            ids.add(ev["event_id"])
            yield ev


def _chunks(db: sqlite3.Connection, rep, ids: Ids) -> Iterator[tuple[dict, dict]]:
    """(header, decoded columns sorted by event_id) of each chunk that decodes, in
    (id_first, chunk_id) order."""
    cols = [r[1] for r in db.execute("PRAGMA table_info(event_chunks)") if r[1] != "data"]
    group: list[dict] = []
    for ch in table_rows(db, f"SELECT {', '.join(cols)}, typeof(data) AS data__type, "
                         "length(data) AS data__bytes FROM event_chunks ORDER BY id_first, "
                         "chunk_id"):
        group.append(ch)
        if len(group) == GROUP:
            yield from _decoded(db, rep, group, ids)
            group = []
    yield from _decoded(db, rep, group, ids)


def _decoded(db: sqlite3.Connection, rep, group: list[dict], ids: Ids):
    keys = [ch["chunk_id"] for ch in group]
    data = dict(db.execute(DATA.format(marks=", ".join("?" * len(keys))), keys).fetchall())
    for ch in group:
        where = f"event_chunks row {ch['chunk_id']}"
        kind, size = ch.pop("data__type"), ch.pop("data__bytes")
        ch["data"] = data.get(ch["chunk_id"])
        if ch["data"] is None and kind != "null":  # withheld: longer than n allows
            ch["data"] = b"" if kind == "blob" else kind
        bad = rows.problem("event_chunks", ch) or rows.chunk_bounds(ch)
        if bad:
            rep.bad(where, bad)
            continue
        try:
            decode.check_stored({"data": size}, 48 * ch["n"])
            cols = decode.event_chunk(ch["n"], ch["encoding"], ch.pop("data"))
        except decode.Undecodable as exc:
            rep.bad(where, str(exc))
            continue
        got, t = cols["event_id"], cols["t"]
        rep.checks += 1
        if ch["kind"] not in CHUNK_KINDS or (
                (int(got[0]), int(got[-1]), float(t[0]), float(t[-1]))
                != (ch["id_first"], ch["id_last"], ch["t_first"], ch["t_last"])):
            rep.bad(where, "its kind, n or first/last id and t disagree with its data")
        ids.add_many(got)
        order = np.argsort(got, kind="stable")
        yield ch, {k: v[order] for k, v in cols.items()}


def _chunk_events(ch: dict, cols: dict) -> Iterator[dict]:
    lane, kind = ch["lane"], ch["kind"]
    for k in range(0, ch["n"], SLICE):
        part = {c: v[k:k + SLICE].tolist() for c, v in cols.items()}
        for e, t, s, q, need, free in zip(part["event_id"], part["t"], part["step"],
                                          part["seq_id"], part["need_tokens"],
                                          part["free_tokens"]):
            yield {"event_id": e, "t": t, "step": s, "lane": lane, "kind": kind, "seq_id": q,
                   "reason": None, "need_tokens": need, "free_tokens": free}
