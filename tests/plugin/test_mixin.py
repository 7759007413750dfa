"""The scheduler subclass kvviz hands vLLM (kvviz/plugin/mixin.py), on a stand-in scheduler:
it returns what the scheduler returned, and a failing sampler costs one log line, after
which sampling is off and the scheduler goes on. (With vLLM: tests/real_vllm/test_blocks.py.)"""
from __future__ import annotations

import logging
import types

from kvviz.plugin.mixin import mixin_class


class Base:
    def __init__(self, out="planned"):
        self.out = out
        self.calls = []

    def add_request(self, request):
        self.calls.append(("add", request))

    def schedule(self, *a, **kw):
        self.calls.append(("schedule",))
        return self.out

    def update_from_output(self, *a, **kw):
        return {"outputs": 1}

    def has_requests(self):
        return True

    def _preempt_request(self, request, *a, **kw):
        self.calls.append(("preempt", request))

    def _free_request(self, request, *a, **kw):
        return ("freed", request)


def test_every_call_returns_what_the_scheduler_returned():
    cls = mixin_class(Base, lambda sched: None)  # an inert sampler: nothing to call
    s = cls("out-1")
    assert cls.__name__ == "KvvizBlocksBase" and isinstance(s, Base)
    assert s.schedule() == "out-1" and s.update_from_output(None, None) == {"outputs": 1}
    assert s._free_request("r") == ("freed", "r")
    s.add_request("r")
    s._preempt_request("r")
    assert s.calls == [("schedule",), ("add", "r"), ("preempt", "r")]


def test_a_failing_sampler_logs_one_line_and_the_scheduler_goes_on(caplog):
    broken = types.SimpleNamespace(disabled=False)  # no settings: before_schedule raises
    cls = mixin_class(Base, lambda sched: broken)
    s = cls("out-2")
    with caplog.at_level(logging.INFO, logger="kvviz.plugin"):
        results = [s.schedule() for _ in range(5)]
    assert results == ["out-2"] * 5
    lines = [r.getMessage() for r in caplog.records]
    assert len(lines) == 1 and lines[0].startswith("kvviz blocks plugin: sample failed")
    assert "the server keeps serving" in lines[0] and broken.disabled


def test_a_sampler_that_cannot_start_logs_one_line_and_leaves_the_scheduler(caplog):
    def refuse(sched):
        raise RuntimeError("2 KV cache groups (a hybrid model)")

    with caplog.at_level(logging.INFO, logger="kvviz.plugin"):
        s = mixin_class(Base, refuse)("out-3")
        assert s.schedule() == "out-3" and s._kvviz is None
    (line,) = [r.getMessage() for r in caplog.records]
    assert "not sampling (RuntimeError: 2 KV cache groups" in line
