"""The compiled rule's records (kvviz/engine/rule/records.py): fields read as the tuples
read, element indexing without wraparound, and every index checked under NUMBA_BOUNDSCHECK."""
from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from typing import NamedTuple

import numpy as np
from numba import njit

from kvviz.engine.rule.records import records


class A(NamedTuple):
    x: np.ndarray
    t: np.ndarray


class B(NamedTuple):
    k: int
    on: bool


@njit
def _touch(a, b, c, i, j):
    p, cf, q = records(a, b, c)
    p.x[i] += cf.k  # element read and write, 1-D
    p.t[i, j] = p.x[i] * 2  # element write, 2-D
    row = p.t[i]  # a row: numba's own indexing
    return p.x[i], row.sum(), cf.on, q.x.size


def test_records_read_and_write_the_tuples_arrays():
    a = A(np.arange(5, dtype=np.int64), np.zeros((5, 3), np.int64))
    got = _touch(a, B(10, True), a, 3, 2)
    assert got == (13, 26, True, 5)
    assert a.x.tolist() == [0, 1, 2, 13, 4] and a.t[3].tolist() == [0, 0, 26]


def test_a_negative_index_raises_under_boundscheck(tmp_path):
    # Element indexing skips numpy's negative-index wraparound (the rule never counts from
    # the end); with NUMBA_BOUNDSCHECK=1 each index is checked, so a negative one is an
    # IndexError, not a read before the array.
    code = textwrap.dedent("""
        import numpy as np
        from numba import njit
        from kvviz.engine.rule.records import records
        from tests.engine.test_records import A, B

        @njit
        def get(a, b, i):
            p, _, _ = records(a, b, a)
            return p.x[i]

        a = A(np.arange(4, dtype=np.int64), np.zeros((1, 1), np.int64))
        assert get(a, B(0, False), 3) == 3
        for bad in (-1, 4):
            try:
                get(a, B(0, False), bad)
            except IndexError:
                continue
            raise SystemExit(f"index {bad}: no IndexError")
        print("ok")
    """)
    env = dict(os.environ, NUMBA_BOUNDSCHECK="1", NUMBA_CACHE_DIR=str(tmp_path),
               PYTHONPATH=os.getcwd())
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True,
                         text=True, timeout=300)
    assert out.returncode == 0 and out.stdout.strip() == "ok", out.stderr[-2000:]
