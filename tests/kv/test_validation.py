"""Every bad argument is refused with a ValueError naming it, before any backend runs."""
from __future__ import annotations

import os

import pytest

from kvviz.kv import contiguous_decode_attention, paged_decode_attention
from kvviz.kv.attention_torch import BACKEND
from tests.kv.kvref import contiguous_case, paged_case


def _paged():
    c = paged_case([5, 9, 2], heads=4, kv_heads=2, head_dim=16, block_size=4)
    return {"q": c.q, "k_cache": c.k, "v_cache": c.v, "block_tables": c.index,
            "context_lens": c.lens}


def _with(args, **changes):
    return {**args, **changes}


def _table_with(args, row, col, value):
    t = args["block_tables"].clone()
    t[row, col] = value
    return t


def _lens_with(args, row, value):
    lens = args["context_lens"].clone()
    lens[row] = value
    return lens


PAGED_BAD = {
    "q not a tensor": (lambda a: _with(a, q=a["q"].tolist()), "q"),
    "q 4-D": (lambda a: _with(a, q=a["q"][:, None]), "q"),
    "q int": (lambda a: _with(a, q=a["q"].int()), "q"),
    "k 3-D": (lambda a: _with(a, k_cache=a["k_cache"][0]), "k_cache"),
    "v other shape": (lambda a: _with(a, v_cache=a["v_cache"][:-1]), "v_cache"),
    "k other dtype": (lambda a: _with(a, k_cache=a["k_cache"].double()), "k_cache"),
    "v other dtype": (lambda a: _with(a, v_cache=a["v_cache"].half()), "v_cache"),
    "k other device": (lambda a: _with(a, k_cache=a["k_cache"].to("meta")), "k_cache"),
    "head_dim": (lambda a: _with(a, k_cache=a["k_cache"][..., :8],
                                 v_cache=a["v_cache"][..., :8]), "k_cache"),
    "gqa": (lambda a: _with(a, q=a["q"][:, :3]), "multiple of num_kv_heads"),
    "table int64": (lambda a: _with(a, block_tables=a["block_tables"].long()), "block_tables"),
    "table 1-D": (lambda a: _with(a, block_tables=a["block_tables"][0]), "block_tables"),
    "table rows": (lambda a: _with(a, block_tables=a["block_tables"][:2]), "block_tables"),
    "table no columns": (lambda a: _with(a, block_tables=a["block_tables"][:, :0]),
                         "block_tables"),
    "block id too big": (lambda a: _with(a, block_tables=_table_with(a, 1, 2, 10_000)),
                         "block_tables"),
    "block id negative": (lambda a: _with(a, block_tables=_table_with(a, 0, 0, -1)),
                          "block_tables"),
    "lens int64": (lambda a: _with(a, context_lens=a["context_lens"].long()), "context_lens"),
    "lens shape": (lambda a: _with(a, context_lens=a["context_lens"][:2]), "context_lens"),
    "len zero": (lambda a: _with(a, context_lens=_lens_with(a, 2, 0)), "context_lens"),
    "len beyond table": (lambda a: _with(a, context_lens=_lens_with(a, 0, 4 * 4 + 1)),
                         "context_lens"),
    "scale": (lambda a: _with(a, scale=-1.0), "scale"),
    "backend": (lambda a: _with(a, backend="cuda-magic"), "backend"),
}


@pytest.fixture
def no_launch(monkeypatch):
    def boom(*args, **kwargs):
        raise AssertionError("a backend ran on invalid arguments")

    monkeypatch.setattr(BACKEND, "paged", boom)
    monkeypatch.setattr(BACKEND, "contiguous", boom)


@pytest.mark.parametrize("case", list(PAGED_BAD))
def test_paged_bad_argument(case, no_launch):
    make, arg = PAGED_BAD[case]
    with pytest.raises(ValueError, match=arg):
        paged_decode_attention(**{"backend": "torch", **make(_paged())})


def test_a_block_id_past_the_used_blocks_is_not_an_error():
    a = _paged()
    a["block_tables"] = _table_with(a, 2, 3, 10_000)  # sequence 2 uses 1 block of 4
    paged_decode_attention(**a, backend="torch")


@pytest.mark.skipif(os.environ.get("TRITON_INTERPRET") == "1", reason="interpreter runs on CPU")
def test_triton_on_cpu_is_refused_with_the_reason(no_launch):
    pytest.importorskip("triton")
    with pytest.raises(ValueError, match="backend: 'triton' cannot run on cpu"):
        paged_decode_attention(**_paged(), backend="triton")


def _contiguous():
    c = contiguous_case([5, 9, 2], heads=4, kv_heads=2, head_dim=16, gaps=False)
    return {"q": c.q, "k_pool": c.k, "v_pool": c.v, "starts": c.index,
            "context_lens": c.lens}


def _starts_with(a, row, value):
    s = a["starts"].clone()
    s[row] = value
    return s


CONTIGUOUS_BAD = {
    "k 4-D": (lambda a: _with(a, k_pool=a["k_pool"][None]), "k_pool"),
    "v other shape": (lambda a: _with(a, v_pool=a["v_pool"][:-1]), "v_pool"),
    "starts float": (lambda a: _with(a, starts=a["starts"].float()), "starts"),
    "starts shape": (lambda a: _with(a, starts=a["starts"][:1]), "starts"),
    "start negative": (lambda a: _with(a, starts=_starts_with(a, 0, -1)), "starts"),
    "range past the pool": (lambda a: _with(a, starts=_starts_with(a, 1, 15)), "starts"),
    "len beyond pool": (lambda a: _with(a, context_lens=_lens_with(a, 0, 100)), "context_lens"),
    "len zero": (lambda a: _with(a, context_lens=_lens_with(a, 1, 0)), "context_lens"),
}


@pytest.mark.parametrize("case", list(CONTIGUOUS_BAD))
def test_contiguous_bad_argument(case, no_launch):
    make, arg = CONTIGUOUS_BAD[case]
    with pytest.raises(ValueError, match=arg):
        contiguous_decode_attention(**{"backend": "torch", **make(_contiguous())})
