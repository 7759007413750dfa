"""`python -m kvviz.twin.worker`: what-if configurations for kvviz.twin.runner, one after
another in one process, so numba and the compiled rule load once per worker, not once per
configuration.

The parent speaks over this process's stdin and stdout as multiprocessing Connections
(length-prefixed pickles): first the Stream, then (index, NodeSettings, record) per
configuration, each answered with (index, "ok", ConfigRun) or (index, "error", "input" |
"bug", message). The end of stdin ends the process. What a run prints goes to stderr.
"""
from __future__ import annotations

import os
import sys
import traceback
from multiprocessing.connection import Connection


def main() -> int:
    jobs = Connection(os.dup(0), writable=False)
    answers = Connection(os.dup(1), readable=False)
    os.dup2(2, 1)  # a stray print must not land among the answers
    from kvviz.core.errors import KvvizError
    from kvviz.twin.runner import run_config

    try:
        stream = jobs.recv()
        while True:
            i, settings, record = jobs.recv()
            try:
                msg = (i, "ok", run_config(stream, settings, record))
            except (KvvizError, ValueError) as exc:
                msg = (i, "error", "input", str(exc))
            except Exception:  # noqa: BLE001 - reported to the parent, which raises it
                msg = (i, "error", "bug", traceback.format_exc(limit=5))
            answers.send(msg)
    except EOFError:  # the parent is done (or gone)
        return 0


if __name__ == "__main__":
    sys.exit(main())
