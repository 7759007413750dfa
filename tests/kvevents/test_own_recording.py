"""`kvviz collect --kv-events` records what it publishes into its own run's kv tables (the same
tables `kvviz events` writes), so the dashboard reads kvviz's own stream from the run."""
from __future__ import annotations

import argparse

from collectors import launch
from kvviz.node.kvevents.rebuild import load_model
from kvviz.settings import flags
from kvviz.store import kv_reader
from kvviz.store.reader import RunReader
from tests.kvevents.conftest import free_base_port


def _collector(tmp_path, *extra: str):
    p = argparse.ArgumentParser()
    flags.add_arguments(p)
    port = free_base_port(2)
    args = p.parse_args(["--mode", "sim", "--quiet", "--steps-per-s", "0", "--hz", "20",
                         "--lane", "paged:16:prefix", "--lane", "paged:16", "--prefix-sharing",
                         "0.8", "--rate", "200", "--duration", "1.5", "--out",
                         str(tmp_path / "c.db"), "--kv-events", f"tcp://127.0.0.1:{port}",
                         *extra])
    return launch.build(flags.settings_of(args))


def test_the_run_holds_every_published_batch_and_the_same_cache(tmp_path):
    col = _collector(tmp_path)
    try:
        col.run()
    finally:
        for lp in col.kv_publishers:
            lp.pub.close()
    (lp,) = col.kv_publishers  # one prefix-caching lane: DP rank 0
    with kv_reader.connect(tmp_path / "c.db") as conn:
        (s,) = kv_reader.streams(conn)
        seqs = [r[0] for r in conn.execute("SELECT seq FROM kv_batches ORDER BY batch_id")]
        model, _ = load_model(conn)
    assert seqs == list(range(lp.pub.seq)) and seqs  # every batch, in order, none twice
    assert s["summary"] == {"lane": lp.lane} and s["endpoint"] == lp.endpoint
    (f,) = model.forests.values()
    assert set(f.parent) == lp.cached_hashes() and f.removed > 0
    r = RunReader(tmp_path / "c.db")  # the engine's own tables are whole beside them
    try:
        assert len(r.samples()) > 0
    finally:
        r.close()


def test_record_alone_opens_no_socket_and_records_the_same_way(tmp_path):
    p = argparse.ArgumentParser()
    flags.add_arguments(p)
    args = p.parse_args(["--mode", "sim", "--quiet", "--steps-per-s", "0", "--hz", "20",
                         "--lane", "paged:16:prefix", "--prefix-sharing", "0.8", "--rate", "200",
                         "--duration", "1", "--out", str(tmp_path / "c.db"),
                         "--kv-events-record"])
    col = launch.build(flags.settings_of(args))
    col.run()
    (lp,) = col.kv_publishers
    assert not hasattr(lp.pub, "ctx")  # nothing bound, nothing sent
    with kv_reader.connect(tmp_path / "c.db") as conn:
        (s,) = kv_reader.streams(conn)
        model, _ = load_model(conn)
    assert s["endpoint"] == "kvviz:paged:16:prefix" and s["encoding"] == "map"
    assert set(next(iter(model.forests.values())).parent) == lp.cached_hashes()


def test_record_without_a_prefix_lane_is_one_error(tmp_path, capsys):
    from kvviz.commands.cli import main

    assert main(["collect", "--mode", "sim", "--lane", "paged:16", "--kv-events-record",
                 "--duration", "1", "--out", str(tmp_path / "c.db")]) == 2
    assert capsys.readouterr().err.strip() == (
        "kvviz collect: error: --kv-events-record: no lane caches prefixes; add one such as "
        "--lane paged:16:prefix")
    assert not (tmp_path / "c.db").exists()
