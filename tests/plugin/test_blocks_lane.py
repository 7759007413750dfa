"""The attach side of the block stream without vLLM: a message as the plugin publishes it
becomes a lane of the recording (map, tables, events, request log, gaps)."""
from __future__ import annotations

import contextlib

import numpy as np
import pytest

from kvviz.node.blocks_lane import BlockLane, blockmap
from kvviz.plugin import wire
from kvviz.store.reader import RunReader
from kvviz.store.writer import RunWriter
from tests.plugin.stream import POOL, frames, message


@contextlib.contextmanager
def node_recording(tmp_path, t0: float = 0.0):
    """A BlockLane writing tmp_path/r.db (a node recording); committed and closed after."""
    w = RunWriter(tmp_path / "r.db", {"mode": "node", "lanes": []})
    lane = BlockLane(f"ipc://{tmp_path}/b.ipc", w, t0)
    try:
        yield lane
        w.commit()
    finally:
        lane.close()
        w.close()


def test_the_map_puts_block_id_minus_one_at_each_address_with_the_planes_of_format_md():
    bm, checks = blockmap(wire.decode(frames())[1])
    assert bm.num_blocks == 8 and bm.block_size == 4  # the null block is not drawn
    assert bm.owner.tolist() == [0, 0, 1, -1, -1, -1, -1, -1]  # block 1 shared: first holder
    assert bm.filled.tolist() == [4, 2, 1, 4, 4, 0, 0, 0]
    assert bm.refcount.tolist() == [2, 1, 1, 0, 0, 0, 0, 0]
    assert bm.cached.tolist() == [False, False, False, True, True, False, False, False]
    assert bm.table_blocks.tolist() == [0, 1, 0, 2] and bm.table_len.tolist() == [2, 2]
    assert checks == {"refcount_mismatches": 0, "untabled_blocks": 0}


def test_a_ref_count_that_is_not_the_number_of_tables_is_counted():
    refcnt = np.array([0, 1, 1, 1, 2, 0, 0, 0, 0], np.int32)
    _, checks = blockmap(wire.decode(frames(refcnt=refcnt))[1])
    assert checks == {"refcount_mismatches": 1, "untabled_blocks": 1}


def test_messages_become_samples_events_a_request_log_and_gaps(tmp_path):
    with node_recording(tmp_path) as lane:
        for seq, step in ((1, 3), (2, 4), (5, 7)):  # 3 and 4 lost on the way
            lane.handle(*wire.decode(frames(seq, step=step)))
        lane.handle(*wire.decode(frames(5, step=7)))  # an idle repeat: nothing new
    r = RunReader(tmp_path / "r.db")
    try:
        assert r.lanes() == ["vllm"]
        s = r.samples("vllm")
        assert s["step"].tolist() == [3, 4, 7] and (s["vllm_free_blocks"] == 5).all()
        assert s["admit_failures_capacity"].tolist() == [1, 2, 3]
        assert s["head_reason"].tolist() == ["no free blocks"] * 3
        ev = r.events("vllm")
        assert ev["kind"].tolist().count("admitted") == 3
        log = r.table("request_log")
        assert log["request_id"].tolist() == ["req-2"] and log["arrive_step"].tolist() == [7]
        gaps = r.table("block_gaps")
        assert gaps[["kind", "first_seq", "last_seq"]].values.tolist() == [["gap", 3, 4]]
    finally:
        r.close()


def test_tables_sent_as_their_new_ids_are_made_whole_and_wait_for_a_key_after_a_hole(
        tmp_path):
    """Wire 2: between key messages a table carries only the ids after its `base`; the lane
    rebuilds it from the message before. After a hole it cannot: those messages keep their
    events and request log, without a map, until the next key message."""
    def grown(seq: int, step: int, key: bool, more: list[int]) -> list[bytes]:
        # seq 0's table 1, 2 grows by `more`; seq 1's 1, 3 is as it was
        base = [0, 0] if key else [2, 2]
        ids = ([1, 2] + more + [1, 3]) if key else more
        return frames(seq, step=step, key=key, base=np.array(base, np.int32),
                      lens=np.array([2 + len(more), 2], np.int32),
                      blocks=np.array(ids, np.int32))

    with node_recording(tmp_path) as lane:
        lane.handle(*wire.decode(grown(1, 3, True, [])))
        lane.handle(*wire.decode(grown(2, 4, False, [4])))  # seq 0 now 1, 2, 4
        lane.handle(*wire.decode(grown(4, 6, False, [4, 5])))  # 3 lost: cannot be rebuilt
        lane.handle(*wire.decode(grown(5, 7, False, [4, 5, 6])))  # nor this one
        lane.handle(*wire.decode(grown(6, 8, True, [4, 5, 6, 7])))  # a key: whole again
        lane.handle(*wire.decode(grown(7, 9, False, [4, 5, 6, 7, 8])))
    assert (lane.samples, lane.undrawn) == (4, 2)
    r = RunReader(tmp_path / "r.db")
    try:
        s = r.samples("vllm")
        assert s["step"].tolist() == [3, 4, 8, 9]
        owners = [r.blockmap(int(i)).owner.tolist() for i in s["sample_id"]]
        # address = block id - 1; seq 1 holds blocks 1 (shared: drawn as seq 0's) and 3
        assert owners == [[0, 0, 1, -1, -1, -1, -1, -1], [0, 0, 1, 0, -1, -1, -1, -1],
                          [0, 0, 1, 0, 0, 0, 0, -1], [0, 0, 1, 0, 0, 0, 0, 0]]
        ev = r.events("vllm")  # every message's events, drawn or not
        assert ev["step"].tolist().count(6) == 2 and ev["step"].tolist().count(7) == 2
        gaps = r.table("block_gaps")
        assert gaps[["kind", "first_seq", "last_seq"]].values.tolist() == [["gap", 3, 3]]
    finally:
        r.close()


def test_a_table_left_out_that_the_lane_never_saw_waits_for_a_key():
    t = wire.Tables()
    _, first = wire.decode(frames(1))
    assert t.whole(1, first)
    # seq 5's table leaves out 2 ids, but the message before held no table of seq 5
    _, msg = wire.decode(frames(2, key=False, seqs=np.array([0, 5]),
                                base=np.array([0, 2], np.int32),
                                blocks=np.array([1, 2], np.int32)))
    assert not t.whole(2, msg) and t.seq is None
    assert msg["base"].tolist() == [0, 2]  # left as it was


def test_wire_version_1_messages_every_table_whole_are_still_read():
    raw = message()
    del raw["key"], raw["base"]
    _, msg = wire.decode(wire.frames(1, wire.encode({**raw, "wire": 1})))
    assert msg["key"] is True and msg["base"].tolist() == [0, 0]
    bm, _ = blockmap(msg)
    assert bm.table_blocks.tolist() == [0, 1, 0, 2]
    with pytest.raises(wire.WireError, match="wire version 3"):
        wire.decode(wire.frames(1, wire.encode({**raw, "wire": 3})))


def test_the_request_logs_vllm_hash_bytes_arrive_as_the_kv_event_streams_ints():
    """The plugin sends vLLM's hash bytes as they are; where the pool says `int_hashes`,
    decode() gives each hash as vLLM's maybe_convert_block_hash makes it (the bytes read
    big-endian, the low 64 bits kept), 8 little-endian bytes; without it, the bytes as sent."""
    hashes = [bytes(range(i, i + 32)) for i in (0, 40)]  # sha256-wide, as vLLM's
    row = [2, "req-2", 3, 20, 4, b"".join(hashes), 32]
    want = b"".join((int.from_bytes(h, "big") % 2**64).to_bytes(8, "little") for h in hashes)
    _, msg = wire.decode(frames(arrived=[row], pool={**POOL, "int_hashes": True}))
    assert msg["arrived"] == [[2, "req-2", 3, 20, 4, want, 8]]
    _, msg = wire.decode(frames(arrived=[row], pool={**POOL, "int_hashes": False}))
    assert msg["arrived"] == [row]


@pytest.mark.parametrize("bad", [dict(null_block=3), dict(blocks=np.array([0, 2, 1, 3]))])
def test_a_map_it_cannot_draw_is_one_wire_error(bad):
    with pytest.raises(wire.WireError):
        blockmap(wire.decode(frames(**bad))[1])


def test_messages_are_numbered_and_a_full_queue_drops_without_blocking(tmp_path):
    from kvviz.plugin.publisher import Publisher

    pub = Publisher(f"ipc://{tmp_path}/p.ipc", max_queue=1)
    pub.ready.wait(5)
    try:
        results = [pub.offer(message()) for _ in range(200)]
        assert pub.seq == 200 and pub.dropped == results.count(False) > 0
    finally:
        pub.close()
    assert pub.failed is None


def test_an_endpoint_it_cannot_bind_fails_with_one_reason(tmp_path):
    from kvviz.plugin.publisher import Publisher

    pub = Publisher(f"ipc://{tmp_path}/no/such/dir/p.ipc")
    assert pub.ready.wait(5)
    assert pub.failed and "cannot bind" in pub.failed
    assert pub.offer(message())  # still never blocks
    pub.close()


def test_the_publisher_and_the_lane_meet_over_a_socket(tmp_path):
    """The plugin's thread binds, attach's reader thread connects: samples arrive in order
    (the first ones may go before the subscription is through: ZeroMQ's slow joiner)."""
    import time

    from kvviz.plugin.publisher import Publisher

    pub = Publisher(f"ipc://{tmp_path}/s.ipc")
    assert pub.ready.wait(5) and pub.failed is None
    w = RunWriter(tmp_path / "r.db", {"mode": "node", "lanes": []})
    lane = BlockLane(f"ipc://{tmp_path}/s.ipc", w, 0.0)
    try:
        end = time.monotonic() + 20
        step = 3
        while lane.samples < 5 and time.monotonic() < end:
            pub.offer(message(step=step))
            step += 1
            time.sleep(0.05)
            lane.poll(50)
        w.commit()
    finally:
        lane.close()
        pub.close()
        w.close()
    assert lane.samples >= 5 and lane.lane == "vllm"


def test_attach_refuses_a_blocks_endpoint_zeromq_would_not_take(tmp_path, capsys):
    from kvviz.commands.cli import main

    out = tmp_path / "n.db"
    assert main(["attach", "127.0.0.1:9", "--blocks", "bogus://x", "--out", str(out)]) == 2
    assert "kvviz attach: error: --blocks 'bogus://x'" in capsys.readouterr().err
    assert not out.exists()


def test_each_data_parallel_rank_is_its_own_lane(tmp_path):
    from kvviz.node.blocks_lane import BlockLanes
    from tests.plugin.stream import POOL

    w = RunWriter(tmp_path / "r.db", {"mode": "node", "lanes": []})
    lanes = BlockLanes([f"ipc://{tmp_path}/a.ipc", f"ipc://{tmp_path}/b.ipc"], w, 0.0)
    try:
        for k, lane in enumerate(lanes.lanes):
            lane.handle(*wire.decode(frames(1, pool={**POOL, "dp_rank": k})))
        w.commit()
    finally:
        lanes.close()
        w.close()
    r = RunReader(tmp_path / "r.db")
    try:
        assert sorted(r.lanes()) == ["vllm", "vllm-dp1"]
    finally:
        r.close()


def test_attachs_status_line_says_how_many_messages_wait_for_whole_tables():
    import types

    from kvviz.commands.attach import _status_line

    none = types.SimpleNamespace(last=None)
    b = types.SimpleNamespace(samples=5, gaps=1, undrawn=0)
    assert _status_line(3.0, none, None, b).endswith("| blocks: 5 samples, 1 gaps")
    b.undrawn = 2
    assert _status_line(3.0, none, None, b).endswith(
        "| blocks: 5 samples, 1 gaps, 2 without a map (waiting for whole tables)")


def test_the_verifier_checks_a_node_recordings_block_lane(tmp_path):
    """python -m kvviz.verify replays a node recording's block lane like any lane's: here a
    hand-made stream whose events do not explain its tables (seq 0 holds blocks, yet no
    event ever admitted it) is reported, not passed over as "a node recording"."""
    from kvviz.verify.core import verify

    with node_recording(tmp_path) as lane:
        for seq, step in ((1, 3), (2, 4)):
            lane.handle(*wire.decode(frames(seq, step=step)))
    rep = verify(tmp_path / "r.db")
    assert "with block lanes" in rep.note and rep.lanes["vllm"]["samples"] == 2
    assert any("live set" in m for m in rep.mismatches)


def test_decode_throughput_between_a_lanes_samples_none_at_its_first(tmp_path):
    """tokens_per_s as every lane's (docs/FORMAT.md) from the plugin's token count, except
    the lane's first sample (the count began with the server, before attach joined) and
    the first after the plugin restarted (its count began again)."""
    import math
    import time

    with node_recording(tmp_path, time.time() - 100.0) as lane:
        for seq, generated in ((1, 5000), (2, 5100), (3, 5400), (1, 30)):  # 1: a restart
            lane.handle(*wire.decode(frames(seq, step=seq, generated=generated)))
            time.sleep(0.05)
    r = RunReader(tmp_path / "r.db")
    try:
        s = r.samples("vllm")
        t, tok, rate = s["t"].tolist(), s["tokens_generated"].tolist(), s["tokens_per_s"]
        assert tok == [5000, 5100, 5400, 30]
        assert rate.isna().tolist() == [True, False, False, True]
        for k in (1, 2):
            assert math.isclose(rate[k], (tok[k] - tok[k - 1]) / (t[k] - t[k - 1]))
    finally:
        r.close()
