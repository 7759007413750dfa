"""The contract between decode attention's dispatcher (kvviz/kv/attention.py) and its
backends (attention_torch.py, attention_triton.py): what a backend implements and what
validation hands it. Both sides import this module; neither imports the other's module.
"""
from __future__ import annotations

from typing import NamedTuple, Protocol

import numpy as np
import torch


class DecodeMeta(NamedTuple):
    """What validation learned, handed to the backend so it need not recompute it."""

    scale: float
    lens_host: np.ndarray | None  # int64 [B] when values were checked on the host, else None


class DecodeBackend(Protocol):
    """One implementation of both decode layouts. q: [B, H, D] -> out: [B, H, D], q's dtype.

    Arguments arrive validated (shapes, dtypes, devices, index ranges when checked).
    Backends must not mutate the caches and must not read table entries past a sequence's
    used blocks (ceil(len / block_size)); those may hold anything.
    """

    name: str

    def unavailable(self, device: torch.device) -> str | None:
        """None when this backend runs on `device`, else the reason it cannot."""

    def check_layout(self, tensors: dict[str, torch.Tensor]) -> None:
        """Raise ValueError (naming the argument) for strides the backend cannot handle."""

    def paged(
        self, q: torch.Tensor, k_cache: torch.Tensor, v_cache: torch.Tensor,
        block_tables: torch.Tensor, context_lens: torch.Tensor, meta: DecodeMeta,
    ) -> torch.Tensor:
        """k_cache, v_cache: [num_blocks, block_size, kv_heads, D]; block_tables int32 [B, M]."""

    def contiguous(
        self, q: torch.Tensor, k_pool: torch.Tensor, v_pool: torch.Tensor,
        starts: torch.Tensor, context_lens: torch.Tensor, meta: DecodeMeta,
    ) -> torch.Tensor:
        """k_pool, v_pool: [capacity, kv_heads, D]; sequence b uses rows starts[b] + 0..len-1."""
