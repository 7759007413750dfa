"""The scheduler class kvviz hands vLLM: the class vLLM chose (Scheduler, AsyncScheduler or
the user's --scheduler-cls), subclassed so that the sampler (kvviz/plugin/sampler.py) runs
around its own methods. The subclass computes nothing of its own: every call returns what
vLLM's method returned."""
from __future__ import annotations

import logging

log = logging.getLogger("kvviz.plugin")


def mixin_class(base: type, make_sampler) -> type:
    """`base` (the scheduler class vLLM chose: Scheduler, AsyncScheduler or the user's) with
    the sampler's calls around its own methods; `make_sampler(scheduler)` builds the
    PoolSampler (None: inert). Any exception in kvviz's code logs one line and switches the
    sampler off; the scheduler's own results are returned unchanged. Each method calls the
    sampler inline (no helper frame: some run several times a step), `_kvviz` being None once
    the sampler is off."""

    def failed(sched, what: str, exc: Exception) -> None:
        log.error("kvviz blocks plugin: %s failed (%s: %s); sampling off, the server keeps "
                  "serving", what, type(exc).__name__, exc)
        k, sched._kvviz = sched._kvviz, None
        if k is not None:
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
            k = self._kvviz
            if k is not None:
                try:
                    k.arrived_request(request)
                except Exception as exc:  # noqa: BLE001 (a guest: one line, keep serving)
                    failed(self, "add_request", exc)

        def schedule(self, *a, **kw):
            k = self._kvviz
            if k is not None:
                try:
                    k.before_schedule()
                except Exception as exc:  # noqa: BLE001
                    failed(self, "sample", exc)
            out = super().schedule(*a, **kw)
            k = self._kvviz
            if k is not None:
                try:
                    k.after_schedule(out)
                except Exception as exc:  # noqa: BLE001
                    failed(self, "schedule", exc)
            return out

        def _handle_blocked_waiting_request(self, request):  # each waiting request it tries
            k = self._kvviz
            if k is not None and not k.hooked:
                try:
                    k.waiting_reached()
                except Exception as exc:  # noqa: BLE001
                    failed(self, "schedule", exc)
            return super()._handle_blocked_waiting_request(request)

        def update_from_output(self, *a, **kw):
            out = super().update_from_output(*a, **kw)
            k = self._kvviz
            if k is not None and not self.has_requests():  # run dry: the last state, until
                try:  # the next step
                    k.sample()
                except Exception as exc:  # noqa: BLE001
                    failed(self, "sample", exc)
            return out

        def _preempt_request(self, request, *a, **kw):
            k = self._kvviz  # the victim, before vLLM frees its table
            if k is not None:
                try:
                    k.preempted(request)
                except Exception as exc:  # noqa: BLE001
                    failed(self, "preempt", exc)
            return super()._preempt_request(request, *a, **kw)

        def _free_request(self, request, *a, **kw):
            k = self._kvviz
            if k is not None:
                try:
                    k.finished(request)
                except Exception as exc:  # noqa: BLE001
                    failed(self, "finish", exc)
            return super()._free_request(request, *a, **kw)

    KvvizBlocks.__name__ = KvvizBlocks.__qualname__ = f"KvvizBlocks{base.__name__}"
    return KvvizBlocks
