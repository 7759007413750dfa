"""The real-vLLM tier's clients of vLLM's KV-event stream (tests/real_vllm/scenario.py drives
them): subscribers that lose live batches on purpose, the waits that keep a subscriber level
with the stream, `kvviz attach` runs in subprocesses, and the forests they end with."""
from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

from kvviz.node.kvevents.model import CacheModel
from kvviz.node.kvevents.rebuild import load_model
from kvviz.node.kvevents.subscriber import Subscriber, SubscriberConfig
from kvviz.store import kv_reader
from tests.real_vllm.server import BLOCK_SIZE

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


class Lossy(Subscriber):
    """A subscriber that loses the live batches whose seq is in `drop` (a gap on the way)."""

    def __init__(self, *a, **kw):
        super().__init__(*a, **kw)
        self.drop: set = set()

    def handle(self, st, frames, count=None):
        if len(frames) == 3 and len(frames[1]) == 8:
            seq = int.from_bytes(frames[1], "big", signed=True)
            if seq in self.drop:
                self.drop.discard(seq)
                return
        super().handle(st, frames, count)


class LossyLive(Subscriber):
    """A subscriber that loses its 2nd, 3rd and 4th live batches (after joining)."""

    def __init__(self, *a, **kw):
        super().__init__(*a, **kw)
        self.live = 0

    def handle(self, st, frames, count=None):
        self.live += 1
        if self.live in (2, 3, 4):
            return
        super().handle(st, frames, count)


def subscriber(srv, cls=Subscriber) -> Subscriber:
    sub = cls(SubscriberConfig((srv.events,), 1, (srv.replay,), "kv-events",
                               replay_timeout_s=10.0))
    sub.model = CacheModel(index_tokens=True)  # before any batch (they come with poll())
    return sub


def sync(*subs, quiet_s: float = 0.4, most_s: float = 15.0) -> None:
    """Poll until no subscriber has received anything for quiet_s."""
    end = time.monotonic() + most_s
    last = time.monotonic()
    while time.monotonic() < end:
        if sum(s.poll(20) for s in subs):
            last = time.monotonic()
        elif time.monotonic() - last >= quiet_s:
            return


def holds(subs, others, prompt, most_s: float = 15.0) -> None:
    """Poll until each of `subs` holds the full blocks of `prompt`, which vLLM caches when it
    has computed it (so: until their streams reached the request just answered; a loaded
    machine delays events more than a quiet spell measures); `others` are polled meanwhile."""
    want = (len(prompt) - 1) // BLOCK_SIZE * BLOCK_SIZE  # the hit a repeat of it would get
    end = time.monotonic() + most_s
    while time.monotonic() < end:
        if all(s.model.prefix_hit_tokens(s.streams[0].sid, prompt) >= want for s in subs):
            return
        for s in (*subs, *others):
            s.poll(20)


def reached(seq: int, *subs, most_s: float = 15.0) -> None:
    """Poll until every subscriber has had batch `seq` (the last one vLLM's replay buffer
    holds): their forests are then compared with that buffer's."""
    end = time.monotonic() + most_s
    while time.monotonic() < end and any((s.streams[0].last_seq or -1) < seq for s in subs):
        for s in subs:
            s.poll(20)


def attach(srv, out, *extra) -> subprocess.Popen:
    env = {**os.environ, "PYTHONPATH": ROOT}
    return subprocess.Popen([sys.executable, "-m", "kvviz", "attach", srv.metrics_url,
                             "--kv-events", srv.events, "--replay", srv.replay, "--topic",
                             "kv-events", "--interval", "1", "--quiet", "--out", str(out),
                             *extra], env=env, cwd=ROOT, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)


def stop(proc: subprocess.Popen) -> tuple[int, str]:
    proc.send_signal(signal.SIGTERM)
    _out, err = proc.communicate(timeout=60)
    return proc.returncode, err


def forest(sub) -> dict:
    (st,) = sub.streams
    return {h: p for _, f in sub.model.of_stream(st.sid) for h, p in f.parent.items()}


def recorded_forest(path) -> dict:
    with kv_reader.connect(path) as conn:
        model, _ = load_model(conn)
    return {h: p for f in model.forests.values() for h, p in f.parent.items()}
