"""The opcode pre-pass: hostile pickles are refused before anything is built; real ones pass."""
from __future__ import annotations

import pickle
import subprocess
import sys

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kvviz.core.errors import KvvizError
from kvviz.torchsnap import PickleLimitError, safe_loads
from kvviz.torchsnap.opscan import MAX_DEPTH, scan_pickle
from tests.torchsnap import bombs
from tests.torchsnap.snaps import dumps, make_snapshot

FAST = {k: v for k, v in bombs.BOMBS.items() if k not in bombs.SLOW}


@pytest.mark.parametrize("name", sorted(FAST))
def test_each_bomb_is_refused_with_its_reason(name):
    build, why = FAST[name]
    with pytest.raises(KvvizError, match=why):
        from kvviz.torchsnap import loads_snapshot
        loads_snapshot(build(), name=name)


def test_the_deep_tuple_key_kills_a_plain_unpickler(tmp_path):
    """Control: the input is a real crash, so refusing it in-process is what saves us."""
    path = tmp_path / "bomb.pickle"
    path.write_bytes(bombs.deep_tuple_dict_key())
    code = f"import pickle; pickle.loads(open({str(path)!r}, 'rb').read())"
    assert subprocess.run([sys.executable, "-c", code], capture_output=True).returncode < 0


@pytest.mark.parametrize("build, extra", [  # levels = depth + extra
    (bombs.deep_tuple_dict_key, 2), (bombs.deep_tuple_set_member, 2), (bombs.deep_list, 0),
    (bombs.deep_dict, 1)])
def test_nesting_at_the_limit_passes_and_one_more_is_refused(build, extra):
    depth = MAX_DEPTH - extra
    safe_loads(build(depth))
    with pytest.raises(PickleLimitError, match=f"deeper than {MAX_DEPTH} levels"):
        safe_loads(build(depth + 1))


def _nest(x: object, levels: int) -> object:
    for _ in range(levels):
        x = [x]
    return x


def test_a_container_filled_after_it_was_memoized_counts_its_items():
    inner = _nest(None, 150)  # pickled once; the second use is a memo reference
    data = pickle.dumps([inner, _nest(inner, 100)], protocol=4)
    with pytest.raises(PickleLimitError, match="deeper than"):
        scan_pickle(data)
    scan_pickle(pickle.dumps([inner, _nest(inner, 10)], protocol=4))


def test_shared_tuples_as_keys_are_refused_for_their_hashing_cost():
    with pytest.raises(PickleLimitError, match="hashing"):
        scan_pickle(bombs.tuple_dag_key(40))
    safe_loads(bombs.tuple_dag_key(8))  # 2**8 nodes: cheap, admitted


scalars = st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | \
    st.text(max_size=8) | st.binary(max_size=8)
hashables = st.recursive(scalars, lambda c: st.tuples(c, c) | st.frozensets(c, max_size=3),
                         max_leaves=10)
trees = st.recursive(scalars | hashables, lambda c: st.lists(c, max_size=4)
                     | st.dictionaries(hashables, c, max_size=4) | st.sets(hashables, max_size=3)
                     | st.tuples(c, c), max_leaves=30)


@settings(max_examples=60, deadline=None)
@given(obj=trees, protocol=st.integers(4, 5))  # protocols 2-3 pickle sets with REDUCE
def test_any_builtin_tree_within_the_limits_round_trips(obj, protocol):
    assert safe_loads(pickle.dumps(obj, protocol=protocol)) == obj


@settings(max_examples=60, deadline=None)
@given(body=st.binary(max_size=200), flips=st.lists(st.tuples(st.integers(0, 10_000),
                                                               st.integers(0, 255)), max_size=6))
def test_any_bytes_are_a_result_or_one_refusal(body, flips):
    data = bytearray(dumps(make_snapshot()) if flips else b"\x80\x04" + body + b".")
    for at, value in flips:
        data[at % len(data)] = value
    try:
        safe_loads(bytes(data))
    except KvvizError:
        pass


def test_a_global_name_with_control_characters_is_shown_escaped():
    name = "evil\n\x1b[31mred"
    raw = name.encode()
    data = (b"\x80\x04\x8c\x02os\x8c" + bytes([len(raw)]) + raw + b"\x93)R.")
    with pytest.raises(KvvizError) as e:
        safe_loads(data)
    assert "\n" not in str(e.value) and "\x1b" not in str(e.value)
    assert "os.evil\\n\\x1b[31mred" in str(e.value)
