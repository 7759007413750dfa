"""The verifier, `kvviz info` and `kvviz export` on crafted recordings (tests/fuzz/crafted.py).

Property: a report or one clear error (verify: a Report or Unreadable, exit 0/1/2; info and
export: exit 0 or 2 with one `error:` line), never a traceback, within a memory bound (traced
peak under 256 MiB for the verifier, however much a bomb or a count declares) and an alarm
at 10x the verifier's ~2 s target that catches a hang.
Times are in docs/BENCHMARKS.md, not asserted more tightly here.
"""
from __future__ import annotations

import signal
import sys
import tracemalloc
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from kvviz.commands.cli import main as cli
from kvviz.verify import Report, Unreadable, verify
from kvviz.verify.__main__ import main as verify_main
from tests.fuzz import crafted

MEMORY = 256 << 20
HANG_S = 20  # 10x the ~2 s target (docs/BENCHMARKS.md has the times): a bound, not a timing


@pytest.fixture(scope="module")
def sources(tmp_path_factory) -> dict[str, Path]:
    d = tmp_path_factory.mktemp("crafted")
    return {"engine": crafted.engine_run(d / "engine.db"), "kv": crafted.kv_run(d / "kv.db"),
            "node": crafted.node_run(d / "node.db")}


@pytest.fixture(scope="module")
def cases() -> dict:
    return crafted.named(crafted.bomb(1))


def _alarm(*_):
    raise TimeoutError(f"no answer within {HANG_S} s")


def verified(path: Path) -> Report | None:
    """verify(path) within the bounds; None when it said Unreadable."""
    old = signal.signal(signal.SIGALRM, _alarm)
    signal.alarm(HANG_S)
    tracemalloc.start()
    try:
        return verify(path)
    except Unreadable as exc:
        assert str(exc).startswith(str(path)), exc
        return None
    finally:
        peak = tracemalloc.get_traced_memory()[1]
        tracemalloc.stop()
        signal.alarm(0)
        signal.signal(signal.SIGALRM, old)
        assert peak < MEMORY, f"verify peaked at {peak / 2**20:.0f} MiB"


def one_clear_error(capsys, code: int, allowed: tuple[int, ...]) -> None:
    out = capsys.readouterr()
    assert code in allowed, (code, out.err[-2000:])
    assert "Traceback" not in out.err + out.out
    if code == 2:
        assert out.err.count("error:") == 1, out.err[-2000:]


def check_all(path: Path, tmp_path: Path, capsys, tools: bool = True) -> None:
    rep = verified(path)
    if rep is not None:
        assert rep.mismatch_count >= len(rep.mismatches)
    one_clear_error(capsys, verify_main([str(path), "--json"]), (0, 1, 2))
    if tools:
        one_clear_error(capsys, cli(["info", str(path)]), (0, 2))
        one_clear_error(capsys, cli(["export", str(path), "--parquet", str(tmp_path / "pq"),
                                     "--overwrite"]), (0, 2))


@pytest.mark.parametrize("source", ["engine", "kv", "node"])
def test_the_sources_verify_clean(sources, source):
    rep = verify(sources[source])
    assert rep.mismatch_count == 0, rep.mismatches[:5]


NAMES = list(crafted.named(b"").keys())


@pytest.mark.parametrize("name", NAMES)
def test_a_crafted_recording_gets_a_report_or_one_clear_error(sources, cases, tmp_path, capsys,
                                                               name):
    for kind, src in sources.items():
        path = crafted.edit(src, tmp_path / f"{kind}.db", cases[name])
        check_all(path, tmp_path, capsys)


@pytest.mark.parametrize("name, words", [
    ("bomb blockmaps", "is stored in"),  # refused from its length, before it is read
    ("multi-stream bomb blockmaps", "is stored in"),
    ("bomb event_chunks", "is stored in"),
    ("bomb node_samples", "not a JSON object"),  # zeros: its first bytes tell
    ("small bomb blockmaps", "inflates past"),  # inflating stops at the bound
    ("small bomb block_tables", "inflates past"),
    ("small bomb node_samples", "not a JSON object"),  # its first bytes tell
    ("17 streams blockmaps", "more than 16 zlib streams")])
def test_a_bomb_is_a_mismatch_naming_its_bound_not_an_inflation(sources, cases, tmp_path,
                                                                 name, words):
    src = sources["node" if "node_samples" in name else "engine"]
    rep = verified(crafted.edit(src, tmp_path / "b.db", cases[name]))
    assert rep is not None and rep.mismatch_count > 0
    assert any(words in m for m in rep.mismatches), rep.mismatches[:3]


def test_oversized_counts_are_named(sources, cases, tmp_path):
    for name, words in (("num_blocks 10^12", "num_blocks 1000000000000 is outside"),
                        ("chunk n 10^12", "n 1000000000000 is outside"),
                        ("delta_first 10^30", "delta_first"), ("idx text", "column idx")):
        rep = verified(crafted.edit(sources["engine"], tmp_path / "o.db", cases[name]))
        assert rep is not None and any(words in m for m in rep.mismatches), (name,
                                                                             rep.mismatches[:3])


@pytest.mark.parametrize("name, words", [("format_version text", "format_version"),
                                         ("meta deep list", "run.meta"),
                                         ("meta lane name list", r"lanes\[0\]"),
                                         ("drop blockmaps.owner", "no column 'owner'")])
def test_a_file_outside_the_format_is_unreadable_naming_what(sources, cases, tmp_path, name,
                                                             words):
    path = crafted.edit(sources["engine"], tmp_path / "u.db", cases[name])
    with pytest.raises(Unreadable, match=words):
        verify(path)


edits = st.sampled_from(sorted(crafted.TABLES)).flatmap(
    lambda t: st.tuples(st.just(t), st.sampled_from(crafted.TABLES[t]),
                        st.sampled_from(crafted.RETYPED),
                        st.sampled_from(["", " WHERE rowid = (SELECT MIN(rowid) FROM {t})"])))


@settings(max_examples=60, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(script=st.lists(edits, min_size=1, max_size=3), source=st.sampled_from(["engine", "kv",
                                                                              "node"]))
def test_random_retyping_of_documented_columns_gets_a_report_or_one_clear_error(
        sources, tmp_path, capsys, script, source):
    sql = ";".join(f"UPDATE {t} SET {c} = {v}" + w.format(t=t) for t, c, v, w in script)
    check_all(crafted.edit(sources[source], tmp_path / "r.db", sql), tmp_path, capsys,
              tools=False)


@pytest.mark.parametrize("column", ["n_events", "n_stored", "n_removed"])
@pytest.mark.parametrize("value", ["-9e999", "9e999", "1e300"])
def test_an_infinite_kv_count_is_a_broken_rule_not_a_crash(sources, tmp_path, capsys, column,
                                                           value):
    # Hypothesis found it: a REAL -9e999 (-inf) in a batch's count made the contents' total
    # infinite and int() raised. The row breaks the integer rule; the totals skip it.
    path = crafted.edit(sources["kv"], tmp_path / "r.db", f"UPDATE kv_batches SET {column} = "
                        f"{value} WHERE rowid = (SELECT MIN(rowid) FROM kv_batches)")
    rep = verified(path)
    assert rep is not None and any("integers" in m for m in map(str, rep.mismatches))
    check_all(path, tmp_path, capsys, tools=False)


if __name__ == "__main__":  # write the crafted set to a directory, for timing by hand
    out = Path(sys.argv[1])
    out.mkdir(parents=True, exist_ok=True)
    srcs = {"engine": crafted.engine_run(out / "src-engine.db"),
            "kv": crafted.kv_run(out / "src-kv.db"), "node": crafted.node_run(out / "src-node.db")}
    for i, (_name, how) in enumerate(crafted.named(crafted.bomb(1)).items()):
        for kind, src in srcs.items():
            crafted.edit(src, out / f"{i:03d}-{kind}.db", how)
