"""vLLM's block tables as a sample publishes them (kvviz/plugin/pool_mirror.py reads them
through a TableReader; docs/NODE.md, "Inside vLLM").

A table only grows while its request holds it (vLLM appends blocks; a preemption or a finish
drops the list, a re-admission starts a new one), so a long table's ids are kept from one read
to the next and only the blocks appended since are read; a short one is read whole. Deriving,
the reader also says what changed since its last read, for the pool mirror's planes.

What a read returns of the ids is a window of each table (`base`: the ids left out at its
front): a "key" read returns every table whole; otherwise a long table's window starts where
the previous read's ended (the receiver has the ids before it: kvviz/plugin/wire.py's
Tables), or earlier where the deriving mirror needs positions before that. A message built
from a read that does not reach the receiver must be followed by a key read (the sampler's
job: a dropped message makes the next one key).
"""
from __future__ import annotations

from array import array

import numpy as np

SHORT = 32  # blocks: a table this short is read whole at each sample, a longer one grows
assert array("i").itemsize == 4  # the tables' ids, read as int32


class TableReader:
    """The block tables of `req_to_blocks` (request id -> block list) with, per table, what
    the last read of it saw (`known`: _Table; `meta`: a short table's (list, seq, final)
    when not tracking)."""

    def __init__(self, req_to_blocks: dict, num_cached: dict) -> None:
        self.req_to_blocks, self.num_cached = req_to_blocks, num_cached
        self.known: dict[str, _Table] = {}  # request id -> its table as last read
        self.meta: dict[str, tuple] = {}  # not tracking: short tables' (list, seq, final)
        self.reads = 0
        self.ids = np.empty(0, np.int32)  # the last read: every table's window back to back
        self.key = True  # the last read was a key read (every window whole)
        self.tails = self.plus = self.on = _NONE  # and, tracking, positions in them
        self.minus: list = []
        self.reread: list = []

    def ids_of(self, request_id: str, lst: list) -> list:
        """The ids of a table about to be freed, as parts (arrays or lists of ids): the ids
        the last read kept, and the blocks appended since."""
        t = self.known.get(request_id)
        k = t.kept(len(lst)) if t is not None and t.lst is lst else 0
        if k:  # the ids as read, past its cached count then (see read(): `reread`), and
            # those appended since
            old = t.ids[min(t.cached, k):] if t.counted == k else t.ids
            return [old, [b.block_id for b in lst[k:]]] if k < len(lst) else [old]
        return [[b.block_id for b in lst]]

    def read(self, requests, seq_of: dict, max_model_len: int, track: bool,
             key: bool = True) -> tuple:
        """(seqs, computed, final, lens, base, blocks): per request holding blocks, in vLLM's
        order, its sequence number and the most tokens it can reach (as they were when its
        table was first read), its num_computed_tokens (0 once vLLM has let go of it), its
        table's length, how many of its first ids are left out (0 for all with `key`; else,
        for a long table, those the previous read returned, less any the mirror needs), and
        the tables' windows of block ids back to back. O(requests + blocks of short tables +
        blocks appended to long ones) Python, the windows joined into one buffer once.
        With `track` (the mirror derives), it also notes the positions of each table's
        uncached tail (from num_cached_block) and, per table, what changed since its last read
        (kvviz/plugin/pool_mirror.py's _derive_changes), as spans of positions in `blocks`
        expanded at the end: `tails`, `plus` (ids counted in), `on` (held and hashed), `minus`
        (ids out) and `reread` (ids out whose hash may have changed since: a table vLLM freed
        whole gives only those past its cached count at its last read, the others had their
        hash then and lose it only to an eviction, which hands the block to a table read or
        freed since). A whole recount (the mirror's first derivation) needs a key read."""
        self.reads += 1
        self.key = key
        read, known, cached = self.reads, self.known, self.num_cached
        # not deriving, a short table needs only its seq and final: (list, seq, final) a
        # request, kept from one read to the next (no _Table)
        meta, self.meta = self.meta, {}
        kept_meta = self.meta
        seqs, finals, computed, lens, minus = [], [], [], [], []  # minus: ids out
        reread: list = []
        base: list = []  # per table: its ids left out (only long tables leave any out)
        # deriving, per table: its cached count now, and from where in it ids are counted in
        # and held blocks may have been hashed since its last read (spans made at the end)
        cs, plus_from, on_from = [], [], []
        # every table's ids, back to back: short tables' into `out`, a long table's array
        # as it is; joined once at the end (one allocation and one copy each, where growing
        # one buffer table by table re-allocated and copied it again and again)
        out = array("i")
        parts: list = []
        at = 0  # ids read so far
        in_known = 0  # tables of `known` read now
        pending: list = []  # short tables not yet copied into `out` (not deriving)
        for rid, lst in self.req_to_blocks.items():
            n = len(lst)
            if not n:
                continue
            req = requests.get(rid)
            computed.append(0 if req is None else req.num_computed_tokens)
            lens.append(n)
            short = n <= SHORT  # read whole (and, deriving, counted anew)
            if short or key:
                at += n
                base.append(0)
            if short and not track:
                m = meta.get(rid)
                if m is None or m[0] is not lst:
                    m = (lst, seq_of.get(rid, -1), _final(req, max_model_len))
                kept_meta[rid] = m
                seqs.append(m[1])
                finals.append(m[2])
                pending.append(lst)  # read with the next ones, in one comprehension
                continue
            if pending:
                out.extend([b.block_id for p in pending for b in p])
                pending.clear()
            t = known.get(rid)
            if t is None or t.lst is not lst:
                if t is not None and t.counted:  # freed whole, and a new table since
                    minus.append(t.counted_ids())
                    reread.append(t.uncached_ids())
                m = meta.get(rid)  # a table grown past SHORT keeps what its first read saw
                t = known[rid] = (_Table(lst, m[1], m[2]) if m is not None and m[0] is lst
                                  else _Table(lst, seq_of.get(rid, -1),
                                              _final(req, max_model_len)))
            t.read = read
            in_known += 1
            seqs.append(t.seq)
            finals.append(t.final)
            if short:
                ids = [b.block_id for b in lst]
                out.extend(ids)
            else:
                old = t.grow(n)
                if out:
                    parts.append(out)
                    out = array("i")
            if track:
                c = cached.get(rid, 0)
                cs.append(c)
                if short:  # counted anew, whole
                    if t.counted:
                        minus.append(t.counted_ids())
                        reread.append(minus[-1])
                    plus_from.append(0)
                    on_from.append(0)
                    t.sids, t.ids, t.counted, t.cached = ids, None, n, c
                    continue
                if old is not None:  # read anew: what was counted goes out
                    minus.append(old)
                    reread.append(old)
                    t.counted = t.cached = 0
                counted = t.counted
                on = counted if counted < t.cached else t.cached  # and cached then
                plus_from.append(counted)
                on_from.append(on)
                t.sids, t.counted, t.cached = None, n, c
            if key:
                parts.append(t.ids)
            else:  # the window: from the end of the last one, or where the mirror looks
                w = t.sent if t.seq >= 0 else 0  # (a receiver finds a table by its seq)
                if track:
                    w = min(w, on, c)  # on <= counted
                base.append(w)
                at += n - w
                parts.append(t.ids[w:] if w else t.ids)
            t.sent = n
        if pending:
            out.extend([b.block_id for p in pending for b in p])
        if len(known) != in_known:  # requests that hold no blocks now: forgotten
            for rid in [r for r, t in known.items() if t.read != read]:
                t = known.pop(rid)
                if t.counted:  # freed whole
                    minus.append(t.counted_ids())
                    reread.append(t.uncached_ids())
        parts.append(out)
        blocks = (np.frombuffer(b"".join(parts), np.int32) if at
                  else np.empty(0, np.int32))
        self.ids = blocks
        base_ = np.array(base, np.int32)
        if track and cs:  # positions: the uncached tails [c, n), counted in [plus_from, n),
            # held and hashed [on_from, c), each table's from its window's first position
            n_ = np.array(lens, np.int64)
            wn = n_ - base_
            a0_ = np.cumsum(wn) - wn - base_  # where a table's position 0 would be
            c_ = np.array(cs, np.int64) + a0_
            end = n_ + a0_
            self.tails = _spans(c_, end)
            self.plus = _spans(np.array(plus_from, np.int64) + a0_, end)
            self.on = _spans(np.array(on_from, np.int64) + a0_, c_)
        else:
            self.tails = self.plus = self.on = _NONE
        self.minus, self.reread = minus, reread
        return (np.array(seqs, np.int64), np.array(computed, np.int64),
                np.array(finals, np.int64), np.array(lens, np.int32), base_, blocks)


_NONE = np.empty(0, np.int64)
_NONE.flags.writeable = False


def _spans(lo: np.ndarray, hi: np.ndarray) -> np.ndarray:
    """The positions of the spans [lo[i], hi[i]) (none where hi <= lo), in order, as one
    array (int64 arrays of one length in)."""
    n = np.maximum(hi - lo, 0)
    ends = np.cumsum(n)
    if not ends.size or not ends[-1]:
        return _NONE
    return np.arange(ends[-1]) + np.repeat(lo - ends + n, n)


def _final(req, max_model_len: int) -> int:
    """The most tokens a request can reach (0 for one vLLM has let go of)."""
    return 0 if req is None else min(max_model_len, req.num_prompt_tokens + req.max_tokens)


class _Table:
    """One request's block table as last read: its sequence number and final length from the
    first read, and, once longer than SHORT, its block ids so far (`ids`, an array that grows
    as the table does; a short one's: `sids`); how many of its ids the deriving mirror has
    counted, and its cached count then. It holds no Request: a finished request is freed
    where vLLM lets go of it, not in a sample."""

    __slots__ = ("lst", "seq", "final", "read", "ids", "last", "sids", "counted", "cached",
                 "sent")

    def __init__(self, lst: list, seq: int, final: int) -> None:
        self.lst, self.seq, self.final, self.read = lst, seq, final, 0
        self.ids: array | None = None
        self.sids: list | None = None
        self.last = self.counted = self.cached = 0
        self.sent = 0  # its first ids the last read returned (a key read: all of them)

    def counted_ids(self):
        return self.sids[:self.counted] if self.sids is not None else self.ids[:self.counted]

    def uncached_ids(self):
        """The counted ids past the cached count at the last read (not hashed then)."""
        ids = self.sids if self.sids is not None else self.ids
        return ids[min(self.cached, self.counted):self.counted]

    def kept(self, n: int) -> int:
        """How many of `ids` are still the first of the table, now n blocks long: all of them
        (a table only grows while its request holds it), or 0 where none were read, or the
        table is shorter, or the last block read has changed (read it anew)."""
        k = 0 if self.ids is None else len(self.ids)
        return k if k and k <= n and self.lst[k - 1].block_id == self.last else 0

    def grow(self, n: int) -> array | list | None:
        """Bring `ids` to the table's n block ids, read on from where the last read stopped;
        a table read anew returns the ids counted before, if any."""
        lst = self.lst
        old = None
        k = self.kept(n)
        if not k:
            if self.counted:
                old = self.counted_ids()
            self.ids = array("i", [b.block_id for b in lst])
            self.sent = 0
        elif k < n:
            self.ids.extend([b.block_id for b in lst[k:]])
        self.last = lst[n - 1].block_id
        return old
