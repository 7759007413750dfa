"""`python -m collectors [flags]`: the same command and flags as `kvviz collect`."""
from __future__ import annotations

import sys

from kvviz.cli import main

if __name__ == "__main__":
    sys.exit(main(["collect", *sys.argv[1:]]))
