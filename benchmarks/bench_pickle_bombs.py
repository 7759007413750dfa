"""Pickle bombs through the sandboxed snapshot parser: what each costs the child, how fast
it is refused. One JSON line per input (--json), else a Markdown table for docs/RELIABILITY.md.

    python benchmarks/bench_pickle_bombs.py [--json] [--only SUBSTRING]

Each input is written to a file and parsed exactly as `kvviz torch-snapshot FILE` does
(kvviz.torchsnap.sandboxed: a child with parse_limits(size)); peak memory is the child's
ru_maxrss from wait4, time is the parent's wall clock from spawn to verdict. Two legitimate
snapshots give the reference, and one control row runs the deep-tuple bomb through a plain
pickle.loads in the same sandbox (what the opcode pre-pass prevents).
"""
from __future__ import annotations

import argparse
import json
import pickle
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))  # run from a checkout
sys.path.insert(0, str(ROOT / "tests"))

from torchsnap import bombs  # noqa: E402  (tests/torchsnap/bombs.py)
from torchsnap.snaps import make_snapshot  # noqa: E402

from kvviz.sandbox import run_limited_outcome  # noqa: E402
from kvviz.torchsnap.safe_pickle import DEFAULT_MAX_BYTES  # noqa: E402
from kvviz.torchsnap.sandboxed import parse_file_plain, parse_limits  # noqa: E402


def realistic(segments: int, blocks: int = 200, frames: int = 20) -> bytes:
    """A snapshot shaped like a real one: blocks with stack frames (most of the bytes)."""
    segs, addr = [], 1 << 40
    for _ in range(segments):
        out, a = [], addr
        for j in range(blocks):
            out.append({"address": a, "size": 1 << 20, "requested_size": (1 << 20) - j,
                        "state": "active_allocated" if j % 2 else "inactive",
                        "frames": [{"filename": f"/site-packages/torch/nn/modules/m{k}.py",
                                    "line": 100 + k + j, "name": f"forward_{k}"}
                                   for k in range(frames)]})
            a += 1 << 20
        segs.append({"device": 0, "address": addr, "total_size": blocks << 20,
                     "segment_type": "large", "blocks": out, "frames": []})
        addr += 1 << 36
    return pickle.dumps({"segments": segs, "device_traces": [[]]}, protocol=4)


def inputs() -> dict[str, bytes | None]:
    rows = {"legit: small snapshot (tests/torchsnap/snaps.py)":
            pickle.dumps(make_snapshot(), protocol=4),
            "legit: 50 segments x 200 blocks x 20 frames": realistic(50),
            "legit: 200 segments x 200 blocks x 20 frames (~ the upload limit)": realistic(200)}
    rows.update({name: build() for name, (build, _) in bombs.BOMBS.items()})
    return rows


def measure(name: str, data: bytes, tmp: Path, plain: bool = False) -> dict:
    path = tmp / "input.pickle"
    path.write_bytes(data)
    limits = parse_limits(len(data))
    if plain:
        out = run_limited_outcome(pickle.loads, data, **limits)
    else:
        out = run_limited_outcome(parse_file_plain, str(path), DEFAULT_MAX_BYTES, **limits)
    verdict = "parsed" if out.error is None else str(out.error).replace(str(path), "FILE")
    return {"input": name, "bytes": len(data), "mem_limit_mb": limits["mem_mb"],
            "peak_rss_mb": round(out.peak_rss_bytes / 2**20, 1), "wall_s": round(out.wall_s, 2),
            "kind": "ok" if out.error is None else out.error.kind, "verdict": verdict}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--json", action="store_true", help="one JSON object per line")
    ap.add_argument("--only", default="", help="run inputs whose name contains this")
    args = ap.parse_args()
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        todo = [(n, d, False) for n, d in inputs().items()]
        todo.append(("control: deep tuple key, plain pickle.loads in the sandbox",
                     bombs.deep_tuple_dict_key(), True))
        for name, data, plain in todo:
            if args.only not in name:
                continue
            row = measure(name, data, Path(tmp), plain)
            rows.append(row)
            if args.json:
                print(json.dumps(row), flush=True)
    if not args.json:
        print("| input | file | child peak RSS (limit) | time to verdict | verdict |")
        print("|---|---:|---:|---:|---|")
        for r in rows:
            print(f"| {r['input']} | {r['bytes'] / 2**20:.2f} MiB | {r['peak_rss_mb']:.0f} MiB "
                  f"({r['mem_limit_mb']:.0f}) | {r['wall_s']:.2f} s | {r['verdict'][:110]} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
