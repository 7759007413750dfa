"""The subscriber's bounds, in-process: depth-limited decoding (live, map form, replay socket),
any frames give counts and never an exception, a replay wait ends on should_stop, the model
and the writer buffer stay bounded. Servers bind 127.0.0.1 and are closed by the test."""
from __future__ import annotations

import dataclasses
import sqlite3
import time

import msgspec
import pytest
import zmq
from hypothesis import given, settings
from hypothesis import strategies as st

from kvviz.node.kvevents import model as model_mod
from kvviz.node.kvevents.decode import MAX_DEPTH, STORED, Event, Undecodable, decode
from kvviz.node.kvevents.endpoints import (
    MAX_MESSAGE_MB,
    MAX_STREAMS,
    RECEIVE_BUDGET,
    check_fd_limit,
    queue_bounds,
    reserved_frames,
)
from kvviz.node.kvevents.model import CacheModel
from kvviz.node.kvevents.subscriber import Subscriber, SubscriberConfig
from kvviz.store import kv_writer
from kvviz.store.kv_writer import KvEventWriter
from tests.fuzz.hostile_zmq import batch, deep, seq_bytes

SEQ0 = seq_bytes(0)


def _sub(tmp_path, replay: str | None = None, **kw) -> tuple[Subscriber, KvEventWriter]:
    conn = sqlite3.connect(tmp_path / "k.db")
    kv = KvEventWriter(conn)
    cfg = SubscriberConfig(("tcp://127.0.0.1:1",), replay=(replay,) if replay else (), **kw)
    return Subscriber(cfg, kv), kv


@pytest.mark.parametrize("form", ["array", "map"])
@pytest.mark.parametrize("depth", [MAX_DEPTH + 1, 1000, 100_000])
def test_a_deep_payload_is_undecodable_never_a_recursion_error(form, depth):
    with pytest.raises(Undecodable, match="nested deeper"):
        decode(deep(depth, form))


@pytest.mark.parametrize("depth", [MAX_DEPTH, 1000, 100_000])
def test_deep_extra_keys_are_skipped_unread_never_a_recursion_error(depth):
    """extra_keys is not read (msgspec skips it as Raw): a deep one costs nothing; past
    msgspec's own recursion limit the batch is Undecodable."""
    nested: list = [1]
    for _ in range(depth):
        nested = [nested]
    ev = {"type": "BlockStored", "block_hashes": [1], "parent_block_hash": None,
          "token_ids": [1] * 16, "block_size": 16}
    p = msgspec.msgpack.encode([1.0, [{**ev, "extra_keys": None}]])
    cut = p.rindex(b"\xc0")  # extra_keys: None -> `depth` nested one-element arrays
    p = p[:cut] + b"\x91" * depth + b"\x01" + p[cut + 1:]
    try:
        b = decode(p)
    except Undecodable as exc:
        assert "nested deeper" in str(exc)
    else:
        assert [e.hashes for e in b.events] == [[1]]
    assert decode(batch(3)).events  # a normal batch still takes the fast path


@pytest.mark.parametrize("form", ["array", "map"])
def test_a_deep_live_message_is_counted_undecodable_and_kept_raw(tmp_path, form):
    sub, kv = _sub(tmp_path)
    try:
        s = sub.streams[0]
        raw = deep(1000, form)
        sub.handle(s, [b"", SEQ0, raw])
        sub.handle(s, [b"", seq_bytes(1), batch(1)])
        kv.flush()
        assert s.undecodable == 1 and s.batches == 1
        rows = kv.conn.execute("SELECT status, payload FROM kv_batches ORDER BY batch_id")
        assert [r[0] for r in rows] == ["undecodable", "ok"]
        assert kv.conn.execute("SELECT payload FROM kv_batches LIMIT 1").fetchone()[0] == raw
    finally:
        sub.close()


def test_a_deep_replayed_message_is_counted_undecodable(tmp_path):
    ctx = zmq.Context()
    ctx.linger = 0
    router = ctx.socket(zmq.ROUTER)
    router.setsockopt(zmq.LINGER, 0)
    port = router.bind_to_random_port("tcp://127.0.0.1")
    sub, kv = _sub(tmp_path, f"tcp://127.0.0.1:{port}")
    try:
        s = sub.streams[0]
        import threading

        def answer() -> None:
            if router.poll(5000):
                ident = router.recv_multipart()[0]
                router.send_multipart([ident, b"", seq_bytes(1), deep(1000)])
                router.send_multipart([ident, b"", (-1).to_bytes(8, "big", signed=True), b""])
        th = threading.Thread(target=answer)
        th.start()
        sub.handle(s, [b"", SEQ0, batch(0)])
        sub.handle(s, [b"", seq_bytes(2), batch(2)])  # seq 1 missing: asked for
        th.join()
        assert s.gaps == 1 and s.undecodable == 1 and s.batches == 2
    finally:
        sub.close()
        ctx.destroy(linger=0)


_frame = st.one_of(st.binary(max_size=40), st.just(SEQ0), st.just(b""),
                   st.sampled_from([batch(1), deep(40), deep(2000, "map"), b"\xc1", b"\x91"]))


@settings(max_examples=60, deadline=None)
@given(st.lists(st.lists(_frame, max_size=5), max_size=8))
def test_any_frames_give_counts_never_an_exception(tmp_path_factory, messages):
    sub, kv = _sub(tmp_path_factory.mktemp("f"))
    try:
        s = sub.streams[0]
        for frames in messages:
            sub.handle(s, frames)
        kv.flush()
        seen = s.batches + s.undecodable + s.wrong_topic
        assert seen <= len(messages)
        n_rows = kv.conn.execute("SELECT COUNT(*) FROM kv_batches").fetchone()[0]
        assert n_rows == s.batches + s.undecodable
    finally:
        sub.close()


def test_a_replay_wait_ends_when_should_stop_says_so(tmp_path):
    ctx = zmq.Context()
    ctx.linger = 0
    router = ctx.socket(zmq.ROUTER)  # never answers
    router.setsockopt(zmq.LINGER, 0)
    port = router.bind_to_random_port("tcp://127.0.0.1")
    sub, _ = _sub(tmp_path, f"tcp://127.0.0.1:{port}", replay_timeout_s=30.0)
    try:
        s = sub.streams[0]
        sub.handle(s, [b"", SEQ0, batch(0)])
        stop_at = time.monotonic() + 0.3
        sub.should_stop = lambda: time.monotonic() >= stop_at
        t0 = time.monotonic()
        sub.handle(s, [b"", seq_bytes(5), batch(5)])
        assert time.monotonic() - t0 < 1.0
        assert s.gaps == 1 and s.lost_batches == 4 and s.batches == 2  # still recorded
        assert s.replay_after > time.monotonic()  # backs off before asking again
    finally:
        sub.close()
        ctx.destroy(linger=0)


@given(streams=st.integers(1, MAX_STREAMS), cap=st.integers(1024, MAX_MESSAGE_MB << 20),
       replay=st.booleans())
def test_the_receive_queues_fit_the_budget_whatever_the_flags(streams, cap, replay):
    """Each socket's HWM of messages plus the one being received, two frames each, and the
    frames held beside them (the message in hand; a replay fetch's queue and answer)."""
    hwm, frame = queue_bounds(streams, cap, replay)
    extra = reserved_frames(replay)
    assert 1 <= hwm <= 1000 and 1024 <= frame <= cap
    held = (streams * (hwm + 1) * 2 + extra) * frame
    assert held <= RECEIVE_BUDGET  # up to MAX_STREAMS, at the 1 KiB frame floor too
    if (streams * 4 + extra) * cap <= RECEIVE_BUDGET:
        assert frame == cap  # lowered only when the streams would not fit


def test_more_streams_than_the_budget_holds_at_the_frame_floor_are_refused():
    assert (MAX_STREAMS * 4 + reserved_frames(True)) * 1024 <= RECEIVE_BUDGET
    with pytest.raises(ValueError, match=f"at most {MAX_STREAMS:,} share the 192 MB"):
        check_fd_limit(MAX_STREAMS + 1)


def test_one_stream_at_the_frame_cap_queues_what_the_budget_leaves():
    """16 MiB frames: 12 fit in 192 MiB; 2 are the message in hand, 6 a replay fetch's."""
    assert queue_bounds(1, 16 << 20) == (4, 16 << 20)  # (4 + 1) x 2 + 2 = 12 frames
    assert queue_bounds(1, 16 << 20, replay=True) == (1, 16 << 20)  # (1 + 1) x 2 + 8
    sub = Subscriber(SubscriberConfig(("tcp://127.0.0.1:20000",),
                                      replay=("tcp://127.0.0.1:20001",)))
    try:
        assert sub.streams[0].sock.getsockopt(zmq.RCVHWM) == 1
    finally:
        sub.close()


def test_the_sockets_take_the_lowered_frame_cap(tmp_path):
    sub, _ = _sub_many(tmp_path, 64)
    try:
        hwm, frame = queue_bounds(64, 16 << 20)
        assert frame < 16 << 20
        assert {(s.sock.getsockopt(zmq.MAXMSGSIZE), s.sock.getsockopt(zmq.RCVHWM))
                for s in sub.streams} == {(frame, hwm)}
    finally:
        sub.close()


def test_roots_token_ids_are_kept_within_one_budget_for_all_forests(monkeypatch):
    """A block may claim millions of token ids (30 one-block batches of 4M took the model to
    1 GB): the roots' token ids kept are bounded for the model, not per forest."""
    monkeypatch.setattr(model_mod, "ROOT_TOKENS_KEPT", 5)
    monkeypatch.setattr(model_mod, "ROOT_TOKEN_IDS_KEPT", 100)
    m = CacheModel()
    m.apply(1, 0, [Event(STORED, [1], None, [7] * 1000, 1000, "GPU", 0)], 0.0)
    assert m.n_cached == 1 and not m.forests[next(iter(m.forests))].root_tokens
    for k in range(10):  # a 16-token root in each of 10 forests (media)
        m.apply(1, 0, [Event(STORED, [100 + k], None, [k] * 16, 16, f"m{k}", 0)], 0.0)
    kept = [t for f in m.forests.values() for t in f.root_tokens.values()]
    assert m.n_cached == 11 and len(kept) == 5 and sum(map(len, kept)) == 80


def test_the_model_stops_growing_at_its_cap(monkeypatch):
    monkeypatch.setattr(model_mod, "MAX_CACHED_BLOCKS", 100)
    monkeypatch.setattr(model_mod, "MAX_FORESTS", 3)
    m = CacheModel()
    evs = decode(msgspec.msgpack.encode([1.0, [
        {"type": "BlockStored", "block_hashes": [i], "parent_block_hash": None,
         "token_ids": [0] * 16, "block_size": 16, "medium": f"m{i % 5}"}
        for i in range(1000)]])).events
    m.apply(1, 0, evs, 0.0)
    assert sum(len(f.parent) for f in m.forests.values()) == m.n_cached <= 100
    assert len(m.forests) == 3 and m.over_cap == 1000 - m.n_cached
    m.apply(1, 0, decode(msgspec.msgpack.encode([2.0, [{"type": "AllBlocksCleared"}]])).events,
            1.0)
    assert m.n_cached == 0
    m.apply(1, 0, evs[:10], 2.0)  # room again after the clear
    assert m.n_cached > 0


def test_the_writer_buffer_flushes_itself(tmp_path, monkeypatch):
    monkeypatch.setattr(kv_writer, "FLUSH_BYTES", 1000)
    kv = KvEventWriter(sqlite3.connect(tmp_path / "w.db"))
    for i in range(10):
        kv.add_batch((1, i, 0.0, None, 0, 0, 0, 0, 0, 0, 0, "ok", b"", b"x" * 300))
    assert len(kv._rows) < 4
    assert kv.conn.execute("SELECT COUNT(*) FROM kv_batches").fetchone()[0] >= 7


def test_more_streams_than_zeromqs_default_socket_limit(tmp_path):
    """340+ streams passed ZeroMQ's 1,023-socket default (a ZMQError); the context's limit
    now fits the streams (each a SUB socket and a monitor pair)."""
    sub, _ = _sub_many(tmp_path, 400)
    try:
        sub.poll(10)
        assert len(sub.streams) == 400
    finally:
        sub.close()


def _sub_many(tmp_path, ranks: int) -> tuple[Subscriber, KvEventWriter]:
    kv = KvEventWriter(sqlite3.connect(tmp_path / "m.db"))
    return Subscriber(SubscriberConfig(("tcp://127.0.0.1:20000",), dp_ranks=ranks), kv), kv


class _Queue:
    """A stand-in for a SUB socket: `n` messages (None: endless), then zmq.Again."""

    def __init__(self, n: int | None) -> None:
        self.n, self.taken = n, 0
        self.more: list[bytes] = []

    def recv(self, _flags: int = 0, copy: bool = True) -> bytes:
        if not self.more:
            if self.n is not None and self.taken >= self.n:
                raise zmq.Again()
            self.taken += 1
            self.more = [b"", seq_bytes(self.taken), batch(self.taken)]
        return self.more.pop(0)

    def getsockopt(self, opt: int) -> int:
        assert opt == zmq.RCVMORE
        return int(bool(self.more))


def test_a_flooding_stream_does_not_starve_a_quiet_one(tmp_path, monkeypatch):
    sub, _ = _sub(tmp_path)
    try:
        flood, quiet = _Queue(None), _Queue(5)
        a, b = sub.streams[0], dataclasses.replace(sub.streams[0], sid=2)
        sub._by_sock = {flood: a, quiet: b}
        monkeypatch.setattr(sub.poller, "poll", lambda _ms: [(flood, zmq.POLLIN),
                                                             (quiet, zmq.POLLIN)])
        monkeypatch.setattr(sub, "handle", lambda st, frames, n: time.sleep(0.002))
        t0 = time.monotonic()
        sub.poll(10)
        assert time.monotonic() - t0 < 0.5  # the budget holds against an endless queue
        assert flood.taken > 5 and quiet.taken == 5  # all of the quiet one handled
    finally:
        sub._by_sock = {}
        sub.close()


@pytest.mark.parametrize("endpoint", ["tcp://-x:5000", "tcp://\u00e4:5000", "tcp://%41:5000"])
def test_a_connect_zeromq_refuses_closes_its_sockets_and_says_why(endpoint):
    """Addresses past the up-front check that ZeroMQ still refuses: one ValueError, and the
    context terminates (a monitor left open made close wait forever)."""
    import threading

    got: list[BaseException] = []

    def build() -> None:
        try:
            Subscriber(SubscriberConfig(("tcp://127.0.0.1:20000", endpoint)))
        except BaseException as exc:  # noqa: BLE001 - the test inspects it
            got.append(exc)
    th = threading.Thread(target=build, daemon=True)  # a hang fails, it does not block
    th.start()
    th.join(10)
    assert not th.is_alive(), "the subscriber hung closing its context"
    assert len(got) == 1 and isinstance(got[0], ValueError)
    assert "ZeroMQ refuses the address" in str(got[0])
