"""Helpers for the CLI fuzz tests: run `kvviz` in-process, hostile files, fakes for slow parts.

`run_cli(argv)` calls kvviz.commands.cli.main with stdout/stderr captured and a SIGALRM
deadline, and returns (exit code, stdout, stderr, traceback text or ""). The fakes replace only
the parts that would run for a long time or reach the network (the simulation loop, the
collector loop, benchmarks, HTTP); every flag, path and file check runs for real.
"""
from __future__ import annotations

import contextlib
import io
import json
import os
import signal
import stat
import sys
import time
import traceback
from dataclasses import dataclass
from pathlib import Path

CASE_DEADLINE_S = 20


class Hang(Exception):
    """Raised by SIGALRM when one CLI call runs past CASE_DEADLINE_S."""


@dataclass
class Result:
    code: int
    out: str
    err: str
    crash: str  # traceback of an exception that escaped main(), or ""


def _alarm(_signum, _frame):
    raise Hang(f"no result within {CASE_DEADLINE_S} s")


def run_cli(argv: list[str]) -> Result:
    from kvviz.commands.cli import main

    torch = sys.modules.get("torch")
    threads = torch.get_num_threads() if torch is not None else None
    out, err = io.StringIO(), io.StringIO()
    old = signal.signal(signal.SIGALRM, _alarm)
    signal.alarm(CASE_DEADLINE_S)
    crash = ""
    try:
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            try:
                code = main(list(argv))
            except SystemExit as exc:
                code = exc.code if isinstance(exc.code, int) else 1
    except BaseException:  # noqa: BLE001 - the property reports any escape, Hang included
        code, crash = 1, traceback.format_exc()
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, old)
        torch = sys.modules.get("torch")
        if torch is not None and threads is not None:
            torch.set_num_threads(threads)
    return Result(code, out.getvalue(), err.getvalue(), crash)


def check_property(cmd: str, argv: list[str], res: Result, *, allow_one: bool = False) -> None:
    """Exit 0, or exit 2 with exactly one stderr line `kvviz CMD...: error: ...`; no traceback.

    allow_one: `kvviz scrape` exits 1 with one line when no scrape succeeded (documented).
    """
    where = f"kvviz {' '.join(map(repr, argv))}"
    assert not res.crash, f"{where}: exception escaped main():\n{res.crash}"
    assert "Traceback" not in res.err, f"{where}: traceback on stderr:\n{res.err}"
    lines = res.err.splitlines()
    if res.code == 0:
        return
    if allow_one and res.code == 1:
        assert len(lines) == 1 and lines[0].startswith(f"kvviz {cmd}: no successful"), (
            f"{where}: exit 1 with {res.err!r}")
        return
    assert res.code == 2, f"{where}: exit {res.code}, stderr {res.err!r}"
    assert len(lines) == 1, f"{where}: {len(lines)} stderr lines: {res.err!r}"
    assert lines[0].startswith(f"kvviz {cmd}") and ": error: " in lines[0], (
        f"{where}: stderr {lines[0]!r}")
    assert "\x1b" not in res.err and "\x1b" not in res.out, f"{where}: raw escape printed"


# ---- hostile files -----------------------------------------------------------------------
TRACE_OK = "arrival_s,prompt_tokens,output_tokens\n0,10,5\n0.5,20,8\n"


def make_recording(path: Path, status_message: str = "") -> Path:
    """A small finished sim recording (both default lanes, a few samples)."""
    from kvviz.core.config import CacheConfig, LaneSpec, WorkloadConfig
    from kvviz.core.metrics import compute
    from kvviz.core.workload import generate
    from kvviz.engine import Simulation
    from kvviz.store.writer import RunWriter

    lanes = [LaneSpec.parse(s) for s in ("contiguous:first-fit:max", "paged:16")]
    sim = Simulation(generate(WorkloadConfig(num_requests=20, rate=50.0, seed=1)), lanes,
                     CacheConfig(capacity_tokens=4096))
    w = RunWriter(path, {"mode": "sim", "device": "cpu\x1b[2J",
                         "lanes": [{"name": ln.name} for ln in sim.lanes]})
    for _ in range(3):
        sim.step()
        for ln in sim.lanes:
            bm = ln.snapshot()
            w.add_sample(sim.time_s, sim.step_no, ln.name,
                         {**compute(bm).as_dict(), "running": int(ln.run_ids.size)}, bm)
        w.commit()
    w.close("finished", status_message)
    return path


def private_device(root: Path, name: str = "null") -> str:
    """A character device node (1, 3: what /dev/null is) of our own under `root`, so that a
    regression in the overwrite rule can never replace the system's /dev/null; a FIFO
    where mknod is not allowed (not root)."""
    path = root / f"dev-{name}"
    if not os.path.lexists(path):
        try:
            os.mknod(path, stat.S_IFCHR | 0o666, os.makedev(1, 3))
        except (PermissionError, OSError):
            os.mkfifo(path)
    return str(path)


def hostile_paths(root: Path) -> dict[str, str]:
    """Named paths of every kind a user might hand the CLI, created under `root`."""
    root.mkdir(parents=True, exist_ok=True)
    fifo = root / "fifo"
    if not fifo.exists():
        os.mkfifo(fifo)
    (root / "dir").mkdir(exist_ok=True)
    (root / "text.txt").write_text("hello\n")
    (root / "empty.csv").write_text("")
    (root / "trace.csv").write_text(TRACE_OK)
    (root / "trace.jsonl").write_text('{"arrival_s": 0, "prompt_tokens": 3, '
                                      '"output_tokens": 2}\n')
    (root / "escape\x1b[31m.csv").write_text("arrival_s,prompt_tokens\n0,\x1b]0;x\x07\n")
    (root / "deep.jsonl").write_text('{"a": ' * 20_000 + "\n")
    (root / "notlog.jsonl").write_text("my notes\n")
    (root / "long.csv").write_text("arrival_s,prompt_tokens,output_tokens\n0,1," + "9" * 200_000)
    (root / "junk.pickle").write_bytes(b"\x80\x04junk")
    rec = root / "run.db"
    if not rec.exists():
        make_recording(rec, "stopped \x1b[31mred\x1b[0m")
    node = root / "node.db"  # an attach --blocks recording with the plugin's request log
    if not node.exists():
        from tests.twin.noderun import workload, write

        write(node, workload(12, spread=20))
    link = root / "link.db"
    if not link.is_symlink():
        link.symlink_to(rec)
    return {
        "fifo": str(fifo), "dir": str(root / "dir"), "text": str(root / "text.txt"),
        "empty": str(root / "empty.csv"), "trace": str(root / "trace.csv"),
        "trace_jsonl": str(root / "trace.jsonl"), "escape": str(root / "escape\x1b[31m.csv"),
        "deep": str(root / "deep.jsonl"), "long": str(root / "long.csv"),
        "pickle": str(root / "junk.pickle"), "recording": str(rec), "link": str(link),
        "node_recording": str(node),
        "missing": str(root / "missing" / "x.db"), "file_parent": str(root / "text.txt" / "x"),
        "dev_null": private_device(root), "dev_zero": "/dev/zero",
        "proc_mem": "/proc/self/mem", "new_db": str(root / "out" / "new.db"),
        "new_csv": str(root / "new.csv"), "new_jsonl": str(root / "new.jsonl"),
        "notlog": str(root / "notlog.jsonl"),
        "long_name": str(root / ("n" * 300 + ".db")),
    }


NUMBERS = ["nan", "NaN", "inf", "-inf", "+inf", "-1", "0", "1", "2", "3", "16", "0.5", "1e-300",
           "1e300", "-1e300", "99999999999999999999", str(2**63), str(2**63 - 1), "1073741824",
           "1_000", "0x10", "1e3", "", " ", "é", "\x1b[31m", "１２"]
WORDS = ["paged:16", "contiguous", "paged:0", "paged:99999999999999", "contiguous:buddy:pow2",
         "sim", "real", "cpu", "cuda", "auto", "tiny-cpu", "nope", "sharegpt-like", "bursty",
         "http://127.0.0.1:1/metrics", "localhost:1", "-", "--", "\x00"]


# ---- fakes for the slow parts ------------------------------------------------------------
class FakeSimulation:
    """Stands in for kvviz.engine.Simulation: records its inputs, runs no steps."""

    def __init__(self, workload, lanes, cache, engine, advance: str = "jump") -> None:
        if advance not in ("jump", "step"):
            raise ValueError(f"advance: {advance!r}")
        self.workload, self.lanes, self.cache, self.engine = workload, lanes, cache, engine
        self.step_no, self.time_s, self.wall_seconds = 0, 0.0, 0.0

    def run(self, progress=None) -> list[dict]:
        return []


def fake_run_all(stream, configs, workers=None, progress=None, record_first=None):
    """Stands in for kvviz.twin.runner.run_all: the settings as checked, no run (the
    baseline's record, when asked, an empty one)."""
    import numpy as np

    from kvviz.twin.runner import ConfigRun
    from kvviz.twin.selfcheck import StepRecord

    none = np.zeros(0, np.int64)
    rec = StepRecord.from_steps([], [], [], []) if record_first else None
    summary = {"steps": 0, "finished": 0, "rejected": 0, "preemptions": 0,
               "admit_failures": {"capacity": 0, "fragmentation": 0, "policy": 0},
               "prefix_hit_rate": 0.0, "tail_waste_share": 0.0, "used_share": 0.0,
               "free_share": 1.0, "tokens_generated": 0}
    return [ConfigRun(c, summary, none, 0, 0.0, none, none, none, rec if i == 0 else None)
            for i, c in enumerate(configs)]


class FakeCollector:
    """Stands in for collectors.engine_collector.EngineCollector: validated config, no loop."""

    def __init__(self, settings, resolved, kv_factory=None) -> None:
        from types import SimpleNamespace

        self.settings, self.resolved = settings, resolved
        self.hooks: list = []
        # lanes as the KV-event publisher sees them (no pool: nothing is allocated here)
        self.sim = SimpleNamespace(lanes=[SimpleNamespace(
            name=ln.label, alloc=SimpleNamespace(prefix_caching=ln.prefix_caching, _pool=None,
                                                 block_size=ln.block_size))
            for ln in settings.lanes])
        self.sim_hooks: list = []

    def run(self) -> str:
        return "finished"


def fake_bench_real(model, seqs, context, steps, duration, device, allocator, block_size,
                    backend, dtype, seed) -> dict:
    return {"bench": "real", "steps": 1, "steps_per_s": 1.0, "tokens_per_s": float(seqs),
            "allocator": allocator, "seqs": seqs, "model": model, "device": device,
            "backend": backend}


def fake_bench_attention(cfg) -> dict:
    return {"bench": "attention", "block_size": cfg.block_size, "paged_ms": 1.0,
            "backend": cfg.backend, "contiguous_ms": 1.0, "contiguous_backend": "torch",
            "ratio": 1.0, "gbps": 1.0, "batch": cfg.batch, "context": cfg.context,
            "heads": cfg.heads, "kv_heads": cfg.kv_heads, "head_dim": cfg.head_dim,
            "dtype": cfg.dtype, "device": cfg.device}


def fake_scrape_once(url: str, **_kw):
    """A successful scrape of the vLLM fixture, without a network."""
    from kvviz.node.scrape import sample_from_text

    text = (Path(__file__).resolve().parents[1] / "fixtures" / "vllm_metrics.txt").read_text()
    return sample_from_text(text, url=url, time=time.time())


def install_fakes(monkeypatch) -> None:
    """Patch the slow parts (see module docstring); paths and flags stay real."""
    import collectors.launch as launch
    import collectors.prometheus as prom
    import kvviz.commands.simulate as sim_cmd
    import kvviz.node.scrape as scrape_mod
    import kvviz.twin as twin

    monkeypatch.setattr(sim_cmd, "Simulation", FakeSimulation)
    monkeypatch.setattr(twin, "run_all", fake_run_all)
    monkeypatch.setattr(launch, "EngineCollector", FakeCollector)
    monkeypatch.setattr(scrape_mod, "scrape_once", fake_scrape_once)
    monkeypatch.setattr(prom, "attach", lambda collector, port, address="127.0.0.1": None)
    try:
        import kvviz.kv.bench as kb
        import kvviz.kv.bench_real as kbr
    except ImportError:  # no torch: bench refuses with one line, which the property accepts
        return
    monkeypatch.setattr(kbr, "bench_real", fake_bench_real)
    monkeypatch.setattr(kb, "bench_attention", fake_bench_attention)
    monkeypatch.setattr(kb, "sweep_block_sizes",
                        lambda cfg, rounds=1: [fake_bench_attention(cfg)])


def flags_of(parser) -> list[tuple[str, bool]]:
    """(option string, takes a value) for every optional flag of an argparse parser."""
    out = []
    for act in parser._actions:
        if not act.option_strings or act.dest in ("help", "version"):
            continue
        out.append((act.option_strings[-1], act.nargs != 0))
    return out


def write_report(path: str, counts: dict[str, int]) -> None:
    Path(path).write_text(json.dumps(counts, indent=1, sort_keys=True))
