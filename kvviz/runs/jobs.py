"""The dashboard's background jobs, side by side: the demo collector, a node scrape and a
KV-event recording.

Each is one LoggedProcess recording into the runs directory, shared by every browser session
(the pages keep one per server in st.cache_resource), and stops by itself when the dashboard
is gone (kvviz/runs/lifecycle.py). The demo collector gets its settings as data: a validated
CollectorConfig written to <recording>.config and read back by `kvviz collect --config`.
"""
from __future__ import annotations

import dataclasses
import os
import sys
import time
from pathlib import Path
from typing import NamedTuple

from kvviz.node.kvevents.endpoints import SubscriberConfig
from kvviz.node.scrape import normalize_url
from kvviz.node.trust import check_scrape_url
from kvviz.runs import control, lifecycle
from kvviz.runs.directory import CONFIG_SUFFIX, CONTROL_SUFFIX, VIEWER_SUFFIX, unique_recording
from kvviz.runs.process import LoggedProcess
from kvviz.runs.status import STOPPED
from kvviz.settings.collector import CollectorConfig

ROOT = Path(__file__).resolve().parents[2]  # where `python -m kvviz` finds the package
# The Live page's collector: `kvviz collect --loop` with the commands' defaults, a stream that
# shows every failure class within its first minute (docs/DASHBOARD.md, "The default demo"): a
# contiguous lane that reserves the next power of two (varied holes: FRAGMENTATION, then
# CAPACITY), one that reserves max_seq_len (all holes alike: CAPACITY only), and paged blocks
# of 16, at 3 arrivals/s into 16,384 slots (kvviz/core/limits.py's shared defaults); with a
# running-batch limit of 24 (POLICY on the paged lane).
DEMO = CollectorConfig(loop=True, max_num_seqs=24)


def demo_config(**settings: object) -> CollectorConfig:
    """DEMO with `settings` changed (a Live form's choices); ValueError names a bad field."""
    return dataclasses.replace(DEMO, **settings)


def run_config(config: CollectorConfig, out: Path) -> CollectorConfig:
    """What the demo collector is started with: `config` writing `out`, quietly, never over
    an existing file; a prefix-caching lane also records its own KV-event stream (the Live
    page shows it beside the lane's block map)."""
    record = config.kv_events_record or any(s.prefix_caching for s in config.lanes)
    return dataclasses.replace(config, out=str(out), quiet=True, overwrite=False,
                               kv_events_record=record)


class Origin(NamedTuple):
    """Who started the running collector, and when: shown beside the settings."""

    at: float  # unix time
    session: str | None  # the browser session that pressed Start (None: the server)
    how: str  # "opened the page", "Start", "Restart", "a viewer came back"


class Collector(LoggedProcess):
    """One demo collector at a time (`python -m collectors --config runs/live-<time>.config`),
    with pause and single-step through its control file (kvviz/runs/control.py)."""

    def __init__(self, root: Path, *, module: str = "collectors", python: str = sys.executable,
                 cwd: Path | None = None) -> None:
        super().__init__()
        self.root, self.module, self.python = root, module, python
        self.cwd = cwd or Path.cwd()
        self.config: CollectorConfig | None = None
        self.autostarted = False
        self.viewer: Path | None = None  # touched while a tab shows the live collector
        self.control_path: Path | None = None  # Pause / Step (kvviz/runs/control.py)
        self.origin: Origin | None = None
        self._touched = 0.0

    def start(self, config: CollectorConfig = DEMO, *, session: str | None = None,
              how: str = "Start") -> Path:
        """Stop any running collector, start a new one writing runs/live-<time>.db.

        The child stops by itself when this process is gone or when no viewer has touched
        its viewer file (touch_viewer) for $KVVIZ_IDLE_STOP_S (kvviz/runs/lifecycle.py)."""
        with self._lock:
            out = unique_recording(self.root, "live")
            run = run_config(config, out)
            settings = run.save(out.with_suffix(CONFIG_SUFFIX))
            self._drop_viewer()
            self.viewer = out.with_suffix(VIEWER_SUFFIX)
            self.viewer.touch()
            self._touched = time.monotonic()
            self.control_path = out.with_suffix(CONTROL_SUFFIX)
            control.write(self.control_path, control.Control())
            env = {lifecycle.VIEWER_ENV: str(self.viewer),
                   control.CONTROL_ENV: str(self.control_path)}
            self._launch_locked([self.python, "-m", self.module, "--config", str(settings)],
                                out, self.cwd, env)
            self.config = config
            self.origin = Origin(time.time(), session, how)
            return out

    def control(self) -> control.Control:
        """Paused or not, and the Step presses so far (Control() when none was started)."""
        return control.Control() if self.control_path is None else control.read(
            self.control_path)

    def set_paused(self, paused: bool) -> None:
        with self._lock:
            if self.control_path is not None:
                control.write(self.control_path, self.control()._replace(paused=paused))

    def step(self) -> None:
        """One engine step of a paused collector (pauses it first if it runs)."""
        with self._lock:
            if self.control_path is not None:
                c = self.control()
                control.write(self.control_path, control.Control(True, c.steps + 1))

    def touch_viewer(self, every_s: float = 5.0) -> None:
        """A tab shows the live collector: push its idle stop back (at most every `every_s`)."""
        now = time.monotonic()
        if self.viewer is None or now - self._touched < every_s:
            return
        self._touched = now
        try:
            os.utime(self.viewer)
        except OSError:
            pass  # the runs directory went away: the collector then runs to its idle stop

    def _drop_viewer(self) -> None:
        if self.viewer is not None:
            self.viewer.unlink(missing_ok=True)
            self.viewer = None
        if self.control_path is not None:
            self.control_path.unlink(missing_ok=True)
            self.control_path = None

    def stop(self) -> None:
        super().stop()
        with self._lock:
            self._drop_viewer()

    def idle_stopped(self) -> bool:
        """The collector stopped itself because no one watched it (lifecycle's message)."""
        return self.status().state == STOPPED and "no viewer for" in self.last_message()

    def ensure_started(self, config: CollectorConfig = DEMO) -> None:
        """Start once per process (the first page view), and again when a viewer comes back
        to a collector that stopped for lack of viewers; otherwise do nothing."""
        with self._lock:
            if self.autostarted and not self.idle_stopped() or self._proc is not None and (
                    self._proc.poll() is None):  # already running (started from a page)
                self.autostarted = True
                return
            self.autostarted = True
            back = self.idle_stopped() and self.config is not None
        self.start(self.config if back and self.config else config,
                   how="a viewer came back" if back else "opened the page")

    def restart(self, config: CollectorConfig | None = None, *,
                session: str | None = None) -> Path:
        return self.start(config or self.config or DEMO, session=session, how="Restart")


class ScrapeJob(LoggedProcess):
    """One `python -m kvviz scrape URL --out runs/node-<time>.db` at a time."""

    LOG_LINES = 3  # one line per scrape

    def __init__(self, root: Path, *, python: str = sys.executable) -> None:
        super().__init__()
        self.root, self.python = Path(root), python
        self.url: str | None = None
        self.every: tuple[float, float] = (2.0, 3.0)

    def start(self, url: str, interval_s: float = 2.0, timeout_s: float = 3.0) -> Path:
        """Stop any running scrape and start one of `url`; NodeUrlError for a bad URL,
        ScrapeNotAllowedError for a host outside KVVIZ_SCRAPE_ALLOW."""
        url = normalize_url(url)
        check_scrape_url(url)
        if not (interval_s > 0 and timeout_s > 0):
            raise ValueError("scrape interval and timeout must be > 0 s")
        with self._lock:
            out = unique_recording(self.root, "node")
            self._launch_locked([self.python, "-m", "kvviz", "scrape", url, "--out", str(out),
                                 "--interval", str(interval_s), "--timeout", str(timeout_s)],
                                out, ROOT)
            self.url, self.every = url, (interval_s, timeout_s)
            return out

    def restart(self) -> Path | None:
        """The same scrape again, into a new recording (None when none was started)."""
        return None if self.url is None else self.start(self.url, *self.every)

    def target(self) -> str | None:
        return self.url


class EventsJob(LoggedProcess):
    """One `python -m kvviz events ENDPOINT... --out runs/kv-events-<time>.db` at a time. The
    arguments are checked here first, so a bad endpoint is one error, not a dead process;
    only the endpoints the user typed are contacted."""

    def __init__(self, root: Path, *, python: str = sys.executable) -> None:
        super().__init__()
        self.root, self.python = Path(root), python
        self.subscription: SubscriberConfig | None = None

    def start(self, endpoints: list[str], dp_ranks: int = 1, replay: list[str] | None = None,
              topic: str = "") -> Path:
        """Stop any running recording and start one; ValueError names a bad argument."""
        sub = SubscriberConfig(tuple(endpoints), dp_ranks, tuple(replay or ()), topic)
        with self._lock:
            out = unique_recording(self.root, "kv-events")
            argv = [self.python, "-m", "kvviz", "events", *sub.endpoints, "--dp-ranks",
                    str(sub.dp_ranks), "--topic", sub.topic, "--quiet", "--out", str(out)]
            for r in sub.replay:
                argv += ["--replay", r]
            self._launch_locked(argv, out, ROOT)
            self.subscription = sub
            return out

    def restart(self) -> Path | None:
        """The same streams again, into a new recording (None when none was started)."""
        s = self.subscription
        return None if s is None else self.start(list(s.endpoints), s.dp_ranks,
                                                 list(s.replay), s.topic)

    def target(self) -> str | None:
        return None if self.subscription is None else " ".join(self.subscription.endpoints)


class AttachJob(LoggedProcess):
    """One `python -m kvviz attach URL [--kv-events EP [--replay EP]] --out runs/node-<time>.db`
    at a time: a node's scrapes and KV events in one recording. Arguments are checked here
    first (one error, not a dead process); only the addresses the user typed are contacted."""

    LOG_LINES = 3

    def __init__(self, root: Path, *, python: str = sys.executable) -> None:
        super().__init__()
        self.root, self.python = Path(root), python
        self.args: tuple | None = None

    def start(self, url: str, events: str | None = None, replay: str | None = None,
              topic: str = "", interval_s: float = 2.0) -> Path:
        url = normalize_url(url)
        check_scrape_url(url)
        events, replay = (events or "").strip() or None, (replay or "").strip() or None
        if replay and not events:
            raise ValueError("a replay endpoint needs the KV-events endpoint it replays")
        if events:
            SubscriberConfig((events,), 1, (replay,) if replay else (), topic)
        if not interval_s > 0:
            raise ValueError("scrape interval must be > 0 s")
        with self._lock:
            out = unique_recording(self.root, "node")
            argv = [self.python, "-m", "kvviz", "attach", url, "--out", str(out),
                    "--interval", str(interval_s), "--quiet", "--topic", topic]
            if events:
                argv += ["--kv-events", events]
            if replay:
                argv += ["--replay", replay]
            self._launch_locked(argv, out, ROOT, env={lifecycle.PARENT_ENV: str(os.getpid())})
            self.args = (url, events, replay, topic, interval_s)
            return out

    def restart(self) -> Path | None:
        return None if self.args is None else self.start(*self.args)

    def target(self) -> str | None:
        if self.args is None:
            return None
        return self.args[0] + (f" + {self.args[1]}" if self.args[1] else "")
