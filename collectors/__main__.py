"""`python -m collectors [flags]`: the same flags and run as `kvviz collect` (collectors/launch.py);
started by the dashboard, it also stops when the dashboard is gone or unwatched
(kvviz/runs/lifecycle)."""
from __future__ import annotations

import sys

from collectors.launch import main
from kvviz.runs import lifecycle

if __name__ == "__main__":
    try:
        lifecycle.watch()
    except ValueError as exc:
        print(f"kvviz collect: error: {exc}", file=sys.stderr)
        sys.exit(2)
    sys.exit(main(sys.argv[1:]))
