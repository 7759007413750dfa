"""A serving node's KV and scheduler settings, as vLLM names them: one frozen record.

`num_gpu_blocks` is vLLM's count, its null block included (vLLM keeps block 0 back), so the
node's usable KV capacity is (num_gpu_blocks - 1) x block_size token slots: the capacity a
kvviz lane is given (docs/FIDELITY.md, row 5; kvviz block b is vLLM's block b + 1).
"""
from __future__ import annotations

from dataclasses import asdict, dataclass, fields

from kvviz.core import limits as at
from kvviz.core.config import (
    MAX_CAPACITY_TOKENS,
    CacheConfig,
    EngineConfig,
    LaneSpec,
    ModelShape,
)

# vLLM 0.32's defaults where the node's own settings are not known (a trace): block size 16,
# max_num_seqs 256, max_num_batched_tokens 8192, chunked prefill and prefix caching on,
# watermark 0. vLLM sizes num_gpu_blocks from free GPU memory; kvviz's default pool (16,384
# slots, the Live demo's) stands in: 1,024 usable blocks of 16 plus the null block.
DEFAULT_NUM_GPU_BLOCKS = at.DEFAULT_CAPACITY_TOKENS // 16 + 1


@dataclass(frozen=True)
class NodeSettings:
    """What vLLM's scheduler and block pool were (or would be) started with."""

    block_size: int = 16
    num_gpu_blocks: int = DEFAULT_NUM_GPU_BLOCKS  # vLLM's, null block included
    max_num_seqs: int = 256
    max_num_batched_tokens: int = 8192
    enable_chunked_prefill: bool = True
    watermark: float = 0.0
    enable_prefix_caching: bool = True

    def __post_init__(self) -> None:
        _need(1 <= self.block_size <= at.BLOCK_SIZE.hi, "block_size",
              f"must be in [1, {at.BLOCK_SIZE.hi}], got {self.block_size}")
        _need(2 <= self.num_gpu_blocks <= at.MAX_BLOCKS + 1, "num_gpu_blocks",
              f"must be in [2, {at.MAX_BLOCKS + 1}] (one is vLLM's null block), got "
              f"{self.num_gpu_blocks}")
        _need(self.capacity_tokens <= MAX_CAPACITY_TOKENS, "num_gpu_blocks",
              f"{self.num_gpu_blocks} blocks of {self.block_size} are "
              f"{self.capacity_tokens} token slots, more than {MAX_CAPACITY_TOKENS}")
        # the scheduler's own bounds, checked once by its record
        self.engine(step_ms=1.0, max_seq_len=2)

    @property
    def usable_blocks(self) -> int:
        """Blocks that can hold KV: vLLM's num_gpu_blocks less its null block."""
        return self.num_gpu_blocks - 1

    @property
    def capacity_tokens(self) -> int:
        return self.usable_blocks * self.block_size

    def kv_bytes(self, model: ModelShape) -> int:
        """The KV memory vLLM sized the pool from: num_gpu_blocks pages of this model."""
        return self.num_gpu_blocks * self.block_size * model.kv_bytes_per_token

    def lane(self) -> LaneSpec:
        return LaneSpec("paged", self.block_size, prefix_caching=self.enable_prefix_caching)

    def cache(self, model: ModelShape) -> CacheConfig:
        return CacheConfig(self.capacity_tokens, model)

    def engine(self, step_ms: float, max_seq_len: int) -> EngineConfig:
        try:
            return EngineConfig(max_num_seqs=self.max_num_seqs,
                                max_batched_tokens=self.max_num_batched_tokens,
                                watermark=self.watermark, step_ms=step_ms,
                                max_seq_len=max_seq_len,
                                enable_chunked_prefill=self.enable_chunked_prefill)
        except ValueError as exc:  # EngineConfig's field names -> vLLM's
            field, _, why = str(exc).partition(": ")
            name = "max_num_batched_tokens" if field == "max_batched_tokens" else field
            raise ValueError(f"{name}: {why}") from None

    def as_dict(self) -> dict:
        return asdict(self)

    def differences(self, other: NodeSettings) -> dict:
        """{field: value in `self`} where `self` differs from `other`."""
        return {f.name: getattr(self, f.name) for f in fields(self)
                if getattr(self, f.name) != getattr(other, f.name)}

    def describe(self, base: NodeSettings | None = None) -> str:
        """'block 32, blocks 513' (only what differs from `base`; 'node's own' when nothing)."""
        d = self.as_dict() if base is None else self.differences(base)
        if not d:
            return "node's own"
        return ", ".join(f"{SHORT[k]} {_fmt(v)}" for k, v in d.items())


SHORT = {"block_size": "block", "num_gpu_blocks": "blocks", "max_num_seqs": "seqs",
         "max_num_batched_tokens": "budget", "enable_chunked_prefill": "chunked",
         "watermark": "watermark", "enable_prefix_caching": "prefix"}


def _fmt(v: object) -> str:
    if isinstance(v, bool):
        return "on" if v else "off"
    if isinstance(v, float):
        return f"{v:g}"
    return str(v)


def _need(cond: bool, field: str, msg: str) -> None:
    if not cond:
        raise ValueError(f"{field}: {msg}")
