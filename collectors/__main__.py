"""`python -m collectors [flags]`: the same command and flags as `kvviz collect`; started by
the dashboard, it also stops when the dashboard is gone or unwatched (kvviz/lifecycle)."""
from __future__ import annotations

import sys

from kvviz import lifecycle
from kvviz.cli import main

if __name__ == "__main__":
    try:
        lifecycle.watch()
    except ValueError as exc:
        print(f"kvviz collect: error: {exc}", file=sys.stderr)
        sys.exit(2)
    sys.exit(main(["collect", *sys.argv[1:]]))
