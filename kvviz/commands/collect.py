"""`kvviz collect` (= `python -m collectors`): run the engine live and record it to a store.

The flags are kvviz/settings/flags.py's and build one validated CollectorConfig; the run itself
is the collector's entry point, collectors/launch.py's `run`, found by name at run time (ENTRY):
collectors sits above kvviz and imports it, so kvviz never imports collectors.
"""
from __future__ import annotations

import argparse
import importlib

from kvviz.settings import flags as collector_flags

HELP = ("run the engine live (real KV tensors or sim) and record block maps, metrics, events; "
        "every lane is scheduled by vLLM 0.32's rules, contiguous lanes are kvviz's own model")
ENTRY = "collectors.launch"  # its run(CollectorConfig) -> exit code records one run

add_arguments = collector_flags.add_arguments


def run(args: argparse.Namespace) -> int:
    settings = collector_flags.settings_of(args)
    return importlib.import_module(ENTRY).run(settings)
