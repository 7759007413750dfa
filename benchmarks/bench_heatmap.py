"""Heatmap builder speed: blockmap_cells / blockmap_figure (plotly: Replay, Node) and
canvas_data (the Live page's canvas, plus the Arrow bytes Streamlit makes of its cells) for
4k .. 1M blocks (target: 1M blocks in <= 50 ms). Prints one JSON line per size.
`python benchmarks/bench_heatmap.py`."""
from __future__ import annotations

import json
import statistics
import time

import numpy as np
import pyarrow as pa

from kvviz.blockmap import FREE, BlockMap
from kvviz.viz.blockcanvas import canvas_data
from kvviz.viz.heatmap import blockmap_cells, blockmap_figure


def busy_map(n: int, seed: int = 0) -> BlockMap:
    """Sequences of 1..64 blocks, holes between them, partly written last blocks, sharing."""
    rng = np.random.default_rng(seed)
    owner = np.full(n, FREE, np.int32)
    filled = np.zeros(n, np.int32)
    i, seq = 0, 0
    while i < n:
        run = int(rng.integers(1, 65))
        if rng.random() < 0.7:
            owner[i:i + run] = seq
            filled[i:i + run] = 16
            filled[min(n, i + run) - 1] = int(rng.integers(0, 17))
            seq += 1
        i += run
    owned = owner != FREE
    refcount = np.where(owned, np.where(rng.random(n) < 0.05, 2, 1), 0).astype(np.int16)
    return BlockMap(owner, filled, np.where(owned, 16, 0).astype(np.int32), refcount,
                    ~owned & (rng.random(n) < 0.1), 16, 0, "paged:16", False)


def arrow_bytes(data: dict) -> bytes:
    """The cells as an Arrow IPC stream, as Streamlit sends a component's DataFrame."""
    table = pa.Table.from_pandas(data["cells"])
    sink = pa.BufferOutputStream()
    with pa.ipc.new_stream(sink, table.schema) as w:
        w.write_table(table)
    return sink.getvalue().to_pybytes()


def median_ms(fn, repeat: int) -> float:
    fn()
    times = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        fn()
        times.append((time.perf_counter() - t0) * 1000)
    return statistics.median(times)


def main() -> None:
    for n in (4096, 65_536, 262_144, 1 << 20):
        bm = busy_map(n)
        fig = blockmap_figure(bm)
        print(json.dumps({
            "blocks": n, "cells": int(np.asarray(fig.data[0].z).size),
            "cells_ms": round(median_ms(lambda bm=bm: blockmap_cells(bm), 20), 2),
            "figure_ms": round(median_ms(lambda bm=bm: blockmap_figure(bm), 20), 2),
            "figure_json_kb": round(len(fig.to_json()) / 1024, 1),
            "canvas_ms": round(median_ms(lambda bm=bm: canvas_data(bm), 20), 2),
            "canvas_arrow_ms": round(median_ms(
                lambda bm=bm: arrow_bytes(canvas_data(bm)), 20), 2),
            "canvas_arrow_kb": round(len(arrow_bytes(canvas_data(bm))) / 1024, 1),
        }))


if __name__ == "__main__":
    main()
