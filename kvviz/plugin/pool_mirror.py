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
  gained and lost since the previous refresh (kvviz/plugin/tables.py's reader remembers what
  of each table was counted);
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

import numpy as np

from kvviz.plugin.tables import TableReader

log = logging.getLogger("kvviz.plugin")
FULL_SHARE = 3  # watching: a full re-read once the ids noted pass num_blocks / FULL_SHARE
SCAN_SHARE = 0.002  # scanning: a scan past this share of the time between refreshes: watch
FREED_MAX = 1 << 16  # deriving: freed tables held past this: re-read every free block's hash
INCR_MIN = 0  # deriving: a pool this large derives from the tables' changes, not whole
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
        self.reader = TableReader(self.req_to_blocks, self.num_cached)
        self._read_at = -1  # reader.reads when tables() last read, for this refresh
        self.synced = False  # refcnt / hashed in step with the tables' counted ids
        self.used = 0  # synced: blocks the tables hold (refcnt > 0, the null block aside)
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
            freed += self.reader.ids_of(request_id, lst)
            if len(freed) > FREED_MAX:  # no refresh for long: read every hash instead
                self.stale = True
                freed.clear()

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
            if full or self._read_at != self.reader.reads:  # no tables read for this refresh
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
        if self._incremental():
            self._derive_changes()
            return  # (else tables() read every table whole for this recount)
        pool, ids, tails = self.pool, self.reader.ids, self.reader.tails
        null = pool.null_block
        ref = np.bincount(ids, minlength=self.refcnt.size)
        ref[null.block_id] = 0
        held = ref > 0
        self.used = int(np.count_nonzero(held))
        if not self._tables_hold_the_pool(self.used, False):
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
        if tails.size:
            hashed[ids[tails]] = 0
        ref[null.block_id] = null.ref_cnt
        hashed[null.block_id] = null._block_hash is not None
        self.refcnt[:] = ref
        self.synced = True

    def _incremental(self) -> bool:
        """Whether the next derivation moves the planes by the tables' changes (else it
        recounts whole, from whole tables)."""
        return self.synced and self.refcnt.size >= INCR_MIN

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
        reader = self.reader
        pool, ref, hashed, ids = self.pool, self.refcnt, self.hashed, reader.ids
        plus, on, minus, tails = reader.plus, reader.on, reader.minus, reader.tails
        null = pool.null_block.block_id
        ref[null] = 0
        gained, lost = ids[plus], _cat(minus)
        used, negative = self.used, False  # held blocks (the null block aside), kept as the
        if gained.size:  # counts cross zero: no pass over the whole plane
            u, c = np.unique(gained, return_counts=True)
            used += int(np.count_nonzero(ref[u] == 0))
            ref[u] += c.astype(ref.dtype)
        if lost.size:
            u, c = np.unique(lost, return_counts=True)
            ref[u] -= c.astype(ref.dtype)
            after = ref[u]
            used -= int(np.count_nonzero(after == 0))
            negative = bool((after < 0).any())
        self.used = used
        if not self._tables_hold_the_pool(used, negative):
            return
        freed = self.freed
        if self.stale:  # tables freed were forgotten: every free block's hash is read
            again = np.flatnonzero(ref == 0)
        else:  # ids out that may have a hash changed, and tables freed since, now free
            maybe = _cat(reader.reread + freed)
            again = maybe[ref[maybe] == 0] if maybe.size else maybe
        freed.clear()
        self.stale = False
        if again.size:
            blocks = pool.blocks
            hashed[again] = [blocks[b]._block_hash is not None for b in again.tolist()]
        if on.size:
            hashed[ids[on]] = 1
        if tails.size:
            hashed[ids[tails]] = 0
        ref[null] = pool.null_block.ref_cnt
        hashed[null] = pool.null_block._block_hash is not None

    def tables(self, requests, seq_of: dict, max_model_len: int, key: bool = True) -> tuple:
        """(seqs, computed, final, lens, base, blocks): the block tables now
        (TableReader.read), whole with `key` or where the next refresh recounts whole, read
        tracking what changed where the mirror derives; the next refresh derives from them."""
        key = key or (self.deriving and not self._incremental())
        out = self.reader.read(requests, seq_of, max_model_len, self.deriving, key)
        self._read_at = self.reader.reads
        return out


def _cat(parts: list) -> np.ndarray:
    parts = [p for p in parts if len(p)]
    if not parts:
        return np.empty(0, np.int64)
    return np.concatenate([np.asarray(p, np.int64) for p in parts])
