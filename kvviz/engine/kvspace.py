"""KV memory as the scheduler sees it: one small interface over a lane's allocator.

PagedSpace is vLLM's KVCacheManager (vllm/v1/core/kv_cache_manager.py) over kvviz's paged
allocator: prefix hits of whole cached blocks (never the last known token), the blocks an
admission or a growth takes, vLLM's watermark, every full block cached under its key.
ContiguousSpace is kvviz's own: one range per request, reserved at admission and grown in
place (vLLM has no contiguous allocator; the scheduler above it is the same).
"""
from __future__ import annotations

from itertools import islice

import numpy as np

from kvviz.alloc.base import Admission, Allocator, Reason
from kvviz.engine.tokens import BlockKeys


def decode_reach(lens: np.ndarray, bs: int, budget: int) -> int:
    """The most decode steps of one token per request (lens: slots each holds)
    whose new blocks number <= budget (no request: no limit). A request opens a block at
    the steps t >= 1 with (lens + t - 1) % bs == 0: once every bs steps, first at step
    1 + (-lens) % bs; so the steps 1..j open (j // bs) * n blocks plus those whose first
    step is <= j % bs."""
    if budget < 0:
        return 0
    n = int(lens.size)
    if not n:
        return 1 << 62
    per, left = divmod(budget, n)
    cum = np.cumsum(np.bincount((-lens) % bs, minlength=bs))  # cum[r]: first step <= r + 1
    return per * bs + int(np.searchsorted(cum, left, "right"))


class PagedSpace:
    def __init__(self, alloc: Allocator, keys: BlockKeys | None, watermark: float) -> None:
        self.alloc, self.keys, self.bs = alloc, keys, alloc.block_size
        # vLLM: int(watermark * num_blocks), its block count including the null block
        self.watermark_blocks = int(watermark * (alloc.num_blocks + 1))
        self._memo: tuple = (-1, 0, 0, [])  # hits' last answer: (r, blocks asked, version, hits)

    def hits(self, r: int, num_tokens: int) -> tuple[list[int], int]:
        """The cached blocks request r starts from and the tokens they hold: whole blocks
        before its last known token (vLLM recomputes that one to sample)."""
        if self.keys is None:
            return [], 0
        pool = self.alloc.block_pool
        if r in pool.lazy.requests:  # r resumes: its keys a window stored are looked up
            pool.materialize()
        n = (num_tokens - 1) // self.bs
        if n <= 0:
            return [], 0
        keys = self.keys.upto(r, n)
        memo = self._memo  # a refused head, asked again: its run stays while no key went
        if memo[0] == r and memo[1] == n and memo[2] == pool.version:  # and none came
            hits = memo[3]
            if len(hits) == n or not pool.holds(keys[len(hits)]):
                return hits, len(hits) * self.bs
        hits = pool.cached_run(islice(keys, n))
        self._memo = (r, n, pool.version, hits)
        return hits, len(hits) * self.bs

    def check(self, r: int, num_tokens: int, hits: list[int], empty: bool) -> Admission:
        """Whether r fits with all num_tokens known tokens: vLLM checks the whole sequence,
        not the chunk, and keeps the watermark free unless nothing runs yet. need: the
        blocks beyond the hits, plus the hits it takes out of the free queue."""
        return self.memory(self.alloc.blocks_to_allocate(r, num_tokens, hits),
                           self.alloc.free_blocks, empty)

    def memory(self, need: int, free: int, empty: bool) -> Admission:
        """check's answer for `need` blocks with `free` free blocks."""
        bs = self.bs
        if self.fits(need, free, empty):
            return Admission(True, None, need * bs, free * bs, free * bs)
        reason = Reason.CAPACITY if need > free else Reason.POLICY
        return Admission(False, reason, need * bs, free * bs, free * bs)

    def fits(self, need, free, empty):
        """The admission's memory test (need and free in blocks, elementwise for arrays):
        the blocks plus vLLM's watermark, waived while nothing runs."""
        if isinstance(empty, bool):
            return need + (0 if empty else self.watermark_blocks) <= free
        return need + np.where(empty, 0, self.watermark_blocks) <= free

    def admit(self, r: int, tokens: int, hits: list[int], num_tokens: int) -> None:
        self.alloc.grow_to(r, tokens, hits)
        self._cache(r, tokens)

    def blocks_for(self, totals: np.ndarray) -> np.ndarray:
        """Blocks that requests not live, without hits, need for `totals` tokens (what
        check() asks for each of them)."""
        return -(-totals // self.bs)

    def admit_many(self, ids: np.ndarray, totals: np.ndarray) -> np.ndarray:
        """admit() for each of `ids` in order, none live, none with hits, all fitting (the
        caller checked), with one block take (a lane without prefix caching: nothing to
        cache). Returns the free slots right after each admission."""
        out = np.empty(ids.size, np.int64)
        if self.alloc.admit_many(ids, totals, out_free=out) != ids.size:
            raise RuntimeError("PagedSpace.admit_many: the blocks did not cover the run")
        return out

    def grow(self, r: int, tokens: int) -> bool:
        """Slots up to `tokens` for a running request; False (nothing changed) if the free
        blocks do not suffice."""
        a = self.alloc
        if a.blocks_to_allocate(r, tokens) > a.free_blocks:
            return False
        a.grow_to(r, tokens)
        self._cache(r, tokens)
        return True

    def decode_many(self, ids: np.ndarray, lens: np.ndarray) -> int:
        """One token for each of the longest leading run of `ids` (lens: slots each holds)
        that the free blocks cover, in order: what grow() one by one would do, as one
        batch. Returns how many grew. While a KV-event publisher follows the pool, one by
        one: each request's eviction and caching are logged in vLLM's order."""
        if self.keys is not None and self.alloc.logs_cache_events:
            k = 0
            for r, n in zip(ids.tolist(), lens.tolist()):
                if not self.grow(r, n + 1):
                    break
                k += 1
            return k
        free = self.alloc.free_blocks
        if self.bs == 1:  # every token opens a block
            k = min(int(ids.size), free)
            opens = None
        else:
            rem = lens % self.bs
            opens = np.flatnonzero(rem == 0)
            k = int(opens[free]) if opens.size > free else int(ids.size)
        if not k:
            return 0
        ids, lens = ids[:k], lens[:k]
        self.alloc.decode_step(ids, opens if opens is None or opens.size <= free
                               else opens[:free])
        if self.keys is not None:  # requests whose new token fills a block cache it
            full = np.flatnonzero(rem[:k] == self.bs - 1) if opens is not None else \
                np.arange(k)
            if full.size:
                self.alloc.cache_many(ids[full], (lens[full] + 1) // self.bs, self.keys.upto,
                                      once=True)
        return k

    def may_hit(self, r: np.ndarray) -> np.ndarray:
        """Per new request: whether its first block's key could be cached (its prompt's
        chain covers the block; else the key names the request's own tokens)."""
        k = self.keys
        if k is None:
            return np.zeros(r.size, np.bool_)
        cover = np.minimum((k.ptr[r + 1] - k.ptr[r]) * k.block, k.prompt[r])
        return (cover >= self.bs) & (k.prompt[r] > self.bs)

    def answer_floor(self, r: int, num_tokens: int) -> int:
        """The fewest free blocks that keep the answer to waiting request r (not live, no
        hits: a lane without prefix caching) as it is now: its need if it fits now."""
        need = -(-num_tokens // self.bs)
        return need if self.alloc.free_blocks >= need else 0

    def span(self, ids: np.ndarray, lens: np.ndarray, m: int, floor: int) -> int:
        """The most steps (<= m) of one token each whose new blocks leave >= floor free.
        While the pool logs for a KV-event publisher, only plain free blocks serve (an
        eviction mid-span would be logged out of step order)."""
        budget = self.alloc.free_blocks - floor
        if self.keys is not None and self.alloc.logs_cache_events:
            budget = min(budget, self.alloc.plain_free_blocks)
        return min(m, decode_reach(lens, self.bs, budget))

    def cache_span(self, ids: np.ndarray, lens: np.ndarray, m: int) -> None:
        """After m decode steps taken at once: cache the blocks they filled, in the order the
        steps would (by step, then running order)."""
        if self.keys is None:
            return
        bs = self.bs
        first = bs - lens % bs  # the step (1-based) whose token fills the current block
        count = np.maximum(0, (m - first) // bs + 1)
        if not count.any():
            return
        who = np.repeat(np.arange(ids.size), count)
        k = np.arange(who.size) - np.repeat(np.cumsum(count) - count, count)
        at = first[who] + k * bs
        order = np.lexsort((who, at))
        self.alloc.cache_many(ids[who[order]], (lens[who[order]] + at[order]) // bs,
                              self.keys.upto)

    def _cache(self, r: int, tokens: int) -> None:
        if self.keys is not None and tokens >= self.bs:
            n = tokens // self.bs
            self.alloc.cache_blocks(r, self.keys.upto(r, n), n)

    def free(self, r: int) -> None:
        self.alloc.release(r)

    def done(self, r: int) -> None:
        """Request r finished: its keys are no longer needed (its cached blocks stay)."""
        if self.keys is not None:
            self.keys.forget(r)


class ContiguousSpace:
    def __init__(self, alloc: Allocator, reserve: np.ndarray) -> None:
        self.alloc, self.reserve, self.bs = alloc, reserve, alloc.block_size

    def hits(self, r: int, num_tokens: int) -> tuple[list[int], int]:
        return [], 0

    def check(self, r: int, num_tokens: int, hits: list[int], empty: bool) -> Admission:
        return self.alloc.check(num_tokens, max(num_tokens, int(self.reserve[r])))

    def admit(self, r: int, tokens: int, hits: list[int], num_tokens: int) -> None:
        self.alloc.admit(r, tokens, max(num_tokens, int(self.reserve[r])))

    def grow(self, r: int, tokens: int) -> bool:
        extra = tokens - self.alloc.seq_len(r)
        return extra <= 0 or self.alloc.append(r, extra).ok

    def decode_many(self, ids: np.ndarray, lens: np.ndarray) -> int:
        """One token for each of the leading requests whose reservation has room."""
        room = lens < self.alloc.seq_allocated_tokens(ids)
        k = ids.size if room.all() else int(np.argmin(room))
        if k:
            self.alloc.append_batch(ids[:k])
        return k

    def answer_floor(self, r: int, num_tokens: int) -> int:
        return 0  # a span of decodes inside the reservations moves no range

    def span(self, ids: np.ndarray, lens: np.ndarray, m: int, floor: int) -> int:
        room = self.alloc.seq_allocated_tokens(ids) - lens
        return max(0, min(m, int(room.min())))

    def cache_span(self, ids: np.ndarray, lens: np.ndarray, m: int) -> None:
        pass

    def free(self, r: int) -> None:
        self.alloc.release(r)

    def done(self, r: int) -> None:
        pass
