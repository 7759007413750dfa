"""vLLM 0.32's scheduling rule and the KV pools it drives, written once and compiled (numba).

Modules, one per concept: state (the struct-of-arrays state), records (how the compiled
code holds it: records of borrowed arrays), keys (prefix block hashes), pool (vLLM's paged
block pool; hashmap: its hash -> block table), placement (contiguous first-fit / best-fit /
buddy), kv (the
memory interface the scheduler calls), scheduler (schedule / update), shares, events,
advance (the step loop), direct (the memory verbs for a pool driven without the scheduler),
build (the records from a workload), view (the read verbs over a pool's arrays), steplog
(advance's loop logging each step's lists and block tables: the twin's self-check). The Python
handles: kvviz/engine/lane.py (a lane), kvviz/engine/kvpool.py (a pool driven directly).

Compiled code is cached (cache=True) in one directory per version of these sources:
numba checks only the calling function's own file, and a compiled caller holds its callees'
code, so a cache keyed by all of them is never stale. The directory is $NUMBA_CACHE_DIR/
kvviz-rule-<digest> when NUMBA_CACHE_DIR is set, else $XDG_CACHE_HOME (~/.cache)/kvviz/
numba/rule-<digest>; where it cannot be written, numba compiles in memory each run
(`python -m kvviz warm` compiles once ahead). NUMBA_DISABLE_JIT=1 runs the same source as
plain Python (a debugger and coverage read it).
"""
from __future__ import annotations

import hashlib
import os
from pathlib import Path

from numba.core import config as _config


def _sources_digest() -> str:
    h = hashlib.sha256()
    for f in sorted(Path(__file__).parent.glob("*.py")):
        h.update(f.name.encode() + f.read_bytes())
    return h.hexdigest()[:16]


def cache_dir() -> Path:
    """Where the compiled rule is cached for this version of its sources."""
    digest = _sources_digest()
    env = os.environ.get("NUMBA_CACHE_DIR")
    if env:
        return Path(env) / f"kvviz-rule-{digest}"
    base = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache")
    return base / "kvviz" / "numba" / f"rule-{digest}"


_config.CACHE_DIR = str(cache_dir())
