"""The plugin's mirror of vLLM's block pool (kvviz/plugin/pool_mirror.py) on a stand-in pool
that moves ref counts and prefix hashes through the verbs vLLM 0.32's BlockPool has, calling
them through itself as vLLM does, and a stand-in full-attention manager that holds them in
block tables as vLLM's does. Whatever way the mirror keeps current (derived from the tables,
a full read, the blocks its wrapped verbs noted), it must equal a full read of the pool at
every refresh. (Against vLLM's own pool: benchmarks/bench_plugin.py's check, run by
tests/real_vllm.)"""
from __future__ import annotations

import logging
import random
import types

import numpy as np
import pytest

from kvviz.plugin import pool_mirror, wire
from kvviz.plugin import tables as tables_mod
from kvviz.plugin.pool_mirror import PoolMirror


class Block:
    __slots__ = ("block_id", "ref_cnt", "_block_hash")

    def __init__(self, i: int) -> None:
        self.block_id, self.ref_cnt, self._block_hash = i, 0, None


class Pool:
    """Block 0 is the null block; free blocks are handed out oldest-freed first, a cached one
    losing its hashes on the way (through self._remove_cached_block_hashes, as in vLLM)."""

    def __init__(self, n: int) -> None:
        self.blocks = [Block(i) for i in range(n)]
        self.num_gpu_blocks = n
        self.free = list(range(1, n))
        self.cached_block_hashes_by_block: dict[int, set] = {}
        self.null_block = self.blocks[0]

    def get_num_free_blocks(self) -> int:
        return len(self.free)

    def get_new_blocks(self, num_blocks):
        got = [self.blocks[self.free.pop(0)] for _ in range(num_blocks)]
        for b in got:
            self._remove_cached_block_hashes(b)
            b.ref_cnt += 1
        return got

    def free_blocks(self, ordered_blocks):
        for b in ordered_blocks:
            b.ref_cnt -= 1
            if b.ref_cnt == 0:
                self.free.append(b.block_id)

    def unpin_blocks(self, blocks, on_reuse):
        self.free_blocks(blocks)

    def touch(self, blocks):
        for b in blocks:
            if b.ref_cnt == 0:
                self.free.remove(b.block_id)
            b.ref_cnt += 1

    def _insert_block_hash(self, key, block, num_tokens):
        if block._block_hash is None:
            block._block_hash = key
        elif key != block._block_hash:
            self.cached_block_hashes_by_block.setdefault(block.block_id, set()).add(key)

    def _remove_cached_block_hashes(self, block):
        out = [] if block._block_hash is None else [block._block_hash]
        out += self.cached_block_hashes_by_block.pop(block.block_id, ())
        block._block_hash = None
        return out

    def reset_prefix_cache(self):
        if any(b.ref_cnt for b in self.blocks):
            return False
        for b in self.blocks:
            b._block_hash = None
        self.cached_block_hashes_by_block.clear()
        return True


def full_read(pool: Pool) -> tuple[list, list]:
    extra = pool.cached_block_hashes_by_block
    return ([b.ref_cnt for b in pool.blocks],
            [int(b._block_hash is not None or b.block_id in extra) for b in pool.blocks])


def manager(tables: dict | None = None):
    return types.SimpleNamespace(req_to_blocks={} if tables is None else tables,
                                 num_cached_block={})


def mirrored(m: PoolMirror) -> tuple[list, list]:
    return m.refcnt.tolist(), m.hashed.tolist()


def churn(rng: random.Random, pool: Pool, held: list[list], steps: int) -> None:
    """Requests taking new blocks, sharing cached ones, hashing, freeing (in any iterable),
    unpinning; now and then a block's hashes dropped directly, or a prefix-cache reset."""
    for _ in range(steps):
        r = rng.random()
        if r < 0.3 and len(pool.free) >= 4:
            held.append(pool.get_new_blocks(rng.randint(1, 4)))
        elif r < 0.45:
            cached = [b for b in pool.blocks[1:] if b._block_hash is not None]
            if cached:
                share = rng.sample(cached, min(len(cached), rng.randint(1, 3)))
                pool.touch(share)
                held.append(share)
        elif r < 0.65 and held:
            b = rng.choice(rng.choice(held))
            for _ in range(rng.randint(1, 2)):
                pool._insert_block_hash(("h", rng.randrange(10_000)), b, 16)
        elif r < 0.72:
            pool._remove_cached_block_hashes(rng.choice(pool.blocks[1:]))
        elif r < 0.95 and held:
            blocks = held.pop(rng.randrange(len(held)))
            if rng.random() < 0.5:
                pool.free_blocks(reversed(blocks))  # an iterator, as vLLM passes one
            else:
                pool.unpin_blocks(iter(blocks), on_reuse=None)
        elif r > 0.98:  # everything let go, then the prefix cache reset
            while held:
                pool.free_blocks(held.pop())
            assert pool.reset_prefix_cache()


@pytest.mark.parametrize("seed", range(6))
def test_a_watching_mirror_equals_a_full_read_at_every_refresh(seed):
    rng, pool, held = random.Random(seed), Pool(48), []
    resets = []
    m = PoolMirror(pool, manager(), lambda: resets.append(1))
    churn(rng, pool, held, 30)
    m.refresh()
    m.watch()  # current now: from here on only the noted blocks are read again
    ways = {True: 0, False: 0}
    for _ in range(80):
        churn(rng, pool, held, rng.randint(0, 12))
        full = rng.choice([False, False, None])
        before = len(m.dirty)
        m.refresh(full)
        ways[full is None and before * pool_mirror.FULL_SHARE > pool.num_gpu_blocks] += 1
        assert mirrored(m) == full_read(pool)
    assert ways[False] > 40 and resets  # mostly incremental, and the resets were seen


def test_a_mirror_scans_until_a_scan_costs_more_than_its_share_then_watches(monkeypatch):
    rng, pool, held = random.Random(7), Pool(32), []
    m = PoolMirror(pool, manager(), lambda: None)
    monkeypatch.setattr(pool_mirror, "SCAN_SHARE", float("inf"))  # a scan is never too dear
    for _ in range(5):
        churn(rng, pool, held, 10)
        m.refresh()
        assert mirrored(m) == full_read(pool) and not m.watching and not m.dirty
    assert set(vars(pool)) & set(pool_mirror.VERBS) == set()  # no verb wrapped while scanning
    monkeypatch.setattr(pool_mirror, "SCAN_SHARE", 0.0)  # every scan is too dear
    m.refresh()
    assert m.watching and set(pool_mirror.VERBS) <= set(vars(pool))
    for _ in range(20):
        churn(rng, pool, held, 10)
        m.refresh(full=False)
        assert mirrored(m) == full_read(pool)


def test_the_first_scan_does_not_decide():
    """The first refresh has no earlier one to measure its cost against (a sampler's first
    sample follows its construction at once)."""
    m = PoolMirror(Pool(16), manager(), lambda: None)
    m.refresh()
    assert not m.watching


def test_after_an_overflow_the_next_refresh_reads_every_block():
    rng, pool, held = random.Random(3), Pool(40), []
    m = PoolMirror(pool, manager(), lambda: None)
    m.refresh()
    m.watch()
    churn(rng, pool, held, 60)
    m.overflow()  # the ids noted are forgotten
    assert not m.dirty
    m.refresh(full=False)
    assert mirrored(m) == full_read(pool)


def test_unhook_gives_the_pool_its_own_verbs_back():
    pool = Pool(8)
    m = PoolMirror(pool, manager(), lambda: None)
    m.watch()
    m.unhook()
    assert vars(pool).keys() & {*pool_mirror.VERBS, "reset_prefix_cache"} == set()
    assert pool.get_new_blocks(2)[0].ref_cnt == 1 and not m.dirty


def req(prompt: int, most: int):
    return types.SimpleNamespace(num_prompt_tokens=prompt, max_tokens=most,
                                 num_computed_tokens=prompt)


def test_tables_equal_the_block_lists_as_they_grow_change_and_go():
    pool = Pool(400)
    tables: dict[str, list] = {}
    requests = {f"r{i}": req(10 * i, 5) for i in range(6)}
    seq_of = {f"r{i}": 100 + i for i in range(6)}
    m = PoolMirror(pool, manager(tables), lambda: None)
    rng, longest = random.Random(11), 0
    whole, windows, windows_seen, keys = wire.Tables(), 0, [], random.Random(3)
    for _ in range(60):
        rid = f"r{rng.randrange(6)}"
        lst = tables.setdefault(rid, [])
        r = rng.random()
        if r < 0.6:
            lst.extend(pool.get_new_blocks(rng.randint(1, 9)))  # long tables grow past SHORT
        elif r < 0.8 and lst:
            pool.free_blocks(tables.pop(rid))  # preempted or done: vLLM drops the list
        elif lst:
            tables[rid] = lst[: len(lst) // 2] + pool.get_new_blocks(1)  # a new list
        key = keys.random() < 0.25  # else each long table's new ids, rebuilt by wire.Tables
        seqs, computed, final, lens, base, blocks = m.tables(requests, seq_of, 60, key)
        windows += int(base.any())
        assert not (key and base.any())
        blocks = rebuilt(whole, len(windows_seen) + 1, m, seqs, computed, final, lens, base,
                         blocks, key)
        windows_seen.append(key)
        held = [(r, lst) for r, lst in tables.items() if lst]
        assert seqs.tolist() == [seq_of[r] for r, _ in held]
        assert lens.tolist() == [len(lst) for _, lst in held]
        assert blocks.tolist() == [b.block_id for _, lst in held for b in lst]
        assert computed.tolist() == [requests[r].num_computed_tokens for r, _ in held]
        assert final.tolist() == [min(60, requests[r].num_prompt_tokens + 5) for r, _ in held]
        # every table read is remembered once (a short one, not deriving, as its seq and
        # final only), and a table gone is forgotten
        assert set(m.reader.known) | set(m.reader.meta) == {r for r, _ in held}
        assert not set(m.reader.known) & set(m.reader.meta)
        assert blocks.dtype == np.int32
        longest = max([longest] + lens.tolist())
    assert longest > tables_mod.SHORT  # the grown path was taken
    assert windows  # and long tables were sent as their new ids


def rebuilt(whole, seq, m, seqs, computed, final, lens, base, blocks, key) -> np.ndarray:
    """The tables of one read as a subscriber gets them: through the wire (a message with
    only the tables' fields that matter here), made whole again by wire.Tables."""
    n = m.refcnt.size
    msg = {"wire": wire.WIRE_VERSION, "pool": {"num_blocks": n, "block_size": 16},
           "step": seq, "num_free": 0, "refcnt": np.zeros(n, np.int32),
           "hashed": np.zeros(n, np.uint8), "seqs": seqs, "computed": computed,
           "final": final, "lens": lens, "key": key, "base": base, "blocks": blocks,
           "events": [], "arrived": [], "done": []}
    _, got = wire.decode(wire.frames(seq, wire.encode(msg)))
    assert whole.whole(seq, got) and not got["base"].any()
    return got["blocks"]


class Manager:
    """vLLM 0.32's FullAttentionManager, as far as the mirror's derivation rests on it: a new
    request's table starts with the prefix-cache hits it touched (all cached:
    num_cached_block = their count), grows by get_new_blocks, has its full blocks hashed from
    num_cached_block on (cache_full_blocks), and is popped and freed in reverse order; the
    scheduler tells the mirror before a table is freed (PoolSampler.finished / preempted)."""

    def __init__(self, pool: Pool, mirror_of) -> None:
        self.pool, self.mirror_of = pool, mirror_of
        self.req_to_blocks: dict[str, list] = {}
        self.num_cached_block: dict[str, int] = {}
        self.next = 0

    def admit(self, rng: random.Random) -> None:
        pool = self.pool
        cached = [b for b in pool.blocks[1:] if b._block_hash is not None]
        hits = rng.sample(cached, min(len(cached), rng.randint(0, 3)))
        new = rng.randint(1, 4)
        if new + sum(b.ref_cnt == 0 for b in hits) > len(pool.free):
            return
        rid = f"r{self.next}"
        self.next += 1
        pool.touch(hits)
        self.req_to_blocks[rid] = list(hits) + pool.get_new_blocks(new)
        self.num_cached_block[rid] = len(hits)

    def grow(self, rng: random.Random) -> None:
        if self.req_to_blocks and pool_has(self.pool, 1):
            rid = rng.choice(list(self.req_to_blocks))
            self.req_to_blocks[rid] += self.pool.get_new_blocks(1)

    def cache(self, rng: random.Random) -> None:
        if not self.req_to_blocks:
            return
        rid = rng.choice(list(self.req_to_blocks))
        lst, done = self.req_to_blocks[rid], self.num_cached_block[rid]
        full = rng.randint(done, len(lst))  # the last block may stay partial
        for b in lst[done:full]:
            self.pool._insert_block_hash(("h", rng.randrange(10_000)), b, 16)
        self.num_cached_block[rid] = full

    def free(self, rng: random.Random) -> None:
        if self.req_to_blocks:
            rid = rng.choice(list(self.req_to_blocks))
            mirror = self.mirror_of()
            if mirror.freed is not None:
                mirror.note_freed(rid)
            self.num_cached_block.pop(rid)
            self.pool.free_blocks(reversed(self.req_to_blocks.pop(rid)))


def pool_has(pool: Pool, n: int) -> bool:
    return len(pool.free) >= n


def manage(rng: random.Random, mgr: Manager, steps: int) -> None:
    for _ in range(steps):
        r = rng.random()
        if r < 0.3:
            mgr.admit(rng)
        elif r < 0.5:
            mgr.grow(rng)
        elif r < 0.75:
            mgr.cache(rng)
        elif r < 0.995:
            mgr.free(rng)
        else:  # everything let go, then the prefix cache reset
            while mgr.req_to_blocks:
                mgr.free(rng)
            assert mgr.pool.reset_prefix_cache()


def deriving_mirror(pool, on_reset=lambda: None) -> tuple:
    """A manager over `pool` whose tables a mirror that may derive reads: (manager, mirror)."""
    mirror: list[PoolMirror] = []
    mgr = Manager(pool, lambda: mirror[0])
    m = PoolMirror(pool, mgr, on_reset, derive=True)
    mirror.append(m)
    return mgr, m


@pytest.mark.parametrize("changes", [False, True])
@pytest.mark.parametrize("seed", range(8))
def test_a_deriving_mirror_equals_a_full_read_at_every_refresh(seed, changes, monkeypatch):
    """Refcounts from the tables, hashes of held blocks from num_cached_block, free blocks
    re-read only where they were held at the last refresh or in a table freed since; recounted
    whole at each refresh, or (a large pool's way) from what the tables gained and lost."""
    if changes:
        monkeypatch.setattr(tables_mod, "SHORT", 3)  # long tables too: read on as they grow
    else:
        monkeypatch.setattr(pool_mirror, "INCR_MIN", 1 << 30)  # recounted whole every time
    rng, pool = random.Random(seed), Pool(64)
    resets = []
    mgr, m = deriving_mirror(pool, lambda: resets.append(1))
    m.start_deriving()  # a fresh pool: the mirror is current
    reads = []
    m._read_all = lambda f=m._read_all: (reads.append(1), f())[1]  # counted
    whole, windows, keys = wire.Tables(), 0, random.Random(seed + 100)
    for i in range(150):
        manage(rng, mgr, rng.randint(0, 15))
        # mostly windows (each long table's new ids and what the mirror looks at), as a
        # sampler reads between its key messages
        key = keys.random() < 0.25
        seq_of = {r: int(r[1:]) for r in mgr.req_to_blocks}
        seqs, computed, final, lens, base, blocks = m.tables({}, seq_of, 1000, key)
        windows += int(base.any())
        m.refresh()
        assert m.mode == "deriving"
        assert mirrored(m) == full_read(pool)
        assert m.synced
        got = rebuilt(whole, i + 1, m, seqs, computed, final, lens, base, blocks, key)
        assert got.tolist() == [b.block_id for lst in mgr.req_to_blocks.values() for b in lst]
    assert not reads and resets  # no block read whole, and the resets were seen
    assert windows > 10 or not changes  # (recounted whole: every read is whole)
    assert not vars(pool).keys() & set(pool_mirror.VERBS)  # no verb wrapped


def test_a_reference_outside_the_tables_turns_the_mirror_to_reading_the_pool(caplog):
    rng, pool = random.Random(5), Pool(40)
    mgr, m = deriving_mirror(pool)
    m.start_deriving()  # a fresh pool: the mirror is current
    manage(rng, mgr, 30)
    m.tables({}, {}, max_model_len=1000)
    m.refresh()
    assert m.mode == "deriving" and mirrored(m) == full_read(pool)
    pool.touch(pool.get_new_blocks(1))  # a reference no table holds (a KV connector's pin)
    m.tables({}, {}, max_model_len=1000)
    with caplog.at_level(logging.WARNING, logger="kvviz.plugin"):
        m.refresh()
    assert m.mode == "scanning" and m.freed is None
    assert mirrored(m) == full_read(pool)
    assert [r.getMessage() for r in caplog.records][0].startswith(
        "kvviz blocks plugin: the pool's references are not its block tables'")
    for _ in range(10):
        manage(rng, mgr, 10)
        m.refresh()
        assert mirrored(m) == full_read(pool)


def test_a_deriving_refresh_without_tables_read_reads_the_pool():
    """refresh() derives from the tables of the same sample; without them it reads."""
    rng, pool = random.Random(9), Pool(32)
    mgr, m = deriving_mirror(pool)
    m.start_deriving()  # a fresh pool: the mirror is current
    m.tables({}, {}, max_model_len=1000)
    m.refresh()
    for _ in range(5):
        manage(rng, mgr, 20)
        m.refresh()  # no tables read since the last refresh: the pool read whole
        assert m.mode == "deriving" and mirrored(m) == full_read(pool)


def test_a_derivable_mirror_scans_until_a_scan_costs_more_than_its_share_then_derives(
        monkeypatch):
    rng, pool = random.Random(4), Pool(48)
    mgr, m = deriving_mirror(pool)
    monkeypatch.setattr(pool_mirror, "SCAN_SHARE", float("inf"))
    for _ in range(5):
        manage(rng, mgr, 10)
        m.tables({}, {}, max_model_len=1000)
        m.refresh()
        assert m.mode == "scanning" and m.freed is None and mirrored(m) == full_read(pool)
    monkeypatch.setattr(pool_mirror, "SCAN_SHARE", 0.0)
    m.tables({}, {}, max_model_len=1000)
    m.refresh()
    assert m.mode == "deriving" and not vars(pool).keys() & set(pool_mirror.VERBS)
    for _ in range(30):
        manage(rng, mgr, rng.randint(0, 12))
        m.tables({}, {}, max_model_len=1000)
        m.refresh()
        assert m.mode == "deriving" and mirrored(m) == full_read(pool)
