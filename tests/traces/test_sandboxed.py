"""Uploaded traces are parsed in the sandboxed child and come back equal to a direct parse."""
from __future__ import annotations

import numpy as np
import pytest

from kvviz.core.errors import KvvizError
from kvviz.traces import read_trace_bytes
from kvviz.traces.options import TraceOptions
from kvviz.traces.sandboxed import parse_upload_sandboxed

AZURE = (b"TIMESTAMP,ContextTokens,GeneratedTokens\r\n"
         b"2023-11-16 18:15:46.6805900,374,44\r\n2023-11-16 18:15:50.9951690,396,109\r\n")
MOONCAKE = (b'{"timestamp": 0, "input_length": 600, "output_length": 5, "hash_ids": [1, 2]}\n'
            b'{"timestamp": 10, "input_length": 900, "output_length": 7, "hash_ids": [1, 3]}\n')


@pytest.mark.parametrize("name, data", [("a.csv", AZURE), ("m.jsonl", MOONCAKE)])
def test_a_sandboxed_parse_equals_a_direct_one(name, data):
    got, info = parse_upload_sandboxed(name, data, TraceOptions())
    want, want_info = read_trace_bytes(data, name, TraceOptions())
    assert info == want_info
    for f in ("arrival_s", "prompt", "output", "prefix_group", "chain_ptr", "chain_ids"):
        a, b = getattr(got, f), getattr(want, f)
        assert (a is None and b is None) or np.array_equal(a, b), f
    assert (got.prefix_tokens, got.chain_block) == (want.prefix_tokens, want.chain_block)


def test_a_bad_upload_is_the_parsers_own_error():
    with pytest.raises(KvvizError, match="line 2"):
        parse_upload_sandboxed("a.csv", b"TIMESTAMP,ContextTokens,GeneratedTokens\nnope,1,2\n",
                               TraceOptions())
