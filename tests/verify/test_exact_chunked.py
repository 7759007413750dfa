"""A recording made under vLLM's defaults (chunked prefill on) with a token budget that binds
re-derives exactly from docs/FORMAT.md. The reader below is written from that document alone:
sqlite3 and numpy, nothing imported from kvviz (the recording is made by `kvviz collect` in a
child process). It recomputes every sample's tokens_generated and running from the events,
and every live sequence's written slots, which it compares with the block map."""
from __future__ import annotations

import json
import os
import sqlite3
import subprocess
import sys
import zlib
from pathlib import Path

import numpy as np
import pytest

ROOT = Path(__file__).resolve().parents[2]
CHUNK_COLS = ("event_id", "t", "step", "seq_id", "need_tokens", "free_tokens")


@pytest.fixture(scope="module")
def budget_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Long prompts, outputs long enough that many run at once, 32 tokens a step: prompts
    take many steps, admitted with whatever the running decodes leave of the budget. The pool
    also runs short (paged: preemption by recompute, a resumed prompt is prefilled again)."""
    d = tmp_path_factory.mktemp("exact")
    rng = np.random.default_rng(7)
    rows = [f"{i * 0.004:.3f},{rng.integers(60, 400)},{rng.integers(20, 90)}" for i in range(48)]
    (d / "long.csv").write_text("arrival_s,prompt_tokens,output_tokens\n" + "\n".join(rows))
    out = d / "budget.db"
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    done = subprocess.run(
        [sys.executable, "-m", "kvviz", "collect", "--mode", "sim", "--quiet", "--trace",
         str(d / "long.csv"), "--lane", "paged:16", "--lane", "contiguous:first-fit:exact",
         "--capacity-tokens", "1536", "--max-seq-len", "1024", "--max-num-seqs", "64",
         "--max-num-batched-tokens", "32", "--steps-per-s", "500", "--hz", "100",
         "--out", str(out)], cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    return out


# ---- the reader: docs/FORMAT.md, written out -----------------------------------------------

def events(db: sqlite3.Connection, lane: str) -> list[tuple]:
    """(event_id, step, kind, seq_id, need_tokens) of one lane: rows and cols-zlib-1 chunks."""
    out = [tuple(r) for r in db.execute("SELECT event_id, step, kind, seq_id, need_tokens "
                                        "FROM events WHERE lane = ?", (lane,))]
    for kind, n, enc, data in db.execute("SELECT kind, n, encoding, data FROM event_chunks "
                                         "WHERE lane = ?", (lane,)):
        assert enc == "cols-zlib-1"
        raw = zlib.decompress(data)
        c = {name: np.frombuffer(raw, "<f8" if name == "t" else "<i8", n, 8 * n * k)
             for k, name in enumerate(CHUNK_COLS)}
        out += zip(c["event_id"].tolist(), c["step"].tolist(), [kind] * n,
                   c["seq_id"].tolist(), c["need_tokens"].tolist())
    return sorted(out)


def inflate(blob: bytes) -> bytes:
    parts = []
    while blob:
        d = zlib.decompressobj()
        parts.append(d.decompress(blob))
        blob = d.unused_data
    return b"".join(parts)


def stored(raw: bytes, spec: dict, count: int) -> np.ndarray:
    dtype = np.dtype(spec["dtype"]).newbyteorder("<")
    planes, pos = [], 0
    for k in range(dtype.itemsize):
        if k in spec.get("nibbles", []):
            b = np.frombuffer(raw, np.uint8, (count + 1) // 2, pos)
            planes.append(np.stack((b & 15, b >> 4), axis=1).ravel()[:count])
        else:
            b = np.frombuffer(raw, np.uint8, count, pos)
            planes.append(b)
        pos += b.size
    return np.stack(planes, axis=1).copy().view(dtype).ravel().astype(np.int64) + spec["offset"]


def plane(rec: dict, name: str) -> np.ndarray:
    layout = json.loads(rec["layout"])
    assert rec["encoding"] == "rle-zlib-2"
    arrays, raw = layout["arrays"], inflate(rec[name])
    spec = arrays[name]
    if layout["mode"] == "joint":
        lengths = stored(inflate(rec["lengths"]), arrays["lengths"], rec["runs"])
        return np.repeat(stored(raw, spec, rec["runs"]), lengths)
    if spec["runs"] is None:
        v = stored(raw, spec, rec["num_blocks"])
        if "delta_first" in spec:
            v[0] = spec["delta_first"]
            v = np.cumsum(v)
        return v
    r, lspec = spec["runs"], spec["lengths"]
    cut = (np.dtype(lspec["dtype"]).itemsize - len(lspec.get("nibbles", []))) * r + len(
        lspec.get("nibbles", [])) * ((r + 1) // 2)
    return np.repeat(stored(raw[cut:], spec, r), stored(raw[:cut], lspec, r))


def final_seq(rec: dict) -> np.ndarray:
    spec = json.loads(rec["layout"])["arrays"]["final_seq"]
    raw = inflate(rec["final_seq"])
    count = spec.get("count", len(raw) // np.dtype(spec["dtype"]).itemsize)
    return stored(raw, spec, count)


class Timeline:
    """FORMAT.md, "The token timeline": per live sequence its state after some step."""

    def __init__(self) -> None:
        self.live: dict[int, list[int]] = {}  # seq -> [step, length, known]
        self.sampled = 0  # by sequences no longer live
        self.shorts = 0  # partial events

    def _default_steps(self, seq: int, upto: int) -> int:
        st = self.live[seq]
        d = max(upto - st[0], 0)
        if d:
            st[:] = [upto, st[2] + d - 1, st[2] + d]
        return d

    def apply(self, step: int, kind: str, seq: int, need: int) -> None:
        if kind == "admitted":
            self.live[seq] = [step - 1, 0, need]
        elif kind == "partial":
            self.sampled += self._default_steps(seq, step - 1)
            st = self.live[seq]
            self.shorts += 1
            st[0], st[1] = step, need
        elif kind == "finished":
            self.sampled += self._default_steps(seq, step)
            del self.live[seq]
        elif kind == "preempted":
            self.sampled += self._default_steps(seq, step - 1)
            del self.live[seq]

    def at(self, step: int) -> tuple[int, dict[int, int], int]:
        """(tokens sampled, length of each live sequence, live ones mid-prefill) after step."""
        tokens, lengths, mid = self.sampled, {}, 0
        for seq, (s, length, known) in self.live.items():
            d = max(step - s, 0)
            tokens += d
            lengths[seq] = known + d - 1 if d else length
            mid += int(not d and length < known - 1)
        return tokens, lengths, mid


def test_every_counter_and_length_re_derives_exactly(budget_run: Path) -> None:
    db = sqlite3.connect(f"file:{budget_run}?mode=ro", uri=True)
    db.row_factory = sqlite3.Row
    (meta,) = db.execute("SELECT meta FROM run").fetchone()
    meta = json.loads(meta)
    assert meta["engine"]["enable_chunked_prefill"] is True
    assert db.execute("SELECT format_version FROM run").fetchone()[0] >= 5
    seen = {"samples": 0, "maps": 0, "mid_prefill": 0, "naive_wrong": 0}
    for lane in [ln["name"] for ln in meta["lanes"]]:
        evs, k, line = events(db, lane), 0, Timeline()
        naive_done, naive_live = 0, {}  # the same events, partial ones ignored
        for s in db.execute("SELECT sample_id, step, tokens_generated, running FROM samples "
                            "WHERE lane = ? ORDER BY sample_id", (lane,)).fetchall():
            while k < len(evs) and evs[k][1] <= s["step"]:
                _, step, kind, seq, need = evs[k]
                line.apply(step, kind, seq, need)
                if kind == "admitted":
                    naive_live[seq] = step
                elif kind in ("finished", "preempted"):
                    naive_done += step - naive_live.pop(seq) + (kind == "finished")
                k += 1
            tokens, lengths, mid = line.at(s["step"])
            assert s["tokens_generated"] == tokens, (lane, s["step"])
            assert s["running"] == len(lengths), (lane, s["step"])
            naive = naive_done + sum(s["step"] - a + 1 for a in naive_live.values())
            seen["naive_wrong"] += int(naive != tokens)
            seen["mid_prefill"] += mid
            seen["samples"] += 1
            rec = db.execute("SELECT * FROM blockmaps WHERE sample_id = ?",
                             (s["sample_id"],)).fetchone()
            if rec is None:
                continue
            rec = dict(rec)
            owner, filled = plane(rec, "owner"), plane(rec, "filled")
            assert sorted(final_seq(rec).tolist()) == sorted(lengths), (lane, s["step"])
            for seq, length in lengths.items():  # no prefix sharing: a sequence's own blocks
                assert int(filled[owner == seq].sum()) == length, (lane, s["step"], seq)
            seen["maps"] += 1
        assert line.shorts, lane  # prompts computed in chunks
        seen["preempted"] = seen.get("preempted", 0) + sum(e[2] == "preempted" for e in evs)
    assert seen["samples"] > 50 and seen["maps"] > 50
    assert seen["mid_prefill"] > 0  # samples caught prompts part-way
    assert seen["preempted"] > 0  # and resumed prompts prefilled again
    assert seen["naive_wrong"] > 0  # without the partial events the counters come out wrong


def test_the_kvviz_verifier_checks_it_exactly(budget_run: Path) -> None:
    from kvviz.verify import verify

    rep = verify(budget_run)
    assert rep.mismatch_count == 0, rep.mismatches[:10]
