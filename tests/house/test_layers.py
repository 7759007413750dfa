"""The layers import only what DESIGN.md allows them (checked in fresh interpreters)."""
from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def loaded_after(*modules: str) -> set[str]:
    code = ("import sys\n" + "".join(f"import {m}\n" for m in modules)
            + "print(' '.join(sorted({n.split('.')[0] for n in sys.modules})))")
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True,
                         text=True, check=True, env={"PYTHONPATH": str(ROOT), "PATH": ""})
    return set(out.stdout.split())


@pytest.mark.parametrize("modules", [
    ("kvviz.store.writer", "collectors.store_process", "collectors.sampler"),
])
def test_the_store_writer_side_loads_numpy_and_the_standard_library_only(modules) -> None:
    assert not loaded_after(*modules) & {"pandas", "pyarrow", "streamlit", "plotly", "torch"}


def test_the_core_imports_with_numpy_alone() -> None:
    core = ("kvviz.alloc", "kvviz.engine", "kvviz.metrics", "kvviz.blockmap", "kvviz.config",
            "kvviz.workload")
    assert not loaded_after(*core) & {"pandas", "pyarrow", "streamlit", "plotly", "torch"}


def test_the_store_package_init_imports_nothing() -> None:
    assert "pandas" not in loaded_after("kvviz.store")
