"""The twin: a node's request stream through vLLM's rule, at its own settings and at others.

`whatif(source, alternatives)` runs the baseline (the node's own settings) and every
alternative on the machine's cores, and returns the table and the self-check.
"""
from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from kvviz.twin.configs import Alternatives
from kvviz.twin.memory import fit_workers
from kvviz.twin.runner import ConfigRun, default_workers, run_all
from kvviz.twin.selfcheck import RecordSpec, compare, no_node_run
from kvviz.twin.settings import NodeSettings
from kvviz.twin.source import Source
from kvviz.twin.table import rows

__all__ = ["Alternatives", "NodeSettings", "Source", "WhatIf", "plan", "whatif"]


@dataclass(frozen=True)
class WhatIf:
    source: Source
    self_check: dict
    runs: list[ConfigRun]  # runs[0]: the baseline
    table: list[dict]  # one row per run, `change` against the baseline
    note: str | None = None  # fewer workers than asked, for memory (twin/memory.py)


def plan(source: Source, alt: Alternatives) -> list[NodeSettings]:
    """The baseline, then each alternative; every one checked before anything runs."""
    configs = [source.settings, *alt.expand(source.settings, source.stream.model)]
    for c in configs:  # the engine's own checks (e.g. the budget without chunked prefill)
        c.engine(source.stream.step_ms, source.stream.max_seq_len)
    return configs


def whatif(source: Source, alt: Alternatives, workers: int | None = None,
           progress: Callable[[int, int], None] | None = None,
           memory_budget_mb: float | None = None) -> WhatIf:
    """KvvizError before anything runs when the largest configuration does not fit memory
    (the budget, else 80% of what the machine has available); fewer workers when they all
    would not (WhatIf.note says so)."""
    configs = plan(source, alt)
    workers = min(len(configs), workers or default_workers())
    workers, note = fit_workers(configs, len(source.stream.workload), workers,
                                memory_budget_mb)
    node = source.node_record
    spec = None if node is None else RecordSpec(node.seq_ids, frozenset(node.tables),
                                                node.has("scheduled"))
    runs = run_all(source.stream, configs, workers, progress, record_first=spec)
    if node is None:
        check = no_node_run(source.name)
    else:
        check = compare(node, runs[0].record)
    return WhatIf(source, check, runs, rows(runs), note)
