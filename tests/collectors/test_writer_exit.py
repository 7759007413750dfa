"""The writer process exits as soon as it has closed the run: it never waits for its own
interpreter teardown, which a loaded machine starves at nice +10 (the collector's stop then
waited for it)."""
from __future__ import annotations

import multiprocessing

from collectors import writer_process
from kvviz.store.reader import RunReader
from tests.collectors.slow_teardown import slow_child


def test_the_writer_process_exits_right_after_closing_the_run(tmp_path):
    ctx = multiprocessing.get_context("spawn")
    data_r, data_w = ctx.Pipe(duplex=False)
    back_r, back_w = ctx.Pipe(duplex=False)
    spec = writer_process.StoreSpec(tmp_path / "run.db", {"mode": "sim", "lanes": []})
    proc = ctx.Process(target=slow_child, args=(spec, data_r, back_w, 0))
    proc.start()
    data_r.close()
    back_w.close()
    try:
        assert back_r.poll(60) and back_r.recv()[0] == "ready"
        writer_process.send(data_w, *writer_process.pack(("close", "stopped", "by the test")))
        assert back_r.poll(60) and back_r.recv()[0] == "closed"
        proc.join(20)  # a normal exit would run the 60 s atexit handler first
        assert not proc.is_alive() and proc.exitcode == 0
    finally:
        if proc.is_alive():
            proc.kill()
            proc.join()
    r = RunReader(tmp_path / "run.db")
    assert (r.status, r.status_message) == ("stopped", "by the test")
    r.close()
