"""Diagnoses: each fires on its case and stays quiet on the healthy one."""
from __future__ import annotations

from kvviz.node.kvevents import diagnose
from kvviz.node.kvevents.decode import REMOVED, STORED, Event
from kvviz.node.kvevents.model import CacheModel


def _stored(hashes, tokens, parent=None, bs=16):
    return Event(STORED, hashes, parent, tokens, bs, None, 0)


def test_block_larger_than_the_shared_prefix():
    m = CacheModel()
    m.apply(1, 0, [_stored([i], list(range(10)) + [99 + i] * 6) for i in range(3)], 0.0)
    (msg,) = diagnose.diagnoses(m, {1: "pod"})
    assert "same 10 tokens" in msg and "16 tokens" in msg


def test_prompts_sharing_a_whole_block_are_not_flagged():
    m = CacheModel()
    m.apply(1, 0, [_stored([1, 2], list(range(32))), _stored([3], [7] * 16, parent=1)], 0.0)
    assert diagnose.diagnoses(m, {1: "pod"}) == []


def test_different_hash_seeds_across_streams():
    m = CacheModel()
    m.apply(1, 0, [_stored([1], list(range(16)))], 0.0)
    m.apply(2, 0, [_stored([2], list(range(16)))], 0.0)
    (msg,) = diagnose.diagnoses(m, {1: "a", 2: "b"})
    assert msg.startswith("a and b") and "different seeds" in msg


def test_eviction_churn_of_a_hot_prefix():
    m = CacheModel()
    for k in range(4):
        m.apply(1, 0, [_stored([1], list(range(16))),
                       Event(REMOVED, [1], None, None, 0, None, 0)], float(k))
    (msg,) = diagnose.diagnoses(m, {1: "pod"})
    assert "evicted and stored again" in msg


def test_gaps_and_restarts_are_reported():
    out = diagnose.diagnoses(CacheModel(), {1: "pod"}, {1: (2, 5)}, {1: 1})
    assert any("2 sequence gaps, 5 batches lost" in m for m in out)
    assert any("restarted 1 times" in m for m in out)
