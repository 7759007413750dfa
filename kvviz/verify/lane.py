"""One lane of a recording checked as its engine events arrive, in event_id order.

A sample at step S reflects exactly the lane's events with step <= S (docs/FORMAT.md, "Which
events belong to a sample"), so it is checked when the first event of a later step arrives,
or at the end. The lane holds its replay (the live set: bounded by the run, not by its
length), one sample, one block map at a time and three cursors (samples, block map and block
table headers, each a scan in sample_id order, the tables' own: SQLite sorts nothing, merged
by sample_id), never a table.
"""
from __future__ import annotations

import sqlite3

import numpy as np

from kvviz.verify import checks, decode, rows, stored, trust
from kvviz.verify.events import table_rows
from kvviz.verify.replay import PARTIAL_SINCE, Budget, LaneReplay


class Headers:
    """The lane's rows of `table` (block maps or block tables) in sample_id order, without
    their blobs (SQLite tells a blob's type and length without reading it: lengths under
    "stored"); rows that do not fit FORMAT.md are mismatches and left out."""

    def __init__(self, db: sqlite3.Connection, rep, table: str, lane: str) -> None:
        self.rep, self.table, self.lane, self.count = rep, table, lane, 0
        have = [r[1] for r in db.execute(f"PRAGMA table_info({table})")]
        self.blobs = [c for c in have if c in decode.BLOB_COLUMNS]
        cols = [c for c in have if c not in decode.BLOB_COLUMNS]
        blobs = [f"typeof({c}) AS {c}, length({c}) AS {c}__bytes" for c in self.blobs]
        self.rows = table_rows(db, f"SELECT {', '.join(cols + blobs)} FROM {table} NOT INDEXED "
                                   "WHERE lane = ? ORDER BY sample_id", (lane,))
        self.head = self._next()

    def _next(self) -> dict | None:
        for r in self.rows:
            r["stored"] = {c: r.pop(f"{c}__bytes") for c in self.blobs}
            shape = {c: (b"" if r[c] == "blob" else None if r[c] == "null" else r[c])
                     for c in self.blobs}
            bad = rows.problem(self.table, {**r, **shape})
            if bad is None and self.table == "blockmaps":
                bad = rows.map_bounds(r)
            if bad:
                self.rep.bad(f"{self.lane} {self.table} row {r['sample_id']}", bad)
                continue
            self.count += 1
            return r
        return None

    def take(self, sid: int, orphan) -> dict | None:
        """The row of sample `sid`, if any; `orphan(row)` for each row of a smaller one."""
        while self.head is not None and self.head["sample_id"] <= sid:
            row, self.head = self.head, self._next()
            if row["sample_id"] == sid:
                return row
            orphan(row)
        return None


class LaneCheck:
    def __init__(self, db: sqlite3.Connection, rep, lane: str, meta: dict, stride: int,
                 with_tables: bool, version: int, budget: Budget) -> None:
        self.db, self.rep, self.lane, self.meta = db, rep, lane, meta
        n = db.execute("SELECT COUNT(*) FROM samples WHERE lane = ?", (lane,)).fetchone()[0]
        self.stats = {"samples": n, "maps": 0, "events": 0}
        rep.lanes[lane] = self.stats
        rep.checks += 1
        for msg in stored.retention_sql(db, lane, stride):
            rep.bad(f"{lane} retention", msg)
        self.samples = table_rows(  # one row at a time, the table's own order: no sort
            db, "SELECT * FROM samples NOT INDEXED WHERE lane = ? ORDER BY sample_id", (lane,))
        self.maps = Headers(db, rep, "blockmaps", lane)
        self.tabs = Headers(db, rep, "block_tables", lane) if with_tables else None
        engine = meta.get("engine") if isinstance(meta.get("engine"), dict) else {}
        chunked = engine.get("enable_chunked_prefill") is not False  # vLLM's default: on
        self.replay = LaneReplay(lane, chunked and version < PARTIAL_SINCE,  # bounds only
                                 budget=budget)
        self.prev, self.last_t, self.last_step = (0.0, 0), float("-inf"), None
        self.pending: dict | None = None  # the next sample that fits FORMAT.md
        self.after, self.first_after = 0, None  # events after the lane's last sample

    def _sample(self) -> dict | None:
        """The next sample that fits FORMAT.md (a sample that does not is a mismatch, its map
        left unchecked)."""
        while self.pending is None:
            s = next(self.samples, None)
            if s is None:
                return None
            bad = rows.problem("samples", s)
            if bad:
                self.rep.bad(f"{self.lane} sample {s['sample_id']} (step "
                             f"{rows.shown(s['step'], 20)})", bad)
                if isinstance(s["sample_id"], int):
                    self._map_row(s["sample_id"])
                continue
            self.pending = s
        return self.pending

    def event(self, ev: dict) -> None:
        """Apply one of the lane's events, first checking the samples it comes after."""
        self.stats["events"] += 1
        while (s := self._sample()) is not None and s["step"] < ev["step"]:
            self._check(s)
        if s is None:
            self.after += 1
            self.first_after = self.first_after or ev
            return
        self.replay.apply(ev)
        self.rep.checks += 1
        t = ev["t"]
        if not (isinstance(t, (int, float)) and self.last_t - 1e-9 <= t <= s["t"] + 1e-9):
            self.rep.bad(f"{self.lane} event {ev['event_id']} (step {ev['step']})",
                         f"t {ev['t']!r} is not between the samples around its step "
                         f"({self.last_t} and {s['t']})")

    def finish(self) -> None:
        """The samples after the last event, and what was left over."""
        while (s := self._sample()) is not None:
            self._check(s)
        self._map_row(None)
        self.stats["maps"] = self.maps.count
        if self.after:  # written with a sample, an event never is past its lane's last one
            ev = self.first_after
            self.rep.bad(f"{self.lane} events", f"{self.after} events have a step after the "
                         f"lane's last sample (first: event {ev['event_id']}, step "
                         f"{ev['step']})")

    def _map_row(self, sid: int | None) -> tuple[dict | None, dict | None]:
        """The block map and block tables rows of sample `sid` (None: the rest, orphans)."""
        def no_sample(row: dict) -> None:
            self._tables(row["sample_id"])
            self.rep.bad(f"{self.lane} map {row['sample_id']}", "no samples row of this lane "
                         "has its sample_id")

        row = self.maps.take(float("inf") if sid is None else sid, no_sample)
        if row is None:
            if sid is None:
                self._tables(None)
            return None, None
        return row, self._tables(sid)

    def _tables(self, sid: int | None) -> dict | None:
        if self.tabs is None:
            return None
        return self.tabs.take(float("inf") if sid is None else sid, lambda r: self.rep.bad(
            f"{self.lane} block tables {r['sample_id']}", "no block map of this lane has its "
            "sample_id"))

    def _check(self, s: dict) -> None:
        self.pending = None
        rep, lane = self.rep, self.lane
        where = f"{lane} sample {s['sample_id']} (step {s['step']})"
        rep.checks += 1
        if s["t"] < self.last_t or (self.last_step is not None and s["step"] < self.last_step):
            rep.bad(where, f"t or step went back (previous sample: t {self.last_t}, step "
                    f"{self.last_step})")
        self.last_step, self.last_t = s["step"], s["t"]
        for msg in self.replay.problems:
            rep.bad(f"{lane} events", msg)
        self.replay.problems.clear()
        if not self.replay.stopped:
            self._counters(where, s)
        if isinstance(s.get("tokens_generated"), int):
            self.prev = (s["t"], s["tokens_generated"])
        if "capacity_tokens" in self.meta:
            rep.same(where, "capacity_tokens (meta)", s["capacity_tokens"],
                     self.meta["capacity_tokens"])
        row, tab = self._map_row(s["sample_id"])
        if row is not None:
            self._map(where, s, row, tab)

    def _counters(self, where: str, s: dict) -> None:
        rep = self.rep
        for name, want in self.replay.counters(s["step"]).items():
            if s.get(name) is None:
                continue
            if name != "tokens_generated":
                rep.same(where, name, s[name], want)
            elif want[0] == want[1]:
                rep.same(where, name, s[name], want[0])
            else:
                rep.checks += 1
                if not (isinstance(s[name], int) and want[0] <= s[name] <= want[1]):
                    rep.bad(where, f"tokens_generated stored {rows.shown(s[name])}, events "
                            f"allow {want[0]}-{want[1]}")
        if s.get("tokens_per_s") is not None and isinstance(s.get("tokens_generated"), int):
            t0, tok0 = self.prev
            want = (s["tokens_generated"] - tok0) / (s["t"] - t0) if s["t"] > t0 else 0.0
            rep.same(where, "tokens_per_s", s["tokens_per_s"], want)

    def _full(self, table: str, row: dict, cap: int) -> dict:
        """The row with its blobs (one map's worth of memory); Undecodable, before a byte of
        them is read, when one is stored in more bytes than a blob inflating to `cap` may."""
        decode.check_stored(row["stored"], cap)
        return next(table_rows(self.db, f"SELECT * FROM {table} WHERE sample_id = ? LIMIT 1",
                               (row["sample_id"],)))

    def _map(self, where: str, s: dict, row: dict, tab: dict | None) -> None:
        """Check one block map (and its block tables) against the sample and the replay."""
        rep, replay = self.rep, self.replay
        rep.same(where, "map t/step", (row["t"], row["step"]), (s["t"], s["step"]))
        try:
            m = decode.block_map(self._full("blockmaps", row,
                                            decode.blob_cap(row["num_blocks"], row["runs"])))
            if tab is not None:
                cap = 8 * (int(m.planes["refcount"].sum()) + m.num_blocks) + 65536
                m = m._replace(tables=decode.block_tables(
                    self._full("block_tables", tab, cap), cap))
        except decode.Undecodable as exc:
            rep.bad(where, f"block map does not decode: {exc}")
            return
        self.stats["maps_decoded"] = self.stats.get("maps_decoded", 0) + 1
        rep.checks += 1
        for msg in checks.invariants(m):
            rep.bad(where, msg)
        for msg in trust.owners(m.planes["owner"]) + trust.map_vs_lane(row, self.meta):
            rep.bad(where, msg)
        got = checks.metrics(m)
        for name, want in got.items():
            if name in s:
                rep.same(where, name, s[name], want)
        if replay.stopped:  # the checks below need the live set
            return
        step, free = replay.last_admit
        if step == s["step"]:  # nothing allocates after them (a finish resets last_admit)
            rep.same(where, "free_tokens of the step's last admission", free,
                     got["free_tokens"])
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
            self.stats["tables_checked"] = self.stats.get("tables_checked", 0) + 1
            rep.checks += 1
            for msg in checks.tables(m, want):
                rep.bad(where, msg)
