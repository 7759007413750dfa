"""verify(path): decode a whole recording and check it against docs/FORMAT.md."""
from __future__ import annotations

import sqlite3
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from kvviz.verify import checks, decode, rows, stored, streams, trust
from kvviz.verify import events as engine_events
from kvviz.verify.header import Unreadable, meta_of, open_db, tables
from kvviz.verify.replay import PARTIAL_SINCE, LaneReplay

MAX_LISTED = 200  # mismatches kept in the report (all are counted)


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
    """Raises Unreadable when the file cannot be read as a recording at all."""
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
            _say(rep, "a node recording ({node_samples_ok} of its scrapes ok): no lanes, "
                 "block maps or engine events")
            return rep
        if meta.get("mode") == "kv-events" or ("samples" not in have and rep.contents):
            _say(rep, "a KV-event recording: no lanes, block maps or engine events")
            return rep
        missing = {"samples", "blockmaps", "events"} - have
        if missing:
            raise Unreadable(f"{path}: tables {sorted(missing)} are missing")
        chunked = "event_chunks" in have  # format 1: every event is a row
        for table in ("samples", "blockmaps", "events", "event_chunks", "block_tables"):
            if table in have:
                rows.columns(db, table)
        events = engine_events.load(db, rep, chunked, max_events)
        lanes = {ln.get("name"): ln for ln in meta.get("lanes", [])}
        for where, what in trust.meta_lanes(meta):
            rep.bad(where, what)
        names = []
        for (lane,) in db.execute("SELECT DISTINCT lane FROM samples"):
            if isinstance(lane, str):
                names.append(lane)
            else:
                rep.bad("samples", f"lane {rows.shown(lane)} is not text")
        stride = run["blockmap_stride"]
        if not rows._fits(stride, "int") or stride < 1:
            rep.bad("run", f"blockmap_stride {rows.shown(stride)} is not a positive integer")
            stride = 1
        rep.checks += 1
        for msg in stored.collector(meta):
            rep.bad("run", msg)
        by_lane: dict = {}
        for e in events:
            by_lane.setdefault(e["lane"], []).append(e)
        for lane in names:
            _lane(db, rep, lane, lanes.get(lane, {}), by_lane.get(lane, []), stride,
                  "block_tables" in have, version)
        for lane in sorted({str(e["lane"]) for e in events} - set(names)):
            rep.bad(f"{lane} events", "events of a lane that has no samples")
        rep.contents.update(samples=sum(s["samples"] for s in rep.lanes.values()),
                            events=len(events))
    except rows.Missing as exc:
        raise Unreadable(f"{path}: {exc}") from None
    except engine_events.TooMany as exc:
        raise Unreadable(f"{path}: {exc}, more than the verifier holds at once (--max-events "
                         "raises the limit: about 0.5 KB of memory per event)") from None
    except sqlite3.DatabaseError as exc:
        raise Unreadable(f"{path}: unreadable ({exc})") from None
    finally:
        db.close()
    return rep


def _say(rep: Report, text: str) -> None:
    line = text.format(**rep.contents)
    rep.note = f"{rep.note}; {line}" if rep.note else line


def _typed(db: sqlite3.Connection, rep: Report, table: str, lane: str) -> dict:
    """sample_id -> row of `table` for `lane` without its blobs (read one map at a time by
    _full), their stored lengths under "stored"; rows that do not fit FORMAT.md left out.
    SQLite tells a blob's type and length without reading it."""
    out = {}
    have = {r[1] for r in db.execute(f"PRAGMA table_info({table})")}
    names = [c for c in have if c in decode.BLOB_COLUMNS]
    cols = [c for c in have if c not in decode.BLOB_COLUMNS]
    blobs = [f"typeof({c}) AS {c}, length({c}) AS {c}__bytes" for c in names]
    sql = f"SELECT {', '.join(cols + blobs)} FROM {table} WHERE lane = ?"
    for r in engine_events.table_rows(db, sql, (lane,)):
        r["stored"] = {c: r.pop(f"{c}__bytes") for c in names}
        shape = {c: (b"" if r[c] == "blob" else None if r[c] == "null" else r[c])
                 for c in names}
        bad = rows.problem(table, {**r, **shape})
        if bad is None and table == "blockmaps":
            bad = rows.map_bounds(r)
        if bad:
            rep.bad(f"{lane} {table} row {r['sample_id']}", bad)
        else:
            out[r["sample_id"]] = r
    return out


def _full(db: sqlite3.Connection, table: str, row: dict, cap: int) -> dict:
    """The row with its blobs (one map's worth of memory); Undecodable, before a byte of them
    is read, when one is stored in more bytes than a blob inflating to `cap` may take."""
    decode.check_stored(row["stored"], cap)
    return next(engine_events.table_rows(db, f"SELECT * FROM {table} WHERE sample_id = ? "
                                         "LIMIT 1", (row["sample_id"],)))


def _lane(db: sqlite3.Connection, rep: Report, lane: str, meta: dict, events: list[dict],
          stride: int, with_tables: bool, version: int) -> None:
    n_samples = db.execute("SELECT COUNT(*) FROM samples WHERE lane = ?",
                           (lane,)).fetchone()[0]
    samples = engine_events.table_rows(  # one row at a time: memory does not grow with them
        db, "SELECT * FROM samples WHERE lane = ? ORDER BY sample_id", (lane,))
    maps = _typed(db, rep, "blockmaps", lane)
    tabs = _typed(db, rep, "block_tables", lane) if with_tables else {}
    for sid in set(tabs) - set(maps):
        rep.bad(f"{lane} block tables {sid}", "no block map of this lane has its sample_id")
    stats = {"samples": n_samples, "maps": len(maps), "events": len(events)}
    rep.lanes[lane] = stats
    rep.checks += 1
    for msg in stored.retention([r["idx"] for r in maps.values()], stride):
        rep.bad(f"{lane} retention", msg)
    engine = meta.get("engine") if isinstance(meta.get("engine"), dict) else {}
    chunked = engine.get("enable_chunked_prefill") is not False  # vLLM's default: on
    bounds = chunked and version < PARTIAL_SINCE  # no partial events: bounds only
    replay, k, prev, last_t = LaneReplay(lane, bounds), 0, (0.0, 0), float("-inf")
    last_step = None
    for s in samples:
        where = f"{lane} sample {s['sample_id']} (step {rows.shown(s['step'], 20)})"
        bad = rows.problem("samples", s)
        if bad:
            rep.bad(where, bad)
            maps.pop(s["sample_id"], None)
            continue
        where = f"{lane} sample {s['sample_id']} (step {s['step']})"
        rep.checks += 1
        if s["t"] < last_t or (last_step is not None and s["step"] < last_step):
            rep.bad(where, f"t or step went back (previous sample: t {last_t}, step "
                    f"{last_step})")
        last_step = s["step"]
        while k < len(events) and events[k]["step"] <= s["step"]:
            ev = events[k]
            replay.apply(ev)
            k += 1
            rep.checks += 1
            t = ev["t"]
            if not (isinstance(t, (int, float)) and last_t - 1e-9 <= t <= s["t"] + 1e-9):
                rep.bad(f"{lane} event {ev['event_id']} (step {ev['step']})",
                        f"t {ev['t']!r} is not between the samples around its step "
                        f"({last_t} and {s['t']})")
        last_t = s["t"]
        for msg in replay.problems:
            rep.bad(f"{lane} events", msg)
        replay.problems.clear()
        _counters(rep, where, s, replay, prev)
        if isinstance(s.get("tokens_generated"), int):
            prev = (s["t"], s["tokens_generated"])
        if "capacity_tokens" in meta:
            rep.same(where, "capacity_tokens (meta)", s["capacity_tokens"],
                     meta["capacity_tokens"])
        row = maps.pop(s["sample_id"], None)
        if row is not None:
            _map(rep, where, s, db, row, replay, tabs.get(s["sample_id"]), meta)
    for sid in maps:
        rep.bad(f"{lane} map {sid}", "no samples row of this lane has its sample_id")
    if k < len(events):  # written with a sample, an event never is past its lane's last one
        rep.bad(f"{lane} events", f"{len(events) - k} events have a step after the lane's last "
                f"sample (first: event {events[k]['event_id']}, step {events[k]['step']})")


def _counters(rep: Report, where: str, s: dict, replay: LaneReplay, prev: tuple) -> None:
    for name, want in replay.counters(s["step"]).items():
        if s.get(name) is None:
            continue
        if name != "tokens_generated":
            rep.same(where, name, s[name], want)
        elif want[0] == want[1]:
            rep.same(where, name, s[name], want[0])
        else:
            rep.checks += 1
            if not (isinstance(s[name], int) and want[0] <= s[name] <= want[1]):
                rep.bad(where, f"tokens_generated stored {rows.shown(s[name])}, events allow "
                        f"{want[0]}-{want[1]}")
    if s.get("tokens_per_s") is not None and isinstance(s.get("tokens_generated"), int):
        t0, tok0 = prev
        want = (s["tokens_generated"] - tok0) / (s["t"] - t0) if s["t"] > t0 else 0.0
        rep.same(where, "tokens_per_s", s["tokens_per_s"], want)


def _map(rep: Report, where: str, s: dict, db: sqlite3.Connection, row: dict,
         replay: LaneReplay, tab: dict | None, lane: dict) -> None:
    """Check one block map (and its block tables) against the sample and the replay; `row`
    and `tab` are _typed rows, their blobs read here when their lengths fit."""
    rep.same(where, "map t/step", (row["t"], row["step"]), (s["t"], s["step"]))
    try:
        m = decode.block_map(_full(db, "blockmaps", row,
                                   decode.blob_cap(row["num_blocks"], row["runs"])))
        if tab is not None:
            cap = 8 * (int(m.planes["refcount"].sum()) + m.num_blocks) + 65536
            m = m._replace(tables=decode.block_tables(_full(db, "block_tables", tab, cap),
                                                      cap))
    except decode.Undecodable as exc:
        rep.bad(where, f"block map does not decode: {exc}")
        return
    rep.lanes[s["lane"]]["maps_decoded"] = rep.lanes[s["lane"]].get("maps_decoded", 0) + 1
    rep.checks += 1
    for msg in checks.invariants(m):
        rep.bad(where, msg)
    for msg in trust.owners(m.planes["owner"]) + trust.map_vs_lane(row, lane):
        rep.bad(where, msg)
    got = checks.metrics(m)
    for name, want in got.items():
        if name in s:
            rep.same(where, name, s[name], want)
    step, free = replay.last_admit
    if step == s["step"]:  # nothing allocates after them (a finish resets last_admit)
        rep.same(where, "free_tokens of the step's last admission", free, got["free_tokens"])
    fs = m.finals["final_seq"]
    if fs is None:
        return
    lengths = replay.lengths(s["step"])
    rep.same(where, "live set (final_seq vs events)", sorted(fs.tolist()), sorted(lengths))
    want = np.array([lengths.get(int(q), -1) for q in fs], np.int64)
    wrote = checks.per_owner(m.planes["owner"], m.planes["filled"], fs)
    shared = (m.planes["refcount"] > 1).any()
    rep.checks += 1
    exact = not replay.chunked  # else lengths from events are upper bounds
    off = (wrote > want) if shared or not exact else (wrote != want)
    off |= want > m.finals["final_len"]
    if off.any():
        i = int(np.flatnonzero(off)[0])
        rep.bad(where, f"sequence {fs[i]}: the map holds {wrote[i]} written slots, events "
                f"give length {want[i]} (final length {m.finals['final_len'][i]})")
    if not exact and not shared:  # bounds only: a table must fit what the map holds
        want = np.where(want < 0, want, wrote)
    if m.tables and not (want < 0).any() and (exact or not shared):
        stats = rep.lanes[s["lane"]]
        stats["tables_checked"] = stats.get("tables_checked", 0) + 1
        rep.checks += 1
        for msg in checks.tables(m, want):
            rep.bad(where, msg)
