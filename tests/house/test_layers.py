"""The layers import only what docs/ARCHITECTURE.md allows them (checked in fresh interpreters)."""
from __future__ import annotations

import ast
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
    ("kvviz.store.writer", "collectors.writer_process", "collectors.writer_client"),
])
def test_the_store_writer_side_loads_numpy_and_the_standard_library_only(modules) -> None:
    assert not loaded_after(*modules) & {"pandas", "pyarrow", "streamlit", "plotly", "torch"}


def test_the_core_imports_with_numpy_alone() -> None:
    core = [".".join(p.relative_to(ROOT).with_suffix("").parts)
            for pkg in ("core", "engine") for p in sorted((ROOT / "kvviz" / pkg).rglob("[!_]*.py"))]
    assert not loaded_after(*core) & {"pandas", "pyarrow", "streamlit", "plotly", "torch"}


def test_the_store_package_init_imports_nothing() -> None:
    assert "pandas" not in loaded_after("kvviz.store")


# What kvviz/node may import of the project: itself and the floors below it (docs/ARCHITECTURE.md).
NODE_MAY_IMPORT = ("kvviz.node", "kvviz.store", "kvviz.core", "kvviz.engine", "kvviz.traces",
                   "kvviz.plugin")


def project_imports(path: Path, package: str) -> list[tuple[int, str]]:
    """(line, module) of every import of kvviz, collectors or pages in module `path` of
    `package`, at any depth (function-level imports included), relative imports resolved."""
    found = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parent = package.rsplit(".", node.level - 1)[0] if node.level > 1 else package
                base = f"{parent}.{base}" if base else parent
            names = [base] if base != "kvviz" else [f"kvviz.{a.name}" for a in node.names]
        else:
            continue
        found += [(node.lineno, n) for n in names
                  if n.split(".")[0] in ("kvviz", "collectors", "pages", "app")]
    return found


@pytest.mark.parametrize("path", sorted((ROOT / "kvviz" / "node").rglob("*.py")),
                         ids=lambda p: str(p.relative_to(ROOT)))
def test_the_node_package_imports_nothing_above_it(path: Path) -> None:
    package = ".".join(path.relative_to(ROOT).parts[:-1])
    above = [f"line {line}: {mod}" for line, mod in project_imports(path, package)
             if not any(mod == ok or mod.startswith(ok + ".") for ok in NODE_MAY_IMPORT)]
    assert not above, f"{path.relative_to(ROOT)} imports above kvviz/node: {above}"


def test_the_node_import_check_sees_function_level_relative_and_from_kvviz_imports(
        tmp_path: Path) -> None:
    probe = tmp_path / "probe.py"
    probe.write_text("def f():\n    from kvviz import runs\n    import collectors.writer_client\n"
                     "    from ...pages import common\n")
    found = [m for _, m in project_imports(probe, "kvviz.node.kvevents")]
    assert sorted(found) == ["collectors.writer_client", "kvviz.pages", "kvviz.runs"]
