"""`kvviz export` writes a recording's KV-event tables too: Parquet keeps the raw payloads (the
cache rebuilds from the export alone), CSV keeps the counts without the binary frames."""
from __future__ import annotations

import sqlite3

import pandas as pd
import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from kvviz.commands.cli import main
from kvviz.node.kvevents.decode import decode
from kvviz.node.kvevents.rebuild import load_model, rebuild
from kvviz.store import kv_reader
from tests.examples import examples
from tests.kvevents.conftest import free_base_port
from tests.kvevents.recordings import write_kv_recording


@pytest.fixture(scope="module")
def kv_rec(tmp_path_factory):
    rec = tmp_path_factory.mktemp("kv") / "ev.db"
    write_kv_recording(rec, free_base_port(2))
    return rec


def _recorded(path) -> dict:
    with kv_reader.connect(path) as conn:
        model, _ = load_model(conn)
    return {k.stream: set(f.parent) for k, f in model.forests.items()}


def test_parquet_export_rebuilds_the_same_caches(tmp_path):
    rec = tmp_path / "ev.db"
    write_kv_recording(rec, free_base_port(2))
    assert main(["export", str(rec), "--parquet", str(tmp_path / "pq")]) == 0
    batches = pd.read_parquet(tmp_path / "pq" / "kv_batches.parquet")
    streams = pd.read_parquet(tmp_path / "pq" / "kv_streams.parquet")
    gaps = pd.read_parquet(tmp_path / "pq" / "kv_gaps.parquet")
    rebuilt = {}
    for sid, group in batches[batches.status == "ok"].sort_values("batch_id").groupby("stream_id"):
        seqs = list(group.seq)
        lost = [i for i in range(1, len(seqs)) if seqs[i] > seqs[i - 1] + 1]
        since = lost[-1] if lost else 0  # a lost batch: only what was stored after it counts
        events = [ev for p in list(group.payload)[since:] for ev in decode(bytes(p)).events]
        rebuilt[int(sid)] = set(rebuild(events))
    assert rebuilt == _recorded(rec)
    assert len(streams) == 2 and list(gaps.kind) == ["gap"]


def test_csv_export_has_the_counts_and_no_binary_frames(tmp_path):
    rec = tmp_path / "ev.db"
    write_kv_recording(rec, free_base_port(2))
    assert main(["export", str(rec), "--csv", str(tmp_path / "csv")]) == 0
    batches = pd.read_csv(tmp_path / "csv" / "kv_batches.csv")
    assert not {"payload", "topic"} & set(batches.columns)
    with kv_reader.connect(rec) as conn:
        stored = conn.execute("SELECT SUM(n_stored), COUNT(*) FROM kv_batches").fetchone()
    assert (int(batches.n_stored.sum()), len(batches)) == stored
    assert (tmp_path / "csv" / "kv_streams.csv").is_file()


def test_a_recording_without_kv_events_exports_no_kv_tables(tmp_path):
    from kvviz.store.writer import RunWriter

    RunWriter(tmp_path / "r.db", {"mode": "sim", "lanes": []}).close()
    assert main(["export", str(tmp_path / "r.db"), "--csv", str(tmp_path / "csv")]) == 0
    assert not list((tmp_path / "csv").glob("kv_*"))


COLUMNS = {"kv_streams": ("endpoint", "dp_rank", "encoding", "first_t", "summary_json"),
           "kv_batches": ("seq", "t", "ts", "n_stored", "status", "topic", "payload"),
           "kv_gaps": ("t", "kind", "first_seq", "filled")}
VALUES = st.one_of(st.none(), st.integers(-2**63, 2**63 - 1), st.floats(), st.text(max_size=8),
                   st.binary(max_size=8))


@settings(max_examples=examples(30), deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(table=st.sampled_from(sorted(COLUMNS)), data=st.data(), value=VALUES,
       fmt=st.sampled_from(["--parquet", "--csv"]))
def test_a_hand_edited_kv_table_exports_or_is_one_error(kv_rec, tmp_path_factory, table, data,
                                                        value, fmt):
    col = data.draw(st.sampled_from(COLUMNS[table]))
    out = tmp_path_factory.mktemp("x")
    rec = out / "ev.db"
    rec.write_bytes(kv_rec.read_bytes())
    with sqlite3.connect(rec) as db:
        try:
            db.execute(f"UPDATE {table} SET {col} = ? WHERE rowid = 1", (value,))
        except sqlite3.IntegrityError:  # a NOT NULL column: SQLite refuses the edit itself
            assume(False)
    assert main(["export", str(rec), fmt, str(out / "dir")]) in (0, 2)


def test_a_missing_kv_table_is_one_error(kv_rec, tmp_path, capsys):
    rec = tmp_path / "ev.db"
    rec.write_bytes(kv_rec.read_bytes())
    with sqlite3.connect(rec) as db:
        db.execute("DROP TABLE kv_gaps")
    assert main(["export", str(rec), "--csv", str(tmp_path / "csv")]) == 2
    assert "kv_gaps" in capsys.readouterr().err


def test_a_value_of_the_wrong_type_is_named_by_table_and_column(kv_rec, tmp_path, capsys):
    rec = tmp_path / "ev.db"
    rec.write_bytes(kv_rec.read_bytes())
    with sqlite3.connect(rec) as db:
        db.execute("UPDATE kv_batches SET seq = 'x' WHERE rowid = 1")
    assert main(["export", str(rec), "--parquet", str(tmp_path / "pq")]) == 2
    assert "kv_batches.seq: 1 row(s) hold text, not integer" in capsys.readouterr().err
