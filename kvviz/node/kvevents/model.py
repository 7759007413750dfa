"""The prefix cache of a serving node, rebuilt from its KV-event stream.

One Forest per (stream, dp rank, medium, group): the cached blocks as hash -> parent hash,
tokens per block, when each was stored. The stream has no physical block ids and no request
ids, so the forest is exactly what the events say: BlockStored adds (a hash already cached is a
duplicate), BlockRemoved drops (an unknown hash is counted, never fatal), AllBlocksCleared
empties. A removed block's children keep their parent hash (they show as orphans).

A lost batch (a seq the stream skipped that no replay filled) may have removed any block
cached before it: those blocks become *unconfirmed* and are not counted; one is counted
again when the stream re-announces it (vLLM 0.32 sends BlockStored for a prefix-cache hit),
and a removal of one is a known removal. So the counts are of blocks whose store was seen
since the last loss, or that the stream has since proven live: never more than the node holds.

Memory: at most MAX_CACHED_BLOCKS cached blocks and MAX_FORESTS forests per model (about
0.4 KB per block); a BlockStored past either is not applied and its blocks are counted in
`over_cap` (the model is then a lower bound: a node with more cached blocks than that is
larger than any this view is built for). Roots' token ids: ROOT_TOKENS_KEPT roots and
ROOT_TOKEN_IDS_KEPT ids for all forests together (RootsKept). Per forest, not per model:
EVICTIONS_KEPT evicted hashes and LIFETIMES_KEPT lifetimes, so many forests that churn
keep more (docs/RELIABILITY.md, "KV-event streams"); the per-second timeline grows with
the run.

Invariants (tests/kvevents/test_model.py, below the caps):
  cached_tokens == sum(ntok[h] for h in parent); nkids[p] == #{cached h : parent[h] == p};
  the forest after any event sequence equals one rebuilt from scratch.
"""
from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Sequence
from typing import Any, NamedTuple

from kvviz.node.kvevents.decode import CLEARED, REMOVED, STORED, Event
from kvviz.node.kvevents.shape import ForestShape

LIFETIMES_KEPT = 100_000  # most recent block lifetimes kept per forest
ROOT_TOKENS_KEPT = 50_000  # first blocks whose token ids are kept (for seed/prefix diagnoses)
ROOT_TOKEN_IDS_KEPT = 1 << 20  # token ids those keep, all forests of a model together (~40 MB)
EVICTIONS_KEPT = 1_000_000  # evicted hashes remembered; past this, those evicted once go
MAX_CACHED_BLOCKS = 1_000_000  # per model, all forests together (~400 MB)
MAX_FORESTS = 1024  # (stream, dp rank, medium, group) combinations per model


class ForestKey(NamedTuple):
    stream: int
    dp_rank: int
    medium: str
    group: int


class RootsKept:
    """What the forests of one model may still keep of their roots' token ids, together:
    ROOT_TOKENS_KEPT roots and ROOT_TOKEN_IDS_KEPT token ids (a block may claim millions)."""

    def __init__(self) -> None:
        self.roots, self.tokens = ROOT_TOKENS_KEPT, ROOT_TOKEN_IDS_KEPT


class Forest(ForestShape):
    def __init__(self, index_tokens: bool = False, kept: RootsKept | None = None) -> None:
        self.index_tokens = index_tokens  # keep by_tokens (prefix_hit_tokens); costs ~40%
        self.kept = RootsKept() if kept is None else kept  # shared by a model's forests
        self.parent: dict[Any, Any] = {}  # cached hash -> parent hash (None: a root)
        self.ntok: dict[Any, int] = {}
        self.stored_t: dict[Any, float] = {}
        self.nkids: dict[Any, int] = {}  # parent hash -> cached children (> 0 only)
        self.cached_tokens = 0
        self.stored = self.removed = self.duplicates = self.unknown_removals = 0
        self.cleared = 0
        self.evictions: dict[Any, int] = defaultdict(int)  # hash -> times removed
        self.restores: dict[Any, int] = defaultdict(int)  # hash -> stored again after removal
        self.root_tokens: dict[Any, tuple] = {}  # root hash -> its token ids
        self.lifetimes: list[float] = []
        self.block_size = 0
        self.by_tokens: dict[tuple, Any] = {}  # (parent hash, hash of the block's tokens) -> h
        self.unconfirmed: dict[Any, tuple[Any, int, float]] = {}  # h -> (parent, ntok, t)
        self._tok_key: dict[Any, tuple] = {}  # h -> its by_tokens key

    def store(self, hashes: list, parent: Any, token_ids: list | None, block_size: int,
              t: float) -> None:
        bs = block_size or self.block_size
        if block_size:
            self.block_size = block_size
        p = parent
        cached, ntok, stored_t, nkids = self.parent, self.ntok, self.stored_t, self.nkids
        self.stored += len(hashes)
        for i, h in enumerate(hashes):
            if h in cached:
                self.duplicates += 1
            elif h in self.unconfirmed:  # re-announced: live after all
                self.duplicates += 1
                _p, n, t0 = self.unconfirmed.pop(h)
                cached[h], ntok[h], stored_t[h] = p, n, t0
                nkids[p] = nkids.get(p, 0) + 1
                self.cached_tokens += n
            else:
                if h in self.evictions:
                    self.restores[h] += 1
                cached[h] = p
                ntok[h] = bs
                stored_t[h] = t
                nkids[p] = nkids.get(p, 0) + 1
                self.cached_tokens += bs
                kept = self.kept
                if p is None and isinstance(token_ids, list) and kept.roots > 0 and \
                        bs <= kept.tokens:
                    toks = tuple(token_ids[i * bs:(i + 1) * bs])
                    if all(type(x) is int for x in toks):  # a publisher may send anything
                        self.root_tokens[h] = toks
                        kept.roots -= 1
                        kept.tokens -= len(toks)
                if self.index_tokens and isinstance(token_ids, list) and bs and \
                        len(token_ids) >= (i + 1) * bs:
                    try:  # a publisher may send anything as token ids
                        key = (p, hash(tuple(token_ids[i * bs:(i + 1) * bs])))
                    except TypeError:
                        key = None
                    if key is not None:
                        self.by_tokens[key] = h
                        self._tok_key[h] = key
            p = h

    def remove(self, hashes: list, t: float) -> None:
        for h in hashes:
            p = self.parent.pop(h, _MISSING)
            if p is _MISSING:
                doubted = self.unconfirmed.pop(h, None)
                if doubted is None:
                    self.unknown_removals += 1
                else:
                    self.removed += 1
                    self.evictions[h] += 1
                    self._tok_key.pop(h, None)
                continue
            self.removed += 1
            self.evictions[h] += 1
            if len(self.evictions) > EVICTIONS_KEPT:
                self._forget_cold()
            k = self.nkids[p] - 1
            if k:
                self.nkids[p] = k
            else:
                del self.nkids[p]
            self.cached_tokens -= self.ntok.pop(h)
            key = self._tok_key.pop(h, None)
            if key is not None and self.by_tokens.get(key) == h:
                del self.by_tokens[key]
            life = t - self.stored_t.pop(h)
            if len(self.lifetimes) >= LIFETIMES_KEPT:
                del self.lifetimes[: LIFETIMES_KEPT // 2]
            self.lifetimes.append(life)

    def _forget_cold(self) -> None:
        """Keep the memory of a day-long stream bounded: forget blocks evicted only once."""
        hot = {h: n for h, n in self.evictions.items() if n > 1}
        self.evictions = defaultdict(int, hot)
        self.restores = defaultdict(int, {h: n for h, n in self.restores.items() if h in hot})

    def doubt(self) -> None:
        """A batch was lost: every cached block becomes unconfirmed (module doc)."""
        for h, p in self.parent.items():
            self.unconfirmed[h] = (p, self.ntok[h], self.stored_t[h])
        self.parent.clear()
        self.ntok.clear()
        self.stored_t.clear()
        self.nkids.clear()
        self.cached_tokens = 0

    def clear(self) -> None:
        self.cleared += 1
        self.unconfirmed.clear()
        self.parent.clear()
        self.ntok.clear()
        self.stored_t.clear()
        self.nkids.clear()
        self.by_tokens.clear()
        self._tok_key.clear()
        self.cached_tokens = 0

    def prefix_hit_tokens(self, prompt: Sequence[int], block_size: int = 0) -> int:
        """Prompt tokens a vLLM-style engine finds cached (needs index_tokens): the longest
        chain of full blocks of `prompt` that the stream says are cached (matched by token
        ids, from the root), at most (len(prompt) - 1) // block_size blocks (the last prompt
        token is always computed).
        Needs streams that send token ids; LoRA / multimodal extra keys are not modelled."""
        bs = block_size or self.block_size
        if not bs:
            return 0
        p, n = None, 0
        for i in range((len(prompt) - 1) // bs):
            h = self.by_tokens.get((p, hash(tuple(prompt[i * bs:(i + 1) * bs]))))
            if h is None or h not in self.parent:
                break
            p, n = h, n + 1
        return n * bs


_MISSING = object()


class CacheModel:
    """All forests of a set of streams, fed event by event (or batch by batch)."""

    def __init__(self, index_tokens: bool = False) -> None:
        """index_tokens: index blocks by their token ids, for prefix_hit_tokens (off by
        default: it costs ~40% of the model's events per second)."""
        self.index_tokens = index_tokens
        self.forests: dict[ForestKey, Forest] = {}
        self.timeline: dict[tuple[int, int], list[int]] = defaultdict(lambda: [0, 0])
        self.t_first: float | None = None
        self._last_seq: dict[int, int] = {}  # per stream: the last seq noted
        self.n_cached = 0  # cached blocks in all forests
        self.over_cap = 0  # stored blocks not applied: past MAX_CACHED_BLOCKS / MAX_FORESTS
        self._kept = RootsKept()  # roots' token ids, for all forests together

    def forest(self, key: ForestKey) -> Forest | None:
        """The forest of `key`, created on first use (None past MAX_FORESTS)."""
        f = self.forests.get(key)
        if f is None:
            if len(self.forests) >= MAX_FORESTS:
                return None
            f = self.forests[key] = Forest(self.index_tokens, self._kept)
        return f

    def apply(self, stream: int, dp_rank: int | None, events: Iterable[Event], t: float) -> None:
        """Apply one batch's events received at time t (seconds, any origin)."""
        rank = dp_rank or 0
        if self.t_first is None:
            self.t_first = t
        sec = int(t - self.t_first)
        line = self.timeline[(stream, sec)]
        near: dict[tuple, Forest] = {}  # (medium, group) -> forest, for this batch
        for ev in events:
            kind = ev.kind
            if kind == STORED or kind == REMOVED:
                mg = (ev.medium, ev.group)
                f = near.get(mg)
                if f is None:
                    f = near[mg] = self.forest(ForestKey(stream, rank, ev.medium or "GPU",
                                                         ev.group))
                if f is None or kind == STORED and \
                        self.n_cached + len(ev.hashes) > MAX_CACHED_BLOCKS:
                    if kind == STORED:
                        self.over_cap += len(ev.hashes)
                    continue
                before = len(f.parent)
                if kind == STORED:
                    f.store(ev.hashes, ev.parent, ev.token_ids, ev.block_size, t)
                    line[0] += len(ev.hashes)
                else:
                    f.remove(ev.hashes, t)
                    line[1] += len(ev.hashes)
                self.n_cached += len(f.parent) - before
            elif kind == CLEARED:
                for k, f in self.forests.items():
                    if k.stream == stream and k.dp_rank == rank and (
                            ev.medium is None or k.medium == ev.medium):
                        self.n_cached -= len(f.parent)
                        f.clear()

    def note_seq(self, stream: int, seq: int) -> bool:
        """Note the sequence number of the stream's next batch; True (and restart()) when it
        does not follow the last one noted: its publisher restarted. A seq past the next one
        is a loss (lost()): the batches between were never applied."""
        last = self._last_seq.get(stream)
        self._last_seq[stream] = seq
        if last is not None and seq <= last:
            self.restart(stream)
            return True
        if last is not None and seq > last + 1:
            self.lost(stream)
        return False

    def lost(self, stream: int) -> None:
        """Batches of the stream were lost: its cached blocks become unconfirmed."""
        for k, f in self.forests.items():
            if k.stream == stream:
                self.n_cached -= len(f.parent)
                f.doubt()

    def unconfirmed_blocks(self, stream: int) -> int:
        """Blocks cached before a lost batch and not re-announced since (not counted)."""
        return sum(len(f.unconfirmed) for _, f in self.of_stream(stream))

    def restart(self, stream: int) -> None:
        """The stream's publisher restarted: its caches are empty (not a cleared event)."""
        for k, f in self.forests.items():
            if k.stream == stream:
                self.n_cached -= len(f.parent)
                f.clear()
                f.cleared -= 1

    def of_stream(self, stream: int) -> list[tuple[ForestKey, Forest]]:
        return [(k, f) for k, f in self.forests.items() if k.stream == stream]

    def cached_blocks(self, stream: int) -> int:
        return sum(len(f.parent) for _, f in self.of_stream(stream))

    def prefix_hit_tokens(self, stream: int, prompt: Sequence[int], dp_rank: int = 0) -> int:
        """The prefix hit (tokens) the stream's GPU cache (group 0) predicts for `prompt`."""
        f = self.forests.get(ForestKey(stream, dp_rank, "GPU", 0))
        return 0 if f is None else f.prefix_hit_tokens(prompt)

    def cached_tokens(self, stream: int) -> int:
        return sum(f.cached_tokens for _, f in self.of_stream(stream))
