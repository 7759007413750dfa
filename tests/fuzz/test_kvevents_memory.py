"""The KV-event subscriber's memory ceiling, in-process: what one message may cost once
decoded, whatever its shape, within the frame cap; the model update of a huge batch yields
to a stop; the frame cap cannot be raised past what the ceiling allows.
(The child process under the hostile node, peak RSS and SIGTERM: test_kvevents_hostile.py.)
"""
from __future__ import annotations

import sqlite3
import tracemalloc

import msgspec
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kvviz.node.kvevents import ingest as ingest_mod
from kvviz.node.kvevents.decode import (
    GENERIC_MAX_BYTES,
    REMOVED,
    STORED,
    Event,
    Undecodable,
    decode,
    decoded_bound,
    pieces,
)
from kvviz.node.kvevents.endpoints import MAX_MESSAGE_MB
from kvviz.node.kvevents.rebuild import rebuild
from kvviz.node.kvevents.subscriber import Subscriber, SubscriberConfig
from kvviz.store.kv_writer import KvEventWriter
from tests.fuzz.hostile import check_property, run_cli
from tests.fuzz.hostile_zmq import _envelope, big_batch, generic_bomb, seq_bytes, worst_batch

MB = 1 << 20
SHAPES = {  # name -> payload of about `n` bytes
    "2-byte bytes hashes (the typed path's worst)": worst_batch,
    "empty arrays as events (260x through a generic decoder)": generic_bomb,
    "empty maps as events": lambda n: _envelope(b"\x80" * n, n),
    "fixints as events": lambda n: _envelope(b"\x01" * n, n),
    "fixint token ids": big_batch,
    "minimal BlockRemoved events": lambda n: _envelope(b"\x91\xacBlockRemoved" * (n // 14),
                                                      n // 14),
    "extra_keys of empty arrays": lambda n: msgspec.msgpack.encode(
        [1.0, [{"type": "BlockStored", "block_hashes": [1], "extra_keys": None}]]).replace(
        b"\xc0", b"\xdd" + n.to_bytes(4, "big") + b"\x90" * n, 1),
    "a generic payload just under the generic decoder's limit": lambda _n: _envelope(
        b"\x90" * (GENERIC_MAX_BYTES - 64), GENERIC_MAX_BYTES - 64),
}


@pytest.mark.parametrize("name", list(SHAPES))
def test_one_message_costs_at_most_its_bound_once_decoded(name):
    """A result or Undecodable, and the traced peak under decoded_bound(payload) (+ 4 MiB):
    the bound docs/RELIABILITY.md's ceiling is built from."""
    payload = SHAPES[name](4 * MB)
    tracemalloc.start()
    try:
        try:
            b = decode(payload)
            assert b.events
        except Undecodable:
            pass
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < decoded_bound(len(payload)) + 4 * MB, (
        f"{peak / MB:.0f} MiB for {len(payload) / MB:.1f} MiB")


hashes = st.lists(st.integers(0, 50), min_size=0, max_size=40)
events = st.lists(st.one_of(
    st.builds(lambda h, p: Event(STORED, h, p, [1] * 16 * len(h), 16, "GPU", 0), hashes,
              st.none() | st.integers(0, 50)),
    st.builds(lambda h: Event(REMOVED, h, None, None, 0, "GPU", 0), hashes)), max_size=30)


@settings(max_examples=200, deadline=None)
@given(evs=events, most=st.integers(1, 12))
def test_pieces_apply_as_the_whole_batch(evs, most):
    parts = list(pieces(evs, most))
    assert all(sum(len(e.hashes) for e in p) <= 2 * most or len(p) == 1 for p in parts)
    assert rebuild([e for p in parts for e in p]) == rebuild(evs)


def test_a_huge_batch_yields_its_model_update_to_a_stop(tmp_path, monkeypatch):
    monkeypatch.setattr(ingest_mod, "APPLY_SLICE", 10)
    kv = KvEventWriter(sqlite3.connect(tmp_path / "k.db"))
    sub = Subscriber(SubscriberConfig(("tcp://127.0.0.1:1",)), kv)
    try:
        s = sub.streams[0]
        payload = msgspec.msgpack.encode([1.0, [{"type": "BlockStored",
                                                 "block_hashes": list(range(1, 1001)),
                                                 "parent_block_hash": None,
                                                 "block_size": 16}]])
        sub.should_stop = lambda: True
        sub.handle(s, [b"", seq_bytes(0), payload])
        kv.flush()
        assert s.unapplied == 1 and s.batches == 1 and s.stored_blocks == 1000
        assert 0 < sub.model.cached_blocks(s.sid) < 1000  # one piece, then the stop
        assert kv.conn.execute("SELECT status, n_stored, payload FROM kv_batches").fetchall() \
            == [("ok", 1000, payload)]  # recorded in full
    finally:
        sub.close()


@pytest.mark.parametrize("mb", [str(MAX_MESSAGE_MB + 1), "128", "1024"])
def test_the_frame_cap_cannot_be_raised_past_the_ceiling(tmp_path, mb):
    argv = ["events", "tcp://127.0.0.1:5999", "--max-message-mb", mb, "--duration", "5",
            "--out", str(tmp_path / "e.db")]
    res = run_cli(argv)
    check_property("events", argv, res)
    assert res.code == 2 and "--max-message-mb" in res.err and not (tmp_path / "e.db").exists()
    with pytest.raises(ValueError, match="--max-message-mb"):
        SubscriberConfig(("tcp://127.0.0.1:1",), max_message_bytes=int(float(mb) * MB))


def test_many_streams_say_that_their_frame_cap_was_lowered(tmp_path):
    argv = ["events", "tcp://127.0.0.1:5999", "--dp-ranks", "100", "--duration", "0.5",
            "--quiet", "--out", str(tmp_path / "e.db")]
    res = run_cli(argv)
    check_property("events", argv, res)
    assert res.code == 0, res.err
    assert "100 streams share the 192 MB receive budget: a frame over 0.48 MB" in res.err


class _Alive:
    """An event the model ignores (unknown kind) that notes when it is freed."""

    kind, hashes, freed = 3, [], []

    def __del__(self) -> None:
        _Alive.freed.append(1)


@pytest.mark.parametrize("big", [False, True])
def test_one_decoded_batch_at_a_time_and_no_rows_beside_a_big_one(tmp_path, monkeypatch, big):
    """A batch's row is added once its decoded form is gone (a flush it triggers never runs
    beside it); the rows waiting are written before a payload of FLUSH_FIRST bytes decodes
    (docs/RELIABILITY.md, "KV-event streams")."""
    kv = KvEventWriter(sqlite3.connect(tmp_path / "k.db"))
    sub = Subscriber(SubscriberConfig(("tcp://127.0.0.1:1",)), kv)
    seen: dict[str, object] = {}

    def decode_noting(payload):
        seen["rows_waiting"] = len(kv._rows)
        b = decode(payload)
        return b._replace(events=[*b.events, _Alive()])

    add = kv.add_batch

    def add_noting(row):
        seen["decoded_freed"] = bool(_Alive.freed)
        add(row)

    monkeypatch.setattr(ingest_mod, "decode", decode_noting)
    monkeypatch.setattr(kv, "add_batch", add_noting)
    _Alive.freed.clear()
    try:
        s = sub.streams[0]
        kv.add_batch((s.sid, 0, 0.0, 1.0, 0, 0, 0, 0, 0, 0, 0, "ok", b"", b"earlier"))
        payload = worst_batch(ingest_mod.FLUSH_FIRST + 64 if big else 1000)
        assert (len(payload) >= ingest_mod.FLUSH_FIRST) == big
        sub.handle(s, [b"", seq_bytes(1), payload])
        assert seen == {"rows_waiting": 0 if big else 1, "decoded_freed": True}
        assert s.batches == 1 and s.removed_blocks > 0
        kv.flush()
        assert kv.conn.execute("SELECT COUNT(*) FROM kv_batches").fetchone() == (2,)
    finally:
        sub.close()
