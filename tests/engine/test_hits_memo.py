"""PagedSpace.hits keeps its last answer for a head asked again (kvviz/engine/kvspace.py):
after any admissions, releases and evictions, every answer equals a fresh lookup of the
request's keys, also when a running request's prefill chunk stores the key a waiting request
missed last time."""
from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from kvviz.alloc.paged import PagedAllocator
from kvviz.core.config import WorkloadConfig
from kvviz.core.workload import generate
from kvviz.engine.kvspace import PagedSpace
from kvviz.engine.tokens import BlockKeys

N = 10


def _fresh(space: PagedSpace, r: int) -> list[int]:
    n = (int(space.keys.prompt[r]) - 1) // space.bs
    if n <= 0:
        return []
    return space.alloc.block_pool.cached_run(space.keys.chain(r, n)[:n])


@settings(max_examples=150, deadline=None)
@given(seed=st.integers(0, 50), blocks=st.integers(8, 40), head=st.integers(0, N - 1),
       ops=st.lists(st.tuples(st.sampled_from(["admit", "grow", "free", "ask"]),
                              st.integers(0, N - 1)), max_size=40))
def test_every_answer_is_a_fresh_lookup(seed, blocks, head, ops):
    """`head` waits and is asked after every op, as the scheduler asks a refused head."""
    w = generate(WorkloadConfig("sharegpt-like", num_requests=N, prefix_share=0.9, seed=seed,
                                max_seq_len=160, prefix_tokens=96))
    alloc = PagedAllocator(blocks, 16, prefix_caching=True)
    space = PagedSpace(alloc, BlockKeys(w, 16), 0.0)
    live: set[int] = set()
    for op, r in ops:
        total = int(w.prompt[r])
        if op == "admit" and r not in live:
            hits, _ = space.hits(r, total)
            assert hits == _fresh(space, r)
            chunk = min(total, len(hits) * 16 + 20)  # a first prefill chunk
            if alloc.blocks_to_allocate(r, chunk, hits) <= alloc.free_blocks:
                space.admit(r, chunk, hits, total)
                live.add(r)
        elif op == "grow" and r in live:  # the next chunk: stores keys, asks no hits
            space.grow(r, min(total, alloc.seq_len(r) + 40))
        elif op == "free" and r in live:
            space.free(r)
            live.discard(r)
        elif r not in live:
            assert space.hits(r, total)[0] == _fresh(space, r)
        if head not in live:
            assert space.hits(head, int(w.prompt[head]))[0] == _fresh(space, head)


def test_hits_evicted_by_a_growing_request_are_gone():
    """A head asked, then a running request's chunk evicts its hits (asking nothing): the
    next answer has lost them."""
    w = generate(WorkloadConfig("sharegpt-like", num_requests=N, prefix_share=0.9, seed=3,
                                max_seq_len=160, prefix_tokens=96))
    alloc = PagedAllocator(12, 16, prefix_caching=True)
    space = PagedSpace(alloc, BlockKeys(w, 16), 0.0)
    q, head, other = 0, 2, 5  # q and head share a prefix; other does not
    total = int(w.prompt[q])
    space.admit(q, total, space.hits(q, total)[0], total)
    space.free(q)  # q's blocks stay cached
    before = space.hits(head, int(w.prompt[head]))[0]
    assert before and before == _fresh(space, head)
    space.admit(other, 20, space.hits(other, int(w.prompt[other]))[0], int(w.prompt[other]))
    assert space.hits(head, int(w.prompt[head]))[0] == before
    space.grow(other, int(w.prompt[other]))  # evicts q's cached blocks, tail first
    after = space.hits(head, int(w.prompt[head]))[0]
    assert after == _fresh(space, head) and len(after) < len(before)
