"""verify(path): decode a whole recording and check it against docs/FORMAT.md."""
from __future__ import annotations

import json
import sqlite3
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from kvviz.verify import checks, decode
from kvviz.verify.replay import LaneReplay

APP_ID = 0x6B76767A
MAX_LISTED = 200  # mismatches kept in the report (all are counted)
KINDS = ("admitted", "admit_failed", "preempted", "finished", "evicted", "rejected")
CHUNK_KINDS = ("admitted", "finished")


class Unreadable(Exception):
    """Not a kvviz recording this verifier can open."""


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
                "note": self.note,
                "lanes": self.lanes, "mismatch_count": self.mismatch_count,
                "mismatches": self.mismatches}


def open_db(path: Path) -> tuple[sqlite3.Connection, int]:
    if not path.is_file():
        raise Unreadable(f"{path}: no such file")
    with path.open("rb") as fh:
        head = fh.read(100)
    if len(head) < 100 or not head.startswith(b"SQLite format 3\x00"):
        raise Unreadable(f"{path}: not a SQLite database")
    if int.from_bytes(head[68:72], "big") != APP_ID:
        raise Unreadable(f"{path}: application_id is not 0x6B76767A ('kvvz')")
    try:
        db = sqlite3.connect(f"{path.resolve().as_uri()}?mode=ro", uri=True)
        row = db.execute("SELECT app, format_version, status, meta, blockmap_stride FROM run "
                         "WHERE id = 1").fetchone()
    except sqlite3.DatabaseError as exc:
        raise Unreadable(f"{path}: unreadable ({exc})") from None
    if row is None or row[0] != "kvviz":
        raise Unreadable(f"{path}: no run row with app = 'kvviz'")
    return db, int(row[1])


def rows(db: sqlite3.Connection, sql: str, args: tuple = ()) -> list[dict]:
    cur = db.execute(sql, args)
    names = [d[0] for d in cur.description]
    return [dict(zip(names, r)) for r in cur.fetchall()]


def tables(db: sqlite3.Connection) -> set[str]:
    return {r[0] for r in db.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}


def load_events(db: sqlite3.Connection, rep: Report) -> list[dict]:
    """Every event of the run in event_id order (rows and decoded chunks)."""
    evs = []
    chunked = "event_chunks" in tables(db)  # format 1: every event is a row
    for ev in rows(db, "SELECT * FROM events"):
        if ev["kind"] not in KINDS or (chunked and ev["kind"] in CHUNK_KINDS):
            rep.bad(f"events row {ev['event_id']}", f"kind {ev['kind']!r} is not a row kind")
        elif not all(isinstance(ev[k], int) for k in ("step", "seq_id", "need_tokens")):
            rep.bad(f"events row {ev['event_id']}", "step, seq_id or need_tokens is not an "
                    "integer")
        else:
            evs.append(ev)
    if chunked:
        for ch in rows(db, "SELECT * FROM event_chunks ORDER BY chunk_id"):
            where = f"event_chunks row {ch['chunk_id']}"
            try:
                cols = decode.event_chunk(ch["n"], ch["encoding"], ch["data"])
            except decode.Undecodable as exc:
                rep.bad(where, str(exc))
                continue
            ids, t = cols["event_id"], cols["t"]
            rep.checks += 1
            if ch["kind"] not in CHUNK_KINDS or ch["n"] < 1 or (
                    (int(ids[0]), int(ids[-1]), float(t[0]), float(t[-1]))
                    != (ch["id_first"], ch["id_last"], ch["t_first"], ch["t_last"])):
                rep.bad(where, "its kind, n or first/last id and t disagree with its data")
            for k in range(ch["n"]):
                evs.append({"event_id": int(ids[k]), "t": float(t[k]),
                            "step": int(cols["step"][k]), "lane": ch["lane"],
                            "kind": ch["kind"], "seq_id": int(cols["seq_id"][k]),
                            "reason": None, "need_tokens": int(cols["need_tokens"][k]),
                            "free_tokens": int(cols["free_tokens"][k])})
    evs.sort(key=lambda e: e["event_id"])
    ids = [e["event_id"] for e in evs]
    rep.checks += 1
    if ids != list(range(1, len(ids) + 1)):
        rep.bad("events", "event ids are not 1, 2, 3, ... without gaps or repeats")
    return evs


def verify(path: str | Path) -> Report:
    """Raises Unreadable when the file cannot be read as a recording at all."""
    path = Path(path)
    db, version = open_db(path)
    rep = Report(str(path), version)
    try:
        run = rows(db, "SELECT * FROM run")[0]
        rep.status = run["status"]
        try:
            meta = json.loads(run["meta"])
        except (TypeError, ValueError):
            meta = None
        if not isinstance(meta, dict) or not isinstance(meta.get("lanes", []), list):
            raise Unreadable(f"{path}: run.meta is not the documented JSON object")
        have = tables(db)
        if meta.get("mode") == "node":
            rep.note = "a node recording (scrapes): no lanes, block maps or events to verify"
            return rep
        missing = {"samples", "blockmaps", "events"} - have
        if missing:
            raise Unreadable(f"{path}: tables {sorted(missing)} are missing")
        events = load_events(db, rep)
        lanes = {ln.get("name"): ln for ln in meta.get("lanes", []) if isinstance(ln, dict)}
        names = [r[0] for r in db.execute("SELECT DISTINCT lane FROM samples")]
        stride = run["blockmap_stride"]
        if not isinstance(stride, int) or stride < 1:
            rep.bad("run", f"blockmap_stride {stride!r} is not a positive integer")
            stride = 1
        for lane in names:
            _lane(db, rep, lane, lanes.get(lane, {}), [e for e in events if e["lane"] == lane],
                  stride)
        for lane in sorted({str(e["lane"]) for e in events} - set(names)):
            rep.bad(f"{lane} events", "events of a lane that has no samples")
    except sqlite3.DatabaseError as exc:
        raise Unreadable(f"{path}: unreadable ({exc})") from None
    finally:
        db.close()
    return rep


def _lane(db: sqlite3.Connection, rep: Report, lane: str, meta: dict, events: list[dict],
          stride: int) -> None:
    samples = rows(db, "SELECT * FROM samples WHERE lane = ? ORDER BY sample_id", (lane,))
    maps = {r["sample_id"]: r for r in rows(db, "SELECT * FROM blockmaps WHERE lane = ?",
                                              (lane,))}
    tabs = {}
    if "block_tables" in tables(db):
        tabs = {r["sample_id"]: r for r in rows(db, "SELECT * FROM block_tables WHERE lane = ?",
                                                (lane,))}
    for sid in set(tabs) - set(maps):
        rep.bad(f"{lane} block tables {sid}", "no block map of this lane has its sample_id")
    stats = {"samples": len(samples), "maps": len(maps), "events": len(events)}
    rep.lanes[lane] = stats
    top = max((r["idx"] for r in maps.values()), default=0)
    for r in maps.values():  # retention
        rep.checks += 1
        if r["idx"] % stride and r["idx"] != top:
            rep.bad(f"{lane} map idx {r['idx']}", f"kept although idx % stride {stride} != 0 "
                    "and it is not the lane's newest")
    replay, k, prev, last_t = LaneReplay(lane), 0, (0.0, 0), float("-inf")
    last_step = None
    for s in samples:
        where = f"{lane} sample {s['sample_id']} (step {s['step']})"
        if not isinstance(s["step"], int) or not isinstance(s["t"], (int, float)):
            rep.bad(where, "t or step is not a number")
            maps.pop(s["sample_id"], None)
            continue
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
            _map(rep, where, s, row, replay, tabs.get(s["sample_id"]))
    for sid in maps:
        rep.bad(f"{lane} map {sid}", "no samples row of this lane has its sample_id")
    if k < len(events):  # written with a sample, an event never is past its lane's last one
        rep.bad(f"{lane} events", f"{len(events) - k} events have a step after the lane's last "
                f"sample (first: event {events[k]['event_id']}, step {events[k]['step']})")


def _counters(rep: Report, where: str, s: dict, replay: LaneReplay, prev: tuple) -> None:
    for name, want in replay.counters(s["step"]).items():
        if s.get(name) is not None:
            rep.same(where, name, s[name], want)
    if s.get("tokens_per_s") is not None and isinstance(s.get("tokens_generated"), int):
        t0, tok0 = prev
        want = (s["tokens_generated"] - tok0) / (s["t"] - t0) if s["t"] > t0 else 0.0
        rep.same(where, "tokens_per_s", s["tokens_per_s"], want)


def _map(rep: Report, where: str, s: dict, row: dict, replay: LaneReplay,
         tab: dict | None) -> None:
    rep.same(where, "map t/step", (row["t"], row["step"]), (s["t"], s["step"]))
    try:
        m = decode.block_map(row)
        if tab is not None:
            m = m._replace(tables=decode.block_tables(tab))
    except decode.Undecodable as exc:
        rep.bad(where, f"block map does not decode: {exc}")
        return
    rep.lanes[s["lane"]]["maps_decoded"] = rep.lanes[s["lane"]].get("maps_decoded", 0) + 1
    rep.checks += 1
    for msg in checks.invariants(m):
        rep.bad(where, msg)
    got = checks.metrics(m)
    for name, want in got.items():
        if name in s:
            rep.same(where, name, s[name], want)
    step, free = replay.last_admit
    if step == s["step"]:  # nothing allocates after a step's admissions
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
    off = (wrote > want) if shared else (wrote != want)
    off |= want > m.finals["final_len"]
    if off.any():
        i = int(np.flatnonzero(off)[0])
        rep.bad(where, f"sequence {fs[i]}: the map holds {wrote[i]} written slots, events "
                f"give length {want[i]} (final length {m.finals['final_len'][i]})")
    if m.tables and not (want < 0).any():
        stats = rep.lanes[s["lane"]]
        stats["tables_checked"] = stats.get("tables_checked", 0) + 1
        rep.checks += 1
        for msg in checks.tables(m, want):
            rep.bad(where, msg)
