"""What a node's block lane (`kvviz attach --blocks`) holds beside its samples, read back and
checked: the request log, the stream's gaps, the block tables of a sampled map
(docs/FORMAT.md, "request_log", "block_gaps", "block_tables").

Every value is checked against what docs/FORMAT.md allows before it is used, and every read
is bounded (rows counted first, blobs measured before they are inflated): a hand-made or
damaged recording gives one StoreError naming the table, row and field."""
from __future__ import annotations

import json

import numpy as np

from kvviz.core.errors import StoreError
from kvviz.store import arraycodec as ac
from kvviz.store import checks as check

MAX_LOG_ROWS = 4_000_000  # request-log rows read at most
MAX_HASH_BYTES = 1 << 30  # all prompts' hash chains together
INT_MAX = (1 << 62) - 1  # every count and step of the log fits with room
LOG_COLS = ("seq_id", "request_id", "arrive_step", "prompt_tokens", "max_tokens", "hash_width",
            "prompt_hashes", "finish_step", "output_tokens", "finish_status", "preemptions")
NULLABLE = ("finish_step", "output_tokens", "finish_status", "preemptions")
TEXT = ("request_id", "finish_status")


def request_log(q, where: str, lane: str) -> dict[str, list]:
    """The lane's request-log rows in seq_id order, column by column (lists), every value
    checked (integers >= 0, text, a hash blob of whole hash_width-byte hashes, NULL only in
    the finish columns). `q(sql, params)` runs SQL on the recording (RunReader._q)."""
    have = {r[1] for r in q("PRAGMA table_info(request_log)", ())}
    missing = [c for c in LOG_COLS if c not in have]
    if missing:
        raise StoreError(f"{where}: table request_log has no column {missing[0]!r}")
    n, size = q("SELECT COUNT(*), TOTAL(length(prompt_hashes)) FROM request_log WHERE lane = ?",
                (lane,))[0]
    if n > MAX_LOG_ROWS or size > MAX_HASH_BYTES:
        raise StoreError(f"{where}: the request log of lane {lane!r} holds {n} rows and "
                         f"{int(size)} bytes of hashes, more than kvviz reads "
                         f"({MAX_LOG_ROWS} rows, {MAX_HASH_BYTES} bytes)")
    rows = q(f"SELECT {', '.join(LOG_COLS)} FROM request_log WHERE lane = ? ORDER BY seq_id",
             (lane,))
    cols: dict[str, list] = {c: [] for c in LOG_COLS}
    for row in rows:
        for c, v in zip(LOG_COLS, row):
            cols[c].append(_value(c, v, row[0], where))
    for i, (w, blob) in enumerate(zip(cols["hash_width"], cols["prompt_hashes"])):
        if not 1 <= w <= 64 or len(blob) % w:
            raise StoreError(f"{where}: request_log seq {cols['seq_id'][i]}: prompt_hashes "
                             f"({len(blob)} bytes) is not whole hashes of hash_width {w}")
    return cols


def _value(col: str, v: object, seq: object, where: str) -> object:
    what = f"{where}: request_log seq {seq!r:.40} column {col}"
    if v is None:
        if col in NULLABLE:
            return None
        raise StoreError(f"{what} is NULL")
    if col in TEXT:
        if not isinstance(v, str) or len(v) > 4096:
            raise StoreError(f"{what} must be text (at most 4096 characters), got "
                             f"{type(v).__name__}")
        return v
    if col == "prompt_hashes":
        if not isinstance(v, bytes):
            raise StoreError(f"{what} must be a blob, got {type(v).__name__}")
        return v
    check.number(v, what, integer=True, lo=0)
    if v > INT_MAX:
        raise StoreError(f"{what} is {v}, more than {INT_MAX}")
    return v


def gaps(q, where: str, lane: str) -> tuple[int, float | None, float | None]:
    """(rows, t of the first, t of the first `restart`) of the lane's block_gaps (0, None,
    None without the table or rows)."""
    if not q("SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = 'block_gaps'", ()):
        return 0, None, None
    (n,), = q("SELECT COUNT(*) FROM block_gaps WHERE lane = ?", (lane,))
    first = q("SELECT MIN(t) FROM block_gaps WHERE lane = ?", (lane,))[0][0]
    restart = q("SELECT MIN(t) FROM block_gaps WHERE lane = ? AND kind = 'restart'",
                (lane,))[0][0]
    for t in (first, restart):
        if t is not None:
            check.number(t, f"{where}: table block_gaps column t")
    return int(n), first, restart


def tables(q, where: str, sample_id: int, sequences: int,
           num_blocks: int) -> tuple[np.ndarray, np.ndarray] | None:
    """(table_len, table_blocks) of one sampled map (None: no row for it), for a map of
    `sequences` live sequences and `num_blocks` blocks; checked: one length per sequence,
    the lengths add up to the blocks given, every block an address of the map."""
    if not q("SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = 'block_tables'", ()):
        return None
    rows = q("SELECT encoding, layout, table_len, table_blocks FROM block_tables WHERE "
             "sample_id = ?", (int(sample_id),))
    if not rows:
        return None
    encoding, layout, lens_blob, blocks_blob = rows[0]
    what = f"{where}: block tables of sample {sample_id}"
    if encoding != "tables-zlib-1" or not isinstance(layout, str):
        raise StoreError(f"{what}: unknown encoding {encoding!r:.40}")
    # a table holds at most every block once per sequence: 8 bytes a value, bounded
    cap = 8 * (sequences + 1) * (num_blocks + 1) + 65536
    out = []
    try:
        specs = json.loads(layout)
        for name, blob, count_cap in (("table_len", lens_blob, sequences),
                                      ("table_blocks", blocks_blob, None)):
            if not isinstance(blob, bytes):
                raise ValueError(f"{name} is not a blob")
            check.bounded_streams(blob, f"{what}: {name}", min(cap, check.INFLATE_CAP))
            raw = ac.inflate(blob)
            spec = specs[name]
            item = np.dtype(spec["dtype"]).itemsize
            count = int(spec.get("count", len(raw) // item))
            if count_cap is not None and count != count_cap:
                raise ValueError(f"{count} table lengths for {sequences} sequences")
            ac.check_size(name, raw, spec, count)
            out.append(ac.values(raw, spec, count))
    except StoreError:
        raise
    except Exception as exc:  # noqa: BLE001 - stored bytes: any failure is damage, named here
        raise StoreError(f"{what} are damaged ({type(exc).__name__}: {str(exc)[:200]})") from None
    lens, blocks = out
    if (lens.size and int(lens.min()) < 0) or int(lens.sum()) != blocks.size or (
            blocks.size and (int(blocks.min()) < 0 or int(blocks.max()) >= num_blocks)):
        raise StoreError(f"{what}: lengths that do not add up to the blocks given, or a block "
                         f"outside the map's {num_blocks}")
    return lens.astype(np.int64), blocks.astype(np.int64)
