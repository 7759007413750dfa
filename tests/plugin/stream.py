"""A block-stream message as kvviz's vLLM plugin publishes it (kvviz/plugin/wire.py), built
by hand for the tests that run without vLLM (the real one: tests/real_vllm/test_blocks.py)."""
from __future__ import annotations

import numpy as np

from kvviz.plugin import wire

POOL = {"num_blocks": 9, "block_size": 4, "engine": "vllm", "version": "0.32.0", "dp_rank": 0,
        "scheduler": "Scheduler", "chunked_prefill": True, "prefix_caching": True,
        "max_num_seqs": 8, "max_num_batched_tokens": 64, "max_model_len": 64, "watermark": 0.0,
        "bytes_per_token": 16}


def message(step: int = 3, **over) -> dict:
    """Block 0 null; seq 0 holds blocks 1, 2 (6 tokens), seq 1 shares block 1 and holds 3
    (5 tokens); blocks 4 and 5 cached free; 6, 7, 8 free. Seq 2 waits for free blocks."""
    refcnt = np.zeros(9, np.int32)
    refcnt[[1, 2, 3]] = [2, 1, 1]
    hashed = np.zeros(9, np.uint8)
    hashed[[1, 4, 5]] = 1
    msg = {"wire": wire.WIRE_VERSION, "pool": dict(POOL), "step": step, "t": 1.0,
           "num_free": 5, "null_block": 0, "refcnt": refcnt, "hashed": hashed,
           "seqs": np.array([0, 1]), "computed": np.array([6, 5]),
           "final": np.array([10, 12]), "lens": np.array([2, 2], np.int32),
           "key": True, "base": np.array([0, 0], np.int32),
           "blocks": np.array([1, 2, 1, 3], np.int32), "running": [0, 1],
           "waiting": [[2, "no free blocks"]], "head": [2, "no free blocks", 24, 20],
           "events": [[step, "admitted", 1, None, 5, 20],
                      [step, "admit_failed", 2, "CAPACITY", 24, 20]],
           "arrived": [[2, "req-2", step, 20, 4, b"\x01" * 40, 8]], "done": [],
           "dropped": 0}
    msg.update(over)
    return msg


def frames(seq: int = 1, **over) -> list[bytes]:
    return wire.frames(seq, wire.encode(message(**over)))
