"""The limits of every setting, typed once: bounds, and the argparse `type=` helpers that
parse a flag's text within them (finite, in range). kvviz/core/config.py's records check the same
bounds; the CLI and kvviz.settings.collector take their ranges from here.

Each helper returns a callable for `type=` that raises argparse.ArgumentTypeError (so the
CLI prints `kvviz CMD: error: argument --flag: ...` and exits 2) and carries its range in
`.range_text`, which `rng()` appends to a flag's help so `--help` states it. `.check(field,
value)` applies the same range to a value that did not come from text (a config file's number,
kvviz.settings.collector): ValueError "field: why".
"""
from __future__ import annotations

import argparse
import math
from collections.abc import Callable

INT64_MAX = 2**63 - 1
MAX_INT_DIGITS = 30  # longer integer text is refused before int() spends time on it


def _fmt(v: float) -> str:
    if isinstance(v, int) or float(v).is_integer() and abs(v) < 1e16:
        return f"{int(v):,}".replace(",", "_") if abs(v) >= 100_000 else str(int(v))
    return f"{v:g}"


class _Typed:
    """A named argparse type callable; argparse uses __name__ in 'invalid X value' messages."""

    def __init__(self, name: str, parse: Callable[[str], object], range_text: str,
                 problem: Callable[[object], str | None], lo: float, hi: float) -> None:
        self.__name__ = name
        self.lo, self.hi = lo, hi  # the bounds (open or closed as range_text says)
        self._parse = parse
        self._problem = problem
        self.range_text = range_text

    def __call__(self, text: str) -> object:
        return self._parse(text)

    def check(self, field: str, value: object) -> object:
        """`value` when it is a number of this type within the range; else ValueError
        "field: why" (bool is not a number here; an int is a float)."""
        why = self._problem(value)
        if why is not None:
            raise ValueError(f"{field}: {why}")
        return float(value) if self.__name__ == "float" else value  # type: ignore[arg-type]

    def __repr__(self) -> str:
        return self.__name__


def int_range(lo: int, hi: int) -> _Typed:
    """An integer in [lo, hi] (both within int64)."""
    assert -INT64_MAX <= lo <= hi <= INT64_MAX

    def problem(v: object) -> str | None:
        if not isinstance(v, int) or isinstance(v, bool):
            return f"expected an integer, got {type(v).__name__}"
        if not lo <= v <= hi:
            return (f"must be in [{_fmt(lo)}, {_fmt(hi)}], got {v}" if abs(v) < 10**20 else
                    f"must be in [{_fmt(lo)}, {_fmt(hi)}]")
        return None

    def parse(text: str) -> int:
        s = text.strip().replace("_", "")
        digits = s.lstrip("+-")
        if not digits.isdigit() or not digits.isascii() or len(digits) > MAX_INT_DIGITS:
            raise argparse.ArgumentTypeError(f"not an integer: {text[:40]!r}")
        try:
            v = int(s)
        except ValueError:  # '+-5' and the like
            raise argparse.ArgumentTypeError(f"not an integer: {text[:40]!r}") from None
        why = problem(v)
        if why is not None:
            raise argparse.ArgumentTypeError(why)
        return v

    return _Typed("int", parse, f"{_fmt(lo)}..{_fmt(hi)}", problem, lo, hi)


def float_range(lo: float, hi: float, *, lo_open: bool = False, hi_open: bool = False,
                allow_inf: bool = False) -> _Typed:
    """A finite float in [lo, hi] (open ends as asked); 'inf' only when allow_inf."""
    left, right = "(" if lo_open else "[", ")" if hi_open else "]"
    range_text = f"{left}{_fmt(lo)}, {_fmt(hi)}{right}" + (" or inf" if allow_inf else "")

    def problem(v: object) -> str | None:
        if not isinstance(v, (int, float)) or isinstance(v, bool):
            return f"expected a number, got {type(v).__name__}"
        try:
            v = float(v)
        except OverflowError:  # an integer past the float range
            return f"must be in {range_text}"
        if math.isnan(v):
            return "must be a number, got nan"
        if math.isinf(v):
            return None if allow_inf and v > 0 else f"must be finite, in {range_text}, got {v}"
        low_ok = v > lo if lo_open else v >= lo
        high_ok = v < hi if hi_open else v <= hi
        return None if low_ok and high_ok else f"must be in {range_text}, got {v:g}"

    def parse(text: str) -> float:
        try:
            v = float(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"not a number: {text[:40]!r}") from None
        if math.isinf(v) and not is_inf_text(text):  # 1e400: past the float range, not inf
            raise argparse.ArgumentTypeError(f"{text[:40]!r} is too large (must be in "
                                             f"{range_text})")
        why = problem(v)
        if why is not None:
            raise argparse.ArgumentTypeError(why)
        return v

    return _Typed("float", parse, range_text, problem, lo, hi)


def is_inf_text(text: str) -> bool:
    """Whether `text` spells infinity (inf, +Infinity ...), not a number past the float range."""
    return text.strip().lstrip("+-").lower() in ("inf", "infinity")


def rng(help_text: str, typ: _Typed) -> str:
    """`help_text` with the flag's accepted range appended."""
    return f"{help_text} [range {typ.range_text}]" if help_text else f"range {typ.range_text}"


# Shared ranges: one name per quantity, so the same flag has the same range everywhere. The
# upper bounds are where arrays or loops would no longer fit a machine, and int64 arithmetic on
# token counts stays exact; kvviz/core/config.py's records check the same bounds (`.hi`).
SEED = int_range(0, INT64_MAX)
REQUESTS = int_range(1, 10_000_000)
CAPACITY_TOKENS = int_range(1, 2**30)
MAX_SEQ_LEN = int_range(2, 2**24)
BLOCK_SIZE = int_range(1, 65536)
MAX_NUM_SEQS = int_range(1, 2**20)
BATCHED_TOKENS = int_range(1, 2**31 - 1)  # "no budget" is written as 10^9 (benchmarks, vLLM)
PREFIX_TOKENS = int_range(1, 2**24)
MAX_BLOCKS = 2**24  # blocks (or contiguous cells) per lane: every BlockMap has one entry each
RATE = float_range(0.0, 1e9, lo_open=True, allow_inf=True)
SHARE = float_range(0.0, 1.0)
WATERMARK = float_range(0.0, 1.0, hi_open=True)  # vLLM's watermark: a share of the blocks
SECONDS = float_range(0.0, 1e9, lo_open=True)  # a duration or an interval
TIMEOUT = float_range(0.0, 3600.0, lo_open=True)
THREADS = int_range(1, 4096)
COUNT = int_range(1, 10**9)

# --prefix-sharing means the same in every command: the share of synthetic requests that begin
# with one of 4 shared system prompts (half of those continue an earlier conversation).
PREFIX_SHARE_BARE = 0.5  # the flag given without a value
PREFIX_SHARING_HELP = ("share of synthetic requests that begin with one of 4 shared system "
                       "prompts, half of those continuing an earlier conversation (default 0; "
                       f"the bare flag = {PREFIX_SHARE_BARE:g})")

# Defaults every command shares: the Live demo's (docs/DASHBOARD.md, "The default demo"), so
# `kvviz simulate` with no flags runs what the dashboard shows first, and `kvviz collect` records
# it. One text per flag, so --help says the same in every command.
DEFAULT_RATE = 3.0
DEFAULT_CAPACITY_TOKENS = 16384
DEFAULT_LANE_TEXTS = ("contiguous:first-fit:pow2", "contiguous:first-fit:max", "paged:16")
RATE_HELP = ("arrivals per second of the engine's clock (simulated in simulate, wall time in "
             "collect); inf = all at once (default 3: the Live demo's stream, one a person can "
             "follow and a small CPU keeps up with in real mode)")
CAPACITY_TOKENS_HELP = ("KV slots per lane (default 16384: the Live demo's pool, small enough "
                        "that real mode's K/V tensors fit a CPU and one block map shows every "
                        "slot, full within a minute at the default rate)")
LANE_HELP = ("an allocator lane, repeatable: contiguous[:PLACEMENT[:RESERVE]] or "
             "paged:BLOCK[:prefix]; all lanes see one request stream (default the Live demo's "
             "three: contiguous:first-fit:pow2, whose holes of many sizes show FRAGMENTATION, "
             "contiguous:first-fit:max, which can only run out, and paged:16)")
# vLLM 0.32's scheduler knobs, under its names, one text each (kvviz/engine/rule/scheduler.py).
MAX_NUM_SEQS_HELP = "running-batch limit, vLLM's max_num_seqs (default 256)"
BATCHED_TOKENS_HELP = ("tokens computed per step, vLLM's max_num_batched_tokens: running "
                       "requests' decodes first, then prefill chunks (default 8192)")
CHUNKED_PREFILL_HELP = ("split prompts over steps when the token budget is short (vLLM's "
                        "default, on); --no-enable-chunked-prefill makes a prompt wait for a "
                        "step with budget for all of it (then --max-num-batched-tokens must be "
                        ">= --max-seq-len)")
WATERMARK_HELP = ("share of paged blocks kept free when admitting while others run, vLLM's "
                  "watermark; a request it turns away is refused with POLICY (default 0)")
