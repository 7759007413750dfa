"""What the audit leaves in a recording: block tables with each paged lane's map (decoding to
the allocator's tables, tying every owned cell to a logical block), audit counts and
audit_failed events; and the block table codec."""
from __future__ import annotations

from pathlib import Path

import numpy as np
from hypothesis import HealthCheck, settings

from collectors.launch import build
from collectors.writer_client import SampleWriter
from kvviz.commands.cli import build_parser, main
from kvviz.core.config import model_preset
from kvviz.settings.flags import settings_of
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
    return build(settings_of(args))


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


def test_audit_in_sim_mode_is_one_clear_error(capsys):
    assert main(["collect", "--mode", "sim", "--audit", "--out", "/nonexistent/x.db"]) == 2
    err = capsys.readouterr().err
    assert "kvviz collect: error: --audit: needs mode real" in err


