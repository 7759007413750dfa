"""A writer-process target whose interpreter teardown would take a minute (an atexit handler
that sleeps): the writer process must not wait for it (collectors/writer_process.child)."""
from __future__ import annotations

import atexit
import time

from collectors import writer_process


def slow_child(spec, rx, tx, nice: int = 0) -> None:
    atexit.register(time.sleep, 60)
    writer_process.child(spec, rx, tx, nice)
