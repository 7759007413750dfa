"""Snapshot-shaped dicts written by hand, in the layout torch.cuda.memory._snapshot() returns.

Segment 0 (large, 20 MiB):  | alloc 4M (req 4M-1000) | hole 2M | alloc 6M | hole 3M |
                            | pending-free 1M | hole 4M |
Segment 1 (small, 2 MiB):   | alloc 512 (req 100) | hole 1536 | alloc 1024 (req 1000) |
                            | hole 2M-3072 |
"""
from __future__ import annotations

import pickle

KiB, MiB = 1 << 10, 1 << 20
BASE0, BASE1 = 0x7F0000000000, 0x7F0100000000
FRAME = {"filename": "model.py", "line": 42, "name": "forward"}


def _blocks(base: int, spec: list[tuple[str, int, int | None]]) -> list[dict]:
    out, addr = [], base
    for state, size, req in spec:
        b = {"address": addr, "size": size, "state": state, "frames": [dict(FRAME)]}
        if req is not None:
            b["requested_size"] = req
        out.append(b)
        addr += size
    return out


def make_snapshot() -> dict:
    seg0 = _blocks(BASE0, [
        ("active_allocated", 4 * MiB, 4 * MiB - 1000), ("inactive", 2 * MiB, 0),
        ("active_allocated", 6 * MiB, 6 * MiB), ("inactive", 3 * MiB, 0),
        ("active_pending_free", 1 * MiB, 1 * MiB), ("inactive", 4 * MiB, 0),
    ])
    seg1 = _blocks(BASE1, [
        ("active_allocated", 512, 100), ("inactive", 1536, 0),
        ("active_allocated", 1024, 1000), ("inactive", 2 * MiB - 3072, 0),
    ])
    segments = [
        # listed out of address order on purpose: the loader sorts
        {"device": 0, "address": BASE1, "total_size": 2 * MiB, "allocated_size": 1536,
         "active_size": 1536, "requested_size": 1100, "stream": 0, "segment_type": "small",
         "segment_pool_id": (0, 0), "is_expandable": False, "frames": [], "blocks": seg1},
        {"device": 0, "address": BASE0, "total_size": 20 * MiB, "allocated_size": 10 * MiB,
         "active_size": 11 * MiB, "requested_size": 10 * MiB - 1000, "stream": 0,
         "segment_type": "large", "segment_pool_id": (0, 0), "is_expandable": False,
         "frames": [], "blocks": seg0},
    ]
    traces = [[{"action": "alloc", "addr": BASE0, "size": 4 * MiB, "stream": 0,
                "frames": [dict(FRAME)]},
               {"action": "segment_alloc", "addr": BASE1, "size": 2 * MiB, "stream": 0,
                "frames": []}]]
    return {"segments": segments, "device_traces": traces,
            "allocator_settings": {"PYTORCH_CUDA_ALLOC_CONF": "", "max_split_size": -1}}


def dumps(obj: object, protocol: int = 4) -> bytes:
    return pickle.dumps(obj, protocol=protocol)
