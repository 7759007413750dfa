"""Small hostile inputs (issue 26, item 9): a config file key given twice, numbers past the
float range, warnings on the way to an error line."""
from __future__ import annotations

import warnings

import numpy as np
import pytest

from kvviz.settings.collector import CollectorConfig
from tests.fuzz.hostile import check_property, run_cli


@pytest.mark.parametrize("text,why", [
    ('{"mode": "sim", "rate": 2, "rate": 5}', "rate: given twice"),
    ('{"lanes": ["paged:16"], "mode": "sim", "lanes": ["paged:32"]}', "lanes: given twice"),
    ('{"mode": "sim", "rate": 1e400}', "1e400 is past the float range"),
    ('{"mode": "sim", "rate": -1e400}', "-1e400 is past the float range"),
    ('{"mode": "sim", "hz": 1e999}', "1e999 is past the float range"),
])
def test_a_config_file_is_refused_naming_what_is_wrong(tmp_path, text, why):
    with pytest.raises(ValueError, match=why):
        CollectorConfig.from_json(text)
    f = tmp_path / "c.json"
    f.write_text(text)
    argv = ["collect", "--config", str(f), "--out", str(tmp_path / "r.db")]
    res = run_cli(argv)
    check_property("collect", argv, res)
    assert res.code == 2 and why in res.err and not (tmp_path / "r.db").exists()


def test_inf_written_as_text_is_still_infinity():
    assert CollectorConfig.from_json('{"mode": "sim", "rate": "inf"}').rate == float("inf")


@pytest.mark.parametrize("text", ["1e400", "-1e400", "9" * 29 + "e300"])
def test_a_flag_number_past_the_float_range_is_refused(tmp_path, text):
    argv = ["collect", "--mode", "sim", "--rate", text, "--out", str(tmp_path / "r.db")]
    res = run_cli(argv)
    check_property("collect", argv, res)
    assert res.code == 2 and "--rate" in res.err


def test_rate_inf_is_accepted_as_infinity():
    from kvviz.core import limits as at

    assert at.RATE("inf") == float("inf") and at.RATE("+Infinity") == float("inf")


@pytest.fixture
def noisy_info(monkeypatch):
    """`kvviz info` replaced by a command that warns (numpy and Python) before it ends."""
    import kvviz.commands.info as info

    def run(fail: bool):
        def go(_args) -> int:
            np.log(np.zeros(2))  # RuntimeWarning: divide by zero
            warnings.warn("something odd", UserWarning, stacklevel=1)
            if fail:
                raise ValueError("the input is bad")
            return 0
        monkeypatch.setattr(info, "run", go)
    return run


def test_warnings_before_an_error_line_are_not_printed(noisy_info, tmp_path):
    noisy_info(True)
    res = run_cli(["info", str(tmp_path / "x.db")])
    check_property("info", ["info"], res)
    assert res.err == "kvviz info: error: the input is bad\n"


def test_warnings_of_a_command_that_succeeds_are_one_line_each(noisy_info, tmp_path):
    noisy_info(False)
    res = run_cli(["info", str(tmp_path / "x.db")])
    assert res.code == 0
    lines = res.err.splitlines()
    assert lines == ["kvviz info: warning: RuntimeWarning: divide by zero encountered in log",
                     "kvviz info: warning: UserWarning: something odd"]
