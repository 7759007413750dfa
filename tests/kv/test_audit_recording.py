"""What the audit leaves in a recording: block tables with each paged lane's map (decoding to
the allocator's tables, tying every owned cell to a logical block), audit counts and
audit_failed events; and the block table codec."""
from __future__ import annotations

from pathlib import Path

import numpy as np
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from collectors.sampler import SampleWriter
from kvviz.blockmap import FREE
from kvviz.cli import build_parser, main
from kvviz.commands.collect import build
from kvviz.config import model_preset
from kvviz.store import tablecodec
from kvviz.store.reader import RunReader
from kvviz.store.writer import RunWriter

MODEL = model_preset("tiny-cpu")
FUZZ = settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])


def _slot(lane, seq: int, pos: int) -> int:
    if lane.alloc.contiguous:
        return int(lane.alloc.ranges(np.asarray([seq]))[0, 0]) + pos
    bs = lane.alloc.block_size
    return int(lane.alloc.block_table(seq)[pos // bs]) * bs + pos % bs


def _collector(out: Path, *extra: str):
    args = build_parser("collect").parse_args(
        ["collect", "--mode", "real", "--device", "cpu", "--quiet", "--rate", "inf",
         "--requests", "40", "--capacity-tokens", "3072", "--max-seq-len", "384",
         "--prefix-sharing", "0.6", "--lane", "paged:16:prefix", "--lane",
         "contiguous:first-fit:max", "--audit", "--out", str(out), *extra])
    return build(args)


def test_recorded_block_tables_match_the_allocator_and_tie_cells_to_logical_blocks(tmp_path):
    out = tmp_path / "run.db"
    col = _collector(out)
    sink = SampleWriter(RunWriter(out, col.meta()), mode="inline")
    want = {}
    for i in range(6):
        for _ in range(8):
            col.sim.step(time_s=0.01 * i)
        lane = col.sim.lanes[0]
        want[i] = {int(s): lane.alloc.block_table(int(s)).copy() for s in lane.run_ids}
        sink.put(col._batch(0.01 * i + 0.005))
    sink.close("finished")
    r = RunReader(out)
    sids = r.blockmap_index("paged:16:prefix").sample_id.tolist()
    assert len(sids) == 6
    assert r.block_tables(int(r.blockmap_index("contiguous:first-fit:max").sample_id[0])) is None
    for i, sid in enumerate(sids):
        bt, bm = r.block_tables(sid), r.blockmap(sid)
        assert {int(s): bt.table(k).tolist() for k, s in enumerate(bt.seq_ids)} == {
            s: t.tolist() for s, t in want[i].items()}
        seq, j = bt.logical()
        blocks = bt.blocks
        assert (bm.owner[blocks] != FREE).all()
        # every owned cell is tied to a table entry; an unshared one to its owner's table
        assert set(blocks.tolist()) == set(np.flatnonzero(bm.owner != FREE).tolist())
        alone = bm.refcount[blocks] == 1
        assert (bm.owner[blocks[alone]] == seq[alone]).all()
        assert (np.bincount(blocks, minlength=bm.owner.size) == bm.refcount).all()
        nb = np.repeat(bt.nblocks, bt.nblocks)
        full = j < nb - 1  # every block but a sequence's last is full: tail waste is last only
        assert (bm.filled[blocks[full]] == bm.block_size).all()
        lens = np.repeat(bt.lengths, bt.nblocks)
        assert (np.minimum(lens - j * bm.block_size, bm.block_size) == bm.filled[blocks]).all()
    s = r.samples()
    assert (s.audit_failures == 0).all() and (s.audit_checks > 0).all()


def test_an_audit_failure_is_an_event_with_its_reason(tmp_path):
    out = tmp_path / "run.db"
    col = _collector(out)
    sink = SampleWriter(RunWriter(out, col.meta()), mode="inline")
    for _ in range(10):
        col.sim.step(time_s=0.0)
    lane = col.sim.lanes[1]
    seq = int(lane.run_ids[0])
    lane.kv.cache.k[0].view(-1, MODEL.num_kv_heads, MODEL.head_dim)[_slot(lane, seq, 0)] = 9.0
    sink.put(col._batch(0.5))
    sink.close("finished")
    r = RunReader(out)
    ev = r.events(kinds=["audit_failed"])
    assert r.count_events("audit_failed") == len(ev) >= 1
    assert (ev.lane == lane.name).all() and ev.seq_id.iloc[0] == seq
    assert ev.reason.iloc[0].startswith("content: sequence")
    s = r.samples().set_index("lane")
    assert s.loc[lane.name, "audit_failures"] >= 1 and s.loc["paged:16:prefix",
                                                             "audit_failures"] == 0


def test_block_tables_follow_their_maps_under_retention(tmp_path):
    out = tmp_path / "run.db"
    col = _collector(out)
    sink = SampleWriter(RunWriter(out, col.meta(), blockmap_budget_bytes=4000), mode="inline")
    for i in range(30):
        for _ in range(3):
            col.sim.step(time_s=0.01 * i)
        sink.put(col._batch(0.01 * i + 0.005))
    sink.close("finished")
    r = RunReader(out)
    kept = set(r.blockmap_index("paged:16:prefix").sample_id.tolist())
    rows = {int(x[0]) for x in r._q("SELECT sample_id FROM block_tables")}
    assert rows == kept and len(kept) < 30


def test_audit_in_sim_mode_is_one_clear_error(capsys):
    assert main(["collect", "--mode", "sim", "--audit", "--out", "/nonexistent/x.db"]) == 2
    err = capsys.readouterr().err
    assert "kvviz collect: error: --audit: needs --mode real" in err


# ---- the block table codec ------------------------------------------------------------------
@FUZZ
@given(st.lists(st.lists(st.integers(0, 2**31 - 1), max_size=6), max_size=8))
def test_block_tables_round_trip(tables):
    n = len(tables)
    bt = tablecodec.BlockTables(np.arange(n, dtype=np.int64) * 7, np.arange(n, dtype=np.int64),
                                np.asarray([len(t) for t in tables], np.int32),
                                np.asarray([b for t in tables for b in t], np.int32))
    got = tablecodec.decode(n, int(bt.blocks.size), tablecodec.ENCODING, tablecodec.encode(bt))
    assert all(np.array_equal(a, b) for a, b in zip(got, bt))
    assert [got.table(i).tolist() for i in range(n)] == tables


@FUZZ
@given(st.integers(-2, 50), st.integers(-2, 50), st.binary(max_size=600))
def test_damaged_block_tables_are_one_clear_error(n, m, data):
    try:
        bt = tablecodec.decode(n, m, tablecodec.ENCODING, data)
    except ValueError as exc:
        assert str(exc)
    else:
        assert bt.seq_ids.size == n and bt.blocks.size == m == int(bt.nblocks.sum())
