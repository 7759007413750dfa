"""The scheduler class kvviz hands vLLM: the class vLLM chose (Scheduler, AsyncScheduler or
the user's --scheduler-cls), subclassed so that the sampler (kvviz/plugin/sampler.py) runs
around its own methods. The subclass computes nothing of its own: every call returns what
vLLM's method returned."""
from __future__ import annotations

import logging

from kvviz.plugin.sampler import PoolSampler

log = logging.getLogger("kvviz.plugin")


def mixin_class(base: type, make_sampler) -> type:
    """`base` (the scheduler class vLLM chose: Scheduler, AsyncScheduler or the user's) with
    the sampler's calls around its own methods; `make_sampler(scheduler)` builds the
    PoolSampler (None: inert). Any exception in kvviz's code logs one line and switches the
    sampler off; the scheduler's own results are returned unchanged."""

    def guard(sched, what: str, fn, *a) -> None:
        k = sched._kvviz
        if k is None or k.disabled:
            return
        try:
            fn(k, *a)
        except Exception as exc:  # noqa: BLE001 (a guest: one line, the server keeps serving)
            log.error("kvviz blocks plugin: %s failed (%s: %s); sampling off, the server "
                      "keeps serving", what, type(exc).__name__, exc)
            try:
                k.unhook()
            except Exception:  # noqa: BLE001
                k.disabled = True

    class KvvizBlocks(base):  # type: ignore[misc, valid-type]
        def __init__(self, *a, **kw):
            super().__init__(*a, **kw)
            self._kvviz = None
            try:
                self._kvviz = make_sampler(self)
            except Exception as exc:  # noqa: BLE001
                log.error("kvviz blocks plugin: not sampling (%s: %s); the server keeps "
                          "serving", type(exc).__name__, exc)

        def add_request(self, request):
            super().add_request(request)
            guard(self, "add_request", PoolSampler.arrived_request, request)

        def schedule(self, *a, **kw):
            guard(self, "sample", PoolSampler.before_schedule)
            out = super().schedule(*a, **kw)
            guard(self, "schedule", PoolSampler.after_schedule, out)
            return out

        def _handle_blocked_waiting_request(self, request):  # each waiting request it tries
            guard(self, "schedule", PoolSampler.waiting_reached)
            return super()._handle_blocked_waiting_request(request)

        def update_from_output(self, *a, **kw):
            out = super().update_from_output(*a, **kw)
            if not self.has_requests():  # run dry: the last state, until the next step
                guard(self, "sample", PoolSampler.sample)
            return out

        def _preempt_request(self, request, *a, **kw):
            super()._preempt_request(request, *a, **kw)
            guard(self, "preempt", PoolSampler.preempted, request)

        def _free_request(self, request, *a, **kw):
            guard(self, "finish", PoolSampler.finished, request)
            return super()._free_request(request, *a, **kw)

    KvvizBlocks.__name__ = KvvizBlocks.__qualname__ = f"KvvizBlocks{base.__name__}"
    return KvvizBlocks
