"""Suite-wide hygiene.

Every folder under tests/ is a package (an empty __init__.py, tests/ too), so pytest names
each module by its path (tests.alloc.ops), puts the repository root on sys.path, and
no test folder shadows a real package (tests/collectors is not `collectors`). A test
imports a helper by its full name: `from tests.pages.recordings import write_recording`.
"""
from __future__ import annotations

import sys

import pytest


@pytest.fixture(autouse=True)
def _main_module_restored():
    """AppTest runs a page as sys.modules["__main__"] and leaves it there; a process spawned
    later in this interpreter (the store writer of an in-process `kvviz collect`) would re-run
    that page as its own main module. Put pytest's back after every test."""
    main = sys.modules.get("__main__")
    yield
    if main is not None and sys.modules.get("__main__") is not main:
        sys.modules["__main__"] = main
