"""Block maps read back (docs/FORMAT.md, "blockmaps" and "Bounds"): one stored row -> a checked
BlockMap, and the size bounds every stored blob must keep.

A blob's bound follows from its row: a block map's arrays inflate to at most
16 x (num_blocks + runs) + 65,536 bytes, an event chunk to 48 x n, a scrape's raw_zlib to
64 MiB. zlib never stores more than about 0.1% (plus a few bytes per stream) over what it
inflates to, so a blob longer than stored_cap(bound) is refused from its length alone, which
SQLite reports without reading the blob: deciding costs no inflation and no blob read.
"""
from __future__ import annotations

from collections.abc import Callable

from kvviz.core.blockmap import BlockMap
from kvviz.core.errors import StoreError
from kvviz.store import checks as check
from kvviz.store import mapcodec
from kvviz.store.schema import BLOB_COLS, MAP_COLS, MAX_BLOCKS

Query = Callable[[str, tuple], list[tuple]]
RAW_CAP = 64 << 20  # bytes one scrape's series (node_samples.raw_zlib) may inflate to
MAP_CAP_SQL = "(16 * (num_blocks + runs) + 65536)"
# (table, key, blob columns, SQL of the inflated bound, rows the bound applies to)
BOUNDS = (
    ("blockmaps", "sample_id", BLOB_COLS, MAP_CAP_SQL,
     "typeof(num_blocks) = 'integer' AND typeof(runs) = 'integer'"),
    ("event_chunks", "chunk_id", ("data",), "(48 * n)", "typeof(n) = 'integer'"),
    ("node_samples", "row_id", ("raw_zlib",), str(RAW_CAP), "1"),
)


def map_cap(num_blocks: int, runs: int) -> int:
    """Bytes a block map's blob may inflate to (8-byte values per block or run, + slack)."""
    return 16 * (num_blocks + runs) + 65536


def stored_cap(inflated: int) -> int:
    """The longest stored blob whose streams inflate to at most `inflated` bytes."""
    return inflated + inflated // 64 + 4096


def refuse_oversized(q: Query, where: str, tables: set[str]) -> None:
    """StoreError naming the first blob (of BOUNDS' tables present in `tables`) whose stored
    length exceeds stored_cap of its bound. Cost: one pass over the row headers."""
    for table, key, cols, bound, applies in BOUNDS:
        if table not in tables:
            continue
        have = {r[1] for r in q(f"PRAGMA table_info({table})", ())}
        for col in (c for c in cols if c in have):
            cap = f"({bound} + {bound} / 64 + 4096)"
            rows = q(f"SELECT {key}, length({col}), {cap} FROM {table} WHERE typeof({col}) = "
                     f"'blob' AND {applies} AND length({col}) > {cap} LIMIT 1", ())
            if rows:
                k, n, most = rows[0]
                raise StoreError(f"{where}: table {table} row {k}: {col} is {n} bytes, more "
                                 f"than its row allows ({most}: it would inflate past the "
                                 "bound docs/FORMAT.md sets)")


def decode_row(r: dict, where: str) -> tuple[BlockMap, float]:
    """A blockmaps row (MAP_COLS -> values) -> (BlockMap, t), every field checked and every
    blob bounded before it is inflated; StoreError naming the map otherwise."""
    what = f"{where}: block map {r['sample_id']!r:.40}"
    if r["encoding"] not in mapcodec.ENCODINGS:
        raise StoreError(f"{what} uses unknown encoding {r['encoding']!r:.60}")
    t = float(check.number(r["t"], f"{what}: t"))
    for k in ("num_blocks", "runs", "block_size", "bytes_per_token"):
        check.number(r[k], f"{what}: {k}", integer=True, lo=1 if k == "block_size" else 0)
    if not isinstance(r["label"], str) or not isinstance(r["layout"], str):
        raise StoreError(f"{what}: label and layout must be text")
    if r["num_blocks"] > MAX_BLOCKS:
        raise StoreError(f"{what}: num_blocks {r['num_blocks']} is more than {MAX_BLOCKS}")
    cap = map_cap(r["num_blocks"], r["runs"])
    for k in BLOB_COLS:
        if isinstance(r[k], bytes) and len(r[k]) > stored_cap(cap):
            raise StoreError(f"{what}: {k} is {len(r[k])} bytes, more than its row allows "
                             f"({stored_cap(cap)})")
        check.bounded_streams(r[k], f"{what}: {k}", cap)
    try:  # stored bytes: any failure to decode them means damage, named here
        bm = mapcodec.decode(r["num_blocks"], r["runs"], r["layout"], r,
                             block_size=r["block_size"], bytes_per_token=r["bytes_per_token"],
                             label=r["label"], contiguous=bool(r["contiguous"]),
                             buddy=bool(r["buddy"]), encoding=r["encoding"])
    except Exception as exc:  # noqa: BLE001 - ValueError, TypeError, zlib.error, ...
        raise StoreError(f"{what} is damaged: {type(exc).__name__}: {exc}") from None
    check.owners(bm.owner, what)
    return bm, t


SELECT_MAP = f"SELECT {', '.join(MAP_COLS)} FROM blockmaps"
