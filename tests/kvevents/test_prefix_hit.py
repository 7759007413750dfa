"""The prefix hit a forest predicts for a prompt, from the token ids its BlockStored events
carry (the real-vLLM tier checks it against vLLM's cached_tokens)."""
from __future__ import annotations

from kvviz.node.kvevents.decode import CLEARED, REMOVED, STORED, Event
from kvviz.node.kvevents.model import CacheModel

BS = 4


def stored(hashes, parent, tokens):
    return Event(STORED, hashes, parent, tokens, BS, None, 0)


def test_the_hit_follows_the_chain_of_cached_blocks_and_stops_at_an_evicted_one():
    m = CacheModel()
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
    m = CacheModel()
    m.apply(1, 0, [stored([11], None, None)], 0.0)
    assert m.prefix_hit_tokens(1, [1, 2, 3, 4, 5]) == 0
