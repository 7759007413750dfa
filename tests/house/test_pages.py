"""Pages only read, call kvviz, and draw (STYLE 18): app.py registers every page by name and
each goes through app.py first (pages/frame.py), a helper module in pages/ draws nothing on
import, and no page knows it is under test, reads the environment, runs a simulation or
imports a private part of Streamlit."""
from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SCRIPTS = sorted([ROOT / "app.py", *(ROOT / "pages").glob("*.py")])


def registered() -> set[str]:
    tree = ast.parse((ROOT / "app.py").read_text())
    (pages,) = [n.value for n in tree.body if isinstance(n, ast.Assign)
                and any(getattr(t, "id", "") == "PAGES" for t in n.targets)]
    return {ast.literal_eval(e)[0] for e in pages.elts}


def imported(path: Path) -> set[str]:
    out = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            out |= {a.name for a in node.names}
        elif isinstance(node, ast.ImportFrom):
            out |= {f"{node.module}.{a.name}" for a in node.names}
    return out


def top_level_calls(path: Path) -> list[str]:
    """The calls a module makes as statements when it is imported or run (a page draws)."""
    return [ast.unparse(n.value.func) for n in ast.parse(path.read_text()).body
            if isinstance(n, ast.Expr) and isinstance(n.value, ast.Call)]


def test_app_registers_every_page_and_each_goes_through_the_app_first() -> None:
    pages = registered()
    assert pages and all((ROOT / p).is_file() for p in pages)
    for page in pages:
        text = (ROOT / page).read_text()
        assert 'enter_through_app("' + page + '")' in text or \
            'runpicker.sidebar("' + page + '")' in text, page


def test_a_helper_module_in_pages_draws_nothing_when_imported() -> None:
    helpers = {p for p in (ROOT / "pages").glob("*.py")} - {ROOT / p for p in registered()}
    assert helpers
    for path in helpers:
        assert not top_level_calls(path), path.name


@pytest.mark.parametrize("path", SCRIPTS, ids=lambda p: p.name)
def test_no_test_hooks_environment_or_private_streamlit(path: Path) -> None:
    text = path.read_text()
    names = imported(path)
    assert not [n for n in names if n.startswith(("streamlit.runtime", "streamlit.testing",
                                                  "streamlit.web", "os.", "kvviz.engine.Sim"))]
    assert "os" not in names and "environ" not in text and "getenv" not in text
    assert not re.search(r"(?i)apptest|under test|test hook|_test_", text), path.name
    assert "Simulation" not in text


@pytest.mark.parametrize("path", SCRIPTS, ids=lambda p: p.name)
def test_no_sql_in_the_dashboard(path: Path) -> None:
    """Queries live in kvviz/store (RunReader, kv_reader); a page asks them, it holds no SQL
    (it may name sqlite3.Error, to show a damaged file's error)."""
    text = path.read_text()
    assert not re.search(r"sqlite3\.connect|\.execute(many)?\(|\bSELECT\b|\bINSERT\b|"
                         r"\bUPDATE\b", text), path.name
