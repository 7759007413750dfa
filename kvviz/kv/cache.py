"""KV pools as real torch tensors: paged (blocks of slots) and contiguous (one line of slots).

Both store every layer's K and V in NHD order (token, kv head, head dim) so one slot is one
contiguous run of `num_kv_heads * head_dim` values, and both are written through a flat slot
index:

    paged:       slot = block_id * block_size + offset      pools [layers, blocks, bs, kvh, d]
    contiguous:  slot = range_start + position              pools [layers, capacity, kvh, d]
"""
from __future__ import annotations

import numpy as np
import torch

from kvviz.core.config import ModelShape

TORCH_DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}


def torch_dtype(dtype: str | torch.dtype | None, model: ModelShape) -> torch.dtype:
    """A torch dtype from a name, a torch dtype, or None (the model's dtype)."""
    if dtype is None:
        dtype = model.dtype
    if isinstance(dtype, torch.dtype):
        if dtype not in TORCH_DTYPES.values():
            raise ValueError(f"dtype: {dtype} is not one of {sorted(TORCH_DTYPES)}")
        return dtype
    if dtype not in TORCH_DTYPES:
        raise ValueError(f"dtype: unknown {dtype!r}; choose one of {sorted(TORCH_DTYPES)}")
    return TORCH_DTYPES[dtype]


class _Pools:
    """Shared storage and writing for both layouts. Subclasses set `slots_per_layer`."""

    def __init__(self, pool_shape: tuple[int, ...], model: ModelShape, device, dtype) -> None:
        self.model = model
        self.device = torch.device(device)
        self.dtype = torch_dtype(dtype, model)
        shape = (model.num_layers, *pool_shape, model.num_kv_heads, model.head_dim)
        # zeros, not empty: the pages are touched now, so the memory is really resident
        self._k = torch.zeros(shape, dtype=self.dtype, device=self.device)
        self._v = torch.zeros(shape, dtype=self.dtype, device=self.device)
        self.device = self._k.device  # "cuda" -> "cuda:0": compare like with like
        self.k = tuple(self._k.unbind(0))  # per layer, views of one allocation
        self.v = tuple(self._v.unbind(0))

    @property
    def k_all(self) -> torch.Tensor:
        """Every layer's K pool as one tensor [layers, *pool shape, kv_heads, D] (a view)."""
        return self._k

    @property
    def v_all(self) -> torch.Tensor:
        return self._v

    @property
    def slots_per_layer(self) -> int:
        return int(np.prod(self._k.shape[1:-2]))

    @property
    def nbytes(self) -> int:
        return self._k.nbytes + self._v.nbytes

    @property
    def bytes_per_token(self) -> int:
        """K and V of one slot across all layers."""
        return self.nbytes // self.slots_per_layer

    def write(
        self, layer: int, slot_mapping: torch.Tensor, k: torch.Tensor, v: torch.Tensor,
        check: bool = True,
    ) -> None:
        """Store k[i], v[i] ([n, kv_heads, head_dim]) at flat slot slot_mapping[i] of `layer`.

        `check` verifies slot range on the values (a device sync on CUDA; callers that built
        the mapping on the host and checked it there pass False).
        """
        kvh, d = self.model.num_kv_heads, self.model.head_dim
        if not 0 <= layer < self.model.num_layers:
            raise ValueError(f"layer: {layer} is outside 0..{self.model.num_layers - 1}")
        if slot_mapping.dim() != 1 or slot_mapping.dtype != torch.int64:
            raise ValueError(f"slot_mapping: need int64 [n], got {slot_mapping.dtype} "
                             f"{tuple(slot_mapping.shape)}")
        n = slot_mapping.shape[0]
        for name, t in (("k", k), ("v", v)):
            if tuple(t.shape) != (n, kvh, d):
                raise ValueError(f"{name}: need shape {(n, kvh, d)}, got {tuple(t.shape)}")
            if t.device != self.device or slot_mapping.device != self.device:
                raise ValueError(f"{name}: tensors must be on {self.device}")
        if check and n:
            lo, hi = int(slot_mapping.min()), int(slot_mapping.max())
            if lo < 0 or hi >= self.slots_per_layer:
                raise ValueError(f"slot_mapping: slots {lo}..{hi} outside "
                                 f"0..{self.slots_per_layer - 1}")
        self.k[layer].view(-1, kvh, d).index_copy_(0, slot_mapping, k.to(self.dtype))
        self.v[layer].view(-1, kvh, d).index_copy_(0, slot_mapping, v.to(self.dtype))


class PagedKVCache(_Pools):
    """Per layer K and V pools [num_blocks, block_size, num_kv_heads, head_dim]."""

    def __init__(
        self, num_blocks: int, block_size: int, model: ModelShape, device="cpu", dtype=None,
    ) -> None:
        if num_blocks < 1:
            raise ValueError(f"num_blocks: must be >= 1, got {num_blocks}")
        if block_size < 1:
            raise ValueError(f"block_size: must be >= 1, got {block_size}")
        self.num_blocks = num_blocks
        self.block_size = block_size
        super().__init__((num_blocks, block_size), model, device, dtype)

    def slot_mapping(self, block_tables, positions, rows=None):
        """Flat slots of token `positions` through `block_tables` ([B, max_blocks]).

        Without `rows`, positions is [B] (one token per sequence, e.g. decode). With `rows`
        ([n], the table row of each token), positions is [n] (e.g. a whole prefill).
        Works on numpy arrays (int64 result) and on torch tensors alike.
        """
        bs = self.block_size
        if rows is None:
            rows = (np.arange(len(positions)) if isinstance(positions, np.ndarray)
                    else torch.arange(positions.shape[0], device=positions.device))
        block = block_tables[rows, positions // bs]
        if isinstance(block, np.ndarray):
            return block.astype(np.int64) * bs + positions % bs
        return block.long() * bs + positions % bs


class ContiguousKVCache(_Pools):
    """Per layer K and V pools [capacity_tokens, num_kv_heads, head_dim]; slot = start + pos."""

    def __init__(self, capacity_tokens: int, model: ModelShape, device="cpu", dtype=None) -> None:
        if capacity_tokens < 1:
            raise ValueError(f"capacity_tokens: must be >= 1, got {capacity_tokens}")
        self.capacity_tokens = capacity_tokens
        super().__init__((capacity_tokens,), model, device, dtype)

    @staticmethod
    def slot_mapping(starts, positions, rows=None):
        """start + position; `starts` [B] per sequence, same conventions as the paged one."""
        if rows is None:
            return starts + positions
        return starts[rows] + positions
