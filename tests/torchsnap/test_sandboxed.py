"""Snapshots parsed in a limited child: same records, and any bomb is one error line."""
from __future__ import annotations

import contextlib
import io
import os

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kvviz.commands.cli import main
from kvviz.core.sandbox import SandboxError
from kvviz.torchsnap import load_snapshot, loads_snapshot, loads_snapshot_sandboxed
from kvviz.torchsnap import sandboxed as sb
from tests.torchsnap import bombs
from tests.torchsnap.snaps import dumps, make_snapshot


def test_the_child_gives_the_same_records_as_parsing_in_process(tmp_path):
    data = dumps(make_snapshot())
    path = tmp_path / "s.pickle"
    path.write_bytes(data)
    assert loads_snapshot_sandboxed(data, name="s") == loads_snapshot(data, name="s")
    assert sb.load_snapshot_sandboxed(path) == load_snapshot(path)


@pytest.mark.parametrize("build", [bombs.deep_tuple_dict_key, bombs.deep_tuple_set_member,
                                   bombs.deep_tuple_frozenset_member])
def test_the_300k_deep_tuple_is_one_error_line_from_the_cli(tmp_path, capsys, build):
    path = tmp_path / "bomb.pickle"
    path.write_bytes(build())
    assert main(["torch-snapshot", str(path)]) == 2
    err = capsys.readouterr().err
    assert err.startswith("kvviz torch-snapshot: error:") and err.count("\n") == 1
    assert "nests deeper than 200 levels" in err


def test_a_fifo_is_refused_not_waited_on(tmp_path, capsys):
    fifo = tmp_path / "snap.pickle"
    os.mkfifo(fifo)
    assert main(["torch-snapshot", str(fifo)]) == 2
    assert "expected a regular file" in capsys.readouterr().err


def test_a_parse_that_outlives_its_deadline_is_cut_off(monkeypatch):
    monkeypatch.setattr(sb, "parse_limits",
                        lambda n: {"mem_mb": 1024, "cpu_s": 30, "wall_s": 1.5})
    with pytest.raises(SandboxError, match=r"^flood.pickle: the parser took longer than 1.5 s"):
        loads_snapshot_sandboxed(bombs.colliding_int_keys(20_000), name="flood.pickle")


def test_a_parse_over_its_memory_limit_is_refused(monkeypatch):
    monkeypatch.setattr(sb, "parse_limits",
                        lambda n: {"mem_mb": 150, "cpu_s": 30, "wall_s": 30})
    with pytest.raises(SandboxError, match=r"^lists.pickle: the parser ran out of its 150 MiB"):
        loads_snapshot_sandboxed(bombs.many_lists(3_000_000), name="lists.pickle")


def test_a_second_look_at_the_same_bytes_does_not_parse_again(monkeypatch):
    data = dumps({**make_snapshot(), "note": "cache test"})
    first = loads_snapshot_sandboxed(data, name="c")
    monkeypatch.setattr(sb, "run_limited", lambda *a, **k: pytest.fail("parsed twice"))
    assert loads_snapshot_sandboxed(data, name="c") is first


@settings(max_examples=20, deadline=None)
@given(data=st.one_of(
    st.binary(max_size=300).map(lambda b: b"\x80\x04" + b),
    st.tuples(st.integers(0, 10_000), st.integers(0, 255)).map(
        lambda f: (lambda d: d[:f[0] % len(d)] + bytes([f[1]]) + d[f[0] % len(d) + 1:])(
            dumps(make_snapshot()))),
    st.sampled_from([bombs.deep_tuple_dict_key, bombs.deep_list, bombs.tuple_dag_key,
                     bombs.deep_marks]).flatmap(lambda b: st.integers(1, 400).map(b)),
))
def test_any_file_is_a_summary_or_one_error_line(data):
    import tempfile

    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "x.pickle")
        with open(path, "wb") as f:
            f.write(data)
        with contextlib.redirect_stdout(io.StringIO()), \
                contextlib.redirect_stderr(io.StringIO()) as err:
            code = main(["torch-snapshot", path, "--json"])
    assert code in (0, 2)
    if code == 2:
        lines = err.getvalue().splitlines()
        assert len(lines) == 1 and lines[0].startswith("kvviz torch-snapshot: error:")
