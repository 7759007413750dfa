"""A memory guard for a process of its own that receives KV events (`kvviz events`,
`kvviz attach --kv-events`): what the receive budget cannot bound, the frames of one message.

ZeroMQ caps each frame (ZMQ_MAXMSGSIZE) and counts whole messages against RCVHWM, but it
buffers a message in its I/O thread until all of its frames are in, and no socket option
bounds how many a message has, so a publisher sending messages of many large frames would
grow the process without a limit (docs/RELIABILITY.md, "KV-event streams"). The guard is a
daemon thread that reads the process's resident memory (/proc/self/statm) every PERIOD_S:
past TRIP_MB (above the legitimate worst case, 940 MB on paper) it records why in `tripped`
and wakes the subscriber's poll (a byte on `wake_fd`), which closes its sockets (LINGER 0:
ZeroMQ frees what it buffered) and raises MemoryLimit; the command then closes its recording
with status error and prints its one error line. Before a large payload decodes, the
subscriber asks `would_pass` (RSS now plus what it may decode into), which trips the guard
rather than let a decode that holds the GIL start near the limit.

Last resorts, before the sockets were closed: past HARD_MB (the main thread held up, e.g. by
a commit waiting on the disk) the thread writes the error line itself and ends the process
(exit 2). The thread needs the GIL, which one decode holds for a while (msgspec, in C) as
ZeroMQ's I/O thread keeps receiving, so a command also starts a watcher process (WATCHER, a
bare interpreter) that reads the command's RSS every WATCH_PERIOD_S (every millisecond near
its limit) without it: past WATCH_MB it writes the error line and kills the command
(SIGKILL). Either way what was committed stays in the recording (SQLite's WAL), whose
status stays "running" (readers show it as "stopped unexpectedly" once its heartbeat is
stale: kvviz/store/liveness.py).

Where /proc/self/statm cannot be read (not Linux) the guard is off (`enabled` False). It
reads the whole process's memory, so only a command that runs in a process of its own starts
one (never the dashboard); a process that held more than BASE_MB when the guard started (a
test calling the command in-process) has its limits raised by the excess.
"""
from __future__ import annotations

import contextlib
import os
import subprocess
import sys
import threading
from collections.abc import Callable

MB = 1 << 20
TRIP_MB = 950  # the paper sum of the bounds is 940 MB (docs/RELIABILITY.md)
HARD_MB = 965  # the guard ends the process itself, the sockets still open
PERIOD_S = 0.02
WATCH_MB = 975  # the watcher process kills the command (SIGKILL)
WATCH_PERIOD_S = 0.01  # the watcher's period; 1 ms once RSS is within WATCH_NEAR_MB of it
WATCH_NEAR_MB = 100
BASE_MB = 60  # an interpreter with kvviz's libraries (the paper sum counts 60 MB)


class MemoryLimit(ValueError):
    """The guard tripped: the subscriber's sockets are closed; str() says why."""


def rss_bytes() -> int | None:
    """This process's resident memory (bytes), or None where /proc/self/statm is missing."""
    try:
        with open("/proc/self/statm", "rb") as f:
            return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
    except (OSError, ValueError, IndexError):
        return None


def why(rss: int | str, trip_mb: int, then: str = "the sockets were closed") -> str:
    """The error's text; rss in bytes, or a text put in place of its MB (the watcher's
    "{mb}", filled in when it trips)."""
    mb = rss if isinstance(rss, str) else rss // MB
    return (f"the process reached {mb} MB (kvviz's limit is {trip_mb} MB) with the "
            "node's messages held by ZeroMQ until all their frames arrive: messages of many "
            f"frames? (kvviz takes topic, seq, payload); {then}")


# argv: the command's pid, the limit (bytes), the period (s), the line ("{mb}" for its RSS),
# the level (bytes) past which it reads every millisecond: a stream ZeroMQ receives at
# GB/s grows the command by tens of MB in one 10 ms period (1,044 MB was seen at 995)
WATCHER = """
import os, signal, sys, time
signal.signal(signal.SIGINT, signal.SIG_IGN)  # a terminal's Ctrl-C is the command's to handle
pid, limit, period, line = int(sys.argv[1]), int(sys.argv[2]), float(sys.argv[3]), sys.argv[4]
near = int(sys.argv[5])
page = os.sysconf("SC_PAGE_SIZE")
while os.getppid() == pid:
    try:
        with open(f"/proc/{pid}/statm", "rb") as f:
            rss = int(f.read().split()[1]) * page
    except (OSError, ValueError, IndexError):
        break
    if rss > limit:
        os.write(2, line.replace("{mb}", str(rss >> 20)).encode() + b"\\n")
        os.kill(pid, signal.SIGKILL)
        break
    time.sleep(period if rss < near else 0.001)
"""


class MemoryGuard:
    def __init__(self, *, prog: str | None = None, trip_mb: int = TRIP_MB,
                 hard_mb: int = HARD_MB, watch_mb: int = WATCH_MB,
                 on_hard: Callable[[str], None] | None = None, period_s: float = PERIOD_S,
                 read: Callable[[], int | None] = rss_bytes) -> None:
        """prog (a command's name, e.g. "kvviz events"): the last resorts are that command's
        (exit_now(prog) and the watcher process); without it, on_hard only."""
        if prog is not None and on_hard is None:
            on_hard = exit_now(prog)
        self.period_s, self.read, self.on_hard = period_s, read, on_hard
        start = read()
        self.enabled = start is not None
        # a process that already held more than an interpreter's BASE_MB when the guard
        # started (a test runner calling the command in-process) gets the excess on top
        extra = max(0, (start or 0) // MB - BASE_MB)
        self.trip_mb, self.hard_mb = trip_mb + extra, hard_mb + extra
        self.watcher: subprocess.Popen | None = None
        self.tripped: str | None = None
        self.peak = 0
        self._stop = threading.Event()
        self._released = threading.Event()  # the sockets are closed: nothing more comes in
        self.wake_fd, self._wake_w = os.pipe()
        self._thread = threading.Thread(target=self._run, name="kvviz-memory-guard",
                                        daemon=True)
        if self.enabled:
            self._thread.start()
            if prog is not None:
                self._watch(prog, watch_mb + extra)

    def _watch(self, prog: str, watch_mb: int) -> None:
        line = f"{prog}: error: " + why("{mb}", self.trip_mb, f"past {watch_mb} MB, kvviz "
                                        "was killed (the recording keeps what was committed)")
        try:
            self.watcher = subprocess.Popen(
                [sys.executable, "-I", "-S", "-c", WATCHER, str(os.getpid()),
                 str(watch_mb * MB), str(WATCH_PERIOD_S), line,
                 str((watch_mb - WATCH_NEAR_MB) * MB)],
                stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL)
        except OSError:
            self.watcher = None  # the thread's limits still hold where it can run

    def _run(self) -> None:
        while not self._stop.wait(self.period_s):
            rss = self.read()
            if rss is None:
                return
            self.peak = max(self.peak, rss)
            if self.tripped is None:
                if rss > self.trip_mb * MB:
                    self.tripped = why(rss, self.trip_mb)
                    with contextlib.suppress(OSError):
                        os.write(self._wake_w, b"!")
            elif not self._released.is_set() and rss > self.hard_mb * MB and \
                    self.on_hard is not None:  # not on the reading that tripped: a chance
                self.on_hard(why(rss, self.trip_mb, f"past {self.hard_mb} MB, kvviz ended "
                                 "at once (the recording keeps what was committed)"))
                return

    def would_pass(self, more: int) -> bool:
        """Whether `more` bytes (a payload's decoded bound) would take the process past the
        limit now; if so the guard trips (the caller's poll then closes the sockets)."""
        rss = self.read()
        if self.tripped is None and rss is not None and rss + more > self.trip_mb * MB:
            self.tripped = why(rss, self.trip_mb, f"a {more // MB} MB decode would have "
                               "passed it; the sockets were closed")
        return self.tripped is not None

    def released(self) -> None:
        """The subscriber closed its sockets: the last resorts are off."""
        self._released.set()
        self._unwatch()

    def _unwatch(self) -> None:
        w, self.watcher = self.watcher, None
        if w is not None:
            with contextlib.suppress(OSError):
                w.kill()
            with contextlib.suppress(subprocess.TimeoutExpired):
                w.wait(2.0)

    def close(self) -> None:
        self._unwatch()
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join(1.0)
        for fd in (self.wake_fd, self._wake_w):
            with contextlib.suppress(OSError):
                os.close(fd)


def exit_now(prog: str) -> Callable[[str], None]:
    """The last resort: `prog: error: MESSAGE` on stderr, then the process ends (exit 2)."""
    def end(message: str) -> None:
        with contextlib.suppress(OSError):
            os.write(2, f"{prog}: error: {message}\n".encode("utf-8", "replace"))
        os._exit(2)
    return end
