"""decode(): every encoding the engines use -> the same events; anything else -> Undecodable."""
from __future__ import annotations

import msgspec
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kvviz.node.kvevents.decode import CLEARED, REMOVED, STORED, UNKNOWN, Undecodable, decode
from tests.examples import examples
from tests.kvevents.schema_pub import clear, payload, remove, store


@pytest.mark.parametrize("enc", ["map", "array"])
@pytest.mark.parametrize("envelope", ["array", "map"])
@pytest.mark.parametrize("h", [7, 2**64 - 1, b"\x01" * 32])
def test_every_encoding_decodes_to_the_same_events(enc, envelope, h):
    b = decode(payload([store([h, 5], 3, enc=enc), remove([h], enc), clear(enc)], rank=2,
                       envelope=envelope))
    assert [e.kind for e in b.events] == [STORED, REMOVED, CLEARED]
    assert b.events[0].hashes == [h, 5] and b.events[0].parent == 3
    assert b.events[0].block_size == 4 and b.dp_rank == 2 and b.encoding == enc


def test_unknown_tags_are_kept_raw_and_counted():
    b = decode(payload([{"type": "BlockMoved", "x": 1}, ["Foo", 2], store([1], None)]))
    assert [e.kind for e in b.events] == [UNKNOWN, UNKNOWN, STORED]
    assert b.unknown == 2 and b.events[1].raw == ["Foo", 2]


def test_malformed_event_bodies_are_unknown_not_errors():
    b = decode(payload([["BlockStored", "not a list"], {"type": "BlockRemoved",
                                                       "block_hashes": [1.5]}]))
    assert b.unknown == 2


@pytest.mark.parametrize("data", [b"", b"\xc1", b"garbage!", msgspec.msgpack.encode(5),
                                  msgspec.msgpack.encode({"ts": "x", "events": []}),
                                  msgspec.msgpack.encode([1.0])])
def test_non_batches_raise_undecodable(data):
    with pytest.raises(Undecodable):
        decode(data)


_leaf = st.one_of(st.none(), st.integers(-2**63, 2**64 - 1), st.binary(max_size=8),
                  st.text(max_size=8), st.floats(allow_nan=False), st.booleans())
_obj = st.recursive(_leaf, lambda c: st.lists(c, max_size=5) | st.dictionaries(
    st.sampled_from(["type", "ts", "events", "block_hashes", "medium", "x"]), c, max_size=4),
    max_leaves=20)


@settings(max_examples=examples(60), deadline=None)
@given(st.one_of(st.binary(max_size=64), _obj.map(msgspec.msgpack.encode)))
def test_any_payload_gives_a_batch_or_undecodable(data):
    try:
        b = decode(data)
    except Undecodable:
        return
    assert b.unknown <= len(b.events)
