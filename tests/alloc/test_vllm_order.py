"""The compiled paged pool against the plain model of vLLM's block pool (tests/alloc/model.py),
after every operation of random sequences: the same answers, the same block ids in every
block table, the same free queue in the same order, the same cached blocks and evictions."""
from __future__ import annotations

import pytest
from hypothesis import HealthCheck, Phase, given, settings

from tests.alloc import invariants as inv
from tests.alloc.model import Model
from tests.alloc.ops import CHURN, CONFIGS, OPS, PREFIX_LEN, Runner
from tests.examples import examples

PAGED = [c for c in CONFIGS if c.paged]


def _model(r: Runner) -> Model:
    bs = r.cfg.spec.block_size
    return Model(r.cfg.capacity // bs, bs, r.cfg.prefix, bs)


@pytest.mark.parametrize("cfg", PAGED, ids=str)
@settings(max_examples=examples(50), deadline=None,
          phases=(Phase.explicit, Phase.reuse, Phase.generate),
          suppress_health_check=[HealthCheck.too_slow])
@given(ops=OPS | CHURN)
def test_the_compiled_pool_is_the_plain_model_block_for_block(cfg, ops):
    r = Runner(cfg)
    m = _model(r)
    for op in ops:
        sid = r.next_id
        live = r.picks(list(range(len(r.lens))))
        res = r.apply(op)
        if op[0] == "admit":
            pre = r.prefix(op[3])
            ids = tuple(pre.ids) if pre else ()
            cover = min(PREFIX_LEN, len(ids) * cfg.spec.block_size) if pre else 0
            assert m.admit(sid, op[1], ids, cover) == res.ok
        elif op[0] == "append" and live:
            s = live[op[1] % len(live)]
            assert m.append(s, op[2]) == res
        elif op[0] == "append_batch":
            assert [m.append(s, 1) for s in r.picks(op[1])] == res.tolist()
        elif op[0] == "release" and live:
            m.release(live[op[1] % len(live)])
        assert {s: r.pool.block_table(s).tolist() for s in r.lens} == m.tables
        assert inv.free_queue(r.pool) == m.queue
        bm = r.pool.snapshot()
        assert bm.refcount.tolist() == m.ref
        assert sorted(b for b in m.queue if b in m.content) == bm.cached.nonzero()[0].tolist()
        assert r.pool.usage().evictions == m.evictions
