"""The block stream (`kvviz attach --blocks`, kvviz/plugin/wire.py) is outside input: any
message decodes to a sample kvviz can draw, or is one WireError; never another exception."""
from __future__ import annotations

import tempfile
from pathlib import Path

import msgspec
import numpy as np
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from kvviz.node.blocks_lane import BlockLane, blockmap
from kvviz.plugin import wire
from kvviz.store.writer import RunWriter
from tests.plugin.stream import message

VALUES = st.one_of(st.none(), st.integers(-2**63, 2**64 - 1), st.binary(max_size=64),
                   st.text(max_size=8), st.lists(st.integers(-3, 10), max_size=6),
                   st.dictionaries(st.text(max_size=8), st.integers(-3, 2**24 + 3),
                                   max_size=4))


def _drawn(frames) -> None:
    try:
        seq, msg = wire.decode(frames)
        blockmap(msg)
    except wire.WireError as exc:
        assert str(exc)
        return
    with tempfile.TemporaryDirectory() as d:  # and the whole message recorded
        w = RunWriter(Path(d) / "r.db", {"mode": "node", "lanes": []})
        lane = BlockLane(f"ipc://{d}/b.ipc", w, 0.0)
        try:
            lane.handle(seq, msg)
            w.commit()
        finally:
            lane.close()
            w.close()


@settings(max_examples=300, deadline=None, suppress_health_check=list(HealthCheck))
@given(st.lists(st.binary(max_size=200), max_size=4))
def test_any_frames_are_a_sample_or_one_wire_error(frames):
    _drawn(frames)


@settings(max_examples=400, deadline=None, suppress_health_check=list(HealthCheck))
@given(st.sampled_from(sorted(message())), VALUES)
def test_a_valid_sample_with_one_field_replaced_is_a_sample_or_one_wire_error(key, value):
    raw = msgspec.msgpack.decode(wire.encode(message()))
    raw[key] = value
    _drawn(wire.frames(1, msgspec.msgpack.encode(raw)))


@settings(max_examples=200, deadline=None, suppress_health_check=list(HealthCheck))
@given(st.sampled_from(["refcnt", "hashed", "seqs", "computed", "final", "lens", "base",
                        "blocks"]),
       st.lists(st.integers(-2**31, 2**31 - 1), max_size=12))
def test_arrays_of_any_values_are_a_sample_or_one_wire_error(key, values):
    msg = message()
    msg[key] = np.array(values, wire.ARRAYS[key]) if key != "hashed" else \
        np.array(values, np.int64).astype(np.uint8)
    _drawn(wire.frames(1, wire.encode(msg)))


@settings(max_examples=15, deadline=None, suppress_health_check=list(HealthCheck))
@given(st.text(max_size=40))
def test_attach_takes_any_blocks_endpoint_text_with_a_result_or_one_error(text):
    import contextlib
    import io

    from kvviz.commands.cli import main

    with tempfile.TemporaryDirectory() as d:
        err = io.StringIO()
        with contextlib.redirect_stderr(err):
            code = main(["attach", "127.0.0.1:9", "--blocks", text, "--duration", "0.2",
                         "--quiet", "--out", f"{d}/n.db"])
        assert code in (0, 1, 2)
        if code == 2:
            assert err.getvalue().count("error:") == 1 and "Traceback" not in err.getvalue()


@settings(max_examples=300, deadline=None, suppress_health_check=list(HealthCheck))
@given(st.sampled_from(sorted(message()["pool"])), VALUES)
def test_a_pool_with_one_field_replaced_is_a_sample_or_one_wire_error(key, value):
    raw = msgspec.msgpack.decode(wire.encode(message()))
    raw["pool"][key] = value
    _drawn(wire.frames(1, msgspec.msgpack.encode(raw)))


@settings(max_examples=200, deadline=None, suppress_health_check=list(HealthCheck))
@given(st.lists(st.tuples(st.integers(1, 6), st.booleans(),
                          st.lists(st.integers(0, 3), min_size=2, max_size=2)),
                min_size=1, max_size=6))
def test_any_run_of_key_and_window_messages_is_recorded_or_waits_for_a_key(run):
    """Messages in any order, key or not, leaving any ids out: each is recorded with its map,
    recorded without it (waiting for a key), or refused with one WireError."""
    with tempfile.TemporaryDirectory() as d:
        w = RunWriter(Path(d) / "r.db", {"mode": "node", "lanes": []})
        lane = BlockLane(f"ipc://{d}/b.ipc", w, 0.0)
        try:
            for seq, key, base in run:
                base = np.minimum(np.array(base, np.int32), 2)
                left = np.repeat(base, 1).tolist()
                blocks = [1, 2, 1, 3]
                kept = blocks[left[0]:2] + blocks[2 + left[1]:]
                try:
                    lane.handle(*wire.decode(wire.frames(seq, wire.encode(message(
                        step=seq, key=key, base=base, blocks=np.array(kept, np.int32))))))
                except wire.WireError as exc:
                    assert str(exc)
            w.commit()
            assert lane.samples + lane.undrawn <= len(run)
        finally:
            lane.close()
            w.close()
