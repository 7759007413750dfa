"""A `kvviz events` process started from the dashboard (one per server), recording into the
runs directory. Arguments are checked here first, so a bad endpoint is one error, not a dead
process; only the endpoints the user typed are contacted."""
from __future__ import annotations

import atexit
import os
import subprocess
import sys
import time
from pathlib import Path

from kvviz.node.kvevents.endpoints import SubscriberConfig


class Recorder:
    def __init__(self, runs: Path) -> None:
        self.runs = runs
        self.proc: subprocess.Popen | None = None
        self.recording: str | None = None
        self.log: Path | None = None
        atexit.register(self.stop)  # the server's exit ends the recording it started

    def start(self, endpoints: list[str], dp_ranks: int = 1, replay: list[str] | None = None,
              topic: str = "") -> str:
        """Start recording; returns the recording's file name. Raises ValueError."""
        SubscriberConfig(tuple(endpoints), dp_ranks, tuple(replay or ()), topic)
        self.stop()
        name = time.strftime("kv-events-%Y%m%dT%H%M%SZ", time.gmtime()) + ".db"
        self.log = self.runs / (name + ".log")
        args = [sys.executable, "-m", "kvviz", "events", *endpoints, "--dp-ranks",
                str(dp_ranks), "--topic", topic, "--quiet", "--out", str(self.runs / name)]
        for r in replay or ():
            args += ["--replay", r]
        with open(self.log, "wb") as log:
            self.proc = subprocess.Popen(args, stdout=log, stderr=log, env=os.environ.copy())
        self.recording = name
        return name

    def state(self) -> tuple[str, int | None, str]:
        """("idle" | "running" | "ended", exit code, the log's last lines)."""
        if self.proc is None:
            return "idle", None, ""
        code = self.proc.poll()
        text = ""
        if self.log is not None and self.log.is_file():
            text = self.log.read_bytes()[-2000:].decode("utf-8", "replace")
        return ("running" if code is None else "ended"), code, text

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(5)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
