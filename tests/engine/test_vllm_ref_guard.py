"""The vLLM tier's guards, without vLLM: a missing venv skips (or fails when required), and
the adapter refuses any vLLM but the one it was written for."""
from __future__ import annotations

import sys
import types

import pytest

from kvviz.reference import vllm_scheduler
from tests.engine.vllm_ref import venv_python


def test_a_missing_venv_skips_with_its_path(monkeypatch, tmp_path):
    monkeypatch.setenv("KVVIZ_VLLM_VENV", str(tmp_path / "none"))
    monkeypatch.delenv("KVVIZ_REQUIRE_VLLM", raising=False)
    with pytest.raises(pytest.skip.Exception, match="no vLLM venv at .*none"):
        venv_python()


def test_a_missing_venv_fails_when_the_tier_is_required(monkeypatch, tmp_path):
    monkeypatch.setenv("KVVIZ_VLLM_VENV", str(tmp_path / "none"))
    monkeypatch.setenv("KVVIZ_REQUIRE_VLLM", "1")
    with pytest.raises(pytest.fail.Exception, match="KVVIZ_REQUIRE_VLLM=1"):
        venv_python()


def test_another_vllm_version_is_refused_by_name(monkeypatch):
    monkeypatch.setitem(sys.modules, "vllm", types.SimpleNamespace(__version__="0.31.2"))
    with pytest.raises(SystemExit, match=r"written for vLLM 0\.32\.0.*has vLLM 0\.31\.2"):
        vllm_scheduler._check_version()


def test_no_vllm_at_all_is_refused_with_the_venv_hint(monkeypatch):
    monkeypatch.setitem(sys.modules, "vllm", None)  # import vllm raises ImportError
    with pytest.raises(SystemExit, match="has no vllm.*KVVIZ_VLLM_VENV"):
        vllm_scheduler._check_version()
