"""Decode attention and real mode: the one attention benchmark (`--json`: JSON lines).

    python benchmarks/bench_attention.py target --preset cpu [--sweep --rounds 3]  # targets
    python benchmarks/bench_attention.py target --preset h200 [--sweep]  # (CUDA)
    python benchmarks/bench_attention.py cpu-options [--flex]            # CPU kernel choices
    python benchmarks/bench_attention.py cpu-breakdown                   # paged time, by part
    python benchmarks/bench_attention.py triton-configs                  # CUDA launch configs
    python benchmarks/bench_attention.py sdpa-backends                   # CUDA baseline choices
    python benchmarks/bench_attention.py real-mode [--device cuda --model llama-3-8b
        --seqs 64 --context 1024 --duration 60]     # RealKV decode steps/s through the pools
`kvviz bench attention` is the same paged-vs-contiguous measurement as a CLI command.
"""
from __future__ import annotations

import statistics
from dataclasses import replace

import harness
import torch
import torch.nn.functional as F

from kvviz.kv.attention import contiguous_decode_attention, paged_decode_attention
from kvviz.kv.bench import (
    SWEEP_BLOCK_SIZES,
    AttentionBench,
    attention_inputs,
    sweep_block_sizes,
    time_runs,
)

PRESETS = {
    "cpu": AttentionBench("cpu", 16, 1024, 8, 8, 128, 16, "float32"),
    "h200": AttentionBench("cuda", 64, 4096, 32, 8, 128, 16, "bfloat16", repeats=50),
}


ARGS = None  # the parsed flags (--json decides how emit prints)


def emit(row: dict) -> None:
    harness.emit(ARGS, row)


def target(args) -> None:
    """The preset's shape; paged, contiguous (SDPA) and, where the paged backend differs, the
    contiguous layout through the paged backend, interleaved; `--rounds` repeats the whole
    sweep and pools each block size's runs. Every row names the host (the CPU's model name
    from /proc/cpuinfo) and the load average."""
    cfg = replace(PRESETS[args.preset], repeats=args.repeats or PRESETS[args.preset].repeats)
    sizes = SWEEP_BLOCK_SIZES if args.sweep else (cfg.block_size,)
    if not args.json:
        print("host: " + ", ".join(f"{k}={v}" for k, v in harness.machine().items()), flush=True)
    for row in sweep_block_sizes(cfg, sizes, rounds=args.rounds):
        emit({"preset": args.preset, **row, "load_avg_1m": harness.machine()["load_avg_1m"]})


def _summary(name: str, runs: list[float], kv_bytes: int, **extra) -> dict:
    ms = statistics.median(runs)
    return {"option": name, "median_ms": round(ms, 3), "min_ms": round(min(runs), 3),
            "gbps": round(kv_bytes / ms / 1e6, 2), "threads": torch.get_num_threads(), **extra}


def cpu_options(args) -> None:
    """The CPU designs measured for docs/BENCHMARKS.md (CPU target shape), interleaved."""
    from kvviz.kv.attention_torch import BACKEND

    cfg = replace(PRESETS["cpu"], repeats=args.repeats or 20)
    x = attention_inputs(cfg)
    kv_bytes = 2 * x["k_pool"].numel() * x["k_pool"].element_size()
    b, n, kvh, d = cfg.batch, cfg.context, cfg.kv_heads, cfg.head_dim

    def paged_with(chunk_bytes):
        def fn():
            BACKEND.chunk_bytes = chunk_bytes
            try:
                return paged_decode_attention(x["q"], x["k_cache"], x["v_cache"],
                                              x["block_tables"], x["context_lens"], backend="torch",
                                              check_values=False)
            finally:
                BACKEND.chunk_bytes = None
        return fn

    def eager_softmax():  # gather everything, then matmul / softmax / matmul without SDPA
        idx = x["block_tables"].reshape(-1)
        k = x["k_cache"].index_select(0, idx).view(b, n, kvh, d).transpose(1, 2)
        v = x["v_cache"].index_select(0, idx).view(b, n, kvh, d).transpose(1, 2)
        s = torch.matmul(x["q"].view(b, kvh, -1, d), k.transpose(-1, -2)) * d ** -0.5
        return torch.matmul(s.softmax(-1), v)

    def contiguous_strided():
        return contiguous_decode_attention(x["q"], x["k_pool"], x["v_pool"], x["starts"],
                                           x["context_lens"], backend="torch", check_values=False)

    def contiguous_per_sequence():
        q = x["q"].unsqueeze(2)
        for i in range(b):
            k = x["k_pool"][i * n:(i + 1) * n].transpose(0, 1).unsqueeze(0)
            v = x["v_pool"][i * n:(i + 1) * n].transpose(0, 1).unsqueeze(0)
            F.scaled_dot_product_attention(q[i:i + 1], k, v)

    def numba(layout):
        if layout == "paged":
            return lambda: paged_decode_attention(x["q"], x["k_cache"], x["v_cache"],
                                                  x["block_tables"], x["context_lens"],
                                                  backend="numba", check_values=False)
        return lambda: contiguous_decode_attention(x["q"], x["k_pool"], x["v_pool"], x["starts"],
                                                   x["context_lens"], backend="numba",
                                                   check_values=False)

    fns = {
        "paged: numba, blocks read in place (kept, auto on CPU)": numba("paged"),
        "contiguous: numba, the same kernel": numba("contiguous"),
        "contiguous: one SDPA over a strided view of the pool (kept)": contiguous_strided,
        "contiguous: one SDPA per sequence slice": contiguous_per_sequence,
        "paged: torch, gather 8 MiB chunks, SDPA per chunk": paged_with(None),
        "paged: gather 2 sequences per chunk": paged_with(2 * 2 * n * kvh * d * 4),
        "paged: gather whole batch, one SDPA": paged_with(1 << 40),
        "paged: gather whole batch, matmul+softmax": eager_softmax,
    }
    runs = time_runs(fns, "cpu", cfg.repeats, 3)
    for name, r in runs.items():
        emit(_summary(name, r, kv_bytes))
    if args.flex:
        emit(_flex_in_place(x, cfg, kv_bytes))


def cpu_breakdown(args) -> None:
    """Where the paged torch path spends its time: the gather alone, SDPA alone over an
    L3-resident one-sequence buffer (16 times), both (the kept design), and contiguous SDPA."""
    cfg = replace(PRESETS["cpu"], repeats=args.repeats or 20)
    x = attention_inputs(cfg)
    kv_bytes = 2 * x["k_pool"].numel() * x["k_pool"].element_size()
    b, n, kvh, d = cfg.batch, cfg.context, cfg.kv_heads, cfg.head_dim
    tables = [x["block_tables"][i].long() for i in range(b)]
    kb = torch.empty(len(tables[0]), cfg.block_size, kvh, d)
    vb = torch.empty_like(kb)
    k1, v1 = (t.view(1, n, kvh, d).transpose(1, 2) for t in (kb, vb))
    qs = x["q"].unsqueeze(2)

    def gather(i):
        torch.index_select(x["k_cache"], 0, tables[i], out=kb)
        torch.index_select(x["v_cache"], 0, tables[i], out=vb)

    def attend(i):
        return F.scaled_dot_product_attention(qs[i:i + 1], k1, v1)

    fns = {
        "gather only (16 x index_select K and V)": lambda: [gather(i) for i in range(b)],
        "SDPA only, over the L3-resident buffer (16 calls)": lambda: [attend(i) for i in range(b)],
        "gather + SDPA per sequence": lambda: [(gather(i), attend(i)) for i in range(b)],
        "contiguous: one SDPA over a strided view": lambda: contiguous_decode_attention(
            x["q"], x["k_pool"], x["v_pool"], x["starts"], x["context_lens"], backend="torch",
            check_values=False),
    }
    for name, r in time_runs(fns, "cpu", cfg.repeats, 3).items():
        emit(_summary(name, r, kv_bytes))


def _flex_in_place(x, cfg, kv_bytes) -> dict:
    """FlexAttention reading pages where they lie: the pool as one long key sequence and a
    mask that keeps, for query row i, only the slots of sequence i's blocks."""
    from torch.nn.attention.flex_attention import create_block_mask, flex_attention

    b, bs = cfg.batch, cfg.block_size
    nb = x["k_cache"].shape[0]
    owner = torch.full((nb,), -1, dtype=torch.int64)
    logical = torch.zeros(nb, dtype=torch.int64)
    for i in range(b):
        owner[x["block_tables"][i].long()] = i
        logical[x["block_tables"][i].long()] = torch.arange(x["block_tables"].shape[1])
    lens = x["context_lens"].long()

    def mask_mod(_b, _h, qi, kv):
        blk = kv // bs
        return (owner[blk] == qi) & (logical[blk] * bs + kv % bs < lens[qi])

    mask = create_block_mask(mask_mod, 1, None, b, nb * bs, device="cpu")
    k = x["k_cache"].view(1, nb * bs, cfg.kv_heads, cfg.head_dim).transpose(1, 2)
    v = x["v_cache"].view(1, nb * bs, cfg.kv_heads, cfg.head_dim).transpose(1, 2)
    q = x["q"].transpose(0, 1).unsqueeze(0)  # [1, H, B, D]: the batch becomes query rows
    fn = torch.compile(flex_attention)
    runs = time_runs({"f": lambda: fn(q, k, v, block_mask=mask, enable_gqa=True)}, "cpu",
                     cfg.repeats, 2)
    return _summary("paged: compiled FlexAttention, pages read in place", runs["f"], kv_bytes)


def triton_configs(args) -> None:
    """Launch-config sweep of the paged Triton kernel at the H200 target shape."""
    from kvviz.kv.attention_triton import LaunchConfig, decode

    cfg = PRESETS["h200"]
    x = attention_inputs(cfg)
    kv_bytes = 2 * x["k_pool"].numel() * x["k_pool"].element_size()
    scale = cfg.head_dim ** -0.5
    for block_n in (32, 64, 128):
        for warps in (4, 8):
            for stages in (2, 3):
                for splits in (None, 1, 4):
                    lc = LaunchConfig(block_n, warps, stages, splits)

                    def fn(lc=lc):
                        return decode(x["q"], x["k_cache"], x["v_cache"], x["block_tables"],
                                      None, x["context_lens"], scale, cfg.context, True, lc)
                    try:
                        runs = time_runs({"f": fn}, "cuda", 30, 3)["f"]
                    except Exception as exc:  # noqa: BLE001 - e.g. out of shared memory: report, go on
                        emit({"config": lc._asdict(), "error": repr(exc)[:300]})
                        continue
                    emit(_summary("triton paged", runs, kv_bytes, config=lc._asdict()))


def sdpa_backends(args) -> None:
    """The contiguous baseline with each SDPA backend forced (is the default the fastest?)."""
    from torch.nn.attention import SDPBackend, sdpa_kernel

    cfg = PRESETS["h200"]
    x = attention_inputs(cfg)
    kv_bytes = 2 * x["k_pool"].numel() * x["k_pool"].element_size()
    b, n = cfg.batch, cfg.context
    k = x["k_pool"].view(b, n, cfg.kv_heads, cfg.head_dim).transpose(1, 2)
    v = x["v_pool"].view(b, n, cfg.kv_heads, cfg.head_dim).transpose(1, 2)
    q = x["q"].unsqueeze(2)
    for name in ("FLASH_ATTENTION", "CUDNN_ATTENTION", "EFFICIENT_ATTENTION", "MATH", None):
        def fn(name=name):
            if name is None:
                return F.scaled_dot_product_attention(q, k, v, enable_gqa=True)
            with sdpa_kernel(getattr(SDPBackend, name)):
                return F.scaled_dot_product_attention(q, k, v, enable_gqa=True)
        try:
            runs = time_runs({"f": fn}, "cuda", 30, 3)["f"]
        except Exception as exc:  # noqa: BLE001 - a backend that refuses this shape/GQA
            emit({"sdpa": name or "default", "error": repr(exc)[:300]})
            continue
        emit(_summary(f"sdpa {name or 'default'}", runs, kv_bytes))


def real_mode(args) -> None:
    """Real mode's decode step rate: RealKV.on_decode over a full running batch through the
    engine's own pool (kvviz.kv.bench_real); on CUDA also peak memory."""
    from kvviz.kv.bench_real import bench_real

    row = bench_real(args.model, args.seqs, args.context, args.steps, args.duration,
                     args.device, args.allocator, args.block_size, "auto")
    if args.device == "cuda":
        row["torch_max_allocated"] = torch.cuda.max_memory_allocated()
        try:
            import pynvml

            pynvml.nvmlInit()
            mem = pynvml.nvmlDeviceGetMemoryInfo(pynvml.nvmlDeviceGetHandleByIndex(0))
            row.update(nvml_used_bytes=int(mem.used), nvml_total_bytes=int(mem.total))
        except Exception as exc:  # noqa: BLE001 - no NVML here: say so in the output
            row["nvml_error"] = repr(exc)[:200]
    emit(row)


MODES = {"target": target, "cpu-options": cpu_options, "cpu-breakdown": cpu_breakdown,
         "triton-configs": triton_configs, "sdpa-backends": sdpa_backends, "real-mode": real_mode}


def main() -> None:
    global ARGS
    p = harness.parser(__doc__, repeats=0)
    p.add_argument("mode", choices=tuple(MODES))
    p.add_argument("--preset", choices=sorted(PRESETS), default="cpu")
    p.add_argument("--sweep", action="store_true", help="target: block sizes 1..256")
    p.add_argument("--rounds", type=int, default=1,
                   help="target: times the whole sweep runs; runs pooled per block size")
    p.add_argument("--flex", action="store_true", help="cpu-options: also compiled FlexAttention")
    p.add_argument("--threads", type=int, default=None)
    real = p.add_argument_group("real-mode")
    real.add_argument("--model", default="tiny-cpu")
    real.add_argument("--seqs", type=int, default=64)
    real.add_argument("--context", type=int, default=300)
    real.add_argument("--steps", type=int, default=200)
    real.add_argument("--duration", type=float, default=None)
    real.add_argument("--device", default="cpu")
    real.add_argument("--allocator", choices=("paged", "contiguous"), default="paged")
    real.add_argument("--block-size", type=int, default=16)
    ARGS = args = p.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    cuda = args.device.startswith("cuda")
    if args.mode == "real-mode" and cuda and not torch.cuda.is_available():
        p.error(f"--device {args.device}: torch sees no CUDA device")
    try:
        MODES[args.mode](args)
    except ValueError as exc:  # a device or shape this machine cannot run: one line, exit 2
        p.error(str(exc))


if __name__ == "__main__":
    main()
