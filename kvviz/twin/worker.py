"""`python -m kvviz.twin.worker`: one what-if configuration, for kvviz.twin.runner.

stdin: pickle of (Stream, NodeSettings, record) from the parent that started this process;
stdout: pickle of ("ok", ConfigRun), or ("error", "input" | "bug", message).
"""
from __future__ import annotations

import pickle
import sys
import traceback


def main() -> int:
    from kvviz.core.errors import KvvizError
    from kvviz.twin.runner import run_config

    stream, settings, record = pickle.loads(sys.stdin.buffer.read())
    try:
        msg = ("ok", run_config(stream, settings, record))
    except (KvvizError, ValueError) as exc:
        msg = ("error", "input", str(exc))
    except Exception:  # noqa: BLE001 - reported to the parent, which raises it
        msg = ("error", "bug", traceback.format_exc(limit=5))
    sys.stdout.buffer.write(pickle.dumps(msg))
    sys.stdout.buffer.flush()
    return 0


if __name__ == "__main__":
    sys.exit(main())
