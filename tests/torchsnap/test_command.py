"""`kvviz torch-snapshot`: a summary for a good file, exit 2 for every refused one."""
from __future__ import annotations

import json
import os
import pickle

import pytest

from kvviz.commands.cli import main
from tests.torchsnap.snaps import dumps, make_snapshot


@pytest.fixture()
def good(tmp_path):
    path = tmp_path / "snap.pickle"
    path.write_bytes(dumps(make_snapshot()))
    return path


def test_table(good, capsys):
    assert main(["torch-snapshot", str(good)]) == 0
    out = capsys.readouterr().out
    assert "2 segments" in out and "external fragmentation index" in out
    assert "largest 4.0 MiB" in out


def test_json_is_one_object(good, capsys):
    assert main(["torch-snapshot", str(good), "--json"]) == 0
    d = json.loads(capsys.readouterr().out)
    assert d["reserved"] == 22 << 20 and len(d["segments"]) == 2


class Payload:
    def __init__(self, marker: str) -> None:
        self.marker = marker

    def __reduce__(self):
        return (os.system, (f"touch {self.marker}",))


def _write(tmp_path, name: str, data: bytes):
    path = tmp_path / name
    path.write_bytes(data)
    return str(path)


@pytest.mark.parametrize("kind, why", [
    ("malicious", "refused to load global"),
    ("truncated", "truncated"),
    ("text", "not a pickle"),
    ("structure", "no 'segments' list"),
    ("large", "limit"),
])
def test_refused_files_exit_2(tmp_path, capsys, kind, why):
    marker = tmp_path / "pwned"
    data = {
        "malicious": pickle.dumps({"segments": [Payload(str(marker))]}, protocol=4),
        "truncated": dumps(make_snapshot())[:100],
        "text": b"segments: []\n",
        "structure": dumps([1, 2, 3]),
        "large": dumps(make_snapshot()),
    }[kind]
    args = ["torch-snapshot", _write(tmp_path, "x.pickle", data)]
    if kind == "large":
        args += ["--max-mb", "0.001"]
    assert main(args) == 2
    err = capsys.readouterr().err
    assert err.startswith("kvviz torch-snapshot: error:") and why in err
    assert not marker.exists()


def test_missing_file_exits_2(tmp_path, capsys):
    assert main(["torch-snapshot", str(tmp_path / "nope.pickle")]) == 2


def test_text_from_the_file_cannot_drive_the_terminal(tmp_path, capsys):
    snap = make_snapshot()
    snap["segments"][0]["segment_type"] = "\x1b[2J\x1b]0;pwned\x07"
    path = _write(tmp_path, "esc.pickle", dumps(snap))
    assert main(["torch-snapshot", path]) == 0
    out = capsys.readouterr().out
    assert "\x1b" not in out and "\x07" not in out and "\\x1b" in out
