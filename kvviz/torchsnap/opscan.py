"""A pass over a pickle's opcodes, before anything is built, that bounds what building costs.

The C unpickler itself is a loop, but the objects it builds are not all harmless to build:
putting a tuple into a dict or a set hashes it, and hashing a tuple recurses in C through its
tuple items with no recursion check. A tuple nested 300,000 deep (a 300 KB file) used as a dict
key overflows the C stack: SIGSEGV, and the process (a dashboard server) is gone. A shallow
tuple DAG built with memo references (t1 = (t0, t0), t2 = (t1, t1), ...) costs 2**depth to hash.

So this pass runs the pickle machine's stack and memo on summaries instead of objects. Each
stack entry is a packed int `cost * _COST + depth`:
  depth: container nesting (0 for a scalar)
  cost:  nodes visited to hash it (1 + the items' costs for a tuple; 1 for anything else,
         since a frozenset caches its hash and a list/dict/set cannot be hashed)
A mutable container (list, dict, set) is a negative entry ~i naming cells[i], so that items
added after it was memoized count for every later memo reference to it. Its depth is what it
held when it was put into its parent (only its own depth, not its ancestors', grows later);
the hashing hazard follows tuples only, which are immutable, so that bound is exact.

Refused: nesting deeper than max_depth, hashing work over `len(data) + HASH_SLACK` nodes in
total, more than max_objects objects, calls (REDUCE, NEWOBJ, OBJ), persistent ids, out-of-band
buffers, memo indices that no pickle writer uses. The pass stops at the first opcode that asks
for a global (GLOBAL, STACK_GLOBAL, INST, EXT*): the restricted loader refuses exactly there,
naming it, so nothing after it is ever built. Costs one Python loop iteration per opcode.
"""
from __future__ import annotations

import struct
from array import array

from kvviz.torchsnap.errors import PickleLimitError, SnapshotFormatError, UnsafePickleError

MAX_DEPTH = 200  # a torch snapshot nests ~8 deep (dict > list > dict > list > dict > ...)
MAX_OBJECTS = 100_000_000
HASH_SLACK = 1_000_000
_COST = 1 << 16  # depth lives in the low 16 bits; max_depth must stay below it
_COST_CAP = 1 << 40
_SCALAR = _COST  # cost 1, depth 0

# opcodes that push one scalar, by how their argument is read
_FIXED = {ord("J"): 4, ord("K"): 1, ord("M"): 2, ord("G"): 8, ord("N"): 0, 0x88: 0, 0x89: 0}
_SIZED = {ord("T"): ("<I", 4), ord("U"): ("<B", 1), ord("X"): ("<I", 4), ord("B"): ("<I", 4),
          ord("C"): ("<B", 1), 0x8C: ("<B", 1), 0x8D: ("<Q", 8), 0x8E: ("<Q", 8),
          0x96: ("<Q", 8), 0x8A: ("<B", 1), 0x8B: ("<i", 4)}
_LINE = frozenset(b"FILSV")
_GLOBALS = frozenset(b"ci\x93\x82\x83\x84")  # the loader's find_class refuses these
_CALLS = {ord("R"): "REDUCE", 0x81: "NEWOBJ", 0x92: "NEWOBJ_EX", ord("o"): "OBJ"}
_MEMO_ARG = {ord("h"): ("<B", 1), ord("j"): ("<I", 4), ord("q"): ("<B", 1),
             ord("r"): ("<I", 4)}


class _Scan:
    def __init__(self, data: bytes, name: str, max_depth: int, max_objects: int) -> None:
        if not 0 < max_depth < _COST:
            raise ValueError(f"max_depth must be in [1, {_COST}), got {max_depth}")
        self.data, self.name = data, name
        self.max_depth, self.max_objects = max_depth, max_objects
        self.cells = array("q")  # packed entries of mutable containers
        self.memo: list[int] = []
        self.sparse_memo: dict[int, int] = {}
        self.hash_budget = len(data) + HASH_SLACK
        self.objects = 0

    def fail(self, what: str, pos: int, kind: type[Exception] = PickleLimitError):
        raise kind(f"{self.name}: {what} (at byte {pos})")

    def value(self, e: int) -> int:
        return self.cells[~e] if e < 0 else e

    def container(self, items: list[int], pos: int) -> tuple[int, int]:
        """(depth, cost) of a container holding items."""
        depth, cost = 0, 1
        for e in items:
            v = self.cells[~e] if e < 0 else e
            d = v % _COST
            if d > depth:
                depth = d
            cost += v // _COST
        depth += 1
        if depth > self.max_depth:
            self.fail(f"pickle nests deeper than {self.max_depth} levels", pos)
        return depth, min(cost, _COST_CAP)

    def hashed(self, keys: list[int], pos: int) -> None:
        for e in keys:
            if e >= 0:
                self.hash_budget -= e // _COST
        if self.hash_budget < 0:
            self.fail("hashing this pickle's tuples would take too long (memo-shared tuples "
                      "used as keys or set members)", pos)

    def new_cell(self, items: list[int], pos: int) -> int:
        depth = self.container(items, pos)[0] if items else 1
        self.cells.append(_COST + depth)
        return ~(len(self.cells) - 1)

    def grow(self, target: int, items: list[int], pos: int) -> None:
        if target < 0 and items:
            depth = self.container(items, pos)[0]
            v = self.cells[~target]
            if depth > v % _COST:
                self.cells[~target] = _COST + depth

    def memo_put(self, idx: int, e: int, pos: int) -> None:
        if idx == len(self.memo):
            self.memo.append(e)
        elif idx < len(self.memo):
            self.memo[idx] = e
        elif idx <= len(self.data):
            self.sparse_memo[idx] = e
        else:
            self.fail(f"memo index {idx} out of range", pos, SnapshotFormatError)

    def memo_get(self, idx: int, pos: int) -> int:
        if idx < len(self.memo):
            return self.memo[idx]
        if idx in self.sparse_memo:
            return self.sparse_memo[idx]
        self.fail(f"pickle is corrupt (memo key {idx} not found)", pos, SnapshotFormatError)


def scan_pickle(data: bytes, *, name: str = "pickle", max_depth: int = MAX_DEPTH,
                max_objects: int = MAX_OBJECTS) -> None:
    """Raise PickleLimitError, UnsafePickleError or SnapshotFormatError when building `data`
    would nest deeper than max_depth, hash without bound, call something, or is malformed.
    Returns None when the restricted loader may run it. Iterative; memory O(memo entries)."""
    s = _Scan(data, name, max_depth, max_objects)
    bad = SnapshotFormatError
    n, pos = len(data), 0
    stack: list[int] = []
    meta: list[list[int]] = []
    unpack = struct.unpack_from
    objects = 0
    memo, cells = s.memo, s.cells
    while True:
        if pos >= n:
            s.fail("pickle is truncated (no STOP opcode)", pos, bad)
        op = data[pos]
        at = pos
        pos += 1
        if op == 0x8C:  # SHORT_BINUNICODE, the commonest opcode of a snapshot
            if pos >= n:
                s.fail("pickle is truncated", at, bad)
            pos += 1 + data[pos]
            stack.append(_SCALAR)
            objects += 1
        elif op == 0x94:  # MEMOIZE
            if not stack:
                s.fail("pickle is corrupt (MEMOIZE on an empty stack)", at, bad)
            memo.append(stack[-1])
        # fast paths for what a snapshot is made of; the general branches below agree with them
        elif op == 0x68 and pos < n and data[pos] < len(memo):  # BINGET
            stack.append(memo[data[pos]])
            pos += 1
        elif op == 0x7D or op == 0x5D:  # EMPTY_DICT, EMPTY_LIST: a cell of depth 1
            cells.append(_SCALAR + 1)
            stack.append(~(len(cells) - 1))
            objects += 1
        elif op == 0x28 and len(meta) < max_depth:  # MARK
            meta.append(stack)
            stack = []
        elif (op == 0x75 or op == 0x65) and meta and meta[-1] and meta[-1][-1] < 0 \
                and stack.count(_SCALAR) == len(stack):
            # SETITEMS / APPENDS of scalars into a dict/list cell: its depth stays >= 1
            if op == 0x75:
                s.hash_budget -= len(stack) // 2
                if s.hash_budget < 0:
                    s.hashed([], at)
            stack = meta.pop()
        elif op in _SIZED:
            fmt, w = _SIZED[op]
            if pos + w > n:
                s.fail("pickle is truncated", at, bad)
            size = unpack(fmt, data, pos)[0]
            if size < 0:
                s.fail("pickle is corrupt (negative length)", at, bad)
            pos += w + size
            if pos > n:
                s.fail("pickle is truncated", at, bad)
            stack.append(_SCALAR)
            objects += 1
        elif op in _MEMO_ARG:
            fmt, w = _MEMO_ARG[op]
            if pos + w > n:
                s.fail("pickle is truncated", at, bad)
            idx = unpack(fmt, data, pos)[0]
            pos += w
            if op in (0x68, 0x6A):  # BINGET, LONG_BINGET
                stack.append(s.memo_get(idx, at))
            elif not stack:
                s.fail("pickle is corrupt (PUT on an empty stack)", at, bad)
            else:
                s.memo_put(idx, stack[-1], at)
        elif op in _FIXED:
            pos += _FIXED[op]
            stack.append(_SCALAR)
            objects += 1
        elif op == 0x28:  # MARK: opens a container, so it counts as a level
            meta.append(stack)
            stack = []
            if len(meta) > max_depth:
                s.fail(f"pickle nests deeper than {max_depth} levels", at)
        elif op in (0x75, 0x65, 0x90, 0x73, 0x61):  # SETITEMS APPENDS ADDITEMS SETITEM APPEND
            if op in (0x73, 0x61):
                if len(stack) < (3 if op == 0x73 else 2):
                    s.fail("pickle is corrupt (stack underflow)", at, bad)
                items = stack[-2:] if op == 0x73 else stack[-1:]
                del stack[-len(items):]
            else:
                if not meta:
                    s.fail("pickle is corrupt (no MARK)", at, bad)
                items, stack = stack, meta.pop()
                if not stack:
                    s.fail("pickle is corrupt (stack underflow)", at, bad)
            if op in (0x75, 0x73):
                s.hashed(items[0::2], at)
            elif op == 0x90:
                s.hashed(items, at)
            s.grow(stack[-1], items, at)
        elif op in (0x7D, 0x5D, 0x8F):  # EMPTY_DICT EMPTY_LIST EMPTY_SET
            stack.append(s.new_cell([], at))
            objects += 1
        elif op in (0x29, 0x85, 0x86, 0x87, 0x74, 0x91, 0x6C, 0x64):
            # EMPTY_TUPLE TUPLE1-3 TUPLE FROZENSET LIST DICT
            if op in (0x74, 0x91, 0x6C, 0x64):
                if not meta:
                    s.fail("pickle is corrupt (no MARK)", at, bad)
                items, stack = stack, meta.pop()
            else:
                k = op - 0x84 if op != 0x29 else 0
                if len(stack) < k:
                    s.fail("pickle is corrupt (stack underflow)", at, bad)
                items = stack[len(stack) - k:]
                del stack[len(stack) - k:]
            if op == 0x6C:
                stack.append(s.new_cell(items, at))
            elif op == 0x64:
                s.hashed(items[0::2], at)
                stack.append(s.new_cell(items, at))
            else:
                depth, cost = s.container(items, at)
                if op == 0x91:
                    s.hashed(items, at)
                    cost = 1
                stack.append(cost * _COST + depth)
            objects += 1
        elif op in _LINE or op in (0x70, 0x67):  # text scalars, PUT, GET
            end = data.find(b"\n", pos)
            if end < 0:
                s.fail("pickle is truncated", at, bad)
            line, pos = data[pos:end], end + 1
            if op in _LINE:
                stack.append(_SCALAR)
                objects += 1
                continue
            if not line.isdigit() or len(line) > 19:
                s.fail("pickle is corrupt (bad memo index)", at, bad)
            if op == 0x67:
                stack.append(s.memo_get(int(line), at))
            elif not stack:
                s.fail("pickle is corrupt (PUT on an empty stack)", at, bad)
            else:
                s.memo_put(int(line), stack[-1], at)
        elif op == 0x95:  # FRAME: only framing, the opcodes inside are read as usual
            pos += 8
        elif op == 0x80:  # PROTO
            pos += 1
        elif op == 0x30:  # POP
            if stack:
                stack.pop()
            elif meta:
                stack = meta.pop()
            else:
                s.fail("pickle is corrupt (stack underflow)", at, bad)
        elif op == 0x31:  # POP_MARK
            if not meta:
                s.fail("pickle is corrupt (no MARK)", at, bad)
            stack = meta.pop()
        elif op == 0x32:  # DUP
            if not stack:
                s.fail("pickle is corrupt (stack underflow)", at, bad)
            stack.append(stack[-1])
        elif op == 0x62:  # BUILD: pops the state; can only fail on builtin types
            if len(stack) < 2:
                s.fail("pickle is corrupt (stack underflow)", at, bad)
            stack.pop()
        elif op == 0x2E:  # STOP
            return
        elif op in _GLOBALS:
            return
        elif op in _CALLS:
            s.fail(f"refused {_CALLS[op]}: the pickle calls something, and a memory snapshot "
                   "calls nothing", at, UnsafePickleError)
        elif op in (0x50, 0x51):
            s.fail("refused persistent id", at, UnsafePickleError)
        elif op in (0x97, 0x98):
            s.fail("pickle refers to out-of-band buffers", at, bad)
        else:
            s.fail(f"pickle is corrupt (unknown opcode {op:#04x})", at, bad)
        if objects > max_objects:
            s.fail(f"pickle holds more than {max_objects:,} objects", at)
