"""Plain-sentence diagnoses of rebuilt prefix caches (pure functions of a CacheModel).

Each answers a question people ask about real nodes: why is the prefix hit rate 0 although
prompts share a system prompt (a block larger than the shared prefix; different hash seeds
across instances), which prefixes are evicted and recomputed (churn), and what the stream
itself lost (sequence gaps, restarts).
"""
from __future__ import annotations

from collections.abc import Sequence

from kvviz.node.kvevents.model import CacheModel, Forest

CHURN_MIN_RESTORES = 3  # a block stored again this many times after eviction is "churning"
MIN_SHARED_TOKENS = 4  # a common start shorter than this is not called a shared prefix


def shared_prefix_tokens(roots: Sequence[tuple]) -> tuple[int, int]:
    """(longest token prefix shared by >= 2 distinct first blocks, how many blocks share it)."""
    uniq = sorted(set(roots))
    best, count = 0, 0
    for a, b in zip(uniq, uniq[1:]):
        n = 0
        for x, y in zip(a, b):
            if x != y:
                break
            n += 1
        if n > best:
            best, count = n, 2
        elif n == best and n:
            count += 1
    return best, count


def _block_too_large(name: str, f: Forest) -> str | None:
    if len(f.root_tokens) < 2 or not f.block_size:
        return None
    shared, count = shared_prefix_tokens(list(f.root_tokens.values()))
    if MIN_SHARED_TOKENS <= shared < f.block_size:
        return (f"{name}: {count} distinct first blocks start with the same {shared} tokens, but "
                f"a block holds {f.block_size} tokens; only full blocks are cached, so this "
                f"shared prefix is never reused (its hit rate is 0). A block size of {shared} or "
                f"less, or a longer common prompt, would let requests share it.")
    return None


def _churn(name: str, f: Forest) -> str | None:
    hot = {h: n for h, n in f.restores.items() if n >= CHURN_MIN_RESTORES}
    if not hot:
        return None
    total = sum(hot.values())
    worst = max(hot.values())
    what = "1 block was" if len(hot) == 1 else f"{len(hot)} blocks were"
    return (f"{name}: {what} evicted and stored again {CHURN_MIN_RESTORES} times or more "
            f"({total} re-stores in all, at most {worst} for one block): hot prefixes are "
            f"evicted and then recomputed. The cache is smaller than the working set of "
            f"shared prefixes.")


def diagnoses(model: CacheModel, names: dict[int, str], gaps: dict[int, tuple[int, int]] | None
              = None, restarts: dict[int, int] | None = None) -> list[str]:
    """names: stream id -> label; gaps: stream id -> (gaps, lost batches); restarts: count."""
    out: list[str] = []
    for key, f in sorted(model.forests.items()):
        name = names.get(key.stream, f"stream {key.stream}")
        if key.dp_rank or key.group or key.medium != "GPU":
            name += f" (dp rank {key.dp_rank}, {key.medium}, group {key.group})"
        for msg in (_block_too_large(name, f), _churn(name, f)):
            if msg:
                out.append(msg)
        if f.unknown_removals:
            out.append(f"{name}: {f.unknown_removals} removals named blocks that were never "
                       "stored while kvviz listened (it joined late or lost batches).")
    out += _seeds(model, names)
    for sid, (n, lost) in sorted((gaps or {}).items()):
        if n:
            out.append(f"{names.get(sid, sid)}: {n} sequence gaps, {lost} batches lost; the "
                       "rebuilt cache may miss blocks (give --replay to fill gaps).")
    for sid, n in sorted((restarts or {}).items()):
        if n:
            out.append(f"{names.get(sid, sid)}: the publisher restarted {n} times (seq back "
                       "to 0); its cache was rebuilt from the restart on.")
    return out


def _seeds(model: CacheModel, names: dict[int, str]) -> list[str]:
    """Streams whose first blocks hold the same tokens but share no root hash."""
    roots: dict[int, dict[tuple, set]] = {}
    for key, f in model.forests.items():
        by_tok = roots.setdefault(key.stream, {})
        for h, tok in f.root_tokens.items():
            if tok:
                by_tok.setdefault(tok, set()).add(h)
    out = []
    ids = sorted(roots)
    for i, a in enumerate(ids):
        for b in ids[i + 1:]:
            same = roots[a].keys() & roots[b].keys()
            if same and not any(roots[a][t] & roots[b][t] for t in same):
                out.append(f"{names.get(a, a)} and {names.get(b, b)}: {len(same)} first blocks "
                           "hold the same token ids but no root hash is shared, so the two "
                           "instances hash with different seeds (set the same PYTHONHASHSEED / "
                           "hash seed) and a KV-aware router cannot match their prefixes.")
    return out


def overlap(model: CacheModel, streams: Sequence[int]) -> list[list[float]]:
    """Share of stream a's cached blocks also cached by stream b (a row per a, by hash)."""
    sets = {s: set().union(*(f.parent.keys() for _, f in model.of_stream(s))) for s in streams}
    return [[(len(sets[a] & sets[b]) / len(sets[a])) if sets[a] else 0.0 for b in streams]
            for a in streams]
