"""The snapshot loader never executes a pickle: each test states one refusal or one admission."""
from __future__ import annotations

import collections
import copyreg
import io
import os
import pickle

import pytest

from kvviz.torchsnap.safe_pickle import (
    SnapshotFormatError,
    UnsafePickleError,
    load_snapshot,
    loads_snapshot,
    safe_loads,
)
from tests.torchsnap.snaps import dumps, make_snapshot


class Payload:
    """Unpickling this runs `os.system(command)`."""

    def __init__(self, command: str) -> None:
        self.command = command

    def __reduce__(self):
        return (os.system, (self.command,))


@pytest.mark.parametrize("protocol", [2, 3, 4, 5])
def test_plain_snapshot_loads_in_every_protocol(protocol):
    snap = make_snapshot()
    assert safe_loads(dumps(snap, protocol)) == snap


@pytest.mark.parametrize("protocol", [2, 3, 4, 5])
def test_reduce_to_os_system_is_refused_and_nothing_runs(tmp_path, protocol):
    marker = tmp_path / "pwned"
    data = pickle.dumps(Payload(f"touch {marker}"), protocol=protocol)
    with pytest.raises(UnsafePickleError, match=r"refused to load global (posix|os)\.system"):
        safe_loads(data)
    assert not marker.exists()
    pickle.loads(data)  # control: the payload is live under a plain pickle.load
    assert marker.exists()


def test_payload_hidden_deep_inside_a_valid_snapshot_is_refused(tmp_path):
    marker = tmp_path / "pwned"
    snap = make_snapshot()
    snap["segments"][1]["blocks"][2]["frames"].append({"name": Payload(f"touch {marker}")})
    with pytest.raises(UnsafePickleError, match="system"):
        loads_snapshot(dumps(snap), name="evil.pickle")
    assert not marker.exists()


def test_hand_written_global_and_reduce_is_refused():
    # PROTO 2; GLOBAL builtins.eval; ('1+1',) ; REDUCE ; STOP
    data = b"\x80\x02cbuiltins\neval\nX\x03\x00\x00\x001+1\x85R."
    with pytest.raises(UnsafePickleError, match="builtins.eval"):
        safe_loads(data)


def test_copyreg_extension_code_is_refused():
    code = 0x7ABC
    copyreg.add_extension("os", "system", code)
    try:
        data = b"\x80\x02\x83" + code.to_bytes(2, "little") + b"X\x04\x00\x00\x00true\x85R."
        with pytest.raises(UnsafePickleError, match="os.system"):
            safe_loads(data)
    finally:
        copyreg.remove_extension("os", "system", code)


@pytest.mark.parametrize("obj", [collections.OrderedDict(a=1), collections.Counter("ab"),
                                 {"segments": [], "when": __import__("datetime").date(2024, 1, 1)}])
def test_class_instances_are_refused(obj):
    with pytest.raises(UnsafePickleError, match="refused to load global"):
        safe_loads(dumps(obj))


def test_persistent_ids_are_refused():
    class P(pickle.Pickler):
        def persistent_id(self, obj):
            return "tensor-storage-7" if obj == "x" else None

    buf = io.BytesIO()
    P(buf, protocol=4).dump({"segments": ["x"]})
    with pytest.raises(UnsafePickleError, match="persistent id"):
        safe_loads(buf.getvalue())


@pytest.mark.parametrize("data, why", [
    (b"", "not a pickle"),
    (b"hello world", "not a pickle"),
    (b"PK\x03\x04 a zip file", "not a pickle"),
    (pickle.dumps({"segments": []}, protocol=0), "not a pickle"),
    (pickle.dumps({"segments": []}, protocol=1), "not a pickle"),
    (b"\x80\x09", "protocol 9 not supported"),
    (dumps(make_snapshot())[:-40], "truncated"),
    (dumps({"segments": []}) + b"junk", "after the pickle end"),
    (b"\x80\x04a.", "corrupt"),  # APPEND with an empty stack
])
def test_malformed_input_is_a_format_error(data, why):
    with pytest.raises(SnapshotFormatError, match=why):
        safe_loads(data)


def test_deep_nesting_is_refused_before_anything_is_built():
    depth = 200_000
    data = b"\x80\x04" + b"]" * depth + b"a" * (depth - 1) + b"."
    with pytest.raises(SnapshotFormatError, match="nests deeper than 200 levels"):
        loads_snapshot(data)


def test_memo_bomb_of_shared_segments_is_refused_quickly():
    seg = make_snapshot()["segments"][1]
    data = dumps({"segments": [seg] * 100_000})
    assert len(data) < 400_000  # memo references make it small
    with pytest.raises(SnapshotFormatError, match=r"segments\[1\]: expected a distinct dict"):
        loads_snapshot(data)


def test_size_cap_refuses_before_reading(tmp_path):
    path = tmp_path / "big.pickle"
    path.write_bytes(dumps(make_snapshot()))
    with pytest.raises(SnapshotFormatError, match="over the 100-byte limit"):
        load_snapshot(path, max_bytes=100)
    assert load_snapshot(path).segments  # the default cap admits it
