"""`kvviz export RUN.db --parquet DIR | --csv DIR`: tables for sharing and notebooks.

Writes samples, events, device_memory and blockmaps (Parquet keeps the encoded arrays as
binary columns; CSV gets the block-map index only), blocks (every kept map decoded: one row
per block with owner, filled, allocated, refcount, cached) plus run.json (metadata and
status); a node recording adds node_samples (Parquet keeps raw_zlib), a recording with
KV-event streams (`kvviz events`, `kvviz collect --kv-events`) kv_streams, kv_batches and
kv_gaps (Parquet keeps each batch's topic and payload bytes; CSV its counts). Files get the
user's umask.
Existing files are refused unless --overwrite, and then replaced only when they are an
earlier export of the same kind (or empty); every file is written atomically.
"""
from __future__ import annotations

import argparse
import json
import re
from pathlib import Path

from kvviz.commands.export_blocks import BLOCKS_HELP
from kvviz.core import safeio

HELP = "export a recording's tables to Parquet or CSV"
_IDENT = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
MAX_RUN_JSON = 64 * 2**20
KV_TABLES = ("kv_streams", "kv_batches", "kv_gaps")
KV_BLOB_COLS = ("topic", "payload")  # kv_batches: raw frames, binary (Parquet only)


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("run", metavar="RUN.db", help="a recording written by kvviz collect")
    p.add_argument("--parquet", metavar="DIR", default=None, help="write DIR/<table>.parquet")
    p.add_argument("--csv", metavar="DIR", default=None, help="write DIR/<table>.csv")
    p.add_argument("--maps", default="auto", metavar="WHICH", help=BLOCKS_HELP)
    p.add_argument("--overwrite", action="store_true",
                   help="replace files of an earlier export in DIR (run.json, <table>.parquet "
                        "or .csv); no other file is ever replaced")


def _outdir(d: str) -> Path:
    out = Path(d)
    shown = safeio.printable(out)
    if out.exists() and not out.is_dir():
        raise ValueError(f"{shown}: exists and is not a directory")
    try:
        out.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise ValueError(f"{shown}: cannot create the directory ({exc.strerror or exc})") from None
    return out


def _is_run_json(path: Path) -> bool:
    try:
        obj = json.loads(safeio.read_bytes(path, "run.json", MAX_RUN_JSON))
    except (ValueError, RecursionError, safeio.PathError):
        return False
    return isinstance(obj, dict) and {"status", "format_version", "meta"} <= obj.keys()


def _is_parquet(first_col: str):
    """A Parquet file (magic PAR1) whose schema starts with the table's first column."""
    def check(path: Path) -> bool:
        if safeio.head(path, 4) != b"PAR1":
            return False
        import pyarrow.parquet as pq

        try:
            names = pq.read_schema(path).names
        except Exception:  # noqa: BLE001 - any unreadable file is simply not ours
            return False
        return bool(names) and names[0] == first_col
    return check


def _is_table_csv(first_col: str):
    """A CSV whose header is column names only, starting with the table's first column."""
    def check(path: Path) -> bool:
        first = safeio.head(path, 65536).split(b"\n", 1)[0].strip().decode("ascii", "replace")
        names = first.split(",")
        return names[0] == first_col and all(_IDENT.match(n) for n in names)
    return check


def _targets(out: Path, fmt: str, tables: dict, overwrite: bool) -> dict[str, Path]:
    """Every file this export will write in `out`, checked before any is written."""
    ours = _is_parquet if fmt == "parquet" else _is_table_csv
    kind = "Parquet export of this table" if fmt == "parquet" else "kvviz CSV export"
    paths = {"run.json": safeio.check_output(out / "run.json", f"--{fmt}", overwrite=overwrite,
                                             is_ours=_is_run_json, kind_name="kvviz run.json")}
    for name, df in tables.items():
        first = str(df.columns[0]) if len(df.columns) else ""
        paths[name] = safeio.check_output(out / f"{name}.{fmt}", f"--{fmt}",
                                          overwrite=overwrite, is_ours=ours(first),
                                          kind_name=kind)
    return paths


def run(args: argparse.Namespace) -> int:
    from kvviz.commands import export_blocks as blocks
    from kvviz.commands.info import DAMAGED
    from kvviz.core.errors import StoreError
    from kvviz.store.reader import RunReader

    if not (args.parquet or args.csv):
        raise ValueError("give --parquet DIR and/or --csv DIR")
    args.blocks_choice = blocks.parse_choice(args.maps)
    safeio.check_input_file(args.run, "recording")
    try:
        r = RunReader(args.run)
    except DAMAGED as exc:
        raise StoreError(f"{args.run}: damaged recording ({type(exc).__name__}: "
                         f"{str(exc)[:200]})") from None
    try:
        return _export(args, r, blocks)
    except DAMAGED as exc:  # a hand-edited or damaged field the reader did not catch
        raise StoreError(f"{args.run}: damaged recording ({type(exc).__name__}: "
                         f"{str(exc)[:200]})") from None
    finally:
        r.close()


def _export(args: argparse.Namespace, r, blocks) -> int:
    from kvviz.commands import export_tables as xt
    from kvviz.store import chunks
    from kvviz.store.contents import kv_line
    from kvviz.store.schema import BLOB_COLS  # encoded arrays: binary, so Parquet only

    r.refuse_oversized_blobs()  # from lengths alone, before any blob is read
    sources: dict[str, xt.Pieces] = {
        "samples": lambda: chunks.samples(r), "events": lambda: chunks.events(r),
        "device_memory": lambda: chunks.device_memory(r),
        "blockmaps": lambda: chunks.table(r, "blockmaps")}
    if r.has_table("node_samples"):  # a node recording (kvviz scrape --out)
        sources["node_samples"] = lambda: chunks.table(r, "node_samples")
    if r.has_table("kv_batches"):  # KV-event streams (kvviz/store/kv_writer.py)
        for name in KV_TABLES:
            sources[name] = lambda name=name: chunks.table(r, name)
    first = {name: next(src()).iloc[:0] for name, src in sources.items()}  # the columns
    n_blocks = r.blockmap_blocks()
    every, kept, left_out = blocks.choose(r, args.blocks_choice, n_blocks)

    def index():
        return blocks.index(r, every)

    header = {"status": r.status, "status_message": r.status_message,
              "format_version": r.format_version, "meta": r.meta}
    try:
        header_text = json.dumps(header, indent=1, default=str)
    except (TypeError, ValueError, RecursionError) as exc:
        raise ValueError(f"{safeio.printable(args.run)}: run metadata cannot be written as "
                         f"JSON ({type(exc).__name__})") from None
    jobs = [(fmt, _outdir(d)) for fmt, d in (("parquet", args.parquet), ("csv", args.csv)) if d]
    plans = [(fmt, out, _targets(out, fmt, {**first, "blocks": pd_columns(blocks.COLUMNS)},
                                 args.overwrite)) for fmt, out in jobs]
    try:
        done = _write(plans, sources, header_text, blocks, r, index, xt, BLOB_COLS)
    except OSError as exc:
        raise safeio.PathError(f"{safeio.printable(exc.filename or args.run)}: cannot write "
                               f"({exc.strerror or exc})") from None
    for out, counts, n_rows in done:
        rows = [f"{k} ({v} rows)" for k, v in counts.items()]
        print(f"{safeio.printable(out)}: {', '.join(rows)}, blocks ({n_rows} rows: "
              f"{kept} block maps decoded" + (f"; {left_out}" if left_out else "")
              + ") + run.json")
    kv = r.kv_counts()
    if kv:
        print("  " + kv_line(kv))
    if "node_samples" in sources:
        nodes = r._q("SELECT COUNT(*), COALESCE(SUM(status = 'ok'), 0) FROM node_samples")[0]
        print(f"  node scrapes: {nodes[0]} ({nodes[1]} ok)")
    return 0


def _write(plans, sources, header_text, blocks, r, index, xt, blob_cols) -> list:
    """Every file of every format staged, then all of them put in place at once."""
    with xt.Staged() as staged:  # nothing replaced unless every file is complete
        done = []
        for fmt, out, paths in plans:
            tmp = staged.new(paths["run.json"])
            tmp.write_text(header_text, encoding="utf-8")
            counts = {}
            for name, src in sources.items():
                tmp = staged.new(paths[name])
                if fmt == "parquet":
                    counts[name] = xt.write_parquet(tmp, src(), xt.column_types(r, name))
                else:
                    binary = {"kv_batches": blob_cols + KV_BLOB_COLS,
                              "node_samples": ("raw_zlib",)}.get(name, blob_cols)
                    counts[name] = xt.write_csv(tmp, src(), binary)
            n_blocks = blocks.write(r, index, staged.new(paths["blocks"]), fmt)
            done.append((out, counts, n_blocks))
        staged.commit()
    return done


def pd_columns(names: tuple[str, ...]):
    """An empty frame with these columns (what _targets needs to name a table's first one)."""
    import pandas as pd

    return pd.DataFrame(columns=list(names))
