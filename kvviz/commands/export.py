"""`kvviz export RUN.db --parquet DIR | --csv DIR`: tables for sharing and notebooks.

Writes samples, events, device_memory and blockmaps (Parquet keeps the encoded arrays as
binary columns; CSV gets the block-map index only) plus run.json (metadata and status).
"""
from __future__ import annotations

import argparse
import json
from pathlib import Path

HELP = "export a recording's tables to Parquet or CSV"


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("run", metavar="RUN.db", help="a recording written by kvviz collect")
    p.add_argument("--parquet", metavar="DIR", default=None, help="write DIR/<table>.parquet")
    p.add_argument("--csv", metavar="DIR", default=None, help="write DIR/<table>.csv")


def _outdir(d: str) -> Path:
    out = Path(d)
    if out.exists() and not out.is_dir():
        raise ValueError(f"{out}: exists and is not a directory")
    out.mkdir(parents=True, exist_ok=True)
    return out


def run(args: argparse.Namespace) -> int:
    from kvviz.store.reader import RunReader
    from kvviz.store.schema import BLOB_COLS  # encoded arrays: binary, so Parquet only

    if not (args.parquet or args.csv):
        raise ValueError("give --parquet DIR and/or --csv DIR")
    r = RunReader(args.run)
    try:
        tables = {"samples": r.samples(), "events": r.events(),
                  "device_memory": r.device_memory(),
                  "blockmaps": r._df("SELECT * FROM blockmaps ORDER BY sample_id")}
        header = {"status": r.status, "status_message": r.status_message,
                  "format_version": r.format_version, "meta": r.meta}
    finally:
        r.close()
    for fmt, d in (("parquet", args.parquet), ("csv", args.csv)):
        if not d:
            continue
        out = _outdir(d)
        (out / "run.json").write_text(json.dumps(header, indent=1))
        for name, df in tables.items():
            if fmt == "parquet":
                df.to_parquet(out / f"{name}.parquet", engine="pyarrow", index=False)
            else:
                df.drop(columns=[c for c in BLOB_COLS if c in df.columns]).to_csv(
                    out / f"{name}.csv", index=False)
        print(f"{out}: {', '.join(f'{k} ({len(v)} rows)' for k, v in tables.items())} + run.json")
    return 0
