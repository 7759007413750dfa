"""What the real-vLLM tier checked, with this run's numbers (printed at the end of the session).
A module of its own so that the conftest and the tests share one dict whatever name pytest
imports the conftest under."""
from __future__ import annotations

SUMMARY: dict = {}
