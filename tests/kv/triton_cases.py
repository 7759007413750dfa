"""Triton kernel checks shared by the interpreter run (CPU) and the CUDA run.

Importing this module does not import triton: under the interpreter it must be run as a
script (`TRITON_INTERPRET=1 python triton_cases.py`), so the variable is set before triton is
first imported; it prints one JSON line per case. tests/kv/test_attention_triton.py drives it.
"""
from __future__ import annotations

import json
import os
import sys
import time
import traceback

import torch

from tests.kv.kvref import assert_close, contiguous_case, paged_case

RAGGED = [1, 17, 40, 5, 33]


def _paged(device, lens=RAGGED, heads=8, kv_heads=2, head_dim=32, block_size=16,
           dtype=torch.float32, check=True, pad=0, config=None):
    from kvviz.kv import paged_decode_attention
    from kvviz.kv.attention_triton import decode

    c = paged_case(lens, heads, kv_heads, head_dim, block_size, dtype, device, seed=block_size,
                   pad=pad)
    if config is None:
        out = paged_decode_attention(c.q, c.k, c.v, c.index, c.lens, backend="triton",
                                     check_values=check)
    else:
        out = decode(c.q, c.k, c.v, c.index, None, c.lens, head_dim ** -0.5, max(lens),
                     paged=True, config=config)
    assert out.dtype == dtype and out.shape == c.q.shape
    assert_close(out, c.expected(), dtype)


def _contiguous(device, lens=RAGGED, heads=8, kv_heads=2, head_dim=32, dtype=torch.float32,
                gaps=True, config=None):
    from kvviz.kv import contiguous_decode_attention
    from kvviz.kv.attention_triton import decode

    c = contiguous_case(lens, heads, kv_heads, head_dim, dtype, device, gaps=gaps)
    if config is None:
        out = contiguous_decode_attention(c.q, c.k, c.v, c.index, c.lens, backend="triton")
    else:
        out = decode(c.q, c.k, c.v, None, c.index, c.lens, head_dim ** -0.5, max(lens),
                     paged=False, config=config)
    assert_close(out, c.expected(), dtype)


def _strides_refused(device):
    from kvviz.kv import paged_decode_attention

    c = paged_case(RAGGED, 4, 2, 16, 4, device=device)
    bad = {"q": c.q.transpose(1, 2).contiguous().transpose(1, 2),
           "block_tables": c.index.t().contiguous().t()}
    for name, t in bad.items():
        args = {"q": c.q, "block_tables": c.index, name: t}
        try:
            paged_decode_attention(args["q"], c.k, c.v, args["block_tables"], c.lens,
                                   backend="triton")
        except ValueError as exc:
            assert str(exc).startswith(f"{name}:"), exc
        else:
            raise AssertionError(f"{name} with a strided last dimension was accepted")


def _config(block_n, splits):
    from kvviz.kv.attention_triton import LaunchConfig

    return LaunchConfig(block_n, 4, 2, splits)


CASES = {
    "paged_block1_fp32": lambda dev: _paged(dev, block_size=1),
    "paged_block16_fp32": lambda dev: _paged(dev, block_size=16),
    "paged_block128_fp32": lambda dev: _paged(dev, block_size=128),
    "paged_block16_bf16": lambda dev: _paged(dev, dtype=torch.bfloat16),
    "paged_block4_fp16": lambda dev: _paged(dev, block_size=4, dtype=torch.float16),
    "paged_mha": lambda dev: _paged(dev, heads=4, kv_heads=4),
    "paged_gqa_group8_dim24": lambda dev: _paged(dev, heads=8, kv_heads=1, head_dim=24),
    "paged_unchecked_garbage_past_used_blocks": lambda dev: _paged(dev, check=False, pad=-9),
    "paged_one_split_direct": lambda dev: _paged(dev, block_size=8, config=_config(16, 1)),
    "paged_three_splits": lambda dev: _paged(dev, block_size=8, config=_config(16, 3)),
    "paged_splits_of_several_tiles": lambda dev: _paged(
        dev, [70, 3, 100], block_size=4, config=_config(16, 3)),
    "contiguous_splits_of_several_tiles": lambda dev: _contiguous(
        dev, [70, 3, 100], config=_config(16, 3)),
    "contiguous_fp32_gaps": lambda dev: _contiguous(dev),
    "strided_last_dim_refused": _strides_refused,
    "contiguous_bf16_packed": lambda dev: _contiguous(dev, dtype=torch.bfloat16, gaps=False),
}

# Larger shapes, CUDA only (the interpreter would take minutes).
CUDA_CASES = {
    "cuda_llama3_shape_bf16_block16": lambda dev: _paged(
        dev, [1, 100, 1000, 4096, 2500, 17, 3000, 64], 32, 8, 128, 16, torch.bfloat16),
    "cuda_llama3_shape_bf16_block1": lambda dev: _paged(
        dev, [3, 700, 2049], 32, 8, 128, 1, torch.bfloat16),
    "cuda_block256_fp16": lambda dev: _paged(
        dev, [300, 1, 5000], 28, 4, 128, 256, torch.float16),
    "cuda_fp32_ieee_tight": lambda dev: _paged(dev, [1500, 20, 777], 32, 8, 128, 16),
    "cuda_contiguous_bf16": lambda dev: _contiguous(
        dev, [1, 2000, 333, 4096], 32, 8, 128, torch.bfloat16),
}


def run(names, device: str) -> list[dict]:
    table = {**CASES, **CUDA_CASES}
    results = []
    for name in names:
        t = time.perf_counter()
        try:
            table[name](device)
            results.append({"case": name, "ok": True})
        except Exception:  # noqa: BLE001 - report every case; the caller asserts per case
            results.append({"case": name, "ok": False, "error": traceback.format_exc()})
        results[-1]["seconds"] = round(time.perf_counter() - t, 3)
    return results


if __name__ == "__main__":
    if os.environ.get("TRITON_INTERPRET") != "1":
        sys.exit("set TRITON_INTERPRET=1 before running this script")
    for r in run(sys.argv[1:] or list(CASES), "cpu"):
        print(json.dumps(r), flush=True)
