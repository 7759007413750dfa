"""Small request streams for the twin's tests (real runs, a few hundred requests)."""
from __future__ import annotations

from kvviz.core.config import WorkloadConfig, model_preset
from kvviz.core.workload import generate
from kvviz.twin.runner import Stream

MODEL = model_preset("llama-3-8b")


def stream(requests: int = 150, rate: float = 40.0, prefix: float = 0.0, seed: int = 3,
           max_seq_len: int = 2048) -> Stream:
    w = generate(WorkloadConfig(num_requests=requests, rate=rate, prefix_share=prefix,
                                seed=seed, max_seq_len=max_seq_len))
    return Stream(w, MODEL, 20.0, max_seq_len)
