"""Read an untrusted pickle without running anything in it.

`pickle.load` executes code: GLOBAL/STACK_GLOBAL (and the copyreg EXT opcodes) fetch any
importable callable by name, and REDUCE/NEWOBJ/BUILD call it. The restricted unpickler
below admits no global at all: `find_class` refuses every name, and `persistent_load`
refuses every persistent id. What can still be built is what the opcodes make natively:
None, bool, int, float, str, bytes, bytearray, list, tuple, dict, set, frozenset. A torch
memory snapshot is made of nothing else. The loaded tree is walked once more to confirm that.

Then the structure is checked (parse_snapshot) and turned into typed records (Snapshot).
"""
from __future__ import annotations

import io
import os
import pickle
import stat
from dataclasses import dataclass
from pathlib import Path

from kvviz.torchsnap.errors import SnapshotFormatError, UnsafePickleError
from kvviz.torchsnap.opscan import scan_pickle

DEFAULT_MAX_BYTES = 256 * 1024 * 1024
PROTO = 0x80  # the PROTO opcode that opens every protocol >= 2 pickle
ALLOWED_PROTOCOLS = range(2, 6)
ALLOWED_TYPES = (type(None), bool, int, float, str, bytes, bytearray, list, tuple, dict, set,
                 frozenset)
_CONTAINERS = (list, tuple, dict, set, frozenset)


def _shown(text: str, limit: int = 80) -> str:
    """Names from the file, made safe to print on one line (no control characters)."""
    return str(text)[:limit].encode("unicode_escape").decode("ascii")


class _RestrictedUnpickler(pickle.Unpickler):
    def find_class(self, module: str, name: str):
        raise UnsafePickleError(
            f"refused to load global {_shown(module)}.{_shown(name)}: a memory snapshot holds "
            "only builtin containers and scalars, so this file is not one (or it was tampered "
            "with)")

    def persistent_load(self, pid: object):
        raise UnsafePickleError(f"refused persistent id {str(pid)[:80]!r}")


def read_capped(path: str | os.PathLike, max_bytes: int = DEFAULT_MAX_BYTES) -> bytes:
    """The file's bytes, refusing (before reading them) files larger than max_bytes."""
    p = Path(path)
    st = p.stat()
    if not stat.S_ISREG(st.st_mode):  # a FIFO or a device would block or never end
        raise SnapshotFormatError(f"{p}: not a regular file")
    size = st.st_size
    if size > max_bytes:
        raise SnapshotFormatError(
            f"{p}: {size:,} bytes is over the {max_bytes:,}-byte limit for a snapshot")
    with p.open("rb") as fh:
        data = fh.read(max_bytes + 1)  # the file may have grown since stat()
    if len(data) > max_bytes:
        raise SnapshotFormatError(f"{p}: larger than the {max_bytes:,}-byte limit")
    return data


def safe_loads(data: bytes, *, name: str = "pickle") -> object:
    """Unpickle `data` with no global admitted. Raises UnsafePickleError or SnapshotFormatError.

    `name` only labels messages (a file name, "upload").
    """
    if len(data) < 2 or data[0] != PROTO:
        raise SnapshotFormatError(f"{name}: not a pickle (protocol 2-5 pickles start with 0x80)")
    if data[1] not in ALLOWED_PROTOCOLS:
        raise SnapshotFormatError(f"{name}: pickle protocol {data[1]} not supported (2-5)")
    scan_pickle(data, name=name)  # bounds nesting and hashing before anything is built
    buf = io.BytesIO(data)
    try:
        obj = _RestrictedUnpickler(buf).load()
    except UnsafePickleError as exc:
        raise UnsafePickleError(f"{name}: {exc}") from None
    except (EOFError, pickle.UnpicklingError) as exc:
        what = "truncated" if isinstance(exc, EOFError) or "truncated" in str(exc) else "corrupt"
        raise SnapshotFormatError(f"{name}: pickle is {what} ({exc})") from None
    except RecursionError:
        raise SnapshotFormatError(f"{name}: pickle nests too deeply") from None
    except MemoryError:
        raise SnapshotFormatError(f"{name}: pickle needs more memory than is available") from None
    except Exception as exc:  # any other malformed-stream error (stack underflow, bad types)
        raise SnapshotFormatError(f"{name}: corrupt pickle ({type(exc).__name__}: {exc})") from exc
    if buf.tell() != len(data):
        raise SnapshotFormatError(f"{name}: {len(data) - buf.tell()} bytes after the pickle end")
    check_builtin_tree(obj, name=name)
    return obj


def check_builtin_tree(obj: object, *, name: str = "pickle") -> None:
    """Confirm every reachable object is an ALLOWED_TYPES instance (exact type, no subclass).

    Iterative, and each container is visited once, so shared or cyclic references built with
    the pickle memo cost no more than the file's size.
    """
    seen: set[int] = set()
    stack = [obj]
    while stack:
        x = stack.pop()
        t = type(x)
        if t not in ALLOWED_TYPES:
            raise UnsafePickleError(f"{name}: refused object of type {t.__module__}.{t.__name__}")
        if t in _CONTAINERS:
            if id(x) in seen:
                continue
            seen.add(id(x))
            if t is dict:
                stack.extend(x.keys())
                stack.extend(x.values())
            else:
                stack.extend(x)


# --- structure: what a torch.cuda.memory._snapshot() dict must look like ---

ALLOCATED = "active_allocated"
PENDING_FREE = ("active_pending_free", "active_awaiting_free")  # freed, stream not yet synced
INACTIVE = "inactive"
STATES = (ALLOCATED, *PENDING_FREE, INACTIVE)
MIN_BLOCK = 512  # the allocator's rounding unit: every block boundary is a multiple of it


@dataclass(frozen=True)
class SnapBlock:
    offset: int  # bytes from the segment start
    size: int
    requested_size: int | None
    state: str

    @property
    def waste(self) -> int:
        known = self.state == ALLOCATED and self.requested_size is not None
        return self.size - self.requested_size if known else 0


@dataclass(frozen=True)
class SnapSegment:
    address: int
    total_size: int
    segment_type: str  # "small" (<= 1 MB requests) or "large"; "?" when absent
    device: int | None
    blocks: tuple[SnapBlock, ...]  # by offset


@dataclass(frozen=True)
class Snapshot:
    segments: tuple[SnapSegment, ...]  # by (device, address)
    trace_entries: int


def load_snapshot(path: str | Path, *, max_bytes: int = DEFAULT_MAX_BYTES) -> Snapshot:
    """Read, safely unpickle and validate a `torch.cuda.memory._dump_snapshot` file."""
    return loads_snapshot(read_capped(path, max_bytes), name=str(path), max_bytes=max_bytes)


def loads_snapshot(data: bytes, *, name: str = "upload",
                   max_bytes: int = DEFAULT_MAX_BYTES) -> Snapshot:
    if len(data) > max_bytes:
        raise SnapshotFormatError(f"{name}: {len(data):,} bytes is over the {max_bytes:,} limit")
    return parse_snapshot(safe_loads(data, name=name), name=name)


def _field(d: dict, key: str, where: str, *, kind: type = int, required: bool = True):
    if key not in d:
        if required:
            raise SnapshotFormatError(f"{where}: missing {key!r}")
        return None
    v = d[key]
    if type(v) is not kind or (kind is int and not 0 <= v < 1 << 64):
        want = "an int in [0, 2**64)" if kind is int else kind.__name__
        raise SnapshotFormatError(f"{where}.{key}: expected {want}, got {_describe(v)}")
    return v


def _describe(v: object) -> str:
    """A short, always-cheap description (the value may be huge or nested 100k deep)."""
    if type(v) is int:
        return repr(v) if v.bit_length() <= 64 else f"an int of {v.bit_length()} bits"
    if type(v) in (str, float, bool, type(None)):
        return repr(v)[:60]
    return f"a {type(v).__name__}"


def parse_snapshot(obj: object, *, name: str = "snapshot") -> Snapshot:
    """Validate the structure; raises SnapshotFormatError naming the first bad field."""
    if type(obj) is not dict or type(obj.get("segments")) is not list:
        raise SnapshotFormatError(f"{name}: not a memory snapshot (no 'segments' list)")
    seen: set[int] = set()  # the pickle memo could reuse one dict many times: refuse that
    segments = []
    for i, seg in enumerate(obj["segments"]):
        where = f"{name}: segments[{i}]"
        if type(seg) is not dict or id(seg) in seen:
            raise SnapshotFormatError(f"{where}: expected a distinct dict")
        seen.add(id(seg))
        address = _field(seg, "address", where)
        total = _field(seg, "total_size", where)
        raw_blocks = _field(seg, "blocks", where, kind=list)
        blocks = []
        for j, b in enumerate(raw_blocks):
            bw = f"{where}.blocks[{j}]"
            if type(b) is not dict or id(b) in seen:
                raise SnapshotFormatError(f"{bw}: expected a distinct dict")
            seen.add(id(b))
            size = _field(b, "size", bw)
            state = _field(b, "state", bw, kind=str)
            if state not in STATES:
                raise SnapshotFormatError(
                    f"{bw}.state: expected one of {STATES}, got {_describe(state)}")
            req = _field(b, "requested_size", bw, required=False)
            if req is not None and req > size and state != INACTIVE:
                raise SnapshotFormatError(f"{bw}: requested_size {req} > size {size}")
            addr = _field(b, "address", bw, required=False)
            blocks.append((addr, size, req, state))
        segments.append(SnapSegment(
            address=address, total_size=total, blocks=_layout(blocks, address, total, where),
            segment_type=seg.get("segment_type") if type(seg.get("segment_type")) is str else "?",
            device=seg.get("device") if type(seg.get("device")) is int else None,
        ))
    traces = obj.get("device_traces")
    n_traces = sum(len(t) for t in traces if type(t) is list) if type(traces) is list else 0
    segments.sort(key=lambda s: (s.device if s.device is not None else -1, s.address))
    return Snapshot(segments=tuple(segments), trace_entries=n_traces)


def _layout(blocks: list, address: int, total: int, where: str) -> tuple[SnapBlock, ...]:
    """Blocks by offset; without addresses they are taken to follow each other."""
    out, cursor = [], 0
    has_addr = all(a is not None for a, *_ in blocks)
    for addr, size, req, state in blocks:
        offset = addr - address if has_addr else cursor
        out.append(SnapBlock(offset, size, req if state != INACTIVE else None, state))
        cursor += size
    out.sort(key=lambda b: b.offset)
    end = 0
    for b in out:
        if b.offset < end:
            raise SnapshotFormatError(f"{where}: blocks overlap or lie before the segment")
        end = b.offset + b.size
    if end > total:
        raise SnapshotFormatError(f"{where}: blocks end at {end}, past total_size {total}")
    return tuple(out)
