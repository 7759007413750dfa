"""One vocabulary for every page, the CLI and the docs: each term defined once, here.

Pure data (no imports): the dashboard shows TERMS as its glossary (app.py's sidebar) and takes
its labels and help texts from here; docs/DASHBOARD.md lists the same words, and
docs/FORMAT.md ("Metrics") defines the stored ones. Every share is a share of the lane's
capacity (its slots) unless its name says otherwise: tail waste, for one, is a share of
capacity on every page.
"""
from __future__ import annotations

# term -> one-line definition, in the order a newcomer meets them
TERMS: dict[str, str] = {
    "slot": "the KV cache of one token (one position of one sequence)",
    "block": "the unit an allocator hands out: a paged allocator's block of N slots, or one "
             "slot in a contiguous allocator",
    "cell": "one square of a block map: one block (one slot in a contiguous lane) when the "
            "range shown is small enough, else a run of them; the map's subtitle says how "
            "many (\"1 cell = 16 slots\"), and zooming in re-bins down to one",
    "capacity": "all slots of a lane; every share below is a share of capacity",
    "used": "slots holding KV written by a live sequence (a shared block counted once)",
    "slack": "slots allocated to a sequence but not written yet = reserved + internal "
             "(the split needs the final lengths: Compare and the CLI show it)",
    "reserved": "slack that will be written before its sequence ends",
    "internal": "slack that will never be written (held beyond the final length): internal "
                "fragmentation",
    "free": "slots no sequence holds",
    "cached": "free blocks that still hold a prefix a new request can reuse",
    "hole": "a run of adjacent free slots",
    "largest hole": "the longest run of adjacent free slots: the largest request a "
                    "contiguous allocator can place now",
    "external fragmentation index": "1 - largest hole / free: 0 = all free slots in one "
                                    "hole, near 1 = free slots shattered into small holes. "
                                    "Paged lanes show 0 by design: any free block serves any "
                                    "request, so their free blocks never need to be adjacent "
                                    "(their waste is tail waste, not holes)",
    "tail waste": "unwritten slots in sequences' partly written last blocks, as a share of "
                  "capacity",
    "shared prefix": "a block read by several sequences at once (refcount > 1): their common "
                     "prompt, stored once",
    "shared savings": "slots that prefix sharing saved: for each shared block, (refcount - 1) "
                      "x its written slots",
    "prefix hit rate": "tokens served from the prefix cache / tokens looked up, over every "
                       "admission, a preempted request's resumption included (vLLM's "
                       "prefix_cache_hits / prefix_cache_queries)",
    "CAPACITY": "admission failure: fewer free slots in total than the request needs "
                "(rounded to blocks): a true out-of-memory",
    "FRAGMENTATION": "admission failure: enough free slots in total, but no hole large "
                     "enough (free >= need > largest hole)",
    "POLICY": "admission failure: memory would serve, the scheduler refused (batch limit, "
              "watermark)",
    "preemption": "a running sequence evicted to make room; it is recomputed later",
    "memory-pressure step": "an engine step whose head-of-line request was refused for "
                            "memory (CAPACITY or FRAGMENTATION), or that preempted",
}


def define(term: str) -> str:
    """The one-line definition of `term` (KeyError names an unknown term)."""
    try:
        return TERMS[term]
    except KeyError:
        raise KeyError(f"not a glossary term: {term!r}") from None


def markdown() -> str:
    """The glossary as a Markdown list (the terms are ours: no outside text)."""
    return "\n".join(f"- **{term}**: {text}" for term, text in TERMS.items())
