"""kvviz.verify on inputs other than a fresh recording: older formats, large nibble-packed
maps, random maps (against kvviz's own decoder and metrics) and damaged files."""
from __future__ import annotations

import json
import shutil
import sqlite3
import zlib
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kvviz.core.blockmap import BlockMap
from kvviz.verify import verify


def clean(path: Path) -> dict:
    rep = verify(path)
    assert rep.mismatch_count == 0, rep.mismatches[:10]
    return rep.lanes


# ---- older formats ----------------------------------------------------------------------------
def _v1(a: np.ndarray) -> tuple[bytes, dict]:
    lo = int(a.min()) if a.size else 0
    return zlib.compress((a.astype(np.int64) - lo).astype("<u4").tobytes()), {
        "dtype": "uint32", "offset": lo}


def as_format_1(path: Path) -> None:
    """Rewrite a recording as format 1: rle-zlib-1 maps, every event a row of `events`."""
    from kvviz.store.reader import RunReader

    r = RunReader(path)
    ids = [int(i) for i in r.blockmap_index()["sample_id"]]
    maps = {i: r.blockmap(i) for i in ids}
    events = r.events()
    r.close()
    db = sqlite3.connect(path)
    for sid, bm in maps.items():
        planes = [getattr(bm, p).astype(np.int64) for p in
                  ("owner", "filled", "allocated", "refcount", "cached")]
        change = np.ones(bm.num_blocks, bool)
        change[1:] = np.any([a[1:] != a[:-1] for a in planes], axis=0)
        starts = np.flatnonzero(change)
        layout, blobs = {}, {}
        named = [("lengths", np.diff(np.append(starts, bm.num_blocks)))]
        named += [(p, a[starts]) for p, a in zip(("owner", "filled", "allocated", "refcount",
                                                  "cached"), planes)]
        named += [(f, getattr(bm, f)) for f in ("final_seq", "final_len", "final_held")]
        for name, a in named:
            blobs[name], layout[name] = (None, None) if a is None else _v1(np.asarray(a))
        db.execute(f"UPDATE blockmaps SET encoding = 'rle-zlib-1', runs = ?, layout = ?, "
                   f"{', '.join(f'{k} = ?' for k in blobs)} WHERE sample_id = ?",
                   (int(starts.size), json.dumps(layout), *blobs.values(), sid))
    db.execute("DELETE FROM events")
    cols = ("t", "step", "lane", "kind", "seq_id", "reason", "need_tokens", "free_tokens",
            "largest_hole_tokens", "count")
    db.executemany(f"INSERT INTO events (event_id, {', '.join(cols)}) VALUES "
                   f"({', '.join('?' * (len(cols) + 1))})",
                   [(i + 1, *(plain(v) for v in row)) for i, row in
                    enumerate(events[list(cols)].itertuples(index=False))])
    db.execute("DROP TABLE event_chunks")
    db.execute("UPDATE run SET format_version = 1")
    db.execute("PRAGMA user_version = 1")
    db.commit()


def plain(v: object) -> object:
    """A pandas cell as a value sqlite3 binds (NaN -> NULL, numpy scalars -> Python)."""
    v = v.item() if hasattr(v, "item") else v
    return None if v is None or (isinstance(v, float) and v != v) else v


def test_format_1_recording_verifies(recording, tmp_path: Path) -> None:
    path = tmp_path / "v1.db"
    shutil.copy(recording[0], path)
    as_format_1(path)
    rep = verify(path)
    assert rep.format_version == 1 and rep.mismatch_count == 0, rep.mismatches[:5]


def test_large_per_plane_nibble_map_verifies(tmp_path: Path) -> None:
    """A 2^18-block map in per-plane mode with nibble-packed owners (format 4)."""
    from kvviz.core.metrics import compute
    from kvviz.store.mapcodec import encode
    from kvviz.store.writer import RunWriter
    from tests.store.test_codec import lockstep

    ls = lockstep(1 << 18, 4096)
    perm = np.random.default_rng(0).permutation(1 << 18)
    bm = BlockMap(ls.owner[perm], ls.filled[perm], ls.allocated, ls.refcount, ls.cached, 16,
                  2, "paged:16", False)
    layout = json.loads(encode(bm).layout)
    assert layout["mode"] == "planes" and layout["arrays"]["owner"]["nibbles"] == [1]
    path = tmp_path / "big.db"
    w = RunWriter(path, {"mode": "sim", "lanes": [{"name": "paged:16"}]})
    w.add_sample(1.0, 1, "paged:16", compute(bm).as_dict(), bm)
    w.close("finished")
    lanes = clean(path)
    assert lanes["paged:16"]["maps_decoded"] == 1


# ---- the verifier agrees with kvviz on any map -------------------------------------------------
@settings(max_examples=40, deadline=None)
@given(st.integers(0, 200), st.integers(1, 40), st.sampled_from(["paged", "contiguous",
                                                                  "buddy"]),
       st.booleans(), st.integers(0, 2**32 - 1))
def test_decode_and_metrics_match_kvviz_on_random_maps(n: int, bs: int, kind: str,
                                                        finals: bool, seed: int) -> None:
    from kvviz.core.metrics import compute
    from kvviz.store.mapcodec import encode
    from kvviz.verify import checks, decode

    rng = np.random.default_rng(seed)
    runs = rng.integers(1, 8, n) if n else np.zeros(0, np.int64)
    owner = np.repeat(rng.integers(-1, 6, n), runs)[:n].astype(np.int32)
    owned = owner >= 0
    cached = ~owned & (rng.random(n) < 0.2) & (kind == "paged")
    filled = np.where(owned, rng.integers(0, bs + 1, n), np.where(cached, bs, 0))
    ref = np.where(owned, rng.integers(1, 3 if kind == "paged" else 2, n), 0)
    bm = BlockMap(owner, filled.astype(np.int32), np.where(owned, bs, 0).astype(np.int32),
                  ref.astype(np.int16), cached, bs, 2, kind, kind != "paged",
                  buddy=kind == "buddy")
    if finals and owned.any():
        fs = np.unique(owner[owned]).astype(np.int32)
        fl = rng.integers(1, 4 * bs, fs.size).astype(np.int32)
        bm = BlockMap(owner, bm.filled, bm.allocated, bm.refcount, cached, bs, 2, kind,
                      kind != "paged", fs, fl, rng.integers(0, 4 * bs, fs.size),
                      buddy=kind == "buddy")
    e = encode(bm)
    row = {"num_blocks": e.num_blocks, "runs": e.runs, "layout": e.layout,
           "encoding": "rle-zlib-2", "block_size": bs, "contiguous": int(bm.contiguous),
           "buddy": int(bm.buddy), **e.blobs}
    m = decode.block_map(row)
    for p in ("owner", "filled", "allocated", "refcount", "cached"):
        assert np.array_equal(m.planes[p], getattr(bm, p))
    want = compute(bm).as_dict()
    got = checks.metrics(m)
    assert got.keys() == want.keys()
    for k, v in want.items():
        assert got[k] == pytest.approx(v, abs=1e-12), k


# ---- damaged input: a report or "unreadable", never a traceback --------------------------------
@settings(max_examples=30, deadline=None)
@given(st.sampled_from([("blockmaps", "owner"), ("blockmaps", "lengths"), ("blockmaps", "filled"),
                        ("blockmaps", "final_seq"), ("blockmaps", "layout"),
                        ("blockmaps", "runs"), ("blockmaps", "num_blocks"),
                        ("blockmaps", "encoding"), ("event_chunks", "data"),
                        ("event_chunks", "n"), ("events", "kind"), ("events", "step"),
                        ("samples", "used_tokens"), ("samples", "step"), ("samples", "t"),
                        ("samples", "external_frag_index"), ("run", "meta"),
                        ("run", "blockmap_stride")]),
       st.integers(0, 10**6), st.sampled_from(["flip", "cut", "int", "null", "text"]))
def test_damaged_recordings_never_crash_the_verifier(recording, tmp_path_factory, where,
                                                     pick, how) -> None:
    from kvviz.verify import Unreadable

    table, col = where
    path = tmp_path_factory.mktemp("fuzz") / "d.db"
    shutil.copy(recording[0], path)
    with sqlite3.connect(path) as db:
        ids = [r[0] for r in db.execute(f"SELECT rowid FROM {table}")]
        rid = ids[pick % len(ids)]
        val = db.execute(f"SELECT {col} FROM {table} WHERE rowid = ?", (rid,)).fetchone()[0]
        if how in ("flip", "cut") and isinstance(val, (bytes, str)) and val:
            raw = bytearray(val.encode() if isinstance(val, str) else val)
            if how == "flip":
                raw[pick % len(raw)] ^= 1 + pick % 255
            else:
                del raw[pick % len(raw):]
            val = bytes(raw) if isinstance(val, bytes) else raw.decode(errors="replace")
        else:
            val = {"int": pick - 500_000, "null": None, "text": "x"}.get(how, pick)
        try:
            db.execute(f"UPDATE {table} SET {col} = ? WHERE rowid = ?", (val, rid))
        except sqlite3.IntegrityError:
            return  # a NOT NULL column: SQLite itself keeps this damage out
    try:
        rep = verify(path)
    except Unreadable:
        return
    assert isinstance(rep.mismatch_count, int)
