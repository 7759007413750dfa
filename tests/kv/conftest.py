"""tests/kv: torch is required here (kvviz.kv is the torch layer).

The `triton` marker (registered in pyproject.toml) tags the Triton kernel checks; they run by
default and can be deselected with -m "not triton".
"""
from __future__ import annotations

import pytest

pytest.importorskip("torch")
