"""The alternatives to a node's settings: lists of values per knob, crossed, or a named set.

Each knob not given keeps the node's value. The KV memory is a knob of its own: a block size
alone changes the block count, not the memory (vLLM sizes num_gpu_blocks from the memory:
memory // (block_size x bytes per token)), so `--block-size 32` at the node's memory has half
the blocks of 16; `--num-blocks` sets vLLM's num_gpu_blocks (null block included) instead.
"""
from __future__ import annotations

import argparse
import dataclasses
import itertools
import math
import re
from dataclasses import dataclass

from kvviz.core import limits as at
from kvviz.core.config import ModelShape
from kvviz.core.errors import KvvizError
from kvviz.twin.settings import NodeSettings

MAX_CONFIGS = 256  # alternatives in one run: each is a whole simulation of the stream

# knob -> its flag, in the order the cross product varies them (the last fastest)
FLAGS = {"block_size": "--block-size", "memory": "--num-blocks / --kv-memory",
         "max_num_seqs": "--max-num-seqs", "max_num_batched_tokens": "--max-num-batched-tokens",
         "watermark": "--watermark", "enable_prefix_caching": "--prefix-caching"}

# named sets: flag values as text, as a person would type them
NAMED_SETS: dict[str, dict[str, str]] = {
    "block-size": {"block_size": "16,32,64,128"},
    "memory": {"kv_memory": "0.5x,0.75x,1.25x,1.5x,2x"},
    "sizing": {"block_size": "16,32,64", "kv_memory": "0.75x,1x,1.25x,1.5x"},
    "batch": {"max_num_seqs": "32,64,128,256,512"},
    "prefix": {"prefix_caching": "on,off"},
}

_UNITS = {"": 1, "b": 1, "k": 10**3, "kb": 10**3, "m": 10**6, "mb": 10**6, "g": 10**9,
          "gb": 10**9, "t": 10**12, "tb": 10**12, "kib": 2**10, "mib": 2**20, "gib": 2**30,
          "tib": 2**40}
_SIZE = re.compile(r"^\s*([0-9]+(?:\.[0-9]+)?(?:e[0-9]+)?)\s*([a-z]*)\s*$", re.I)
MAX_ITEMS = 64  # values in one list


@dataclass(frozen=True)
class KvMemory:
    """One --kv-memory value: a multiple of the node's KV memory, or bytes."""

    factor: float | None = None
    nbytes: int | None = None

    def num_gpu_blocks(self, base: NodeSettings, block_size: int, model: ModelShape) -> int:
        page = block_size * model.kv_bytes_per_token
        nbytes = base.kv_bytes(model) * self.factor if self.factor is not None else self.nbytes
        return int(nbytes // page)

    @property
    def text(self) -> str:
        return f"{self.factor:g}x" if self.factor is not None else f"{self.nbytes} bytes"


@dataclass(frozen=True)
class Alternatives:
    """Values per knob; an empty tuple keeps the node's value."""

    block_size: tuple[int, ...] = ()
    num_gpu_blocks: tuple[int, ...] = ()
    kv_memory: tuple[KvMemory, ...] = ()
    max_num_seqs: tuple[int, ...] = ()
    max_num_batched_tokens: tuple[int, ...] = ()
    watermark: tuple[float, ...] = ()
    enable_prefix_caching: tuple[bool, ...] = ()

    def __post_init__(self) -> None:
        if self.num_gpu_blocks and self.kv_memory:
            raise KvvizError("--num-blocks and --kv-memory both size the pool: give one")

    @property
    def empty(self) -> bool:
        return not any(getattr(self, f.name) for f in dataclasses.fields(self))

    def count(self) -> int:
        lists = [self.block_size, self.num_gpu_blocks or self.kv_memory, self.max_num_seqs,
                 self.max_num_batched_tokens, self.watermark, self.enable_prefix_caching]
        return math.prod(max(1, len(v)) for v in lists)

    def expand(self, base: NodeSettings, model: ModelShape) -> list[NodeSettings]:
        """The cross product, in flag order (the last knob fastest), duplicates dropped;
        none when no knob is listed."""
        if self.empty:
            return []
        n = self.count()
        if n > MAX_CONFIGS:
            raise KvvizError(f"{n} configurations (the product of the list lengths); at most "
                             f"{MAX_CONFIGS}: shorten the lists")
        memory: tuple = self.num_gpu_blocks or self.kv_memory or (None,)
        out: list[NodeSettings] = []
        for bs, mem, seqs, budget, wm, prefix in itertools.product(
                self.block_size or (base.block_size,), memory,
                self.max_num_seqs or (base.max_num_seqs,),
                self.max_num_batched_tokens or (base.max_num_batched_tokens,),
                self.watermark or (base.watermark,),
                self.enable_prefix_caching or (base.enable_prefix_caching,)):
            if isinstance(mem, KvMemory):
                blocks, flag = mem.num_gpu_blocks(base, bs, model), f"--kv-memory {mem.text}"
            elif mem is None:  # the node's memory at this block size
                blocks, flag = KvMemory(1.0).num_gpu_blocks(base, bs, model), "--block-size"
            else:
                blocks, flag = mem, "--num-blocks"
            try:
                s = NodeSettings(bs, blocks, seqs, budget, base.enable_chunked_prefill, wm, prefix)
            except ValueError as exc:
                field, _, why = str(exc).partition(": ")
                where = flag if field == "num_gpu_blocks" else FLAGS.get(field, field)
                raise KvvizError(f"{where}: block size {bs}: {why}") from None
            if s not in out:
                out.append(s)
        return out


def parse_list(text: str, flag: str, item) -> tuple:
    """'16,32,64' -> (16, 32, 64) through `item(text)`; one clear error naming the flag."""
    parts = [p.strip() for p in str(text).split(",")]
    if not parts or any(not p for p in parts):
        raise KvvizError(f"{flag}: {text!r}: give a comma-separated list of values")
    if len(parts) > MAX_ITEMS:
        raise KvvizError(f"{flag}: {len(parts)} values; at most {MAX_ITEMS}")
    out = []
    for p in parts:
        try:
            v = item(p)
        except (ValueError, OverflowError, argparse.ArgumentTypeError) as exc:
            raise KvvizError(f"{flag}: {p!r}: {exc}") from None
        if v not in out:
            out.append(v)
    return tuple(out)


def on_off(text: str) -> bool:
    t = text.lower()
    if t in ("on", "true", "yes", "1"):
        return True
    if t in ("off", "false", "no", "0"):
        return False
    raise ValueError("say on or off")


def kv_memory(text: str) -> KvMemory:
    """'1.2x' (a multiple of the node's KV memory) or a size: '8GiB', '512MB', '1000000'."""
    t = text.strip().lower()
    if t.endswith("x"):
        f = float(t[:-1])
        if not (0.0 < f <= 1e6) or not math.isfinite(f):
            raise ValueError("a multiple must be in (0, 1e6]")
        return KvMemory(factor=f)
    m = _SIZE.match(t)
    if not m or m.group(2) not in _UNITS:
        raise ValueError("neither a multiple of the node's KV memory like 1.2x nor a size "
                         "like 8GiB, 512MB or 1000000 (bytes)")
    n = float(m.group(1)) * _UNITS[m.group(2)]
    if not 1 <= n <= 2**60:
        raise ValueError("a size must be in [1 byte, 2^60 bytes]")
    return KvMemory(nbytes=int(n))


NUM_GPU_BLOCKS = at.int_range(2, at.MAX_BLOCKS + 1)  # vLLM's count: the null block and one
# each list item parses as the same flag does in simulate and collect (one range per quantity)
PARSERS = {"block_size": ("--block-size", at.BLOCK_SIZE),
           "num_gpu_blocks": ("--num-blocks", NUM_GPU_BLOCKS),
           "kv_memory": ("--kv-memory", kv_memory),
           "max_num_seqs": ("--max-num-seqs", at.MAX_NUM_SEQS),
           "max_num_batched_tokens": ("--max-num-batched-tokens", at.BATCHED_TOKENS),
           "watermark": ("--watermark", at.WATERMARK),
           "prefix_caching": ("--prefix-caching", on_off)}


class CommaList:
    """argparse `type=` for a comma list of one knob's values: checks every item as the
    single-value flag would (`item`, `range_text`) and keeps the text for `alternatives`."""

    def __init__(self, key: str) -> None:
        self.key = key
        self.flag, self.item = PARSERS[key]
        self.range_text = getattr(self.item, "range_text", None)

    def __call__(self, text: str) -> str:
        try:
            parse_list(text, self.flag, self.item)
        except KvvizError as exc:
            raise argparse.ArgumentTypeError(str(exc).removeprefix(self.flag + ": ")) from None
        return text

    def __repr__(self) -> str:
        return f"CommaList({self.key})"


def alternatives(texts: dict[str, str | None], named: str | None = None) -> Alternatives:
    """Alternatives from flag texts ({PARSERS key: '16,32' or None}) and a named set; a flag
    given beside the set replaces that knob's list."""
    merged: dict[str, str | None] = {}
    if named is not None:
        if named not in NAMED_SETS:
            raise KvvizError(f"--set: {named!r}: choose one of {sorted(NAMED_SETS)}")
        merged.update(NAMED_SETS[named])
    if texts.get("num_gpu_blocks") is not None:  # a flag replaces the set's way of sizing
        merged.pop("kv_memory", None)
    merged.update({k: v for k, v in texts.items() if v is not None})
    kw = {}
    for key, text in merged.items():
        flag, item = PARSERS[key]
        field = "enable_prefix_caching" if key == "prefix_caching" else key
        kw[field] = parse_list(text, flag, item)
    return Alternatives(**kw)
