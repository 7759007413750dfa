"""What a run needs in memory in total, checked before anything is allocated.

`collect` and `simulate` add up what their lanes, pools and requests will hold (`need`) and
compare the total with a limit (`check`): the `--memory-budget-mb` flag when given, else
80% of the memory the machine has available now (/proc/meminfo's MemAvailable). K/V pools
on a CUDA device are checked against that device's free memory instead (collectors/launch.py
asks torch for it: this module imports no torch). Past the limit the
run is one error naming the total, its parts and the limit, before a pool or a lane exists,
so the OOM killer never decides.

The per-block figures are measured peaks with a margin (docs/RELIABILITY.md, "Round 3":
`/usr/bin/time -f %M kvviz collect --mode sim --lane paged:1 --capacity-tokens N`): a paged
lane's metadata ~88 bytes a block and a contiguous lane's ~37 bytes a cell at 4M blocks in a
5 s run, grown to ~141 bytes a block over a longer run (the recording's buffers); a request
~1.7 KB in the engine (200,000 at once: 383 MB).
"""
from __future__ import annotations

from collections.abc import Iterable
from typing import NamedTuple

from kvviz.core.config import LaneSpec, ModelShape
from kvviz.core.errors import KvvizError

PAGED_BLOCK_BYTES = 160  # metadata per paged block (free queue, tables, maps, recording)
CONTIGUOUS_CELL_BYTES = 80  # metadata per contiguous cell
REQUEST_BYTES = 2048  # engine state per request of the workload (arrays, queues, lifetimes)
BASE_BYTES = 96 << 20  # the interpreter, numpy, kvviz
AVAILABLE_SHARE = 0.8  # of MemAvailable, when no --memory-budget-mb is given


class Need(NamedTuple):
    """Bytes a run will hold: host memory in total, and K/V pools on a device."""

    host: int
    device: int  # pools on CUDA (0 on the CPU: they count in host)
    parts: tuple[tuple[str, int], ...]  # (what, bytes), for the error line


def lane_bytes(lane: LaneSpec, capacity_tokens: int) -> int:
    """Metadata bytes one sim lane holds at its peak."""
    cells = capacity_tokens // lane.block_size
    per = PAGED_BLOCK_BYTES if lane.allocator == "paged" else CONTIGUOUS_CELL_BYTES
    return cells * per


def pool_bytes(lane: LaneSpec, capacity_tokens: int, model: ModelShape) -> int:
    """K and V pool bytes of one real-mode lane (kvviz/kv/cache.py allocates them zeroed)."""
    tokens = capacity_tokens // lane.block_size * lane.block_size
    return tokens * model.kv_bytes_per_token


def need(lanes: Iterable[LaneSpec], capacity_tokens: int, requests: int,
         model: ModelShape | None = None, device: str = "cpu") -> Need:
    """What a run of `lanes` at `capacity_tokens` over `requests` requests holds; `model`
    given: real mode, each lane with its own K/V pools on `device`."""
    lanes = tuple(lanes)
    meta = sum(lane_bytes(s, capacity_tokens) for s in lanes)
    parts = [(f"{len(lanes)} lane{'s' if len(lanes) != 1 else ''}' block metadata"
              .replace("lane'", "lane's"), meta),
             (f"{requests} requests", requests * REQUEST_BYTES), ("the interpreter", BASE_BYTES)]
    pools = 0
    if model is not None:
        pools = sum(pool_bytes(s, capacity_tokens, model) for s in lanes)
        parts.insert(0, (f"K/V pools ({model.name}, {model.kv_bytes_per_token} bytes a "
                         f"token, {device})", pools))
    host = meta + requests * REQUEST_BYTES + BASE_BYTES + (pools if device != "cuda" else 0)
    return Need(host, pools if device == "cuda" else 0, tuple(parts))


def available_bytes() -> int | None:
    """MemAvailable from /proc/meminfo (None where it cannot be read)."""
    try:
        with open("/proc/meminfo", encoding="ascii") as fh:
            for line in fh:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        return None
    return None


def mb(n: float) -> str:
    return f"{n / 2**20:,.1f} MB" if n < 10 * 2**20 else f"{n / 2**20:,.0f} MB"


def _limits(budget_mb: float | None, available: int | None,
            flag: str) -> list[tuple[int, str]]:
    """(bytes, whose limit) for each limit that applies: the budget, the machine's share."""
    available = available_bytes() if available is None else available
    limits = []
    if budget_mb is not None:
        limits.append((int(budget_mb * 2**20), f"{flag} {budget_mb:g}"))
    if available is not None:  # a budget may not promise more than the machine has
        share = 1.0 if budget_mb is not None else AVAILABLE_SHARE
        limits.append((int(available * share), f"{share:.0%} of the {mb(available)} this "
                       "machine has available now"))
    return limits


def limit_bytes(budget_mb: float | None, available: int | None = None) -> int | None:
    """The limit `check` holds a run to (None: none known)."""
    limits = _limits(budget_mb, available, "")
    return min(limits)[0] if limits else None


def check(n: Need, budget_mb: float | None, flag: str = "--memory-budget-mb",
          available: int | None = None, device_free: int | None = None) -> None:
    """KvvizError naming the total and the limit when `n` does not fit: the budget if given,
    else AVAILABLE_SHARE of `available` (read now when None); device pools against
    `device_free` (the caller asks torch; None: not checked). No limit known (no
    /proc/meminfo, no budget): nothing is refused."""
    shown = ", ".join(f"{what} {mb(b)}" for what, b in n.parts if b)
    limits = _limits(budget_mb, available, flag)
    if limits:
        limit, whose = min(limits)
        more = whose.startswith(flag) or budget_mb is None  # raising the flag would help
        if n.host > limit:
            raise KvvizError(
                f"the run needs {mb(n.host)} of memory in total ({shown}), more than the "
                f"limit of {mb(limit)} ({whose}); use less capacity, fewer lanes, larger "
                "blocks or fewer requests" + (f", or raise {flag}" if more else ""))
    if n.device and device_free is not None:  # the caller asks the device (torch)
        free = device_free
        if n.device > free:
            raise KvvizError(f"the run's K/V pools need {mb(n.device)} on the CUDA device, "
                             f"more than its {mb(free)} free; use less capacity or fewer "
                             "lanes")
