"""A hand-edited KV-event recording on the Node page's KV events tab, beside an attach
recording's scrapes and on Live (a collector's own run): a view, or one st.error naming what
is wrong; never an exception box."""
from __future__ import annotations

import re
import shutil
import sqlite3
from pathlib import Path

import pytest
import streamlit as st
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as hs

ROOT = Path(__file__).resolve().parents[2]
from kvviz.commands.cli import main  # noqa: E402
from tests.examples import examples  # noqa: E402
from tests.kvevents.conftest import free_base_port  # noqa: E402
from tests.kvevents.recordings import write_attach_recording, write_kv_recording  # noqa: E402
from tests.pages.apptest_fixtures import use_collector  # noqa: E402
from tests.pages.pagehelpers import no_exception, page, tiles  # noqa: E402

COLUMNS = {"kv_streams": ("stream_id", "endpoint", "dp_rank", "encoding", "summary_json"),
           "kv_batches": ("stream_id", "seq", "t", "status", "n_stored", "payload"),
           "kv_gaps": ("stream_id", "t", "kind", "first_seq", "filled")}
VALUES = hs.one_of(hs.none(), hs.integers(-2**63, 2**63 - 1), hs.floats(),
                   hs.text(max_size=6), hs.binary(max_size=6), hs.just("[1]"))


@pytest.fixture(scope="module")
def clean(tmp_path_factory) -> dict[str, Path]:
    d = tmp_path_factory.mktemp("kvclean")
    write_kv_recording(d / "ev.db", free_base_port(2))
    write_attach_recording(d / "att.db", free_base_port(2))
    assert main(["collect", "--mode", "sim", "--quiet", "--steps-per-s", "0", "--hz", "20",
                 "--lane", "paged:16:prefix", "--prefix-sharing", "0.8", "--rate", "100",
                 "--duration", "1", "--kv-events-record", "--out", str(d / "own.db")]) == 0
    return {"node": d / "ev.db", "attach": d / "att.db", "live": d / "own.db"}


@settings(max_examples=examples(25), deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(which=hs.sampled_from(["node", "attach", "live"]), table=hs.sampled_from(sorted(COLUMNS)),
       data=hs.data(), value=VALUES)
def test_a_hand_edited_kv_recording_shows_a_view_or_an_error(clean, tmp_path_factory,
                                                             monkeypatch, which, table, data,
                                                             value):
    runs = tmp_path_factory.mktemp("runs")
    monkeypatch.setenv("KVVIZ_RUNS_DIR", str(runs))
    use_collector(monkeypatch, "tests.pages.fake_collector")
    dst = runs / clean[which].name
    shutil.copy(clean[which], dst)
    col = data.draw(hs.sampled_from(COLUMNS[table]))
    with sqlite3.connect(dst) as db:
        try:
            db.execute(f"UPDATE {table} SET {col} = ? WHERE rowid IN (1, 2)", (value,))
        except sqlite3.IntegrityError:  # NOT NULL or a duplicate key: SQLite refuses it
            assume(False)
    if which in ("node", "attach"):
        at = page("pages/node.py")
    else:
        at = page("pages/live.py", run="own.db")
    no_exception(at)


def _text_in_seq(clean, tmp_path, monkeypatch, which: str, name: str):
    """The Node page over recording `which` copied as `name`, its batch 3's seq made text;
    returns the page and its errors with Markdown's escapes removed."""
    monkeypatch.setenv("KVVIZ_RUNS_DIR", str(tmp_path))
    st.cache_resource.clear()
    shutil.copy(clean[which], tmp_path / name)
    with sqlite3.connect(tmp_path / name) as db:
        db.execute("UPDATE kv_batches SET seq = 'x' WHERE batch_id = 3")
    at = page("pages/node.py")
    no_exception(at)
    return at, [re.sub(r"\\(.)", r"\1", e.value) for e in at.error]


def test_text_in_seq_is_one_error_naming_the_row_and_column(clean, tmp_path, monkeypatch):
    _, shown = _text_in_seq(clean, tmp_path, monkeypatch, "node", "ev.db")
    assert any("kv_batches row 3: seq 'x' is not a number" in e for e in shown), shown


def test_a_damaged_attach_recording_is_one_error_beside_its_scrapes(clean, tmp_path,
                                                                    monkeypatch):
    at, shown = _text_in_seq(clean, tmp_path, monkeypatch, "attach", "att.db")
    assert any("att.db's KV events" in e and "kv_batches row 3" in e for e in shown), shown
    assert "KV usage" in tiles(at)  # the scrapes beside it still show


def test_a_file_name_in_a_read_error_is_text_not_markdown(clean, tmp_path, monkeypatch):
    at, _ = _text_in_seq(clean, tmp_path, monkeypatch, "node", "**loud**_ev_.db")
    raw = [e.value for e in at.error if "kv_batches row 3" in re.sub(r"\\(.)", r"\1", e.value)]
    assert raw and all(r"\*\*loud\*\*\_ev\_\.db" in e for e in raw), raw
