"""Imports point one way (docs/ARCHITECTURE.md, "Layers"): kvviz never imports collectors or
pages, and nothing below the command line (kvviz/commands/, its dispatcher cli.py included)
imports it. Read from the source (every import statement, function-level ones too), so a lazy
import counts."""
from __future__ import annotations

from pathlib import Path

import pytest

from tests.house.test_layers import ROOT, project_imports

CLI = ("kvviz.commands.cli", "kvviz.commands")
KVVIZ = sorted((ROOT / "kvviz").rglob("*.py"))
BELOW_CLI = [p for p in KVVIZ + sorted((ROOT / "collectors").rglob("*.py"))
             if p != ROOT / "kvviz" / "commands" / "cli.py" and "commands" not in p.parts
             and p.name != "__main__.py"]


def _package(path: Path) -> str:
    return ".".join(path.relative_to(ROOT).parts[:-1])


def _is(mod: str, prefixes: tuple[str, ...]) -> bool:
    return any(mod == p or mod.startswith(p + ".") for p in prefixes)


@pytest.mark.parametrize("path", KVVIZ, ids=lambda p: str(p.relative_to(ROOT)))
def test_kvviz_imports_neither_collectors_nor_pages(path: Path) -> None:
    bad = [f"line {n}: {m}" for n, m in project_imports(path, _package(path))
           if _is(m, ("collectors", "pages", "app"))]
    assert not bad, f"{path.relative_to(ROOT)} imports upward: {bad}"


@pytest.mark.parametrize("path", BELOW_CLI, ids=lambda p: str(p.relative_to(ROOT)))
def test_nothing_below_the_command_line_imports_it(path: Path) -> None:
    bad = [f"line {n}: {m}" for n, m in project_imports(path, _package(path)) if _is(m, CLI)]
    assert not bad, f"{path.relative_to(ROOT)} imports the CLI: {bad}"


def test_the_collector_entry_script_does_not_go_back_through_the_cli() -> None:
    main = ROOT / "collectors" / "__main__.py"
    assert not [m for _, m in project_imports(main, "collectors") if _is(m, CLI)]


def test_the_cli_names_the_collector_entry_point_that_exists() -> None:
    """kvviz collect reaches collectors by name (no import edge): the name must resolve."""
    import importlib

    from kvviz.commands import collect

    assert callable(importlib.import_module(collect.ENTRY).run)


def test_the_direction_check_sees_a_lazy_upward_import(tmp_path: Path) -> None:
    probe = tmp_path / "probe.py"
    probe.write_text("def f():\n    from collectors import launch\n"
                     "    from kvviz.commands import collect\n")
    found = sorted(m for _, m in project_imports(probe, "kvviz"))
    assert found == ["collectors", "kvviz.commands"]
    assert _is(found[0], ("collectors",)) and _is(found[1], CLI) and not _is("kvviz.cli2", CLI)
