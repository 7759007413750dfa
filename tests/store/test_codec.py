"""Block map encodings (kvviz/store/mapcodec.py): decode(encode(bm)) == bm for any map, in both of
rle-zlib-2's modes; rle-zlib-1 maps (written by earlier kvviz) still decode."""
from __future__ import annotations

import json
import zlib

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kvviz.core.blockmap import BlockMap, empty_blockmap
from kvviz.store.mapcodec import DENSE_RUNS, PLANES, decode, encode


def roundtrip(bm: BlockMap) -> BlockMap:
    e = encode(bm)
    return decode(e.num_blocks, e.runs, e.layout, e.blobs, block_size=bm.block_size,
                  bytes_per_token=bm.bytes_per_token, label=bm.label, contiguous=bm.contiguous)


def mode(bm: BlockMap) -> str:
    return json.loads(encode(bm).layout)["mode"]


def lockstep(n: int, seqs: int, bs: int = 16) -> BlockMap:
    """A full paged pool whose sequences grew one block each in turn: every block is a run."""
    owner = (np.arange(n) % seqs).astype(np.int32)
    filled = np.full(n, bs, np.int32)
    filled[-seqs:] = np.arange(seqs) % bs + 1
    return BlockMap(owner, filled, np.full(n, bs, np.int32), np.ones(n, np.int16),
                    np.zeros(n, bool), bs, 2, "paged:16", False)


@settings(max_examples=80, deadline=None)
@given(st.integers(0, 300), st.integers(0, 2**31 - 2), st.integers(1, 300), st.booleans(),
       st.integers(0, 2**32 - 1), st.sampled_from([1, 2, 6, 40]))
def test_roundtrip_any_map(n: int, max_owner: int, bs: int, finals: bool, seed: int,
                           mean_run: int) -> None:
    rng = np.random.default_rng(seed)
    # runs of random length around mean_run: short runs exercise the per-plane mode,
    # long ones the joint mode
    k = max(1, n // mean_run + 1)
    lengths = rng.multinomial(n, np.ones(k) / k) if n else np.zeros(k, np.int64)

    def plane(lo: int, hi: int, dtype) -> np.ndarray:
        return np.repeat(rng.integers(lo, hi + 1, k), lengths).astype(dtype)

    owner = plane(-1, max_owner, np.int32)
    owner[rng.random(n) < 0.3] = -1
    fs = np.unique(owner[owner >= 0]).astype(np.int32)
    bm = BlockMap(owner, plane(0, bs, np.int32), plane(0, bs, np.int32),
                  plane(-5, 2**15 - 1, np.int16), plane(0, 1, np.int32) > 0,
                  bs, 7, "paged:x", bool(seed % 2),
                  final_seq=fs if finals else None,
                  final_len=(fs * 3).astype(np.int32) if finals else None,
                  final_held=(fs.astype(np.int64) * 5) if finals else None)
    out = roundtrip(bm)
    assert out == bm
    if finals:
        assert np.array_equal(out.final_seq, bm.final_seq)
        assert np.array_equal(out.final_len, bm.final_len)
        assert np.array_equal(out.final_held, bm.final_held)
    else:
        assert out.final_seq is None and out.final_len is None and out.final_held is None


def test_modes_follow_the_number_of_runs() -> None:
    assert mode(empty_blockmap(1 << 16, 16)) == "joint"
    ls = lockstep(1 << 16, 512)
    assert encode(ls).runs == 1 << 16 and mode(ls) == "planes"
    spec = json.loads(encode(ls).layout)["arrays"]
    # owner alternates every block (stored per block, as deltas); the other planes have
    # their own few runs
    assert spec["owner"]["runs"] is None and "delta_first" in spec["owner"]
    assert spec["filled"]["runs"] == 512 + 1 and spec["allocated"]["runs"] == 1
    # just below and above the threshold
    n = 4096
    few = np.repeat(np.arange(n // DENSE_RUNS, dtype=np.int32), DENSE_RUNS)
    bm = BlockMap(few, np.zeros(n, np.int32), np.zeros(n, np.int32), np.zeros(n, np.int16),
                  np.zeros(n, bool), 16, 1, "x", False)
    assert encode(bm).runs == n // DENSE_RUNS and mode(bm) == "joint"
    more = few.copy()
    more[1] = -1
    bm2 = BlockMap(more, bm.filled, bm.allocated, bm.refcount, bm.cached, 16, 1, "x", False)
    assert mode(bm2) == "planes" and roundtrip(bm2) == bm2


def test_lockstep_pool_is_small_and_exact() -> None:
    ls = lockstep(1 << 18, 4096)
    e = encode(ls)
    raw = sum(getattr(ls, p).nbytes for p in PLANES)
    assert e.nbytes < raw / 500, e.nbytes  # a few KB for 3.9 MB of planes
    assert roundtrip(ls) == ls


def test_random_dense_owner_is_not_delta_coded_when_wider() -> None:
    rng = np.random.default_rng(1)
    n = 5000
    owner = rng.integers(0, 60000, n).astype(np.int32)  # deltas would need 17 bits
    bm = BlockMap(owner, np.zeros(n, np.int32), np.zeros(n, np.int32), np.zeros(n, np.int16),
                  np.zeros(n, bool), 16, 1, "x", False)
    spec = json.loads(encode(bm).layout)["arrays"]["owner"]
    assert spec["dtype"] == "uint16" and "delta_first" not in spec
    assert roundtrip(bm) == bm


def test_free_map_is_tiny() -> None:
    e = encode(empty_blockmap(1 << 20, 16))
    assert e.runs == 1 and e.nbytes < 200


def test_dtypes_restored() -> None:
    for bm in (empty_blockmap(10, 4), lockstep(64, 8)):
        out = roundtrip(bm)
        assert (out.owner.dtype, out.filled.dtype, out.refcount.dtype, out.cached.dtype) == (
            np.int32, np.int32, np.int16, np.bool_)


def test_byte_shuffle_is_in_the_stream() -> None:
    """Multi-byte arrays are stored lowest bytes first (docs/FORMAT.md)."""
    n = 1200
    owner = np.repeat(np.arange(300, 600, dtype=np.int32), 4)  # 300 runs, span 299: uint16
    bm = BlockMap(owner, np.zeros(n, np.int32), np.zeros(n, np.int32), np.zeros(n, np.int16),
                  np.zeros(n, bool), 16, 1, "x", False)
    e = encode(bm)
    spec = json.loads(e.layout)["arrays"]["owner"]
    assert json.loads(e.layout)["mode"] == "joint" and spec == {"dtype": "uint16", "offset": 300}
    raw = np.frombuffer(zlib.decompress(e.blobs["owner"]), np.uint8)
    q = np.arange(300, dtype=np.uint16)
    assert np.array_equal(raw[:300], q & 0xFF) and np.array_equal(raw[300:], q >> 8)


@pytest.mark.parametrize("damage", ["short", "lengths"])
def test_damaged_pieces_raise_value_error(damage: str) -> None:
    for bm in (lockstep(256, 16), empty_blockmap(256, 16)):
        e = encode(bm)
        blobs = dict(e.blobs)
        if damage == "short":
            blobs["owner"] = zlib.compress(zlib.decompress(blobs["owner"])[:-1])
            with pytest.raises(ValueError, match="owner"):
                decode(e.num_blocks, e.runs, e.layout, blobs, block_size=16,
                       bytes_per_token=1, label="x", contiguous=False)
        else:
            with pytest.raises(ValueError, match="expected"):
                decode(e.num_blocks + 1, e.runs, e.layout, blobs, block_size=16,
                       bytes_per_token=1, label="x", contiguous=False)


def encode_v1(bm: BlockMap) -> tuple[int, str, dict]:
    """rle-zlib-1 as kvviz 0.x wrote it (docs/FORMAT.md): joint runs, plain bytes."""
    planes = [getattr(bm, p).astype(np.int64) for p in PLANES]
    change = np.zeros(bm.num_blocks, bool)
    change[0] = True
    for a in planes:
        change[1:] |= a[1:] != a[:-1]
    starts = np.flatnonzero(change)
    layout, blobs = {}, {}
    for name, a in (("lengths", np.diff(np.append(starts, bm.num_blocks))),
                    *((p, a[starts]) for p, a in zip(PLANES, planes))):
        lo = int(a.min())
        layout[name] = {"dtype": "uint32", "offset": lo}
        blobs[name] = zlib.compress((a - lo).astype(np.uint32).tobytes())
    return int(starts.size), json.dumps(layout), blobs


def store_as_format_2(db, maps: dict[int, BlockMap]) -> None:
    """Rewrite the given block maps (by sample_id) of an open recording as rle-zlib-1 and mark
    it format 2: what an older kvviz wrote."""
    for sid, bm in maps.items():
        runs, layout, blobs = encode_v1(bm)
        db.execute(f"UPDATE blockmaps SET encoding = 'rle-zlib-1', runs = ?, layout = ?, "
                   f"{', '.join(f'{k} = ?' for k in blobs)} WHERE sample_id = ?",
                   (runs, layout, *blobs.values(), sid))
    db.execute("UPDATE run SET format_version = 2")


def test_version_1_maps_still_decode() -> None:
    for bm in (lockstep(512, 16), empty_blockmap(64, 4)):
        runs, layout, blobs = encode_v1(bm)
        out = decode(bm.num_blocks, runs, layout, blobs, block_size=bm.block_size,
                     bytes_per_token=bm.bytes_per_token, label=bm.label,
                     contiguous=bm.contiguous, encoding="rle-zlib-1")
        assert out == bm and out.owner.dtype == np.int32
    with pytest.raises(ValueError, match="unknown block map encoding"):
        decode(1, 1, "{}", {}, block_size=1, bytes_per_token=1, label="x", contiguous=False,
               encoding="rle-zlib-9")


def test_reader_opens_format_2_maps(tmp_path) -> None:
    """A recording of format 2 (rle-zlib-1 maps) reads through RunReader unchanged."""
    import sqlite3

    from kvviz.store.reader import RunReader
    from kvviz.store.writer import RunWriter

    bm = lockstep(512, 16)
    path = tmp_path / "old.db"
    w = RunWriter(path, {"mode": "sim", "lanes": [{"name": "paged:16"}]})
    w.add_sample(0.5, 3, "paged:16", {}, bm)
    w.close("finished")
    with sqlite3.connect(path) as db:
        sid = db.execute("SELECT sample_id FROM blockmaps").fetchone()[0]
        store_as_format_2(db, {sid: bm})
    r = RunReader(path)
    assert r.format_version == 2
    sid = int(r.blockmap_index("paged:16")["sample_id"].iloc[0])
    assert r.blockmap(sid) == bm
    r.close()


def test_random_bytes_are_stored_not_deflated() -> None:
    """A busy pool whose owners are in random order: the owner ids' low bytes are stored
    (level 0: deflate would barely shrink them), the high bytes (values < 16: 4096 owners)
    nibble-packed, two per byte, and stored too; exact either way."""
    n = 1 << 18
    ls = lockstep(n, 4096)
    perm = np.random.default_rng(2).permutation(n)
    bm = BlockMap(ls.owner[perm], ls.filled, ls.allocated, ls.refcount, ls.cached, 16, 2,
                  "paged:16", False)
    e = encode(bm)
    spec = json.loads(e.layout)["arrays"]["owner"]
    assert spec["dtype"] == "uint16" and spec["nibbles"] == [1] and spec["count"] == n
    blob = e.blobs["owner"]
    d = zlib.decompressobj()
    low = d.decompress(blob)
    assert d.eof and len(low) == n and d.unused_data  # first stream: the low bytes
    assert len(blob) - len(d.unused_data) > n  # stored: no smaller than the bytes themselves
    high = zlib.decompress(d.unused_data)  # second stream: the high bytes, two per byte
    q = bm.owner.astype(np.uint16)
    assert np.array_equal(np.frombuffer(low, np.uint8), q & 0xFF)
    assert np.array_equal(np.frombuffer(high, np.uint8), (q[0::2] >> 8) | (q[1::2] >> 8 << 4))
    assert roundtrip(bm) == bm


def random_small(n: int, seed: int = 4) -> BlockMap:
    """Every block its own run: 12-bit owners in random order, fill levels 0..15 per block."""
    rng = np.random.default_rng(seed)
    owner = rng.permutation(np.arange(n) % 4000).astype(np.int32)
    filled = rng.integers(0, 16, n).astype(np.int32)
    return BlockMap(owner, filled, np.full(n, 16, np.int32), np.ones(n, np.int16),
                    np.zeros(n, bool), 16, 2, "paged:16", False)


@pytest.mark.parametrize("n", [(1 << 18) + 1, 1 << 18])
def test_nibble_packed_planes_roundtrip(n: int) -> None:
    """Odd and even counts; a one-byte plane (filled) packed whole, a two-byte one (owner)
    packed in its high byte plane only."""
    bm = random_small(n)
    arrays = json.loads(encode(bm).layout)["arrays"]
    assert arrays["filled"]["nibbles"] == [0] and arrays["owner"]["nibbles"] == [1]
    # 1.5 bytes per block for owner + 0.5 for filled, plus stored blocks' 5-byte headers
    assert encode(bm).nbytes < 2.01 * n
    assert roundtrip(bm) == bm


def test_large_finals_with_small_values_roundtrip() -> None:
    """final_* arrays of 2^18 or more sequences may be nibble-packed; their count is then in
    the spec, since the inflated size alone no longer gives it."""
    m = (1 << 18) + 3
    rng = np.random.default_rng(5)
    bm = lockstep(1 << 10, 8)
    bm = BlockMap(bm.owner, bm.filled, bm.allocated, bm.refcount, bm.cached, 16, 1, "x", False,
                  final_seq=np.arange(m, dtype=np.int32),
                  final_len=rng.integers(0, 16, m).astype(np.int32),
                  final_held=rng.integers(0, 16, m).astype(np.int64))
    arrays = json.loads(encode(bm).layout)["arrays"]
    assert arrays["final_len"]["nibbles"] == [0] and arrays["final_len"]["count"] == m
    out = roundtrip(bm)
    for name in ("final_seq", "final_len", "final_held"):
        assert np.array_equal(getattr(out, name), getattr(bm, name)), name


def test_truncated_nibble_plane_names_the_packing() -> None:
    bm = random_small(1 << 18)
    e = encode(bm)
    blobs = dict(e.blobs)
    blobs["filled"] = zlib.compress(zlib.decompress(blobs["filled"])[:-1])
    with pytest.raises(ValueError, match=r"filled: .*byte planes \[0\] as nibbles"):
        decode(e.num_blocks, e.runs, e.layout, blobs, block_size=16, bytes_per_token=2,
               label="x", contiguous=False)
