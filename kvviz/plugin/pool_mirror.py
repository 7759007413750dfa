"""vLLM's block pool and block tables as the arrays a sample publishes (kvviz/plugin/sampler.py;
docs/NODE.md, "Inside vLLM").

Two ways to keep `refcnt` and `hashed` current, chosen by what they cost on this pool:
- scanning: each refresh re-reads every block (O(blocks) Python, ~0.09 ms per 1,000 blocks)
  and nothing runs between samples;
- watching: the pool's mutating verbs (get_new_blocks, free_blocks, touch, unpin_blocks, the
  hash insert / remove) are wrapped on the pool instance to note the ids of the blocks they
  touch, and a refresh re-reads those (a call layer on every verb, ~75 calls a step on a full
  1,000-block pool under a closed loop; O(ids noted) Python a refresh).
The mirror starts scanning and turns to watching, for good, the first time a scan costs more
CPU time than SCAN_SHARE of the time since the previous refresh (the first scan has none to
compare with): a large pool watches (200,000 blocks: a 17 ms scan, 7% of the time at 4 Hz),
a small one scans (1,000 blocks: 0.09 ms in 250 ms). While watching, a refresh that
finds more ids noted than num_blocks / FULL_SHARE re-reads the whole pool instead. A
prefix-cache reset is always watched (one call, rare): it is a sample's cue.
"""
from __future__ import annotations

import time

import numpy as np

SHORT = 32  # blocks: a table this short is read whole at each sample, a longer one grows
FULL_SHARE = 3  # watching: a full re-read once the ids noted pass num_blocks / FULL_SHARE
SCAN_SHARE = 0.002  # scanning: a scan past this share of the time between refreshes: watch
VERBS = ("get_new_blocks", "free_blocks", "touch", "unpin_blocks", "_insert_block_hash",
         "_remove_cached_block_hashes")


class PoolMirror:
    """Per block vLLM's `ref_cnt` and whether it holds a prefix hash (`refcnt`, `hashed`,
    indexed by block id), and per request holding blocks its block table."""

    def __init__(self, pool, req_to_blocks, on_reset) -> None:
        """`pool`: vLLM's BlockPool (hooked here); `req_to_blocks`: the single-type manager's
        request id -> block list; `on_reset()`: called after a prefix-cache reset emptied it."""
        self.pool, self.req_to_blocks = pool, req_to_blocks
        n = pool.num_gpu_blocks
        self.refcnt = np.zeros(n, np.int32)
        self.hashed = np.zeros(n, np.uint8)
        self.dirty: list[int] = []
        self.cap = 4 * n + 4096  # ids noted past this: a full re-read is due (memory bound)
        self.stale = False
        self.watching = False
        self.last_refresh: float | None = None  # none yet: the first scan cannot compare
        self.known: dict[str, _Table] = {}  # request id -> its table as last read
        self.reads = 0
        reset = pool.reset_prefix_cache

        def reset_prefix_cache():
            ok = reset()
            if ok:
                self.hashed[:] = 0
                on_reset()
            return ok

        self.hooks = {"reset_prefix_cache": reset_prefix_cache}
        pool.reset_prefix_cache = reset_prefix_cache

    def watch(self) -> None:
        """Wrap the pool's mutating verbs to note the blocks they touch; the mirror must be
        current when this is called (after a full refresh, before the pool moves again)."""
        if self.watching:
            return
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

    def unhook(self) -> None:
        for name, fn in self.hooks.items():  # the class's method again (never through
            if getattr(self.pool, name, None) is fn:  # pool.__dict__: see
                delattr(self.pool, name)  # PoolSampler._unhook_admissions)
        self.watching = False

    def overflow(self) -> None:
        """Forget the ids noted: the next refresh re-reads every block."""
        self.stale = True
        self.dirty.clear()

    def refresh(self, full: bool | None = None) -> None:
        """Bring `refcnt` and `hashed` up to date. Scanning: re-read every block, and watch
        from now on if that cost more than SCAN_SHARE of the time since the last refresh.
        Watching: re-read the blocks noted since the last refresh, or every block when those
        pass num_blocks / FULL_SHARE. `full` forces one or the other while watching (after
        `overflow()`, a full re-read whatever it says)."""
        t0 = time.perf_counter()
        if not self.watching:  # the scan's cost in this thread's CPU time: a preemption
            c0 = time.thread_time()  # by other work in the middle of it is not its cost
            self._read_all()
            cost = time.thread_time() - c0
            last = self.last_refresh
            if last is not None and cost > SCAN_SHARE * (t0 - last):
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
            blocks, extra = self.pool.blocks, self.pool.cached_block_hashes_by_block
            ids = np.fromiter(set(dirty), np.int64)
            got = [blocks[b] for b in ids.tolist()]
            self.refcnt[ids] = [b.ref_cnt for b in got]
            self.hashed[ids] = [b._block_hash is not None or b.block_id in extra for b in got]
        dirty.clear()
        self.stale = False
        self.last_refresh = t0

    def _read_all(self) -> None:
        pool = self.pool
        blocks = pool.blocks
        self.refcnt[:] = [b.ref_cnt for b in blocks]
        self.hashed[:] = [b._block_hash is not None for b in blocks]
        if pool.cached_block_hashes_by_block:  # extra hashes: of blocks that hold one
            self.hashed[list(pool.cached_block_hashes_by_block)] = 1

    def tables(self, requests, seq_of: dict, max_model_len: int) -> tuple:
        """(seqs, computed, final, lens, blocks): per request holding blocks, in vLLM's order,
        its sequence number and the most tokens it can reach (as they were when its table was
        first read), its num_computed_tokens (0 once vLLM has let go of it), its table's
        length, and all tables' block ids back to back. O(requests + blocks of short tables +
        blocks appended to long ones) Python, then one concatenation."""
        self.reads += 1
        read, known = self.reads, self.known
        seqs, computed, final, lens, parts, run = [], [], [], [], [], []
        for rid, lst in self.req_to_blocks.items():
            n = len(lst)
            if not n:
                continue
            t = known.get(rid)
            req = requests.get(rid)
            if t is None or t.lst is not lst:
                t = known[rid] = _Table(lst, seq_of.get(rid, -1), req, max_model_len)
            t.read = read
            seqs.append(t.seq)
            computed.append(0 if req is None else req.num_computed_tokens)
            final.append(t.final)
            lens.append(n)
            if n <= SHORT:
                run += [b.block_id for b in lst]
                continue
            if run:
                parts.append(np.array(run, np.int32))
                run = []
            parts.append(t.grown(n))
        if run:
            parts.append(np.array(run, np.int32))
        if len(known) != len(lens):  # requests that hold no blocks now: forgotten
            for rid in [r for r, t in known.items() if t.read != read]:
                del known[rid]
        return (np.array(seqs, np.int64), np.array(computed, np.int64),
                np.array(final, np.int64), np.array(lens, np.int32),
                np.concatenate(parts) if parts else np.empty(0, np.int32))


class _Table:
    """One request's block table as last read: its sequence number and final length from the
    first read, and, once longer than SHORT, its block ids so far (`ids[:done]`). It holds no
    Request: a finished request is freed where vLLM lets go of it, not in a sample."""

    __slots__ = ("lst", "seq", "final", "read", "ids", "done", "last")

    def __init__(self, lst: list, seq: int, req, max_model_len: int) -> None:
        self.lst, self.seq, self.read = lst, seq, 0
        self.final = 0 if req is None else min(max_model_len,
                                               req.num_prompt_tokens + req.max_tokens)
        self.ids: np.ndarray | None = None
        self.done = self.last = 0

    def grown(self, n: int) -> np.ndarray:
        """The table's n block ids, read on from where the last read stopped (a table only
        grows while its request holds it; a shorter one, or one whose last block read has
        changed, is read anew)."""
        lst, k = self.lst, self.done
        if self.ids is None or k > n or lst[k - 1].block_id != self.last:
            self.ids = np.empty(max(64, 2 * n), np.int32)
            self.ids[:n] = [b.block_id for b in lst]
        elif k < n:
            if self.ids.size < n:
                self.ids = np.concatenate([self.ids[:k], np.empty(2 * n - k, np.int32)])
            self.ids[k:n] = [b.block_id for b in lst[k:n]]
        self.done, self.last = n, lst[n - 1].block_id
        return self.ids[:n]
