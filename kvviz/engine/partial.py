"""`partial` events: the running requests a step leaves short of their known tokens.

Under vLLM's rule a step gives each running request some tokens to compute (its plan:
`Plan.starts` computed before, `Plan.counts` scheduled now). By default a request computes
all its known tokens (the rest of its prompt, or its one new token) and so samples one token.
Two things break the default, both only with chunked prefill or a binding token budget: a
prefill chunk that leaves part of the prompt for later steps, and a running request the
budget left without tokens. Each such (request, step) is one `partial` event carrying the
slots the request has written at the end of the step; it samples nothing in that step.
With these, a reader re-derives every length and tokens_generated exactly (docs/FORMAT.md).
"""
from __future__ import annotations

import numpy as np


def short_of_known(ids: np.ndarray, computed: np.ndarray,
                   known: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Of the running requests `ids` after a step's plan (computed = starts + counts for those
    it scheduled, unchanged for the others), those whose computed tokens stay below their
    known tokens: (their ids, their computed tokens), in `ids`' order."""
    have = computed[ids]
    short = have < known[ids]
    if not short.any():
        return ids[:0], have[:0]
    return ids[short], have[short]
