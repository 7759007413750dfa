"""`kvviz collect --torch-snapshot-every S`: periodic torch CUDA memory snapshots of this process.

CUDA only. At start it turns on the allocator's history (`_record_memory_history`); then,
from the sample hook, every S seconds of run time it writes `torch.cuda.memory._snapshot()`
with pickle.dump to `<run dir>/<run>-torchsnap-<n>.pickle` (written under a temporary name,
then renamed). Writing our own snapshot is fine; reading one always goes through
kvviz.torchsnap's safe loader. On CPU it says once that snapshots are unavailable.
"""
from __future__ import annotations

import os
import pickle
import sys
from pathlib import Path

HISTORY_ENTRIES = 100_000


def snapshot_path(out: Path, n: int) -> Path:
    return out.parent / f"{out.stem}-torchsnap-{n}.pickle"


class TorchSnapshots:
    def __init__(self, out: Path, every_s: float, device: str) -> None:
        if not every_s > 0:
            raise ValueError(f"--torch-snapshot-every: must be > 0 s, got {every_s}")
        self.out, self.every_s = Path(out), every_s
        self.written = 0
        self.next_t = 0.0
        self.enabled = False
        self.reason = ""
        if not device.startswith("cuda"):
            self.reason = f"the collector runs on {device}, not CUDA"
        else:
            from collectors.torch_memory import cuda_available

            if not cuda_available():
                self.reason = "torch sees no CUDA device"
        if self.reason:
            print(f"kvviz collect: torch memory snapshots unavailable: {self.reason}",
                  file=sys.stderr, flush=True)
            return
        import torch

        torch.cuda.memory._record_memory_history(max_entries=HISTORY_ENTRIES)
        self.enabled = True

    def hook(self, rec: dict) -> None:
        """Sample hook (collector's engine thread): one snapshot per `every_s` of run time."""
        t = float(rec.get("t", 0.0))
        if t < self.next_t:
            return
        self.next_t = t + self.every_s
        self.write()

    def write(self) -> Path:
        import torch

        path = snapshot_path(self.out, self.written)
        tmp = path.with_name(f".{path.name}.partial")
        with open(tmp, "wb") as fh:
            pickle.dump(torch.cuda.memory._snapshot(), fh)
        os.replace(tmp, path)
        self.written += 1
        return path


def attach(collector, every_s: float) -> TorchSnapshots:
    snaps = TorchSnapshots(collector.resolved.out, every_s, collector.resolved.device)
    if snaps.enabled:
        collector.hooks.append(snaps.hook)
    return snaps
