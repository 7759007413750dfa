"""BlockKeys (kvviz/engine/tokens.py): every block's key, computed in pieces as requests grow,
equals the chain its definition gives, block by block: key k hashes key k-1, the trace's
chain ids its tokens fall in (none past the chain), the request id past the chain, its end."""
from __future__ import annotations

from kvviz.core.config import WorkloadConfig
from kvviz.core.workload import generate
from kvviz.engine.tokens import BlockKeys


def _reference(w, r: int, bs: int, n: int) -> list[tuple[int, int]]:
    ptr, ids, cb = w.chains()
    a, b = int(ptr[r]), int(ptr[r + 1])
    cover = min((b - a) * cb, int(w.prompt[r]))
    out, prev = [], 0
    for k in range(n):
        s, e = k * bs, (k + 1) * bs
        hi = min(e, cover)
        chunk = tuple(ids[a + s // cb:a + (hi - 1) // cb + 1].tolist()) if s < hi else ()
        prev = hash((prev, chunk, -1 if e <= cover else r, e))
        out.append((prev, e))
    return out


def test_keys_grown_in_pieces_equal_their_definition():
    for share, tokens in ((0.0, 16), (0.6, 100), (1.0, 40)):
        w = generate(WorkloadConfig("sharegpt-like", num_requests=60, rate=10.0, seed=3,
                                    prefix_share=share, prefix_tokens=tokens))
        for bs in (1, 3, 16, 64):
            keys = BlockKeys(w, bs)
            for r in range(len(w)):
                n = int(w.prompt[r] + w.output[r]) // bs
                want = _reference(w, r, bs, n)
                for part in (1, 2, 7, n):
                    assert keys.upto(r, min(part, n))[:min(part, n)] == want[:min(part, n)]
                assert BlockKeys(w, bs).chain(r, n) == want


def test_equal_keys_mean_equal_prefixes():
    w = generate(WorkloadConfig("sharegpt-like", num_requests=80, rate=10.0, seed=1,
                                prefix_share=0.9, prefix_tokens=64))
    keys = BlockKeys(w, 16)
    first = {}
    for r in range(len(w)):
        n = int(w.prompt[r] + w.output[r]) // 16
        for k, key in enumerate(keys.upto(r, n)[:n]):
            first.setdefault(key, (r, k))
            assert first[key][1] == k  # a key names one block position
    assert len(first) < sum(int(w.prompt[r] + w.output[r]) // 16 for r in range(len(w)))
