"""A real snapshot from torch's CUDA caching allocator, when a GPU is present."""
from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")

pytestmark = pytest.mark.skipif(
    not torch.cuda.is_available(),
    reason="needs CUDA: torch.cuda.memory._snapshot() only describes a CUDA caching allocator",
)


def test_real_snapshot_loads_safely_and_adds_up(tmp_path):
    from kvviz.torchsnap import load_snapshot, snapshot_cells, summarize

    torch.cuda.memory._record_memory_history(max_entries=10_000)
    try:
        # interleave small and large tensors, then free every other one to leave holes
        keep = [torch.empty(n * 1024 + 7, dtype=torch.uint8, device="cuda")
                for n in (1, 300, 5, 3000, 9, 700, 2, 5000)]
        del keep[::2]
        torch.cuda.synchronize()
        path = tmp_path / "real.pickle"
        torch.cuda.memory._dump_snapshot(str(path))
        reserved = torch.cuda.memory_reserved()
        allocated = torch.cuda.memory_allocated()
    finally:
        torch.cuda.memory._record_memory_history(enabled=None)

    snap = load_snapshot(path)
    s = summarize(snap)
    assert s.reserved == reserved
    assert s.allocated == allocated
    assert s.requested_known and s.rounding_waste >= 0
    assert s.uncovered == 0 and s.trace_entries > 0
    assert s.allocated + s.pending_free + s.free == s.reserved
    cells = snapshot_cells(snap)
    assert int(cells.hole_bytes.sum()) == s.free
    del keep
