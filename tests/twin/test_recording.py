"""read_recording on attach --blocks recordings (synthetic, written as the plugin's lane is:
tests/twin/noderun.py): the node's stream, settings and record; what cannot be replayed is
named; a malformed or hostile recording is one KvvizError, never a traceback or a hang."""
from __future__ import annotations

import json
import os
import shutil
import sqlite3

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from kvviz.core.errors import KvvizError
from kvviz.twin import whatif
from kvviz.twin.configs import alternatives
from kvviz.twin.source import from_recording, read_recording
from tests.twin import noderun
from tests.twin.streams import MODEL


@pytest.fixture(scope="module")
def rec(tmp_path_factory):
    return noderun.write(tmp_path_factory.mktemp("node") / "node.db")


def _check(path, **kw) -> dict:
    return whatif(from_recording(path, MODEL), alternatives(kw), workers=1).self_check


def test_the_node_is_read_with_its_settings_and_replays_equal(rec):
    w, s, node = read_recording(rec)
    assert s == noderun.SETTINGS and len(w) == 40
    assert w.chain_block == 16 and w.chain_ids.size > 0
    assert node.block_ids == "exact" and node.end_step is None and not node.notes
    assert node.preemptions > 0 and len(node.tables) == node.steps
    check = _check(rec)
    assert check["equal"], check["verdict"]
    assert check["steps_compared"] == node.steps == check["block_steps_compared"]
    assert "every block id" in check["verdict"] and "renumbering" not in check["verdict"]


def test_arrivals_keep_the_nodes_engine_steps(rec):
    w, _, node = read_recording(rec)
    first = noderun.workload()
    assert np.array_equal(w.arrival_s, first.arrival_s)
    assert int(node.busy[0, 0]) == int(first.arrival_s[0])


def test_a_pool_that_served_requests_before_compares_under_one_renumbering(tmp_path):
    perm = np.random.default_rng(1).permutation(noderun.SETTINGS.usable_blocks)
    used = noderun.write(tmp_path / "used.db", seq_offset=5, perm=perm)
    check = _check(used)
    assert check["equal"] and "under one renumbering" in check["verdict"], check["verdict"]
    fresh = noderun.write(tmp_path / "fresh.db", perm=perm)  # seq 0 logged: ids must match
    check = _check(fresh)
    assert not check["equal"] and check["first_difference"]["what"].startswith("block ids")


def test_requests_running_at_the_end_are_named_and_compared_up_to_it(tmp_path):
    path = noderun.write(tmp_path / "cut.db", stop_at=40)
    _, _, node = read_recording(path)
    assert node.end_step == 40 and "still running" in node.end_reason
    assert any("still running when the recording ended" in n for n in node.notes)
    check = _check(path)
    assert check["equal"] and "compared up to engine step 40" in check["verdict"]
    assert check["not_replayed"] == list(node.notes)


def test_a_recording_that_never_shows_the_node_empty_says_so(tmp_path):
    path = noderun.write(tmp_path / "busy.db", dry_samples=False, first_sample=False)
    _, _, node = read_recording(path)
    assert any("never shows the node empty" in n for n in node.notes)


def test_a_gap_in_the_stream_ends_the_comparison_before_it(tmp_path, rec):
    path = tmp_path / "gap.db"
    shutil.copy(rec, path)
    db = sqlite3.connect(path)
    db.execute("INSERT INTO block_gaps (lane, t, kind, first_seq, last_seq, dropped) VALUES "
               "('vllm', 30.5, 'gap', 10, 12, 0)")
    db.commit()
    db.close()
    _, _, node = read_recording(path)
    assert node.end_step == 30 and "lost messages" in node.end_reason
    assert _check(path)["equal"]


def test_a_difference_is_named_at_its_engine_step(tmp_path, rec):
    """A node that ran with fewer blocks than its settings say: the replay differs, named."""
    path = tmp_path / "small.db"
    shutil.copy(rec, path)
    _edit_meta(path, lambda m: m["blocks"]["vllm"]["pool"].update(num_blocks=200))
    check = _check(path)
    assert not check["equal"] and check["first_difference"]["step"] >= 1
    assert f"engine step {check['first_difference']['step']}" in check["verdict"]


def _edit_meta(path, fn) -> None:
    db = sqlite3.connect(path)
    meta = json.loads(db.execute("SELECT meta FROM run").fetchone()[0])
    fn(meta)
    db.execute("UPDATE run SET meta = ?", (json.dumps(meta),))
    db.commit()
    db.close()


def _sql(*stmts):
    def edit(path):
        db = sqlite3.connect(path)
        for s in stmts:
            db.execute(s)
        db.commit()
        db.close()
    return edit


HOSTILE = {
    "no request log": (_sql("DROP TABLE request_log"), "no request log"),
    "empty log": (_sql("DELETE FROM request_log"), "request log of lane vllm is empty"),
    "a missing column": (_sql("ALTER TABLE request_log DROP COLUMN output_tokens"),
                         "no column 'output_tokens'"),
    "text for a step": (_sql("UPDATE request_log SET arrive_step = 'soon' WHERE seq_id = 3"),
                        "column arrive_step must be an integer"),
    "a NULL prompt": (_sql("ALTER TABLE request_log RENAME TO old",  # no NOT NULL left
                           "CREATE TABLE request_log AS SELECT * FROM old",
                           "UPDATE request_log SET prompt_tokens = NULL WHERE seq_id = 2"),
                      "column prompt_tokens is NULL"),
    "text for hashes": (_sql("UPDATE request_log SET prompt_hashes = 'abc' WHERE seq_id = 1"),
                        "column prompt_hashes must be a blob"),
    "a truncated hash chain": (_sql("UPDATE request_log SET prompt_hashes = substr("
                                    "prompt_hashes, 1, length(prompt_hashes) - 8) WHERE "
                                    "length(prompt_hashes) > 8"), "truncated hash chain"),
    "a cut hash": (_sql("UPDATE request_log SET prompt_hashes = substr(prompt_hashes, 1, 5) "
                        "WHERE length(prompt_hashes) > 8"), "not whole hashes"),
    "a huge step": (_sql(f"UPDATE request_log SET arrive_step = {2**62} WHERE seq_id = 39"),
                    "more than"),
    "a step past the clock": (_sql(f"UPDATE request_log SET arrive_step = {2**53} WHERE "
                                   "seq_id = 39"), "out of range"),
    "a step past int64": (_sql(f"UPDATE request_log SET arrive_step = {2**63 - 1}"),
                          "more than"),
    "a huge prompt": (_sql(f"UPDATE request_log SET prompt_tokens = {10**15}"), "out of range"),
    "a negative id": (_sql("UPDATE request_log SET seq_id = -4 WHERE seq_id = 0"), ">= 0"),
    "arrivals out of order": (_sql("UPDATE request_log SET arrive_step = 1 WHERE seq_id = 30"),
                              "before the request logged before it"),
    "a finish before arrival": (_sql("UPDATE request_log SET finish_step = 0"),
                                "before its arrive_step"),
    "a blob status": (_sql("UPDATE request_log SET finish_status = x'00'"), "must be text"),
    "events out of order": (_sql(f"UPDATE events SET step = {10**15} WHERE kind = 'preempted'"),
                            "not in engine-step order"),
    "samples out of order": (_sql("UPDATE samples SET step = 0 WHERE sample_id = 30"),
                             "not increasing engine steps"),
    "a restart": (_sql("INSERT INTO block_gaps (lane, t, kind, first_seq, last_seq, dropped) "
                       "VALUES ('vllm', 3.0, 'restart', 1, 9, 0)"), "restarted"),
    "damaged tables": (_sql("UPDATE block_tables SET table_blocks = x'0102'"),
                       "block tables of sample"),
    "a table block out of the map": (_sql("UPDATE block_tables SET layout = replace(layout, "
                                          "'\"offset\": 0', '\"offset\": 100000')"),
                                     "block tables of sample"),
}
META = {
    "no engine": (lambda m: m.pop("engine"), "no 'engine'"),
    "no blocks": (lambda m: m.pop("blocks"), "no 'blocks' entry"),
    "no prefix caching": (lambda m: m["blocks"]["vllm"]["pool"].pop("prefix_caching"),
                          "whether the node had prefix caching on"),
    "a huge pool": (lambda m: m["blocks"]["vllm"]["pool"].update(num_blocks=10**12),
                    "num_gpu_blocks: must be in"),
    "a pool of text": (lambda m: m["blocks"]["vllm"].update(pool="big"), "no pool geometry"),
    "a float seq limit": (lambda m: m["engine"].update(max_num_seqs=2.5), "max_num_seqs"),
    "a bool budget": (lambda m: m["engine"].update(max_num_batched_tokens=True),
                      "max_num_batched_tokens"),
    "watermark nan": (lambda m: m["engine"].update(watermark=float("nan")), "watermark"),
    "no budget for the prompts": (lambda m: m["engine"].update(
        enable_chunked_prefill=False, max_num_batched_tokens=8), "outside what kvviz replays"),
}


@pytest.mark.parametrize("name", sorted(HOSTILE) + sorted(META))
def test_a_hostile_recording_is_one_clear_error(tmp_path, rec, name, capsys):
    path = tmp_path / "bad.db"
    shutil.copy(rec, path)
    if name in HOSTILE:
        edit, words = HOSTILE[name]
        edit(path)
    else:
        fn, words = META[name]
        _edit_meta(path, fn)
    with pytest.raises(KvvizError, match=None) as got:
        read_recording(path)
    assert words in str(got.value), str(got.value)
    from kvviz.commands.cli import main

    assert main(["whatif", str(path), "--workers", "1"]) == 2
    err = capsys.readouterr().err
    assert len(err.splitlines()) == 1 and err.startswith("kvviz whatif: error: ")


def test_a_log_larger_than_the_reading_bound_is_refused_before_it_is_read(rec, monkeypatch):
    from kvviz.store import lane_log

    monkeypatch.setattr(lane_log, "MAX_LOG_ROWS", 10)
    with pytest.raises(KvvizError, match="more than kvviz reads"):
        read_recording(rec)


def test_an_aborted_request_that_never_ran_is_left_out_and_others_are_named(tmp_path, rec):
    path = tmp_path / "abort.db"
    shutil.copy(rec, path)
    _sql("INSERT INTO request_log VALUES ('vllm', 40, 'gone', 70, 70.0, 5, 5, 8, x'', 70, 0, "
         "'FINISHED_ABORTED', 0)",
         "UPDATE request_log SET finish_status = 'FINISHED_ERROR' WHERE seq_id = 7")(path)
    w, _, node = read_recording(path)
    assert len(w) == 40 and 40 not in node.seq_ids.tolist()
    assert any("another reason" in n and "seq 7" in n for n in node.notes)


_CELLS = [None, -1, 0, 1, 3, 2**31, 2**53, 2**62, 2**63 - 1, -2**63, 1.5, "x", "", b"",
          b"\x00" * 7, b"\x01" * 8, b"\xff" * 64, "FINISHED_ABORTED", "FINISHED_STOPPED"]
_COLS = ("seq_id", "arrive_step", "prompt_tokens", "max_tokens", "hash_width",
         "prompt_hashes", "finish_step", "output_tokens", "finish_status", "preemptions")


@pytest.fixture(scope="module")
def small(tmp_path_factory):
    path = tmp_path_factory.mktemp("small") / "small.db"
    noderun.write(path, noderun.workload(12, spread=20))
    _sql("ALTER TABLE request_log RENAME TO old",  # a table without the writer's constraints
         "CREATE TABLE request_log AS SELECT * FROM old", "DROP TABLE old")(path)
    return path


@settings(max_examples=int(os.environ.get("KVVIZ_FUZZ_EXAMPLES", "40")), deadline=None,
          derandomize=True, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(edits=st.lists(st.tuples(st.sampled_from(_COLS), st.integers(0, 12),
                                st.sampled_from(_CELLS)), min_size=1, max_size=4))
def test_any_edit_of_the_log_gives_a_replay_or_one_clear_error(tmp_path, small, edits):
    path = tmp_path / "fuzz.db"
    shutil.copy(small, path)
    db = sqlite3.connect(path)
    for col, seq, value in edits:
        db.execute(f"UPDATE request_log SET {col} = ? WHERE rowid = ?", (value, seq + 1))
    db.commit()
    db.close()
    try:
        w, s, node = read_recording(path)
    except KvvizError as exc:
        assert str(exc) and "\n" not in str(exc)
        return
    assert len(w) >= 1 and node.steps >= 0
