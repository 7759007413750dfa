"""`kvviz simulate --trace` on mangled files and odd flags: a result or exit 2, never a crash."""
from __future__ import annotations

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from kvviz.commands.cli import main
from tests.traces import samples as S

FILES = [S.azure(S.AZURE_ROWS, bom=True, crlf=True),
         S.burstgpt([(0, "ChatGPT", 30, 0), (1, "GPT-4", 50, 6), (2, "ChatGPT", 9, 9)]),
         S.mooncake([(0, 600, 5, [1, 2]), (10, 700, 2, [1, 3])]),
         S.kvviz_csv([(0.5, 3, 4), (0.1, 8, 2)])]
FLAGS = st.lists(st.sampled_from([
    ["--limit", "1"], ["--limit", "0"], ["--start-s", "0.5"], ["--duration-s", "1"],
    ["--time-scale", "3"], ["--time-scale", "-1"], ["--skip-bad-rows"],
    ["--model-filter", "GPT-4"], ["--max-seq-len", "40"], ["--trace-format", "azure"],
    ["--trace-format", "mooncake"], ["--lane", "paged:16:prefix"], ["--json"]]), max_size=4)


@settings(max_examples=40, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.sampled_from(FILES), st.integers(0, 300), st.binary(max_size=6), FLAGS)
def test_simulate_on_a_mangled_trace_exits_0_or_2(tmp_path, capsys, raw, at, junk, flags):
    p = tmp_path / "t.trace"
    p.write_bytes(raw[:at] + junk + raw[at:])
    code = main(["simulate", "--trace", str(p), "--capacity-tokens", "4096",
                 *[x for f in flags for x in f]])
    err = capsys.readouterr().err
    assert code in (0, 2)
    if code == 2:
        assert err.startswith("kvviz simulate: error: ") and "Traceback" not in err
