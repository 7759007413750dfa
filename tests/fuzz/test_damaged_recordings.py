"""Damaged recordings: hand-edited fields, dropped tables and columns, cut blobs and files.

Property, for the reader and for every page that opens recordings (AppTest): a result or one
clear error (StoreError; st.error on a page), never another exception.
"""
from __future__ import annotations

import shutil
import sqlite3
import zlib
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from kvviz.core.errors import StoreError
from kvviz.store.reader import RunReader
from tests.pages.pagehelpers import shown
from tests.pages.recordings import write_recording

DEEP = "[" * 100_000 + "]" * 100_000
# The hand edits of issue 13 and their kin: one SQL script each.
NAMED = {
    "meta list": "UPDATE run SET meta = '[]'",
    "meta lanes int": "UPDATE run SET meta = '{\"lanes\": 5}'",
    "meta lane int": "UPDATE run SET meta = '{\"lanes\": [5]}'",
    "meta lane name int": "UPDATE run SET meta = '{\"lanes\": [{\"name\": 5}]}'",
    "meta deep": f"UPDATE run SET meta = '{DEEP}'",
    "meta deep object": "UPDATE run SET meta = '" + '{"a":' * 50_000 + "1" + "}" * 50_000 + "'",
    "meta not json": "UPDATE run SET meta = 'not json'",
    "meta blob": "UPDATE run SET meta = x'00ff'",
    "meta number": "UPDATE run SET meta = 42",
    "status bogus": "UPDATE run SET status = 'bogus'",
    "status number": "UPDATE run SET status = 5",
    "status message blob": "UPDATE run SET status_message = x'00'",
    "heartbeat text": "UPDATE run SET heartbeat_unix = 'abc'",
    "heartbeat blob": "UPDATE run SET heartbeat_unix = x'0102'",
    "heartbeat inf": "UPDATE run SET heartbeat_unix = 9e999",
    "format text": "UPDATE run SET format_version = 'abc'",
    "format future": "UPDATE run SET format_version = 99",
    "stride text": "UPDATE run SET blockmap_stride = 'x'",
    "stride zero": "UPDATE run SET blockmap_stride = 0",
    "no run row": "DELETE FROM run",
    "app other": "UPDATE run SET app = 'other'",
    "samples t text": "UPDATE samples SET t = 'abc' WHERE sample_id = 3",
    "samples t all text": "UPDATE samples SET t = 'abc'",
    "samples t blob": "UPDATE samples SET t = x'00'",
    "samples t inf": "UPDATE samples SET t = 9e999 WHERE sample_id = 4",
    "samples step text": "UPDATE samples SET step = 'x'",
    "samples lane int": "UPDATE samples SET lane = 5 WHERE sample_id = 2",
    "samples share text": "UPDATE samples SET used_tokens = 'x'",
    "samples counter text": "UPDATE samples SET admit_failures_capacity = 'many'",
    "samples tokens blob": "UPDATE samples SET tokens_generated = x'01'",
    "drop samples": "DROP TABLE samples",
    "drop samples lane": "DROP INDEX samples_lane_t; ALTER TABLE samples DROP COLUMN lane",
    "drop samples t": "DROP INDEX samples_lane_t; DROP INDEX IF EXISTS samples_t; "
                      "ALTER TABLE samples DROP COLUMN t",
    "drop samples share": "ALTER TABLE samples DROP COLUMN used_tokens",
    "maps truncated": "UPDATE blockmaps SET owner = substr(owner, 1, length(owner) / 2)",
    "maps lengths cut": "UPDATE blockmaps SET lengths = substr(lengths, 1, 3)",
    "maps blob text": "UPDATE blockmaps SET filled = 'text'",
    "maps blob null": "UPDATE blockmaps SET filled = NULL",
    "maps layout list": "UPDATE blockmaps SET layout = '[]'",
    "maps layout deep": f"UPDATE blockmaps SET layout = '{DEEP}'",
    "maps layout int": "UPDATE blockmaps SET layout = 7",
    "maps zlib bomb": "UPDATE blockmaps SET owner = zeroblob(0)",  # replaced in damage_sql
    "maps huge": "UPDATE blockmaps SET num_blocks = 1000000000000",
    "maps negative": "UPDATE blockmaps SET num_blocks = -1, runs = -5",
    "maps block size 0": "UPDATE blockmaps SET block_size = 0",
    "maps block size text": "UPDATE blockmaps SET block_size = 'x'",
    "maps encoding": "UPDATE blockmaps SET encoding = 'zstd-9'",
    "maps t text": "UPDATE blockmaps SET t = 'x'",
    "maps label int": "UPDATE blockmaps SET label = 5",
    "drop blockmaps": "DROP TABLE blockmaps",
    "events t text": "UPDATE events SET t = 'x'",
    "events kind int": "UPDATE events SET kind = 5",
    "events count text": "UPDATE events SET count = 'x'",
    "drop events": "DROP TABLE events",
    "chunks n text": "UPDATE event_chunks SET n = 'x'",
    "chunks n huge": "UPDATE event_chunks SET n = 1000000000000",
    "chunks n negative": "UPDATE event_chunks SET n = -3",
    "chunks data cut": "UPDATE event_chunks SET data = substr(data, 1, length(data) / 2)",
    "chunks data text": "UPDATE event_chunks SET data = 'abc'",
    "chunks lane int": "UPDATE event_chunks SET lane = 5",
    "chunks encoding": "UPDATE event_chunks SET encoding = 'x'",
    "drop chunks": "DROP TABLE event_chunks",
    "device t text": "UPDATE device_memory SET t = 'x'",
    "device bytes text": "ALTER TABLE device_memory ADD COLUMN nvml_used_bytes; "
                         "UPDATE device_memory SET nvml_used_bytes = 'lots'",
    "device mixed": "UPDATE device_memory SET nvml_error = 5 WHERE row_id = 1",
    "drop device": "DROP TABLE device_memory",
    "node table odd": "CREATE TABLE node_samples (row_id INTEGER PRIMARY KEY, t, raw_zlib); "
                      "INSERT INTO node_samples VALUES (1, 'x', x'00')",
}
FILE_DAMAGE = ("empty", "not sqlite", "cut third", "cut page", "zero page 2", "flip bytes")


@pytest.fixture(scope="module")
def clean(tmp_path_factory) -> Path:
    return write_recording(tmp_path_factory.mktemp("clean") / "rec.db", steps=200, every=20,
                           capacity=8192)


BOMB = zlib.compress(bytes(256 * 2**20), 9)  # 256 MiB of zeros in ~250 KB


def damage_sql(src: Path, dst: Path, sql: str) -> Path:
    shutil.copy(src, dst)
    conn = sqlite3.connect(dst)
    try:
        if sql == NAMED["maps zlib bomb"]:
            with conn:
                conn.execute("UPDATE blockmaps SET owner = ?", (BOMB,))
        else:
            conn.executescript(sql)
    finally:
        conn.close()
    return dst


def damage_file(src: Path, dst: Path, how: str, seed: int = 0) -> Path:
    data = bytearray(src.read_bytes())
    page = 4096
    if how == "empty":
        data = bytearray()
    elif how == "not sqlite":
        data = bytearray(b"kvviz? no." * 50)
    elif how == "cut third":
        data = data[: len(data) // 3]
    elif how == "cut page":
        data = data[: len(data) - page]
    elif how == "zero page 2":
        data[page: 2 * page] = bytes(page)
    else:  # a few bytes flipped past the header, where the seed says
        for k in range(8):
            i = 100 + (seed * 7919 + k * 104729) % (len(data) - 100)
            data[i] ^= 0xFF
    dst.write_bytes(bytes(data))
    return dst


def attempt(fn, *args, **kw):
    """fn(*args, **kw), or None when it raised StoreError (the one allowed failure)."""
    try:
        return fn(*args, **kw)
    except StoreError:
        return None


def read_everything(path: Path) -> None:
    """Every public read of RunReader; StoreError is the one allowed failure."""
    r = attempt(RunReader, path)
    if r is None:
        return
    try:
        for fn, kw in ((r.refresh, {}), (r.lanes, {}), (r.last_t, {}), (r.samples, {}),
                       (r.events, {}), (r.events, {"kinds": ["admit_failed"], "limit": 50}),
                       (r.events, {"since_t": 1.0}), (r.device_memory, {}),
                       (r.node_samples, {"raw": True}), (r.blockmap_rows, {}),
                       (r.summary, {})):
            attempt(fn, **kw)
        for lane in attempt(r.lanes) or []:
            attempt(r.blockmap_index, lane)
            attempt(r.latest_blockmap, lane)
            attempt(r.blockmap_at, lane, 2.0)
            attempt(r.samples, lane, 1.0)
    finally:
        r.close()


@pytest.mark.parametrize("name", list(NAMED))
def test_a_hand_edited_recording_reads_or_fails_with_a_store_error(clean, tmp_path, name):
    read_everything(damage_sql(clean, tmp_path / "d.db", NAMED[name]))


@pytest.mark.parametrize("how", FILE_DAMAGE)
def test_a_damaged_file_reads_or_fails_with_a_store_error(clean, tmp_path, how):
    read_everything(damage_file(clean, tmp_path / "d.db", how))


def test_a_zlib_bomb_in_a_block_map_is_refused_before_it_is_inflated(clean, tmp_path):
    r = RunReader(damage_sql(clean, tmp_path / "d.db", NAMED["maps zlib bomb"]))
    try:
        # refused from its length (more than its row allows), or inflating stops at the bound
        with pytest.raises(StoreError, match="owner (is [0-9]+ bytes, more than its row allows|"
                                             "inflates past)"):
            r.latest_blockmap(r.lanes()[0])
    finally:
        r.close()


@pytest.mark.parametrize("sql, words", [
    (NAMED["meta list"], "must be a JSON object"),
    (NAMED["meta lanes int"], "'lanes' must be a list"),
    (NAMED["meta deep"], "nested too deeply"),
    (NAMED["heartbeat text"], "heartbeat_unix"),
    (NAMED["status bogus"], "run status"),
])
def test_a_damaged_run_header_is_named_when_opened(clean, tmp_path, sql, words):
    with pytest.raises(StoreError, match=words):
        RunReader(damage_sql(clean, tmp_path / "d.db", sql))


def test_text_in_samples_t_is_named_by_table_and_column(clean, tmp_path):
    r = RunReader(damage_sql(clean, tmp_path / "d.db", NAMED["samples t text"]))
    try:
        with pytest.raises(StoreError, match="samples column 't'"):
            r.samples()
    finally:
        r.close()


TABLE_COLS = {
    "run": ("meta", "status", "status_message", "heartbeat_unix", "format_version",
            "blockmap_stride"),
    "samples": ("t", "step", "lane", "used_tokens", "external_frag_index", "preemptions",
                "tokens_per_s", "running"),
    "blockmaps": ("t", "num_blocks", "runs", "block_size", "bytes_per_token", "label",
                  "contiguous", "encoding", "layout", "lengths", "filled", "owner", "buddy"),
    "events": ("t", "step", "lane", "kind", "seq_id", "reason", "count"),
    "event_chunks": ("lane", "kind", "n", "t_first", "t_last", "encoding", "data"),
    "device_memory": ("t", "nvml_error"),
}
VALUES = ("'x'", "x'00ff'", "NULL", "-1", "0", "9e999", "-9e999", "1e300", "4611686018427387904",
          "'[]'", "'{}'", "'{\"lanes\": {}}'", "substr(COL, 1, length(COL) / 2)",
          "substr(COL, 2)", "COL || x'00'", "zeroblob(16)")
edits = st.tuples(st.sampled_from(sorted(TABLE_COLS)), st.data()).map(
    lambda td: (td[0], td[1].draw(st.sampled_from(TABLE_COLS[td[0]]))))


@st.composite
def damage(draw) -> list[str]:
    out = []
    for _ in range(draw(st.integers(1, 3))):
        table, col = draw(edits)
        val = draw(st.sampled_from(VALUES)).replace("COL", col)
        rows = draw(st.sampled_from(["", " WHERE rowid = (SELECT MIN(rowid) FROM {t})",
                                     " WHERE rowid = (SELECT MAX(rowid) FROM {t})"]))
        out.append(f"UPDATE {table} SET {col} = {val}" + rows.format(t=table))
    return out


def apply(src: Path, dst: Path, script: list[str]) -> Path:
    shutil.copy(src, dst)
    conn = sqlite3.connect(dst)
    try:
        for sql in script:
            try:
                conn.executescript(sql)
            except (sqlite3.IntegrityError, sqlite3.OperationalError):
                pass  # NOT NULL / CHECK (a file SQLite would refuse), or a table dropped before
        conn.commit()
    finally:
        conn.close()
    return dst


@settings(max_examples=40, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(script=damage())
def test_random_field_damage_reads_or_fails_with_a_store_error(clean, tmp_path, script):
    read_everything(apply(clean, tmp_path / "d.db", script))


# ---- the pages ------------------------------------------------------------------------------
RUN_PAGES = ("pages/replay.py", "pages/gpu.py", "pages/live.py", "pages/node.py")
ROOT = Path(__file__).resolve().parents[2]


def show(runs: Path, script: str):
    """The page opened on runs/d.db, as a browser session that picked it in the sidebar."""
    from streamlit.testing.v1 import AppTest

    from tests.pages.apptest_fixtures import framed

    at = framed(AppTest.from_file(str(ROOT / script), default_timeout=60))
    at.session_state["kvviz_run"] = "d.db"
    return at.run()


@pytest.fixture
def runs(tmp_path: Path, monkeypatch) -> Path:
    import streamlit

    from kvviz.runs import process
    from tests.pages.apptest_fixtures import use_collector

    monkeypatch.setenv("KVVIZ_RUNS_DIR", str(tmp_path))
    use_collector(monkeypatch, "tests.pages.fake_collector")
    yield tmp_path
    process.stop_all()
    streamlit.cache_resource.clear()


def no_exception_box(at) -> None:
    assert not at.exception, [e.message for e in at.exception]


ISSUE_CASES = ("meta list", "meta lanes int", "meta deep", "samples t text", "heartbeat text",
               "maps truncated", "events t text", "device bytes text", "chunks data text")


OPEN_FAILS = ("meta list", "meta lanes int", "meta deep", "heartbeat text")


@pytest.mark.parametrize("script", RUN_PAGES[:3])
@pytest.mark.parametrize("name", ISSUE_CASES)
def test_a_page_on_a_hand_edited_recording_shows_an_error_not_an_exception(clean, runs, script,
                                                                          name):
    damage_sql(clean, runs / "d.db", NAMED[name])
    at = show(runs, script)
    no_exception_box(at)
    if name in OPEN_FAILS:  # the reader refuses the file: every page says why
        assert any("d.db" in shown(e) for e in at.error)


@settings(max_examples=10, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(script=st.sampled_from(RUN_PAGES), edits=damage(), name=st.sampled_from(sorted(NAMED)))
def test_a_page_on_randomly_damaged_recordings_never_shows_an_exception(clean, runs, script,
                                                                        edits, name):
    apply(clean, runs / "d.db", [NAMED[name], *edits])
    no_exception_box(show(runs, script))
