"""tests/kv: torch is required here (kvviz.kv is the torch layer).

The `triton` marker (registered in pyproject.toml) tags the Triton kernel checks; they run by
default and can be deselected with -m "not triton".
"""
from __future__ import annotations

import sys
from pathlib import Path

import pytest

pytest.importorskip("torch")
sys.path.insert(0, str(Path(__file__).parent))  # kvref, fakes, triton_cases: any import mode
