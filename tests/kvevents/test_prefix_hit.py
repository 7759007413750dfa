"""The prefix hit a forest predicts for a prompt, from the token ids its BlockStored events
carry (the real-vLLM tier checks it against vLLM's cached_tokens)."""
from __future__ import annotations

from kvviz.node.kvevents.decode import CLEARED, REMOVED, STORED, Event
from kvviz.node.kvevents.model import CacheModel

BS = 4


def stored(hashes, parent, tokens):
    return Event(STORED, hashes, parent, tokens, BS, None, 0)


def test_the_hit_follows_the_chain_of_cached_blocks_and_stops_at_an_evicted_one():
    m = CacheModel(index_tokens=True)
    prompt = list(range(100, 113))  # 13 tokens: 3 full blocks + 1
    m.apply(1, 0, [stored([11, 12, 13], None, prompt[:12])], 0.0)
    assert m.prefix_hit_tokens(1, prompt) == 12
    assert m.prefix_hit_tokens(1, prompt[:12]) == 8  # the last token is always computed
    assert m.prefix_hit_tokens(1, prompt[:5] + [0] * 8) == 4  # diverges in block 2
    assert m.prefix_hit_tokens(1, [7] + prompt[1:]) == 0  # first block differs
    m.apply(1, 0, [Event(REMOVED, [12], None, None, 0, None, 0)], 1.0)
    assert m.prefix_hit_tokens(1, prompt) == 4  # block 13 is cached but its parent is not
    m.apply(1, 0, [stored([12], 11, prompt[4:8])], 2.0)
    assert m.prefix_hit_tokens(1, prompt) == 12
    m.apply(1, 0, [Event(CLEARED, [], None, None, 0, None, 0)], 3.0)
    assert m.prefix_hit_tokens(1, prompt) == 0
    assert m.prefix_hit_tokens(2, prompt) == 0  # an unknown stream


def test_a_stream_without_token_ids_predicts_no_hit():
    m = CacheModel(index_tokens=True)
    m.apply(1, 0, [stored([11], None, None)], 0.0)
    assert m.prefix_hit_tokens(1, [1, 2, 3, 4, 5]) == 0


def test_token_ids_that_are_not_ints_are_not_indexed_and_do_not_crash():
    m = CacheModel(index_tokens=True)
    m.apply(1, 0, [stored([11], None, [{"a": 1}, [2], 3, 4])], 0.0)  # unhashable, mixed
    assert m.cached_blocks(1) == 1 and m.prefix_hit_tokens(1, [1, 2, 3, 4, 5]) == 0


def test_without_the_token_index_no_hit_is_predicted():
    m = CacheModel()  # the default: no index (it costs events per second)
    m.apply(1, 0, [stored([11], None, [1, 2, 3, 4])], 0.0)
    assert m.cached_blocks(1) == 1 and m.prefix_hit_tokens(1, [1, 2, 3, 4, 5]) == 0
