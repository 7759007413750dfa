"""Tests of collectors/.

pytest imports this directory as the package `collectors` (it puts tests/ on sys.path),
which hides the real package of that name; without the line below, `collectors.X` would then
come from whatever install provides it (an editable install of another checkout). Searching
the real directory too makes these tests import this checkout's collectors/.
"""
from pathlib import Path

__path__.append(str(Path(__file__).resolve().parents[2] / "collectors"))  # noqa: F821
