"""Import a torch CUDA memory snapshot (`torch.cuda.memory._dump_snapshot`) safely and measure
the caching allocator's fragmentation. Loading never calls pickle.load: see safe_pickle.py
(an opcode pre-pass in opscan.py bounds nesting and hashing first). Untrusted files go through
load_snapshot_sandboxed / loads_snapshot_sandboxed: the same parse in a limited child process.
Needs numpy only; torch is not imported.
"""
from __future__ import annotations

from kvviz.torchsnap.errors import PickleLimitError
from kvviz.torchsnap.safe_pickle import (
    DEFAULT_MAX_BYTES,
    Snapshot,
    SnapshotFormatError,
    UnsafePickleError,
    load_snapshot,
    loads_snapshot,
    parse_snapshot,
    safe_loads,
)
from kvviz.torchsnap.sandboxed import load_snapshot_sandboxed, loads_snapshot_sandboxed
from kvviz.torchsnap.summary import (
    SnapshotCells,
    SnapshotSummary,
    segment_blockmap,
    snapshot_cells,
    summarize,
)

__all__ = [
    "DEFAULT_MAX_BYTES", "PickleLimitError", "Snapshot", "SnapshotCells", "SnapshotFormatError",
    "SnapshotSummary",
    "UnsafePickleError", "load_snapshot", "load_snapshot_sandboxed", "loads_snapshot",
    "loads_snapshot_sandboxed", "parse_snapshot", "safe_loads",
    "segment_blockmap", "snapshot_cells", "summarize",
]
