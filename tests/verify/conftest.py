"""tests/verify: fixtures shared with tests/store (its conftest.py holds them)."""
from __future__ import annotations

from tests.store.conftest import recording  # noqa: F401 (fixtures)
