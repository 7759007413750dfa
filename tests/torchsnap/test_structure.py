"""parse_snapshot: a snapshot's shape is checked field by field before anything is measured."""
from __future__ import annotations

import pytest

from kvviz.torchsnap.safe_pickle import SnapshotFormatError, loads_snapshot, parse_snapshot
from tests.torchsnap.snaps import BASE0, BASE1, MiB, dumps, make_snapshot


def test_segments_sorted_by_address_with_offsets():
    snap = parse_snapshot(make_snapshot())
    assert [s.address for s in snap.segments] == [BASE0, BASE1]
    assert [b.offset for b in snap.segments[0].blocks] == [0, 4 * MiB, 6 * MiB, 12 * MiB,
                                                           15 * MiB, 16 * MiB]
    assert snap.segments[0].segment_type == "large" and snap.segments[0].device == 0
    assert snap.trace_entries == 2


def test_blocks_without_addresses_follow_each_other():
    raw = make_snapshot()
    for seg in raw["segments"]:
        for b in seg["blocks"]:
            del b["address"]
    assert parse_snapshot(raw) == parse_snapshot(make_snapshot())


def test_minimal_snapshot_and_awaiting_free_spelling_accepted():
    raw = {"segments": [{"address": 0, "total_size": 1024, "blocks": [
        {"size": 512, "state": "active_awaiting_free"}, {"size": 512, "state": "inactive"}]}]}
    seg = parse_snapshot(raw).segments[0]
    assert seg.segment_type == "?" and seg.device is None
    assert seg.blocks[0].requested_size is None


def _seg0(raw: dict) -> dict:
    return raw["segments"][1]  # BASE0, the large one, is second in the raw list


def _blk(raw: dict, j: int = 0) -> dict:
    return _seg0(raw)["blocks"][j]


BAD = [
    (lambda r: r.clear(), "no 'segments' list"),
    (lambda r: r.update(segments={"a": 1}), "no 'segments' list"),
    (lambda r: r["segments"].append([1, 2]), r"segments\[2\]: expected a distinct dict"),
    (lambda r: _seg0(r).pop("total_size"), r"segments\[1\]: missing 'total_size'"),
    (lambda r: _seg0(r).update(address=-5), r"address: expected an int"),
    (lambda r: _seg0(r).update(total_size=True), r"total_size: expected an int"),
    (lambda r: _seg0(r).update(total_size=10 ** 40), r"total_size: expected an int"),
    (lambda r: _seg0(r).update(blocks="none"), r"blocks: expected list"),
    (lambda r: _blk(r).update(state="mystery"), r"blocks\[0\]\.state: expected one of"),
    (lambda r: _blk(r).update(size=2.5), r"blocks\[0\]\.size: expected an int"),
    (lambda r: _blk(r).pop("state"), r"blocks\[0\]: missing 'state'"),
    (lambda r: _blk(r).update(requested_size=5 * MiB), "requested_size .* > size"),
    (lambda r: _blk(r, 1).update(address=BASE0 + 1 * MiB), "overlap"),
    (lambda r: _blk(r).update(address=BASE0 - 512), "overlap or lie before"),
    (lambda r: _seg0(r).update(total_size=19 * MiB), "past total_size"),
    (lambda r: _seg0(r)["blocks"].append(_blk(r)), "expected a distinct dict"),
]


@pytest.mark.parametrize("mutate, why", BAD)
def test_wrong_structure_is_refused_with_the_field_named(mutate, why):
    raw = make_snapshot()
    mutate(raw)
    with pytest.raises(SnapshotFormatError, match=why):
        loads_snapshot(dumps(raw), name="snap.pickle")


def test_huge_or_nested_values_are_described_cheaply():
    deep: list = []
    for _ in range(100_000):
        deep = [deep]
    raw = make_snapshot()
    _seg0(raw)["address"] = deep
    with pytest.raises(SnapshotFormatError, match="got a list"):
        parse_snapshot(raw)
