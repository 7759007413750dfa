"""`kvviz whatif INPUT`: a node's request stream through vLLM's rule at its own settings
(the baseline, checked against what the node did when INPUT is a recording of it) and at
alternative settings, one table (or `--json`) with each one's change against the baseline."""
from __future__ import annotations

import argparse
import json
import sys

from kvviz.core import limits as at
from kvviz.core.config import MODEL_HELP, model_for
from kvviz.core.safeio import check_input_file
from kvviz.settings.collector import MEMORY_BUDGET_MB
from kvviz.traces.args import add_trace_arguments, load_trace_args, resolve_max_seq_len
from kvviz.twin.configs import (
    MAX_CONFIGS,
    NAMED_SETS,
    NUM_GPU_BLOCKS,
    CommaList,
    alternatives,
    on_off,
)
from kvviz.twin.settings import DEFAULT_NUM_GPU_BLOCKS, NodeSettings

HELP = ("replay a node's request stream (a trace, or a kvviz attach --blocks recording) "
        "through vLLM 0.32's rule at its own settings and at alternatives: preemptions, "
        "refusals, queueing, blocks in use")
STEP_MS = at.float_range(0.0, 1e6, lo_open=True)
NODE = (("block_size", "--node-block-size", at.BLOCK_SIZE, 16, "block size in tokens"),
        ("num_gpu_blocks", "--node-num-blocks", NUM_GPU_BLOCKS,
         DEFAULT_NUM_GPU_BLOCKS, "vLLM's num_gpu_blocks, its null block included"),
        ("max_num_seqs", "--node-max-num-seqs", at.MAX_NUM_SEQS, 256, "max_num_seqs"),
        ("max_num_batched_tokens", "--node-max-num-batched-tokens", at.BATCHED_TOKENS, 8192,
         "max_num_batched_tokens"),
        ("watermark", "--node-watermark", at.WATERMARK, 0.0, "watermark"),
        ("enable_prefix_caching", "--node-prefix-caching", on_off, True, "prefix caching"),
        ("enable_chunked_prefill", "--node-chunked-prefill", on_off, True, "chunked prefill"))
ALTS = (("block_size", "--block-size", "block sizes, e.g. 16,32,64 (each at the node's KV "
                                       "memory unless --num-blocks or --kv-memory)"),
        ("num_gpu_blocks", "--num-blocks", "vLLM num_gpu_blocks values (null block included)"),
        ("kv_memory", "--kv-memory", "KV memory: multiples of the node's (0.8x,1.2x) or sizes "
                                     "(8GiB, 512MB, bytes)"),
        ("max_num_seqs", "--max-num-seqs", "max_num_seqs values"),
        ("max_num_batched_tokens", "--max-num-batched-tokens", "max_num_batched_tokens values"),
        ("watermark", "--watermark", "watermark values"),
        ("prefix_caching", "--prefix-caching", "on, off or on,off"))


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("input", metavar="INPUT",
                   help="a trace kvviz reads (Azure, BurstGPT, Mooncake, kvviz CSV/JSONL) or a "
                        "kvviz attach --blocks recording (RUN.db)")
    n = p.add_argument_group("the node's own settings, for a trace (a recording holds its own; "
                             "defaults: vLLM 0.32's, the pool kvviz's 16,384 slots)")
    for field, flag, typ, default, what in NODE:
        shown = ("on" if default else "off") if isinstance(default, bool) else default
        text = f"{what} (default {shown})"
        n.add_argument(flag, dest="node_" + field, type=typ, default=None, metavar="V",
                       help=at.rng(text, typ) if hasattr(typ, "range_text") else text)
    a = p.add_argument_group(f"alternatives: comma lists, crossed (at most {MAX_CONFIGS} "
                             "configurations); a knob not given keeps the node's value")
    for dest, flag, what in ALTS:
        typ = CommaList(dest)
        rng = f" [each in {typ.range_text}]" if typ.range_text else ""
        a.add_argument(flag, dest=f"alt_{dest}", type=typ, default=None, metavar="LIST",
                       help=what + rng)
    a.add_argument("--set", dest="named_set", default=None, metavar="NAME",
                   help="a named set of alternatives: " + "; ".join(
                       f"{k} ({', '.join(f'{f}={v}' for f, v in d.items())})"
                       for k, d in NAMED_SETS.items()) + "; list flags beside it replace its "
                       "lists")
    s = p.add_argument_group("stream and run")
    s.add_argument("--model", default=None, metavar="PRESET", help=MODEL_HELP)
    s.add_argument("--step-ms", type=STEP_MS, default=20.0, metavar="MS",
                   help=at.rng("a trace's engine step on its clock (default 20)", STEP_MS))
    s.add_argument("--max-seq-len", type=at.MAX_SEQ_LEN, default=None, metavar="N",
                   help=at.rng("clip prompt+output (default the trace's longest request)",
                               at.MAX_SEQ_LEN))
    s.add_argument("--prefix-tokens", type=at.PREFIX_TOKENS, default=256, metavar="N",
                   help=at.rng("a prefix_group's shared prompt length (default 256)",
                               at.PREFIX_TOKENS))
    add_trace_arguments(s)
    s.add_argument("--workers", type=at.THREADS, default=None, metavar="N",
                   help=at.rng("processes (default: this machine's cores)", at.THREADS))
    s.add_argument("--memory-budget-mb", type=MEMORY_BUDGET_MB, default=None, metavar="MB",
                   help=at.rng("the memory the run may hold in all its processes (default 80%% "
                               "of the memory available now); fewer configurations run at "
                               "once to stay within it", MEMORY_BUDGET_MB))
    s.add_argument("--json", action="store_true",
                   help="one JSON line with the self-check, then one per configuration")


def node_settings(a: argparse.Namespace) -> NodeSettings:
    kw = {field: getattr(a, "node_" + field) for field, *_ in NODE}
    try:
        return NodeSettings(**{k: v for k, v in kw.items() if v is not None})
    except ValueError as exc:
        field, _, why = str(exc).partition(": ")
        flag = next((f for name, f, *_ in NODE if name == field), field)
        raise ValueError(f"{flag}: {why}") from None


def load_source(a: argparse.Namespace, show_progress: bool):
    from kvviz.core.workload import clip_workload
    from kvviz.twin import source

    check_input_file(a.input, "INPUT")
    model = model_for(a.model, real_on_cpu=False)
    if source.is_recording(a.input):
        given = [f for field, f, *_ in NODE if getattr(a, "node_" + field) is not None]
        if given:
            raise ValueError(f"{given[0]}: a recording holds the node's own settings; the "
                             "--node-* flags are for a trace")
        return source.from_recording(a.input, model)
    settings = node_settings(a)
    a.trace = a.input
    w, info = load_trace_args(a, a.prefix_tokens, show_progress)
    max_seq_len = resolve_max_seq_len(a.max_seq_len, w)
    return source.from_trace(clip_workload(w, max_seq_len), a.input, settings, model,
                             a.step_ms, max_seq_len, info)


def run(a: argparse.Namespace) -> int:
    from kvviz.twin import whatif
    from kvviz.twin.table import format_table

    alt = alternatives({d: getattr(a, f"alt_{d}") for d, *_ in ALTS}, a.named_set)
    src = load_source(a, show_progress=not a.json)
    show = sys.stderr.isatty()

    def progress(done: int, total: int) -> None:
        if show:
            bar = "#" * int(30 * done / total)
            print(f"\r[{bar:<30}] {done}/{total} configurations", end="", file=sys.stderr,
                  flush=True)

    res = whatif(src, alt, a.workers, progress, a.memory_budget_mb)
    if show:
        print(file=sys.stderr)
    if res.note:
        print(f"kvviz whatif: {res.note}", file=sys.stderr)
    if a.json:
        print(json.dumps({"input": src.name, "requests": len(src.stream.workload),
                          "node_settings": src.settings.as_dict(),
                          "self_check": res.self_check, "configurations": len(res.table)}))
        for r in res.table:
            print(json.dumps(r))
        return 0
    print(f"{src.name}: {len(src.stream.workload)} requests; node: "
          f"{src.settings.describe()}")
    print("self-check: " + res.self_check["verdict"])
    print(format_table(res.table))
    return 0
