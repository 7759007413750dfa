"""vLLM's block pool and block tables as the arrays a sample publishes (kvviz/plugin/sampler.py;
docs/NODE.md, "Inside vLLM").

Three ways to keep `refcnt` and `hashed` current:
- deriving (a pool whose every reference is a block-table entry: see `derivable` in
  kvviz/plugin/vllm_entry.py): nothing is read block by block. A block's `ref_cnt` is the number
  of block tables holding it (one bincount over the tables a sample reads anyway); a held block
  holds a prefix hash unless it lies in a table's uncached tail (positions from the manager's
  `num_cached_block[request]` on: such a block came new from `get_new_blocks`, which cleared its
  hash, and only prefix-hashed blocks are shared); a free block's hash changes only while it is
  held (`cache_full_blocks`) or when `get_new_blocks` hands it out again (then it is held), so
  the free blocks re-read are those held at the previous refresh and those of the tables vLLM
  freed since (`note_freed`: the sampler's finish and preemption hooks, before vLLM frees
  the table). No pool verb is wrapped. Once in step, the planes move by what the tables
  gained and lost since the previous refresh (each _Table remembers what of it was counted);
  the first derivation, and any after a full read, recounts whole. Each refresh checks the
  derived planes against vLLM's own free-block count; a difference (a reference held outside
  the tables) logs one line and the mirror reads the pool itself from then on (scanning, then
  watching);
- scanning: each refresh re-reads every block (O(blocks) Python, ~0.09 ms per 1,000 blocks);
- watching: the pool's mutating verbs (get_new_blocks, free_blocks, touch, unpin_blocks, the
  hash insert / remove) are wrapped on the pool instance to note the ids of the blocks they
  touch, and a refresh re-reads those (a call layer on every verb).
The mirror starts scanning and, the first time a scan costs more CPU time than SCAN_SHARE of
the time since the previous refresh (the first scan has none to compare with), turns for good
to deriving where the pool allows it, else to watching: a small pool is scanned (cheaper than
the tables' bookkeeping), a large one derived. While watching, a refresh that finds more ids
noted than num_blocks / FULL_SHARE re-reads the whole pool instead. A prefix-cache reset is
always watched (one call, rare): it is a sample's cue.
"""
from __future__ import annotations

import logging
import time
from array import array

import numpy as np

log = logging.getLogger("kvviz.plugin")
SHORT = 32  # blocks: a table this short is read whole at each sample, a longer one grows
FULL_SHARE = 3  # watching: a full re-read once the ids noted pass num_blocks / FULL_SHARE
SCAN_SHARE = 0.002  # scanning: a scan past this share of the time between refreshes: watch
FREED_MAX = 1 << 16  # deriving: freed tables held past this: re-read every free block's hash
INCR_MIN = 0  # deriving: a pool this large derives from the tables' changes, not whole
assert array("i").itemsize == 4  # the tables' ids, read as int32
VERBS = ("get_new_blocks", "free_blocks", "touch", "unpin_blocks", "_insert_block_hash",
         "_remove_cached_block_hashes")


class PoolMirror:
    """Per block vLLM's `ref_cnt` and whether it holds a prefix hash (`refcnt`, `hashed`,
    indexed by block id), and per request holding blocks its block table."""

    def __init__(self, pool, manager, on_reset, derive: bool = False) -> None:
        """`pool`: vLLM's BlockPool (its reset hooked here); `manager`: the single-type manager
        (`req_to_blocks`: request id -> block list, `num_cached_block`: request id -> leading
        blocks cached); `on_reset()`: called after a prefix-cache reset emptied it; `derive`:
        the pool's references are its block tables' entries (deriving, else scanning)."""
        self.pool, self.req_to_blocks = pool, manager.req_to_blocks
        self.num_cached = getattr(manager, "num_cached_block", {})
        n = pool.num_gpu_blocks
        self.refcnt = np.zeros(n, np.int32)
        self.hashed = np.zeros(n, np.uint8)
        self.dirty: list[int] = []
        self.cap = 4 * n + 4096  # ids noted past this: a full re-read is due (memory bound)
        self.stale = False
        self.watching = False
        self.can_derive, self.deriving = derive, False
        self.freed: list | None = None  # deriving: the ids of the tables vLLM freed since
        # a refresh (lists or arrays of ids)
        self.last_refresh: float | None = None  # none yet: the first scan cannot compare
        self.known: dict[str, _Table] = {}  # request id -> its table as last read
        self.meta: dict[str, tuple] = {}  # not deriving: short tables' (list, seq, final)
        self.reads = 0
        self._ids = np.empty(0, np.int32)  # the last tables(): all ids, and the uncached tails
        self._tails = np.empty(0, np.int64)
        self._read_at = -1  # self.reads when _ids was read
        self._delta: tuple = (self._tails, self._tails, [])  # the last tables(): what changed
        self.synced = False  # refcnt / hashed in step with the tables' counted ids
        reset = pool.reset_prefix_cache

        def reset_prefix_cache():
            ok = reset()
            if ok:
                self.hashed[:] = 0
                on_reset()
            return ok

        self.hooks = {"reset_prefix_cache": reset_prefix_cache}
        pool.reset_prefix_cache = reset_prefix_cache

    @property
    def mode(self) -> str:
        return "deriving" if self.deriving else "watching" if self.watching else "scanning"

    def note_freed(self, request_id: str) -> None:
        """vLLM is about to free this request's table (a finish or a preemption)."""
        lst = self.req_to_blocks.get(request_id)
        if lst:
            freed = self.freed
            t = self.known.get(request_id)
            ids = t.ids if t is not None and t.lst is lst else None
            k = 0 if ids is None else len(ids)
            if k and k <= len(lst) and lst[k - 1].block_id == t.last:  # read up to k: the
                freed.append(ids)  # ids as read (the table is gone: they stay as they are)
                if k < len(lst):
                    freed.append([b.block_id for b in lst[k:]])
            else:
                freed.append([b.block_id for b in lst])
            if len(freed) > FREED_MAX:  # no refresh for long: read every hash instead
                self.stale = True
                self.freed.clear()

    def watch(self) -> None:
        """Wrap the pool's mutating verbs to note the blocks they touch; the mirror must be
        current when this is called (after a full refresh, before the pool moves again)."""
        if self.watching:
            return
        self._stop_deriving()
        pool, dirty = self.pool, self.dirty
        get_new, free, touch, unpin, insert, remove = (getattr(pool, v) for v in VERBS)

        def get_new_blocks(num_blocks):
            ret = get_new(num_blocks)
            dirty.extend([b.block_id for b in ret])
            return ret

        def free_blocks(ordered_blocks):
            blocks = ordered_blocks if isinstance(ordered_blocks, list) else list(ordered_blocks)
            free(blocks)
            dirty.extend([b.block_id for b in blocks])

        def touch_(blocks):
            touch(blocks)
            dirty.extend([b.block_id for b in blocks])

        def unpin_blocks(blocks, on_reuse):
            blocks = list(blocks)
            unpin(blocks, on_reuse)
            dirty.extend([b.block_id for b in blocks])

        def insert_block_hash(key, block, num_tokens):
            insert(key, block, num_tokens)
            dirty.append(block.block_id)

        def remove_hashes(block):
            out = remove(block)
            dirty.append(block.block_id)
            return out

        wrapped = dict(zip(VERBS, (get_new_blocks, free_blocks, touch_, unpin_blocks,
                                   insert_block_hash, remove_hashes)))
        for name, fn in wrapped.items():
            setattr(pool, name, fn)
        self.hooks.update(wrapped)
        self.watching = True

    def start_deriving(self) -> None:
        """Derive from the tables from now on; the mirror must be current when this is called
        (after a full refresh, before the pool moves again)."""
        self.deriving, self.freed, self.synced, self.stale = True, [], False, False

    def _stop_deriving(self) -> None:
        self.deriving = self.can_derive = False
        self.freed = None

    def unhook(self) -> None:
        for name, fn in self.hooks.items():  # the class's method again (never through
            if getattr(self.pool, name, None) is fn:  # pool.__dict__: see
                delattr(self.pool, name)  # PoolSampler._unhook_admissions)
        self.watching = False
        self._stop_deriving()

    def overflow(self) -> None:
        """Forget the ids noted: the next refresh re-reads every block."""
        self.stale = True
        self.dirty.clear()

    def refresh(self, full: bool | None = None) -> None:
        """Bring `refcnt` and `hashed` up to date. Deriving: from the tables the last
        `tables()` read (call it first, in the same sample), or by a full read when `full`.
        Scanning: re-read every block, and watch from now on if that cost more than SCAN_SHARE
        of the time since the last refresh. Watching: re-read the blocks noted since the last
        refresh, or every block when those pass num_blocks / FULL_SHARE. `full` forces one or
        the other (after `overflow()`, a full re-read whatever it says)."""
        t0 = time.perf_counter()
        if self.deriving:
            if full or self._read_at != self.reads:  # no tables read for this refresh
                self._read_all()
                self.freed.clear()
                self.stale = False
            else:
                self._derive()
            self._read_at = -1  # tables serve one refresh
            self.last_refresh = t0
            return
        if not self.watching:  # the scan's cost in this thread's CPU time: a preemption
            c0 = time.thread_time()  # by other work in the middle of it is not its cost
            self._read_all()
            cost = time.thread_time() - c0
            last = self.last_refresh
            if last is not None and cost > SCAN_SHARE * (t0 - last):
                if self.can_derive:
                    self.start_deriving()
                else:
                    self.watch()
            self.last_refresh = t0
            return
        dirty = self.dirty
        if self.stale:  # the ids were forgotten
            full = True
        elif full is None:
            full = len(dirty) * FULL_SHARE > self.refcnt.size
        if full:
            self._read_all()
        elif dirty:
            self._read(np.fromiter(set(dirty), np.int64))
        dirty.clear()
        self.stale = False
        self.last_refresh = t0

    def _read(self, ids: np.ndarray) -> None:
        blocks, extra = self.pool.blocks, self.pool.cached_block_hashes_by_block
        got = [blocks[b] for b in ids.tolist()]
        self.refcnt[ids] = [b.ref_cnt for b in got]
        self.hashed[ids] = [b._block_hash is not None or b.block_id in extra for b in got]

    def _read_all(self) -> None:
        self.synced = False  # the next derivation recounts whole
        pool = self.pool
        blocks = pool.blocks
        self.refcnt[:] = [b.ref_cnt for b in blocks]
        self.hashed[:] = [b._block_hash is not None for b in blocks]
        if pool.cached_block_hashes_by_block:  # extra hashes: of blocks that hold one
            self.hashed[list(pool.cached_block_hashes_by_block)] = 1

    def _derive(self) -> None:
        """The planes from the tables the last tables() read (the module's docstring): on a
        pool of INCR_MIN blocks or more, once in step with the tables, from what changed in
        them since the previous refresh (O(changes) numpy); else recounted whole (O(blocks)
        numpy)."""
        if self.synced and self.refcnt.size >= INCR_MIN:
            self._derive_changes()
            return
        pool, ids = self.pool, self._ids
        null = pool.null_block
        ref = np.bincount(ids, minlength=self.refcnt.size)
        ref[null.block_id] = 0
        held = ref > 0
        if not self._tables_hold_the_pool(int(np.count_nonzero(held)), False):
            return
        freed = self.freed
        if self.stale:  # tables freed were forgotten: every free block's hash is read
            again = np.flatnonzero(~held)
        else:
            left = (self.refcnt > 0) & ~held  # held at the last refresh, free now
            if freed:
                ids_freed = _cat(freed)
                left[ids_freed[~held[ids_freed]]] = True
            again = np.flatnonzero(left)
        freed.clear()
        self.stale = False
        hashed = self.hashed
        if again.size:
            blocks = pool.blocks
            hashed[again] = [blocks[b]._block_hash is not None for b in again.tolist()]
        hashed[ids] = 1
        if self._tails.size:
            hashed[ids[self._tails]] = 0
        ref[null.block_id] = null.ref_cnt
        hashed[null.block_id] = null._block_hash is not None
        self.refcnt[:] = ref
        self.synced = True

    def _tables_hold_the_pool(self, used: int, negative: bool) -> bool:
        """Whether the blocks the tables hold (`used`) are the blocks vLLM counts in use (and
        no count went negative, no block holds extra hashes); if not, one log line, and the
        pool is read itself from now on."""
        pool = self.pool
        want = pool.num_gpu_blocks - 1 - pool.get_num_free_blocks()
        if used == want and not negative and not pool.cached_block_hashes_by_block:
            return True
        log.warning("kvviz blocks plugin: the pool's references are not its block tables' "
                    "(%d blocks in tables, %d in use%s); reading the pool itself from now "
                    "on", used, want, ", extra prefix hashes"
                    if pool.cached_block_hashes_by_block else "")
        self._stop_deriving()
        self._read_all()
        return False

    def _derive_changes(self) -> None:
        """refcnt += the ids tables gained, -= the ids of tables gone; hashed set for the held
        positions that may have changed (each table's ids from min(counted, cached) at its
        last read on: new blocks, and tail blocks cached since); free blocks re-read where a
        table gone or freed held them."""
        pool, ref, hashed, ids = self.pool, self.refcnt, self.hashed, self._ids
        plus, on, minus = self._delta
        null = pool.null_block.block_id
        ref[null] = 0
        gained, lost = ids[plus], _cat(minus)
        if gained.size:
            np.add.at(ref, gained, 1)
        if lost.size:
            np.add.at(ref, lost, -1)
        if not self._tables_hold_the_pool(int(np.count_nonzero(ref)),
                                          bool(lost.size and ref.min() < 0)):
            return
        freed = self.freed
        if self.stale:  # tables freed were forgotten: every free block's hash is read
            again = np.flatnonzero(ref == 0)
        else:
            if freed:
                lost = np.concatenate([lost, _cat(freed)])
            again = lost[ref[lost] == 0] if lost.size else lost
        freed.clear()
        self.stale = False
        if again.size:
            blocks = pool.blocks
            hashed[again] = [blocks[b]._block_hash is not None for b in again.tolist()]
        if on.size:
            hashed[ids[on]] = 1
        if self._tails.size:
            hashed[ids[self._tails]] = 0
        ref[null] = pool.null_block.ref_cnt
        hashed[null] = pool.null_block._block_hash is not None

    def tables(self, requests, seq_of: dict, max_model_len: int) -> tuple:
        """(seqs, computed, final, lens, blocks): per request holding blocks, in vLLM's order,
        its sequence number and the most tokens it can reach (as they were when its table was
        first read), its num_computed_tokens (0 once vLLM has let go of it), its table's
        length, and all tables' block ids back to back. O(requests + blocks of short tables +
        blocks appended to long ones) Python, the ids copied into one buffer as they are read.
        Deriving, it also notes the positions of each table's uncached tail (from
        num_cached_block) and, per table, what changed since its last read (see _derive), as
        spans of positions expanded at the end."""
        self.reads += 1
        read, known, cached = self.reads, self.known, self.num_cached
        track = self.deriving  # else: no tails, no changes noted
        # not deriving, a short table needs only its seq and final: (list, seq, final) a
        # request, kept from one read to the next (no _Table)
        meta, self.meta = self.meta, {}
        kept_meta = self.meta
        seqs, finals, computed, lens, minus = [], [], [], [], []  # minus: ids out
        # deriving, per table: its cached count now, and from where in it ids are counted in
        # and held blocks may have been hashed since its last read (spans made at the end)
        cs, plus_from, on_from = [], [], []
        out = array("i")  # every table's ids, back to back
        at = 0  # ids in `out` so far
        in_known = 0  # tables of `known` read now
        pending: list = []  # short tables not yet copied into `out` (not deriving)
        for rid, lst in self.req_to_blocks.items():
            n = len(lst)
            if not n:
                continue
            req = requests.get(rid)
            computed.append(0 if req is None else req.num_computed_tokens)
            lens.append(n)
            at += n
            short = n <= SHORT  # read whole (and, deriving, counted anew)
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
                if t is not None and t.counted:
                    minus.append(t.counted_ids())
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
                got = t.ids
                k = 0 if got is None else len(got)
                if k and k <= n and lst[k - 1].block_id == t.last:  # the common case: grown
                    old = None  # by the blocks past k (t.grow's first branch, inline)
                    if k < n:
                        got.extend([b.block_id for b in lst[k:]])
                        t.last = lst[n - 1].block_id
                else:
                    old = t.grow(n)
                out += t.ids
            if not track:
                continue
            c = cached.get(rid, 0)
            cs.append(c)
            if short:  # counted anew, whole
                if t.counted:
                    minus.append(t.counted_ids())
                plus_from.append(0)
                on_from.append(0)
                t.sids, t.ids, t.counted, t.cached = ids, None, n, c
                continue
            if old is not None:  # read anew: what was counted goes out
                minus.append(old)
                t.counted = t.cached = 0
            counted = t.counted
            plus_from.append(counted)
            on_from.append(counted if counted < t.cached else t.cached)  # and cached then
            t.sids, t.counted, t.cached = None, n, c
        if pending:
            out.extend([b.block_id for p in pending for b in p])
        if len(known) != in_known:  # requests that hold no blocks now: forgotten
            for rid in [r for r, t in known.items() if t.read != read]:
                t = known.pop(rid)
                if t.counted:
                    minus.append(t.counted_ids())
        blocks = np.frombuffer(out, np.int32) if at else np.empty(0, np.int32)
        self._ids, self._read_at = blocks, read
        if track and cs:  # positions: the uncached tails [c, n), counted in [plus_from, n),
            # held and hashed [on_from, c), each table's from its first id's position
            n_ = np.array(lens, np.int64)
            a0_ = np.cumsum(n_) - n_
            c_ = np.array(cs, np.int64) + a0_
            end = n_ + a0_
            self._tails = _spans(c_, end)
            self._delta = (_spans(np.array(plus_from, np.int64) + a0_, end),
                           _spans(np.array(on_from, np.int64) + a0_, c_), minus)
        else:
            self._tails = _NONE
            self._delta = (_NONE, _NONE, minus)
        return (np.array(seqs, np.int64), np.array(computed, np.int64),
                np.array(finals, np.int64), np.array(lens, np.int32), blocks)


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


def _cat(parts: list) -> np.ndarray:
    parts = [p for p in parts if len(p)]
    if not parts:
        return np.empty(0, np.int64)
    return np.concatenate([np.asarray(p, np.int64) for p in parts])


def _final(req, max_model_len: int) -> int:
    """The most tokens a request can reach (0 for one vLLM has let go of)."""
    return 0 if req is None else min(max_model_len, req.num_prompt_tokens + req.max_tokens)


class _Table:
    """One request's block table as last read: its sequence number and final length from the
    first read, and, once longer than SHORT, its block ids so far (`ids`, an array that grows
    as the table does; a short one's: `sids`); how many of its ids the deriving mirror has
    counted, and its cached count then. It holds no Request: a finished request is freed
    where vLLM lets go of it, not in a sample."""

    __slots__ = ("lst", "seq", "final", "read", "ids", "last", "sids", "counted", "cached")

    def __init__(self, lst: list, seq: int, final: int) -> None:
        self.lst, self.seq, self.final, self.read = lst, seq, final, 0
        self.ids: array | None = None
        self.sids: list | None = None
        self.last = self.counted = self.cached = 0

    def counted_ids(self):
        return self.sids[:self.counted] if self.sids is not None else self.ids[:self.counted]

    def grow(self, n: int) -> array | list | None:
        """Bring `ids` to the table's n block ids, read on from where the last read stopped (a
        table only grows while its request holds it; a shorter one, or one whose last block
        read has changed, is read anew: then the ids counted before, if any, are returned)."""
        lst, ids = self.lst, self.ids
        old = None
        k = 0 if ids is None else len(ids)
        if not k or k > n or lst[k - 1].block_id != self.last:
            if self.counted:
                old = self.counted_ids()
            self.ids = array("i", [b.block_id for b in lst])
        elif k < n:
            ids.extend([b.block_id for b in lst[k:]])
        self.last = lst[n - 1].block_id
        return old
