"""The Learn story as data: each step is built by driving the engine's own pools (KVPool:
the compiled rule's admit / grow / free, as a lane places memory; for preemption and POLICY,
the real engine) and snapshotting.

The line has 32 slots. Contiguous: A, B, C each reserve a range for their maximum length;
B finishes; D needs 14 slots, 16 are free, the largest hole has 12: a fragmentation failure.
Paged (block size 4): the same A, B, C take blocks as they write, and land on the same
slots; B finishes; D's 14 tokens round up to four blocks, which land in both holes, and its
block table says where they are. kvviz/story/course.py adds prefix sharing, preemption and
POLICY.

    contiguous  AAAAAAAA BBBBBBBBBBBB CCCCCCCC ....   ->  B finishes  ->  D (14) fails
    paged       [A][A] [B][B][B] [C][C] [.]           ->  D gets blocks 2, 3, 4, 7
"""
from __future__ import annotations

from collections.abc import Sequence
from typing import NamedTuple

import numpy as np

from kvviz.core.admission import Admission
from kvviz.core.config import LaneSpec, WorkloadConfig
from kvviz.core.metrics import tail_waste_tokens
from kvviz.core.workload import generate
from kvviz.engine.kvpool import KVPool
from kvviz.story import course
from kvviz.story.record import Step

SLOTS = 32
PAGE = 4  # block size of the paged half of the story
NAMES = {0: "A", 1: "B", 2: "C", 3: "D"}
# (seq id, tokens written now, tokens the contiguous allocator reserves for its maximum).
# B has written 9 of 12: three blocks of 4 under paging, so that A, B and C sit on the same
# slots in both pictures (A 0-7, B 8-19, C 20-27).
ARRIVALS = ((0, 5, 8), (1, 9, 12), (2, 6, 8))
D_ID, D_TOKENS = 3, 14
TRADEOFF_SIZES = (1, 2, 4, 8, 16, 32, 64, 128, 256)


class TradeoffPoint(NamedTuple):
    block_size: int
    tail_waste_tokens: int  # unwritten slots in last blocks, summed over the sample
    table_entries: int  # block-table entries (blocks held), summed over the sample
    written_tokens: int

    @property
    def tail_share(self) -> float:
        """Tail waste as a share of capacity: the allocator holds exactly the sample's blocks,
        so its capacity is the slots held (written + tail waste)."""
        held = self.tail_waste_tokens + self.written_tokens
        return self.tail_waste_tokens / held if held else 0.0


def _contiguous() -> KVPool:
    return KVPool(LaneSpec("contiguous", 1, "first-fit"), SLOTS, label="contiguous:first-fit")


def _paged() -> KVPool:
    return KVPool(LaneSpec("paged", PAGE), SLOTS, label=f"paged:{PAGE}")


def _arrive(alloc: KVPool, reserve: bool) -> None:
    for seq, written, maximum in ARRIVALS:
        adm = alloc.admit(seq, written, maximum if reserve else None)
        if not adm.ok:  # the story's numbers are wrong if this happens
            raise RuntimeError(f"story: {NAMES[seq]} did not fit: {adm}")


def build_story() -> list[Step]:
    """Every step of the Learn page, in order."""
    c = _contiguous()
    steps = [Step(
        "line", "KV memory is a line of slots",
        "Each slot holds the keys and values of one token, for every layer. This cache has "
        f"**{SLOTS} slots**. A request's KV grows by one slot per generated token.",
        line=c.snapshot())]
    _arrive(c, reserve=True)
    steps.append(Step(
        "reserve", "A, B and C reserve ranges",
        "A contiguous allocator gives each request one range of adjacent slots. Nobody knows "
        "how long an answer will be, so each range is sized for the request's maximum: "
        "A has written 5 slots of 8, B 9 of 12, C 6 of 8. The dark blue part is **used** (KV "
        "written); the pale blue part is **slack**: held for the request, not yet written. "
        "What the answer still writes is reserved; what it never writes, because it ends "
        "short of the maximum, is **internal** waste.", line=c.snapshot()))
    c.release(1)
    steps.append(Step(
        "finish", "B finishes",
        "B's answer is complete and its range is freed. Now there are **two holes**: 12 slots "
        "where B was, 4 at the end. 16 slots are free in total.", line=c.snapshot()))
    adm = c.admit(D_ID, D_TOKENS)
    steps.append(Step(
        "fail", "D does not fit: fragmentation",
        f"D needs {adm.need_tokens} adjacent slots. {adm.free_tokens} slots are free, but the "
        f"largest hole has only {adm.largest_hole_tokens}. The allocator refuses D although "
        "there is enough memory in total: **external fragmentation**, not out-of-memory.",
        line=c.snapshot(), admission=adm))
    p = _paged()
    _arrive(p, reserve=False)
    p.release(1)
    before = p.snapshot()
    adm_p = p.admit(D_ID, D_TOKENS)
    table = p.block_table(D_ID)
    steps.append(Step(
        "paged", "The same under paging",
        f"A paged allocator cuts the line into blocks of {PAGE} slots and hands out any free "
        "block, one at a time as a request writes. A, B and C sit on the same slots as "
        "above. After B finishes, blocks "
        f"{', '.join(str(b) for b in np.flatnonzero(before.is_free))} are free. D's "
        f"{D_TOKENS} tokens round up to whole blocks: {table.size} blocks of {PAGE} = "
        f"{adm_p.need_tokens} slots. D gets {table.size} free blocks, scattered over both "
        "holes; its **block table** maps D's logical blocks to where they sit. The attention "
        "kernel follows this table.",
        line=c.snapshot(), paged=p.snapshot(), admission=adm_p, table=table,
        asked_tokens=D_TOKENS))
    bm = p.snapshot()
    waste = (-D_TOKENS) % PAGE
    steps.append(Step(
        "tail", "What paging still wastes: the tail of the last block",
        f"D wrote {D_TOKENS} tokens into {table.size} blocks of {PAGE}: its last block holds "
        f"{D_TOKENS - (table.size - 1) * PAGE} and leaves **{waste} slots** unused until D "
        "writes more. Every live request has at most one such partial block, so the waste "
        "is bounded by block size - 1 per request. Here A, C and D together leave "
        f"{tail_waste_tokens(bm)} slots of tail waste (orange).",
        paged=bm, table=table, tail_owner=D_ID))
    steps += course.steps()
    steps.append(Step(
        "block-size", "Choosing a block size",
        "Bigger blocks mean shorter block tables (less indirection for the kernel) but more "
        "tail waste; smaller blocks the reverse. Move the slider to see both, summed over a "
        "sample workload of requests at their final length."))
    steps.append(Step("questions", "Four questions", ""))
    return steps


def d_fails_contiguous() -> Admission:
    """D's admission under contiguous allocation (the story's claim, for tests)."""
    return next(s.admission for s in build_story() if s.key == "fail")  # type: ignore[return-value]


def sample_lengths(num_requests: int = 400, seed: int = 0) -> np.ndarray:
    """Final lengths (prompt + output) of a sharegpt-like sample: int64 [n]."""
    w = generate(WorkloadConfig("sharegpt-like", num_requests=num_requests, seed=seed))
    return w.final_len


def tradeoff(lengths: np.ndarray, sizes: Sequence[int] = TRADEOFF_SIZES) -> list[TradeoffPoint]:
    """Place every sequence at its final length in a paged pool per block size."""
    lengths = np.asarray(lengths, np.int64)
    out = []
    for bs in sizes:
        blocks = int(np.sum(-(-lengths // bs)))
        pool = KVPool(LaneSpec("paged", bs), max(1, blocks) * bs)
        if not all(pool.admit(s, n).ok for s, n in enumerate(lengths.tolist())):
            raise RuntimeError(f"tradeoff: block size {bs} did not place every sequence")
        bm = pool.snapshot()
        out.append(TradeoffPoint(bs, tail_waste_tokens(bm), int((~bm.is_free).sum()),
                                 int(bm.filled.sum())))
    return out


QUESTIONS: tuple[tuple[str, str], ...] = (
    ("Is fragmentation the same as running out of memory?",
     "No. Out of memory means the free slots add up to less than the request needs "
     "(kvviz calls that CAPACITY). Fragmentation means they add up to enough but are split "
     "into holes, none big enough for one contiguous range (FRAGMENTATION). The fix differs: "
     "more memory for the first, a different layout for the second."),
    ("Why is the KV cache prone to it?",
     "Each request's KV grows one slot per generated token, up to a length nobody knows in "
     "advance, and requests finish in an order unrelated to when they arrived. A contiguous "
     "allocator must either reserve for the worst case (slack that is never written) or risk "
     "not being able to grow in place; and finished requests leave holes of every size "
     "between live ones."),
    ("Does paging eliminate it?",
     "It eliminates external fragmentation: any free block serves any request, so a request "
     "fails only when there are too few free blocks in total. It does not eliminate waste: "
     "each request's last block is partly empty (at most block size - 1 slots), and the "
     "kernel pays for reading K/V through a block table."),
    ("Is FlashAttention a fix?",
     "Not for this. FlashAttention makes the attention computation faster and avoids "
     "materialising the attention matrix, but it does not decide where KV lives. Paged "
     "variants of such kernels read K/V through block tables; the fragmentation is solved "
     "by the allocator, and the kernel only has to cope with scattered blocks."),
)

__all__ = ["NAMES", "course", "QUESTIONS", "Step", "TradeoffPoint", "build_story",
           "d_fails_contiguous", "sample_lengths", "tradeoff"]
