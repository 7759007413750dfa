"""verify(path): decode a whole recording and check it against docs/FORMAT.md."""
from __future__ import annotations

import sqlite3
from dataclasses import dataclass, field
from pathlib import Path

from kvviz.verify import events as engine_events
from kvviz.verify import rows, stored, streams, trust
from kvviz.verify.header import Unreadable, meta_of, open_db, tables
from kvviz.verify.ids import Ids
from kvviz.verify.lane import LaneCheck
from kvviz.verify.replay import Budget

MAX_LISTED = 200  # mismatches kept in the report (all are counted)
MAX_LANES = 128  # lanes checked (kvviz's event log holds at most 127); past it, the report says so
MAX_STRAY = 1000  # lanes without samples named one by one


@dataclass
class Report:
    path: str
    format_version: int = 0
    status: str = ""
    lanes: dict = field(default_factory=dict)  # lane -> counts
    checks: int = 0
    mismatches: list = field(default_factory=list)
    mismatch_count: int = 0
    note: str = ""
    live: bool = False  # the writer was still running: a consistent snapshot was verified
    contents: dict = field(default_factory=dict)  # what the file holds, table by table

    def bad(self, where: str, what: str) -> None:
        self.mismatch_count += 1
        if len(self.mismatches) < MAX_LISTED:
            self.mismatches.append(f"{where}: {what}")

    def same(self, where: str, name: str, stored: object, want: object) -> None:
        self.checks += 1
        if isinstance(want, float) or isinstance(stored, float):
            ok = (isinstance(stored, (int, float)) and isinstance(want, (int, float))
                  and abs(float(stored) - float(want)) <= 1e-9 * max(1.0, abs(float(want))))
        else:
            ok = stored == want
        if not ok:
            self.bad(where, f"{name} stored {stored!r}, recomputed {want!r}")

    def as_dict(self) -> dict:
        return {"path": self.path, "format_version": self.format_version,
                "status": self.status, "ok": self.mismatch_count == 0, "checks": self.checks,
                "note": self.note, "live": self.live, "contents": self.contents,
                "lanes": self.lanes, "mismatch_count": self.mismatch_count,
                "mismatches": self.mismatches}


def verify(path: str | Path, max_events: int = rows.MAX_EVENTS) -> Report:
    """Raises Unreadable when the file cannot be read as a recording at all. Memory holds the
    lanes' replays, one sample and block map per lane and the events of one sample's chunks
    (at most `max_events` of them), whatever the recording's length."""
    path = Path(path)
    db, version = open_db(path)
    rep = Report(str(path), version)
    try:
        run = next(engine_events.table_rows(db, "SELECT * FROM run"))
        rep.status = run["status"] if isinstance(run["status"], str) else repr(run["status"])
        meta = meta_of(run["meta"], path)
        have = tables(db)
        if rep.status == "running":
            rep.live = True
            beat = run.get("heartbeat_unix")
            age = trust.age(beat)
            rep.note = ("a live recording (status running" + age + "): verified one "
                        "consistent snapshot, what was committed when the check began")
        rep.contents.update(streams.kv_events(db, rep, have))
        if meta.get("mode") == "node":
            rep.contents.update(streams.node_samples(db, rep, have))
            if not _has_lanes(db, have):
                _say(rep, "a node recording ({node_samples_ok} of its scrapes ok): no lanes, "
                     "block maps or engine events")
                return rep
            # `kvviz attach --blocks`: the plugin's lanes meet every lane rule (below)
            _say(rep, "a node recording ({node_samples_ok} of its scrapes ok) with block "
                 "lanes (kvviz attach --blocks)")
        if meta.get("mode") == "kv-events" or ("samples" not in have and rep.contents):
            _say(rep, "a KV-event recording: no lanes, block maps or engine events")
            return rep
        missing = {"samples", "blockmaps", "events"} - have
        if missing:
            raise Unreadable(f"{path}: tables {sorted(missing)} are missing")
        for table in ("samples", "blockmaps", "events", "event_chunks", "block_tables"):
            if table in have:
                rows.columns(db, table)
        _engine(db, rep, run, meta, have, version, max_events)
    except rows.Missing as exc:
        raise Unreadable(f"{path}: {exc}") from None
    except engine_events.TooMany as exc:
        raise Unreadable(f"{path}: {exc}, more than the verifier holds at once (--max-events "
                         "raises the limit: about 100 bytes of memory per event)") from None
    except sqlite3.DatabaseError as exc:
        raise Unreadable(f"{path}: unreadable ({exc})") from None
    finally:
        db.close()
    return rep


def _has_lanes(db: sqlite3.Connection, have: set[str]) -> bool:
    """Whether a node recording holds lanes of its own (the vLLM plugin's block pool)."""
    return "samples" in have and db.execute("SELECT 1 FROM samples LIMIT 1").fetchone() \
        is not None


def _engine(db: sqlite3.Connection, rep: Report, run: dict, meta: dict, have: set[str],
            version: int, max_events: int) -> None:
    """The lanes' samples, block maps and tables against the engine events, in one pass over
    the events in event_id order."""
    lanes = {ln.get("name"): ln for ln in meta.get("lanes", [])}
    for where, what in trust.meta_lanes(meta):
        rep.bad(where, what)
    names, more = [], 0
    for (lane,) in db.execute("SELECT DISTINCT lane FROM samples"):
        if not isinstance(lane, str):
            rep.bad("samples", f"lane {rows.shown(lane)} is not text")
        elif len(names) < MAX_LANES:
            names.append(lane)
        else:
            more += 1
    if more:
        _note(rep, f"not checked: {more} lanes past the first {MAX_LANES} (kvviz runs at "
             "most 127), their samples, maps and events")
    stride = run["blockmap_stride"]
    if not rows._fits(stride, "int") or stride < 1:
        rep.bad("run", f"blockmap_stride {rows.shown(stride)} is not a positive integer")
        stride = 1
    rep.checks += 1
    for msg in stored.collector(meta):
        rep.bad("run", msg)
    budget = Budget()  # live sequences, all lanes together
    lanes = {lane: LaneCheck(db, rep, lane, lanes.get(lane, {}), stride,
                             "block_tables" in have, version, budget) for lane in names}
    ids, stray, n = Ids(), Stray(db, rep), 0
    for ev in engine_events.stream(db, rep, "event_chunks" in have, max_events, ids):
        n += 1
        check = lanes.get(ev["lane"]) if isinstance(ev["lane"], str) else None
        if check is not None:
            check.event(ev)
        else:
            stray.add(ev["lane"])
    for check in lanes.values():
        check.finish()
        if check.replay.stopped:
            _note(rep, "not checked: " + check.replay.stopped)
    stray.report()
    rep.checks += 1
    if not ids.ok():
        rep.bad("events", "event ids are not 1, 2, 3, ... without gaps or repeats")
    if ids.unchecked():
        _note(rep, "not checked: " + ids.unchecked())
    rep.contents.update(samples=sum(s["samples"] for s in rep.lanes.values()), events=n)


class Stray:
    """Events of lanes that have no samples: one mismatch per lane (the first MAX_STRAY lanes
    named, the others counted), in lane order."""

    def __init__(self, db: sqlite3.Connection, rep: Report) -> None:
        self.db, self.rep, self.seen, self.others = db, rep, set(), 0

    def add(self, lane: object) -> None:
        key = str(lane)
        if key in self.seen:
            return
        if isinstance(lane, str) and self.db.execute(  # a lane past MAX_LANES: not a stray
                "SELECT 1 FROM samples WHERE lane = ? LIMIT 1", (lane,)).fetchone():
            return
        if len(self.seen) < MAX_STRAY:
            self.seen.add(key)
        else:
            self.others += 1

    def report(self) -> None:
        for lane in sorted(self.seen):
            self.rep.bad(f"{lane} events", "events of a lane that has no samples")
        if self.others:
            self.rep.bad("events", f"{self.others} more events of lanes that have no samples "
                         f"(past the first {MAX_STRAY} such lanes)")


def _say(rep: Report, text: str) -> None:
    _note(rep, text.format(**rep.contents))


def _note(rep: Report, line: str) -> None:
    """`line` added to the report's note as it is (no field of it is filled in)."""
    rep.note = f"{rep.note}; {line}" if rep.note else line
