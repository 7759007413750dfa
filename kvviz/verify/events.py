"""Every engine event of a recording, rows and decoded chunks, in event_id order."""
from __future__ import annotations

import sqlite3

from kvviz.verify import decode, rows

KINDS = ("admitted", "admit_failed", "preempted", "finished", "evicted", "rejected",
         "partial")
CHUNK_KINDS = ("admitted", "finished", "partial")  # partial: format 5 on


# a chunk's data is read only when its length fits n (decode.stored_cap of 48 n bytes):
# SQLite tells a blob's length without reading it
CHUNKS = ("SELECT {cols}, typeof(data) AS data__type, length(data) AS data__bytes, "
          "CASE WHEN typeof(n) = 'integer' AND length(data) <= 48 * n + 48 * n / "
          f"{decode.STORED_PER} + {decode.STORED_PLUS} THEN data END AS data "
          "FROM event_chunks ORDER BY chunk_id")


class TooMany(Exception):
    """More events than the verifier holds (rows.MAX_EVENTS, --max-events)."""


def table_rows(db: sqlite3.Connection, sql: str, args: tuple = ()):
    """Rows as dicts, one at a time."""
    cur = db.execute(sql, args)
    names = [d[0] for d in cur.description]
    for r in cur:
        yield dict(zip(names, r))


def load(db: sqlite3.Connection, rep, chunked: bool, limit: int) -> list[dict]:
    """Every event of the run in event_id order (rows and decoded chunks); rows and chunks
    that do not fit FORMAT.md are mismatches and left out. TooMany past `limit` events."""
    evs: list[dict] = []
    for ev in table_rows(db, "SELECT * FROM events"):
        where = f"events row {ev['event_id']}"
        bad = rows.problem("events", ev)
        if bad:
            rep.bad(where, bad)
        elif ev["kind"] not in KINDS or (chunked and ev["kind"] in CHUNK_KINDS):
            rep.bad(where, f"kind {rows.shown(ev['kind'])} is not a row kind")
        else:
            evs.append(ev)
        if len(evs) > limit:
            raise TooMany(f"more than {limit} events")
    if chunked:
        for ch in table_rows(db, CHUNKS.format(cols=", ".join(
                r[1] for r in db.execute("PRAGMA table_info(event_chunks)") if r[1] != "data"))):
            where = f"event_chunks row {ch['chunk_id']}"
            kind, size = ch.pop("data__type"), ch.pop("data__bytes")
            if ch["data"] is None and kind != "null":  # withheld: longer than n allows
                ch["data"] = b"" if kind == "blob" else kind
            bad = rows.problem("event_chunks", ch) or rows.chunk_bounds(ch)
            if bad:
                rep.bad(where, bad)
                continue
            if len(evs) + ch["n"] > limit:
                raise TooMany(f"more than {limit} events")
            try:
                decode.check_stored({"data": size}, 48 * ch["n"])
                cols = decode.event_chunk(ch["n"], ch["encoding"], ch["data"])
            except decode.Undecodable as exc:
                rep.bad(where, str(exc))
                continue
            ids, t = cols["event_id"], cols["t"]
            rep.checks += 1
            if ch["kind"] not in CHUNK_KINDS or (
                    (int(ids[0]), int(ids[-1]), float(t[0]), float(t[-1]))
                    != (ch["id_first"], ch["id_last"], ch["t_first"], ch["t_last"])):
                rep.bad(where, "its kind, n or first/last id and t disagree with its data")
            lists = {k: v.tolist() for k, v in cols.items()}
            for k in range(ch["n"]):
                evs.append({"event_id": lists["event_id"][k], "t": lists["t"][k],
                            "step": lists["step"][k], "lane": ch["lane"],
                            "kind": ch["kind"], "seq_id": lists["seq_id"][k],
                            "reason": None, "need_tokens": lists["need_tokens"][k],
                            "free_tokens": lists["free_tokens"][k]})
    evs.sort(key=lambda e: e["event_id"])
    ids = [e["event_id"] for e in evs]
    rep.checks += 1
    if ids != list(range(1, len(ids) + 1)):
        rep.bad("events", "event ids are not 1, 2, 3, ... without gaps or repeats")
    return evs
