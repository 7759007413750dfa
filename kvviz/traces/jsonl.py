"""JSON-lines traces: one object per line, each checked field by field with its line number."""
from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass

import numpy as np

from kvviz.traces.rows import Checks, Rows, Sink


@dataclass(frozen=True)
class JsonSpec:
    fmt: str
    time: str  # keys
    prompt: str
    output: str
    time_unit_s: float = 1.0  # Mooncake: milliseconds
    group: str | None = None  # kvviz: optional prefix_group
    hashes: str | None = None  # Mooncake: hash_ids of 512-token blocks
    hash_block: int = 0  # tokens per hash id; 0 = given per row as "hash_block" (kvviz)
    relative: bool = True

    @property
    def checks(self) -> Checks:
        return Checks(self.time, self.prompt, self.output, monotonic=self.relative)


class _Bad(Exception):
    def __init__(self, key: str, why: str) -> None:
        super().__init__(why)
        self.key, self.why = key, why


def _number(obj: dict, key: str, whole: bool) -> float:
    if key not in obj:
        raise _Bad(key, "missing")
    v = obj[key]
    if isinstance(v, bool) or not isinstance(v, (int, float)) or (whole and not isinstance(v, int)):
        raise _Bad(key, f"not a {'whole ' if whole else ''}number: {str(v)[:40]!r}")
    if whole and abs(v) > 1 << 62:
        raise _Bad(key, "out of range")
    if isinstance(v, int) and abs(v) > 1 << 62:  # a time: past float range -> OverflowError
        try:
            v = float(v)
        except OverflowError:
            raise _Bad(key, f"out of range (an integer of {len(str(v))} digits)") from None
    return v


class JsonReader:
    def __init__(self, spec: JsonSpec, sink: Sink, name: str) -> None:
        self.spec, self.sink, self.name = spec, sink, name
        self.t0: float | None = None

    def read(self, chunks: Iterator[tuple[int, str]]) -> None:
        for line_no, text in chunks:
            lines = text.split("\n")
            nums = [i for i, ln in enumerate(lines) if ln.strip()]
            if not nums:
                continue
            objs = None
            try:
                objs = list(map(json.loads, [lines[i] for i in nums]))
            except (ValueError, RecursionError):
                pass
            rows = self._fast(line_no, nums, objs) if objs is not None else None
            self.sink.take(rows or self._rows(line_no, lines, nums, objs))
            if self.sink.done:
                return

    def _fast(self, line_no: int, nums: list[int], objs: list) -> Rows | None:
        """Whole-chunk columns when every line is a well-typed object (Mooncake, or kvviz rows
        without hash ids); None sends the chunk through the per-line checks."""
        try:
            return self._columns(line_no, nums, objs)
        except OverflowError:  # a number past int64: the per-line checks name it
            return None

    def _columns(self, line_no: int, nums: list[int], objs: list) -> Rows | None:
        sp = self.spec
        if set(map(type, objs)) != {dict}:
            return None
        try:
            t = [o[sp.time] for o in objs]
            p = [o[sp.prompt] for o in objs]
            out = [o[sp.output] for o in objs]
        except KeyError:
            return None
        if not (set(map(type, p)) | set(map(type, out)) <= {int}
                and set(map(type, t)) <= {int, float}):
            return None
        r = Rows(np.asarray(t, np.float64) * sp.time_unit_s, np.asarray(p, np.int64),
                 np.asarray(out, np.int64), line=np.asarray(nums, np.int64) + line_no)
        if sp.group is not None:
            g = [o.get(sp.group) for o in objs]
            if not set(map(type, g)) <= {int, type(None)}:
                return None
            r.group = np.asarray([-1 if x is None else x for x in g], np.int64)
        if sp.hashes is not None:
            if not sp.hash_block:
                return None if any(sp.hashes in o for o in objs) else self._relative(r)
            chains = [o.get(sp.hashes, []) for o in objs]
            if set(map(type, chains)) != {list}:
                return None
            flat = [h for c in chains for h in c]
            if not set(map(type, flat)) <= {int}:
                return None
            ids = np.asarray(flat, np.int64) if flat else np.zeros(0, np.int64)
            lens = np.fromiter(map(len, chains), np.int64, len(chains))
            if ids.size and (ids.min() < 0 or ids.max() >= 1 << 62):
                return None
            if (lens > np.maximum(1, -(-r.prompt // sp.hash_block))).any():
                return None
            self.sink.chain_block = sp.hash_block
            r.chains = chains
        return self._relative(r)

    def _relative(self, r: Rows) -> Rows:
        if self.spec.relative and r.t.size:
            if self.t0 is None:
                self.t0 = float(r.t[0])
            r.t = r.t - self.t0
        return r

    def _rows(self, line_no: int, lines: list[str], nums: list[int], objs: list | None) -> Rows:
        sp = self.spec
        vals: list[tuple] = []
        chains: list[list[int]] = []
        good: list[int] = []
        bad: list[tuple[int, str, str]] = []
        for k, i in enumerate(nums):
            at = line_no + i
            if objs is not None:
                obj = objs[k]
            else:
                try:
                    obj = json.loads(lines[i])
                except ValueError as exc:
                    col = getattr(exc, "colno", None)
                    where = "" if col is None else f" at column {col}"
                    bad.append((at, "", f"not valid JSON{where} ({getattr(exc, 'msg', exc)})"))
                    continue
                except RecursionError:
                    bad.append((at, "", "JSON nested too deeply"))
                    continue
            if not isinstance(obj, dict):
                bad.append((at, "", "expected a JSON object"))
                continue
            try:
                t = _number(obj, sp.time, whole=False) * sp.time_unit_s
                p = int(_number(obj, sp.prompt, whole=True))
                o = int(_number(obj, sp.output, whole=True))
                g = -1
                if sp.group is not None and obj.get(sp.group) is not None:
                    g = int(_number(obj, sp.group, whole=True))
                if sp.hashes is not None:
                    chains.append(self._chain(obj, p))
            except _Bad as b:
                bad.append((at, b.key, b.why))
                continue
            vals.append((float(t), p, o, g))
            good.append(at)
        arr = np.array(vals, dtype=np.float64).reshape(-1, 4)
        t = arr[:, 0]
        if sp.relative and t.size:
            if self.t0 is None:
                self.t0 = float(t[0])
            t = t - self.t0
        return Rows(t, arr[:, 1].astype(np.int64), arr[:, 2].astype(np.int64),
                    line=np.asarray(good, np.int64), group=arr[:, 3].astype(np.int64),
                    chains=chains if sp.hashes is not None else None, bad=bad)

    def _chain(self, obj: dict, prompt: int) -> list[int]:
        sp = self.spec
        ids = obj.get(sp.hashes, [])
        if not isinstance(ids, list):
            raise _Bad(sp.hashes, "expected a list of block ids")
        if not ids:
            return ids
        block = sp.hash_block
        if not block:
            block = obj.get("hash_block")
            if isinstance(block, bool) or not isinstance(block, int) or not 1 <= block <= 1 << 20:
                raise _Bad("hash_block", "expected a whole number of tokens in [1, 2**20]")
            if self.sink.chain_block not in (0, block):
                raise _Bad("hash_block", f"{block} differs from {self.sink.chain_block} "
                                         "on earlier rows")
        self.sink.chain_block = block
        if len(ids) > max(1, -(-prompt // block)):
            raise _Bad(sp.hashes, f"{len(ids)} block ids for {prompt} prompt tokens "
                                  f"(one per {block}-token block)")
        for h in ids:
            if isinstance(h, bool) or not isinstance(h, int) or not 0 <= h < 1 << 62:
                raise _Bad(sp.hashes, f"block id {str(h)[:40]!r} is not a whole number "
                                      "in [0, 2**62)")
        return ids
