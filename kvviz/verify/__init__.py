"""A standalone verifier of kvviz recordings: `python -m kvviz.verify RUN.db [--json]`.

Written from docs/FORMAT.md alone. It imports only the standard library, numpy and its own
modules (tests/verify/test_verify.py checks this), so it shares no code with the writer: it
decodes every block map and event, checks the plane invariants, recomputes every stored
metric and replays the events against every sample. Exit 0: clean; 1: mismatches (listed);
2: not a readable recording.
"""
from kvviz.verify.core import Report, Unreadable, verify

__all__ = ["Report", "Unreadable", "verify"]
