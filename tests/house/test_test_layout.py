"""The tests mirror the packages: every test folder is a package (an empty __init__.py), no test
file sits loose at the root of tests/, and no test reaches another test folder through
sys.path (tests/conftest.py states the convention)."""
from __future__ import annotations

import re
from pathlib import Path

TESTS = Path(__file__).resolve().parents[1]
ROOT_FILES = {"__init__.py", "conftest.py", "procs.py",  # procs: shared by two folders
              "examples.py"}  # every property test's example count


def _folders() -> list[Path]:
    return sorted({p.parent for p in TESTS.rglob("*.py") if "__pycache__" not in p.parts})


def test_every_test_folder_is_a_package_with_an_empty_init():
    bad = [str(d.relative_to(TESTS.parent)) for d in _folders()
           if not (d / "__init__.py").exists() or (d / "__init__.py").read_text().strip()]
    assert not bad, f"folders without an empty __init__.py: {bad}"


def test_no_loose_test_file_at_the_root_of_tests():
    loose = sorted(p.name for p in TESTS.glob("*.py") if p.name not in ROOT_FILES)
    assert not loose, f"put these where the module they test lives: {loose}"


def test_no_test_puts_a_test_folder_on_sys_path():
    hits = [f"{p.relative_to(TESTS.parent)}:{n}" for p in TESTS.rglob("*.py")
            for n, line in enumerate(p.read_text().splitlines(), 1)
            if re.search(r"sys\.path\.(insert|append)\(", line)
            and ("tests" in line or "parent" in line or "ROOT" in line)]
    assert not hits, f"import helpers by their full name (tests.x.y) instead: {hits}"
