"""Run an untrusted parser in a child process with memory, CPU and wall-clock limits.

    from kvviz.core.sandbox import SandboxError, run_limited
    value = run_limited(parse_file, path, mem_mb=1024, cpu_s=20, wall_s=20, label="x.csv")

`func` must be a function defined at module level of an importable module (the child imports
it by name); `args` go to the child through a pickle the parent writes into a private
temporary directory (trusted: the parent made it). The child sets its limits, calls
func(*args) and sends the result back WITHOUT pickle: JSON for plain data (dict with str keys,
list, str, int, float, bool, None; tuples come back as lists) and `np.save(allow_pickle=False)`
files for numpy arrays anywhere in it, so a parser subverted by its input cannot run code in
the parent. Anything that goes wrong becomes one SandboxError with a clear message:

    the parser ran out of its 1 GiB memory limit     (MemoryError, or killed at the limit)
    the parser used more than its 20 s of CPU        (RLIMIT_CPU: SIGXCPU / SIGKILL)
    the parser took longer than 20 s                 (wall-clock deadline; then SIGKILL)
    the parser crashed (signal 11, SIGSEGV)          (a C stack overflow, os.abort(), ...)
    <the parser's own message>                       (any exception it raised)

Limits: mem_mb caps what the child may allocate after it has imported func's module
(RLIMIT_DATA = mem_mb, RLIMIT_AS = mem_mb + the address space it had then); cpu_s is
RLIMIT_CPU; wall_s counts from the start, child start-up included.
Core dumps are off in the child, and it is killed if the parent dies (Linux). Costs one
interpreter start. Linux/POSIX only. Imports numpy and the standard library only.
"""
from __future__ import annotations

import importlib
import json
import os
import pickle
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

from kvviz.core.errors import KvvizError

MAX_RESULT_BYTES = 1 << 30  # a result file larger than this is refused


class SandboxError(KvvizError):
    """The sandboxed parser failed: kind is memory | cpu | timeout | signal | error | exit.

    error_type names the parser's exception class when kind == "error"."""

    def __init__(self, message: str, kind: str, error_type: str = "") -> None:
        super().__init__(message)
        self.kind, self.error_type = kind, error_type


@dataclass(frozen=True)
class Outcome:
    """What one sandboxed run gave: value (None on failure) or error, and what it cost."""

    value: object
    error: SandboxError | None
    peak_rss_bytes: int  # the child's peak resident memory after exec (VmHWM; see _wait)
    wall_s: float


def _seconds(s: float) -> str:
    return f"{s:g}" if s == round(s, 1) else f"{s:.1f}"


def _mem_text(mb: float) -> str:
    return f"{mb / 1024:.3g} GiB" if mb >= 1024 else f"{mb:.0f} MiB"


def _reference(func) -> tuple[str, str]:
    module, qual = getattr(func, "__module__", None), getattr(func, "__qualname__", "")
    if not module or module == "__main__" or "<locals>" in qual or not qual:
        raise ValueError(f"run_limited needs a module-level function of an importable module, "
                         f"got {func!r}")
    obj = sys.modules.get(module)
    for part in qual.split("."):
        obj = getattr(obj, part, None)
    if obj is not func:
        raise ValueError(f"{module}.{qual} does not name {func!r}")
    return module, qual


def run_limited(func, *args, mem_mb: float = 1024, cpu_s: float = 20.0, wall_s: float = 20.0,
                label: str = "") -> object:
    """func(*args) in a limited child: its result, or SandboxError. label (a file name)
    prefixes the sandbox's own messages; the parser's own error comes back as it was."""
    out = run_limited_outcome(func, *args, mem_mb=mem_mb, cpu_s=cpu_s, wall_s=wall_s,
                              label=label)
    if out.error is not None:
        raise out.error
    return out.value


def run_limited_outcome(func, *args, mem_mb: float = 1024, cpu_s: float = 20.0,
                        wall_s: float = 20.0, label: str = "") -> Outcome:
    """Like run_limited, but returns the Outcome (with the child's peak memory) instead."""
    for what, v in (("mem_mb", mem_mb), ("cpu_s", cpu_s), ("wall_s", wall_s)):
        if not 0 < v < float("inf"):
            raise ValueError(f"{what} must be a finite number > 0, got {v}")
    module, qual = _reference(func)
    with tempfile.TemporaryDirectory(prefix="kvviz-sandbox-") as tmp:
        d = Path(tmp)
        (d / "job.json").write_text(json.dumps(
            {"module": module, "qualname": qual, "mem_mb": mem_mb, "cpu_s": cpu_s}))
        with open(d / "args.pickle", "wb") as f:
            pickle.dump(args, f, protocol=pickle.HIGHEST_PROTOCOL)
        env = dict(os.environ, PYTHONPATH=os.pathsep.join(p for p in sys.path if p),
                   OMP_NUM_THREADS="1", OPENBLAS_NUM_THREADS="1", MKL_NUM_THREADS="1")
        t0 = time.monotonic()
        with open(d / "stderr", "wb") as err:
            proc = subprocess.Popen([sys.executable, "-m", "kvviz.core.sandbox", tmp], env=env,
                                    stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                                    stderr=err)
        try:
            status, usage, timed_out, polled = _wait(proc, t0 + wall_s)
        except BaseException:  # e.g. Ctrl-C in the parent: leave no child behind
            proc.kill()
            proc.wait()
            raise
        elapsed = time.monotonic() - t0
        rss = max(polled, _reported_peak(d))
        prefix = f"{label}: " if label else ""
        try:
            value, error = _verdict(d, status, usage, rss, timed_out, mem_mb, cpu_s, wall_s)
        except (OSError, ValueError) as exc:  # a result the child wrote badly
            value, error = None, SandboxError(f"unreadable result ({exc})", "exit")
        if error is not None and error.kind != "error":  # the parser's own names its input
            error = SandboxError(prefix + str(error), error.kind, error.error_type)
        return Outcome(value, error, rss, elapsed)


def _peak_rss(pid: int | str) -> int:
    """VmHWM of a live process, bytes (0 once it is gone). Not getrusage's ru_maxrss: that
    keeps the high-water mark of the parent's memory the child was forked with."""
    try:
        with open(f"/proc/{pid}/status", "rb") as f:
            for line in f:
                if line.startswith(b"VmHWM:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    return 0


def _reported_peak(d: Path) -> int:
    try:
        return int((d / "peak").read_text())
    except (OSError, ValueError):
        return 0


def _wait(proc: subprocess.Popen, deadline: float) -> tuple[int, object, bool, int]:
    """(wait status, resource usage, timed out, peak RSS seen while polling), reaping the
    child with wait4. Polls every 2-50 ms."""
    pause, timed_out, peak = 0.002, False, 0
    while True:
        pid, status, usage = os.wait4(proc.pid, os.WNOHANG)
        if pid:
            break
        peak = max(peak, _peak_rss(proc.pid))
        if time.monotonic() >= deadline:
            proc.kill()
            _, status, usage = os.wait4(proc.pid, 0)
            timed_out = True
            break
        time.sleep(pause)
        pause = min(pause * 1.5, 0.05)
    proc.returncode = os.waitstatus_to_exitcode(status)  # reaped here, not by Popen
    return status, usage, timed_out, peak


def _verdict(d: Path, status: int, usage, rss: int, timed_out: bool, mem_mb: float,
             cpu_s: float, wall_s: float) -> tuple[object, SandboxError | None]:
    memory = SandboxError(f"the parser ran out of its {_mem_text(mem_mb)} memory limit",
                          "memory")
    if timed_out:
        return None, SandboxError(f"the parser took longer than {_seconds(wall_s)} s", "timeout")
    if os.WIFSIGNALED(status):
        sig = os.WTERMSIG(status)
        cpu = usage.ru_utime + usage.ru_stime
        if sig == signal.SIGXCPU or (sig == signal.SIGKILL and cpu >= int(-(-cpu_s // 1))):
            return None, SandboxError(
                f"the parser used more than its {_seconds(cpu_s)} s of CPU", "cpu")
        if sig == signal.SIGKILL and rss >= 0.9 * mem_mb * 2**20:
            return None, memory  # the kernel's OOM killer
        name = signal.Signals(sig).name if sig in signal.valid_signals() else "?"
        return None, SandboxError(f"the parser crashed (signal {sig}, {name})", "signal")
    code = os.WEXITSTATUS(status)
    if code == 0 and (d / "result.json").exists():
        return _read_result(d), None
    if (d / "error.json").exists():
        e = json.loads((d / "error.json").read_text())
        if e.get("kind") == "memory":
            return None, memory
        return None, SandboxError(str(e.get("message", "")), "error", str(e.get("type", "")))
    tail = (d / "stderr").read_bytes()[-2000:].decode("utf-8", "replace").strip()
    last = tail.splitlines()[-1][:200] if tail else "no message"
    if "MemoryError" in tail:
        return None, memory
    return None, SandboxError(f"the parser exited with status {code} ({last})", "exit")


def _read_result(d: Path) -> object:
    import numpy as np

    path = d / "result.json"
    if path.stat().st_size > MAX_RESULT_BYTES:
        raise ValueError(f"result over {MAX_RESULT_BYTES:,} bytes")

    def hook(obj: dict):
        if len(obj) == 1 and "__ndarray__" in obj:
            i = obj["__ndarray__"]
            if type(i) is not int or not 0 <= i < 1 << 31:
                raise ValueError("bad array reference")
            return np.load(d / f"a{i}.npy", allow_pickle=False)
        return obj

    return json.loads(path.read_text(encoding="utf-8"), object_hook=hook)


# --- the child side -------------------------------------------------------------------------

def _set_limits(mem_mb: float, cpu_s: float) -> None:
    import resource

    mem = int(mem_mb * 2**20)
    with open("/proc/self/statm") as f:
        vsz = int(f.read().split()[0]) * os.sysconf("SC_PAGE_SIZE")
    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
    resource.setrlimit(resource.RLIMIT_DATA, (mem, mem))
    resource.setrlimit(resource.RLIMIT_AS, (vsz + mem, vsz + mem))
    soft = max(1, int(-(-cpu_s // 1)))
    resource.setrlimit(resource.RLIMIT_CPU, (soft, soft + 2))


def _die_with_parent() -> None:
    try:
        import ctypes

        ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG
    except (OSError, AttributeError):
        pass


def _write_json(path: Path, obj: object, arrays_dir: Path | None = None) -> None:
    count = [0]

    def default(o):
        if type(o).__module__ == "numpy":
            import numpy as np

            if isinstance(o, np.ndarray) and arrays_dir is not None:
                np.save(arrays_dir / f"a{count[0]}.npy", o, allow_pickle=False)
                count[0] += 1
                return {"__ndarray__": count[0] - 1}
            if isinstance(o, np.generic):
                return o.item()
        raise TypeError(f"the parser returned a {type(o).__name__}, which is not plain data")

    tmp = path.with_suffix(".tmp")
    with open(tmp, "w", encoding="utf-8") as f:
        json.dump(obj, f, default=default, allow_nan=True)
    os.replace(tmp, path)


def _child(tmp: str) -> int:
    d = Path(tmp)
    _die_with_parent()
    try:
        job = json.loads((d / "job.json").read_text())
        func = importlib.import_module(job["module"])
        for part in job["qualname"].split("."):
            func = getattr(func, part)
        _set_limits(job["mem_mb"], job["cpu_s"])
        with open(d / "args.pickle", "rb") as f:
            args = pickle.load(f)  # written by the parent: trusted
        _write_json(d / "result.json", func(*args), d)
    except MemoryError:
        _write_json(d / "error.json", {"kind": "memory"})
        return 1
    except BaseException as exc:  # the parser's own error, whatever it is
        _write_json(d / "error.json", {"kind": "error", "type": type(exc).__name__,
                                       "message": str(exc)[:4000]})
        return 1
    finally:
        (d / "peak").write_text(str(_peak_rss("self")))
    return 0


if __name__ == "__main__":
    sys.exit(_child(sys.argv[1]))
