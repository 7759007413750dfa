"""Frozen, validated configuration records. Presets are data. Never mutated after creation."""
from __future__ import annotations

import math
from dataclasses import dataclass

from kvviz.core import limits

DTYPE_BYTES = {"float32": 4, "bfloat16": 2, "float16": 2}
# The bounds are kvviz/core/limits.py's (one set, typed once; the CLI states them in --help).
MAX_BLOCK_SIZE = limits.BLOCK_SIZE.hi
MAX_CAPACITY_TOKENS = limits.CAPACITY_TOKENS.hi
MAX_BLOCKS = limits.MAX_BLOCKS
MAX_SEQ_LEN = limits.MAX_SEQ_LEN.hi
MAX_REQUESTS = limits.REQUESTS.hi
MAX_NUM_SEQS = limits.MAX_NUM_SEQS.hi
MAX_BATCHED_TOKENS = limits.BATCHED_TOKENS.hi


def _need(cond: bool, field: str, msg: str) -> None:
    if not cond:
        raise ValueError(f"{field}: {msg}")


@dataclass(frozen=True)
class ModelShape:
    name: str
    num_layers: int
    num_heads: int
    num_kv_heads: int
    head_dim: int
    dtype: str = "float16"

    def __post_init__(self) -> None:
        for f in ("num_layers", "num_heads", "num_kv_heads", "head_dim"):
            _need(getattr(self, f) >= 1, f, f"must be >= 1, got {getattr(self, f)}")
        _need(self.num_heads % self.num_kv_heads == 0, "num_heads",
              f"{self.num_heads} is not a multiple of num_kv_heads {self.num_kv_heads}")
        _need(self.dtype in DTYPE_BYTES, "dtype",
              f"unknown dtype {self.dtype!r}; choose one of {sorted(DTYPE_BYTES)}")

    @property
    def kv_bytes_per_token(self) -> int:
        """K and V, every layer: 2 * layers * kv_heads * head_dim * dtype bytes."""
        return 2 * self.num_layers * self.num_kv_heads * self.head_dim * DTYPE_BYTES[self.dtype]


# Shapes from the models' published configs (config.json on their model cards).
MODEL_PRESETS: dict[str, ModelShape] = {
    m.name: m
    for m in (
        ModelShape("tiny-cpu", num_layers=2, num_heads=4, num_kv_heads=2, head_dim=32,
                   dtype="float32"),
        ModelShape("llama-2-7b", num_layers=32, num_heads=32, num_kv_heads=32, head_dim=128),
        ModelShape("llama-3-8b", num_layers=32, num_heads=32, num_kv_heads=8, head_dim=128,
                   dtype="bfloat16"),
        ModelShape("qwen2.5-7b", num_layers=28, num_heads=28, num_kv_heads=4, head_dim=128,
                   dtype="bfloat16"),
    )
}


SMALL_MODEL = "tiny-cpu"  # real mode on a CPU: K/V tensors a CPU's memory holds
DEFAULT_MODEL = "llama-3-8b"  # everywhere else: a GPU-sized model's bytes per token
MODEL_HELP = (f"model shape preset: {', '.join(MODEL_PRESETS)} (default {DEFAULT_MODEL}, the "
              f"bytes per token of a GPU-sized model, except real mode on a CPU: {SMALL_MODEL}, "
              "whose K/V tensors fit its memory)")


def model_preset(name: str) -> ModelShape:
    if name not in MODEL_PRESETS:
        raise ValueError(f"model: unknown preset {name!r}; choose one of {sorted(MODEL_PRESETS)}")
    return MODEL_PRESETS[name]


def model_for(name: str | None, real_on_cpu: bool) -> ModelShape:
    """The model a command runs: `name`, or (None) the default MODEL_HELP states."""
    return model_preset(name or (SMALL_MODEL if real_on_cpu else DEFAULT_MODEL))


@dataclass(frozen=True)
class CacheConfig:
    """One lane's KV capacity in token slots, and the model whose bytes per token the maps
    record. Each lane cuts the slots into its own blocks (LaneSpec.block_size); the per-lane
    bounds are `check_lane_blocks`'s and the engine's (a lane needs one block or cell)."""

    capacity_tokens: int
    model: ModelShape = MODEL_PRESETS["tiny-cpu"]

    def __post_init__(self) -> None:
        _need(1 <= self.capacity_tokens <= MAX_CAPACITY_TOKENS, "capacity_tokens",
              f"must be in [1, {MAX_CAPACITY_TOKENS}], got {self.capacity_tokens}")

@dataclass(frozen=True)
class LengthPreset:
    name: str
    prompt_mean: float
    output_mean: float
    sigma: float  # log-normal shape; 0 = uniform between 1 and 2*mean


# Means for sharegpt-like and alpaca-like are the ones the vLLM paper (Kwon et al., SOSP'23,
# Fig. 11) reports for those datasets; the log-normal spread is our modelling choice.
LENGTH_PRESETS: dict[str, LengthPreset] = {
    p.name: p
    for p in (
        LengthPreset("sharegpt-like", 161.0, 338.0, 1.0),
        LengthPreset("alpaca-like", 19.0, 58.0, 0.6),
        LengthPreset("long-context", 1500.0, 250.0, 0.5),
        LengthPreset("uniform", 256.0, 256.0, 0.0),
    )
}


@dataclass(frozen=True)
class WorkloadConfig:
    preset: str = "sharegpt-like"
    num_requests: int = 1000
    rate: float = math.inf  # arrivals per simulated second; inf = all at t=0
    arrival: str = "poisson"  # or "bursty" (gamma inter-arrivals)
    burstiness: float = 0.25  # gamma shape for bursty (< 1 is burstier than Poisson)
    max_seq_len: int = 2048
    prefix_share: float = 0.0  # fraction of requests that share a system prompt
    prefix_tokens: int = 256
    prefix_groups: int = 4
    seed: int = 0

    def __post_init__(self) -> None:
        _need(self.preset in LENGTH_PRESETS, "preset",
              f"unknown workload preset {self.preset!r}; choose one of {sorted(LENGTH_PRESETS)}")
        _need(1 <= self.num_requests <= MAX_REQUESTS, "num_requests",
              f"must be in [1, {MAX_REQUESTS}], got {self.num_requests}")
        _need(self.rate > 0, "rate", f"must be > 0 (inf for all at once), got {self.rate}")
        _need(self.arrival in ("poisson", "bursty"), "arrival",
              f"must be 'poisson' or 'bursty', got {self.arrival!r}")
        _need(0 < self.burstiness < math.inf, "burstiness",
              f"must be > 0 and finite, got {self.burstiness}")
        _need(2 <= self.max_seq_len <= MAX_SEQ_LEN, "max_seq_len",
              f"must be in [2, {MAX_SEQ_LEN}], got {self.max_seq_len}")
        _need(0.0 <= self.prefix_share <= 1.0, "prefix_share",
              f"must be in [0, 1], got {self.prefix_share}")
        _need(self.prefix_tokens >= 1, "prefix_tokens", f"must be >= 1, got {self.prefix_tokens}")
        _need(self.prefix_tokens < self.max_seq_len, "prefix_tokens",
              f"{self.prefix_tokens} must be below max_seq_len {self.max_seq_len}")
        _need(self.prefix_groups >= 1, "prefix_groups", f"must be >= 1, got {self.prefix_groups}")


RESERVE_POLICIES = ("max", "pow2", "exact")
PLACEMENTS = ("first-fit", "best-fit", "buddy")


@dataclass(frozen=True)
class LaneSpec:
    """One allocator configuration. Text form: 'contiguous:first-fit:max', 'paged:16[:prefix]'."""

    allocator: str = "paged"  # "paged" | "contiguous"
    block_size: int = 16  # paged: block size; contiguous: cell size in the BlockMap
    placement: str = "first-fit"
    reserve: str = "max"
    prefix_caching: bool = False

    def __post_init__(self) -> None:
        _need(self.allocator in ("paged", "contiguous"), "allocator",
              f"must be 'paged' or 'contiguous', got {self.allocator!r}")
        _need(1 <= self.block_size <= MAX_BLOCK_SIZE, "block_size",
              f"must be in [1, {MAX_BLOCK_SIZE}], got {self.block_size}")
        _need(self.placement in PLACEMENTS, "placement",
              f"unknown placement {self.placement!r}; choose one of {list(PLACEMENTS)}")
        _need(self.reserve in RESERVE_POLICIES, "reserve",
              f"unknown reservation {self.reserve!r}; choose one of {list(RESERVE_POLICIES)}")
        _need(not (self.prefix_caching and self.allocator != "paged"), "prefix_caching",
              "only the paged allocator supports prefix caching")

    @property
    def label(self) -> str:
        if self.allocator == "paged":
            return f"paged:{self.block_size}" + (":prefix" if self.prefix_caching else "")
        return f"contiguous:{self.placement}:{self.reserve}"

    @classmethod
    def parse(cls, text: str) -> LaneSpec:
        parts = [p.strip() for p in text.strip().split(":")]
        kind = parts[0]
        if kind == "paged":
            _need(len(parts) in (2, 3), "lane",
                  f"{text!r}: expected 'paged:BLOCK_SIZE' or 'paged:BLOCK_SIZE:prefix'")
            try:
                bs = int(parts[1])
            except ValueError:
                raise ValueError(
                    f"lane: {text!r}: block size {parts[1]!r} is not an integer") from None
            if len(parts) == 3:
                _need(parts[2] == "prefix", "lane", f"{text!r}: unknown option {parts[2]!r}")
            return cls("paged", bs, prefix_caching=len(parts) == 3)
        if kind == "contiguous":
            _need(len(parts) in (1, 2, 3), "lane",
                  f"{text!r}: expected 'contiguous[:PLACEMENT[:RESERVE]]'")
            placement = parts[1] if len(parts) > 1 else "first-fit"
            reserve = parts[2] if len(parts) > 2 else "max"
            return cls("contiguous", 1, placement=placement, reserve=reserve)
        raise ValueError(f"lane: {text!r}: allocator must be 'paged' or 'contiguous'")

    def describe(self) -> str:
        """The lane in words, e.g. 'paged, blocks of 16 slots: any free block serves'."""
        if self.allocator == "paged":
            return (f"paged, blocks of {self.block_size} slots"
                    + (", prefix caching" if self.prefix_caching else "")
                    + ": any free block serves")
        return (f"contiguous, {self.placement} placement, reserves {self.reserve} length up "
                "front: needs one free range")


DEFAULT_LANES = tuple(LaneSpec.parse(t) for t in limits.DEFAULT_LANE_TEXTS)


def lane_caption(name: str) -> str:
    """A lane's name in words; 'paged:16#2' (the same spec given twice) says 'second lane'."""
    label, _, copy = name.partition("#")
    try:
        text = LaneSpec.parse(label).describe()
    except ValueError:
        return name
    return f"{text} (lane #{copy} with this setting)" if copy else text


@dataclass(frozen=True)
class EngineConfig:
    """The scheduler's knobs, vLLM's names and meaning (kvviz/engine/rule/scheduler.py)."""

    max_num_seqs: int = 256  # running-batch limit (POLICY when it refuses)
    max_batched_tokens: int = 8192  # vLLM's max_num_batched_tokens: tokens computed per step
    watermark: float = 0.0  # share of blocks kept free when admitting (POLICY); vLLM's 0.0
    enable_chunked_prefill: bool = True  # vLLM's default: a prompt may take several steps
    step_ms: float = 20.0  # simulated time per engine step
    max_seq_len: int = 2048

    def __post_init__(self) -> None:
        _need(1 <= self.max_num_seqs <= MAX_NUM_SEQS, "max_num_seqs",
              f"must be in [1, {MAX_NUM_SEQS}], got {self.max_num_seqs}")
        _need(1 <= self.max_batched_tokens <= MAX_BATCHED_TOKENS, "max_batched_tokens",
              f"must be in [1, {MAX_BATCHED_TOKENS}], got {self.max_batched_tokens}")
        _need(0.0 <= self.watermark < 1.0, "watermark", f"must be in [0, 1), got {self.watermark}")
        _need(0 < self.step_ms < math.inf, "step_ms", f"must be > 0 and finite, got {self.step_ms}")
        _need(2 <= self.max_seq_len <= MAX_SEQ_LEN, "max_seq_len",
              f"must be in [2, {MAX_SEQ_LEN}], got {self.max_seq_len}")
        _need(self.enable_chunked_prefill or self.max_batched_tokens >= self.max_seq_len,
              "max_batched_tokens",
              f"{self.max_batched_tokens} is below max_seq_len {self.max_seq_len}: without "
              "chunked prefill a longer prompt could never be scheduled (vLLM refuses this "
              "too); raise it or enable chunked prefill")


def check_lane_blocks(lanes: tuple[LaneSpec, ...] | list[LaneSpec], capacity_tokens: int) -> None:
    """Each lane keeps one BlockMap entry per block (a contiguous lane: per cell of
    block_size tokens, usually 1): refuse a capacity below one block, or over MAX_BLOCKS, in
    any lane."""
    for lane in lanes:
        n = capacity_tokens // lane.block_size
        _need(n >= 1, "capacity_tokens",
              f"lane {lane.label}: {capacity_tokens} token slots is below one block of "
              f"{lane.block_size}")
        _need(n <= MAX_BLOCKS, "capacity_tokens",
              f"lane {lane.label}: {capacity_tokens} token slots is {n} cells of "
              f"{lane.block_size}, over the limit of {MAX_BLOCKS} per lane; use less capacity"
              + (" or larger blocks" if lane.allocator == "paged" else ""))
