"""Synthetic request streams and trace files (CSV / JSONL).

A Workload is columns of equal length, sorted by arrival:
arrival_s float64, prompt int64, output int64, prefix_group int64 (-1 = no shared prefix).

Prompt content is described by hash chains: request r's prompt is cut into blocks of
`chain_block` tokens and chain_ids[chain_ptr[r]:chain_ptr[r+1]] names them in order. Id i stands
for the whole prefix up to the end of block i (as vLLM's block hashes and Mooncake's hash_ids
do): two requests with the same id at block i have identical tokens up to there, as far as both
prompts go. Prompt tokens past a request's chain are its own. Without explicit chains, a request
of prefix_group g has the one-id chain [g] in blocks of prefix_tokens (see `chains`).
"""
from __future__ import annotations

import csv
import json
import math
from dataclasses import dataclass, replace
from pathlib import Path

import numpy as np

from kvviz.core import safeio
from kvviz.core.config import LENGTH_PRESETS, WorkloadConfig

TRACE_FIELDS = ("arrival_s", "prompt_tokens", "output_tokens", "prefix_group")


@dataclass(frozen=True, eq=False)
class Workload:
    arrival_s: np.ndarray
    prompt: np.ndarray
    output: np.ndarray
    prefix_group: np.ndarray
    prefix_tokens: int = 0  # length of each group's shared system prompt
    chain_ptr: np.ndarray | None = None  # int64 [n + 1]; None = derive from prefix_group
    chain_ids: np.ndarray | None = None  # int64, all requests' chains concatenated
    chain_block: int = 0  # tokens per chain id
    clipped: int = 0  # requests whose prompt+output was cut to max_seq_len

    def __len__(self) -> int:
        return int(self.arrival_s.shape[0])

    @property
    def final_len(self) -> np.ndarray:
        return self.prompt + self.output

    @property
    def total_output_tokens(self) -> int:
        return int(self.output.sum())

    @property
    def has_chains(self) -> bool:
        return self.chain_ptr is not None or self.prefix_tokens > 0

    def chains(self) -> tuple[np.ndarray, np.ndarray, int]:
        """(chain_ptr, chain_ids, chain_block), derived from prefix groups when not given."""
        if self.chain_ptr is not None:
            return self.chain_ptr, self.chain_ids, self.chain_block
        shared = self.prefix_group >= 0 if self.prefix_tokens else np.zeros(len(self), bool)
        ptr = np.concatenate([[0], np.cumsum(shared)]).astype(np.int64)
        return ptr, self.prefix_group[shared].astype(np.int64), max(1, self.prefix_tokens)

    def chain(self, r: int) -> np.ndarray:
        ptr, ids, _ = self.chains()
        return ids[ptr[r] : ptr[r + 1]]


def _lognormal(rng: np.random.Generator, mean: float, sigma: float, n: int) -> np.ndarray:
    if sigma == 0:
        return rng.integers(1, int(2 * mean), n, endpoint=True).astype(np.float64)
    mu = math.log(mean) - sigma * sigma / 2  # so that E[x] = mean
    return rng.lognormal(mu, sigma, n)


def arrivals(rng: np.random.Generator, cfg: WorkloadConfig) -> np.ndarray:
    n = cfg.num_requests
    if math.isinf(cfg.rate):
        return np.zeros(n)
    if cfg.arrival == "poisson":
        gaps = rng.exponential(1.0 / cfg.rate, n)
    else:  # gamma gaps with the same mean; shape < 1 clusters requests into bursts
        gaps = rng.gamma(cfg.burstiness, 1.0 / (cfg.rate * cfg.burstiness), n)
    return np.cumsum(gaps) - gaps[0]


def generate(cfg: WorkloadConfig) -> Workload:
    """A seeded synthetic workload; the same config always gives the same requests."""
    rng = np.random.default_rng(cfg.seed)
    p = LENGTH_PRESETS[cfg.preset]
    n = cfg.num_requests
    prompt = np.maximum(1, np.rint(_lognormal(rng, p.prompt_mean, p.sigma, n))).astype(np.int64)
    output = np.maximum(1, np.rint(_lognormal(rng, p.output_mean, p.sigma, n))).astype(np.int64)
    group = np.full(n, -1, np.int64)
    chains = None
    if cfg.prefix_share > 0:
        shared = rng.random(n) < cfg.prefix_share
        group[shared] = rng.integers(0, cfg.prefix_groups, int(shared.sum()))
        prompt[shared] += cfg.prefix_tokens
        chains = conversations(np.random.default_rng([cfg.seed, 1]), cfg, prompt, output, group)
    clipped = clip_lengths(prompt, output, cfg.max_seq_len)
    w = Workload(arrivals(rng, cfg), prompt, output, group,
                 cfg.prefix_tokens if cfg.prefix_share > 0 else 0)
    if chains is not None:
        w = replace(w, chain_ptr=chains[0], chain_ids=chains[1], chain_block=CHAIN_BLOCK)
    cut = int(((clipped[0] != prompt) | (clipped[1] != output)).sum())
    return replace(w, prompt=clipped[0], output=clipped[1], clipped=cut)


CHAIN_BLOCK = 16  # tokens per hash id in synthetic workloads (vLLM's default block size)
FOLLOW_UP = 0.5  # share of prefix-sharing requests that continue an earlier conversation


def conversations(rng: np.random.Generator, cfg: WorkloadConfig, prompt: np.ndarray,
                  output: np.ndarray, group: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Hash chains for a few system prompts and multi-turn conversations (changes `prompt` and
    `group` in place for follow-ups). A first turn is the group's system prompt (its whole
    blocks shared) and its own user text; a follow-up turn's prompt is an earlier turn's prompt
    + that turn's output + new user text, and its chain extends the earlier one's whole blocks.
    Blocks holding any token of a request's own are new ids, never shared with another request.
    """
    b = CHAIN_BLOCK
    n = prompt.size
    sys_blocks = cfg.prefix_tokens // b
    next_id = cfg.prefix_groups * sys_blocks  # ids below are the system prompts' blocks
    follow = rng.random(n) < FOLLOW_UP
    pick = rng.random(n)
    chains: list[np.ndarray] = []
    turns: list[int] = []  # requests so far that share a prefix
    for r in range(n):
        g = int(group[r])
        if g < 0:
            chains.append(np.zeros(0, np.int64))
            continue
        user = int(prompt[r]) - cfg.prefix_tokens
        if follow[r] and turns:
            parent = turns[int(pick[r] * len(turns))]
            group[r] = g = int(group[parent])
            prompt[r] = prompt[parent] + output[parent] + user
            base = chains[parent][: int(prompt[parent]) // b]
        else:
            base = np.arange(g * sys_blocks, (g + 1) * sys_blocks, dtype=np.int64)
        own = -(-int(prompt[r]) // b) - base.size
        chains.append(np.concatenate([base, np.arange(next_id, next_id + own, dtype=np.int64)]))
        next_id += own
        turns.append(r)
    ptr = np.concatenate([[0], np.cumsum([c.size for c in chains])]).astype(np.int64)
    return ptr, np.concatenate(chains)


def clip_lengths(prompt: np.ndarray, output: np.ndarray, max_seq_len: int):
    """Keep prompt + output <= max_seq_len: the prompt keeps at most max_seq_len - 1."""
    prompt = np.minimum(prompt, max_seq_len - 1)
    output = np.minimum(output, max_seq_len - prompt)
    return prompt, output


# ---- traces (kvviz/traces reads every format; parse_trace/load_trace live there) -------
def clip_workload(w: Workload, max_seq_len: int) -> Workload:
    """The workload with prompt+output cut to max_seq_len; `clipped` counts the requests cut."""
    prompt, output = clip_lengths(w.prompt, w.output, max_seq_len)
    cut = int(((prompt != w.prompt) | (output != w.output)).sum())
    return replace(w, prompt=prompt, output=output, clipped=w.clipped + cut)


def is_kvviz_trace(path: Path) -> bool:
    """Whether a file starts like a trace that dump_trace writes (CSV header or JSONL row)."""
    first = safeio.head(path, 4096).split(b"\n", 1)[0].strip()
    if first.startswith(",".join(TRACE_FIELDS[:3]).encode()):
        return True
    try:
        obj = json.loads(first)
    except (ValueError, RecursionError):
        return False
    return isinstance(obj, dict) and all(f in obj for f in TRACE_FIELDS[:3])


def dump_trace(w: Workload, path: str | Path) -> None:
    """Write kvviz's CSV (.csv) or JSONL (anything else) with the four trace fields, atomically
    (a temporary file beside `path`, then renamed); a workload with explicit hash chains writes
    JSONL with a hash_ids list and hash_block per row. Callers check the path first
    (safeio.check_output): this replaces whatever is there."""
    path = Path(path)
    cols = (w.arrival_s, w.prompt, w.output, w.prefix_group)
    explicit = w.chain_ptr is not None

    def write(tmp: Path) -> None:
        with tmp.open("w", newline="", encoding="utf-8") as fh:
            if path.suffix.lower() == ".csv":
                out = csv.writer(fh)
                out.writerow(TRACE_FIELDS)
                for a, p, o, g in zip(*cols):
                    out.writerow([repr(float(a)), int(p), int(o), int(g)])
            else:
                for i, (a, p, o, g) in enumerate(zip(*cols)):
                    row = dict(zip(TRACE_FIELDS, (float(a), int(p), int(o), int(g))))
                    if explicit:
                        row["hash_ids"] = w.chain(i)[: -(-int(p) // w.chain_block)].tolist()
                        row["hash_block"] = w.chain_block
                    fh.write(json.dumps(row) + "\n")

    safeio.atomic_write(path, write, "trace")
