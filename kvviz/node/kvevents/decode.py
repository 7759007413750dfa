"""Decode one KV-event payload: a msgpack EventBatch in any of the engines' encodings.

Envelope: an array `[ts, events, data_parallel_rank?]` or a map `{"ts", "events",
"data_parallel_rank"?}`. Events: maps tagged by "type" (current vLLM, encoding "map") or tagged
arrays `[tag, field...]` (older vLLM, SGLang, TensorRT-LLM: positional, trailing fields may be
absent; encoding "array"). Positional fields:

    BlockStored       [tag, block_hashes, parent_block_hash, token_ids, block_size, lora_id,
                       medium, lora_name, extra_keys, group_idx, ...]
    BlockRemoved      [tag, block_hashes, medium, group_idx]
    AllBlocksCleared  [tag, medium?]

Block hashes are ints (TensorRT-LLM: 64-bit) or bytes; both are kept as they are (hashable).
An event with an unknown tag or a malformed body becomes an UNKNOWN event holding the raw
object; a payload that is not an EventBatch raises Undecodable. Never anything else: a
payload nested deeper than MAX_DEPTH levels (a real batch has 5 or 6) is Undecodable too,
whether the decoder's own recursion limit or the depth check below stops it.

Memory: the typed path (msgspec Structs, the four well-formed layouts) builds at most about
DECODED_PER_BYTE times the payload in Python objects (2-byte hashes are the worst case;
`extra_keys`, which kvviz does not read, stays undecoded); the generic path, which may build
~260 bytes per payload byte (a msgpack empty array is one byte, a Python list 56), reads only
payloads of at most GENERIC_MAX_BYTES. A larger payload outside the typed layouts is
Undecodable.
"""
from __future__ import annotations

from typing import Any, NamedTuple

import msgspec

STORED, REMOVED, CLEARED, UNKNOWN = 0, 1, 2, 3
KIND_NAMES = ("BlockStored", "BlockRemoved", "AllBlocksCleared", "unknown")
_TAGS = {"BlockStored": STORED, "BlockRemoved": REMOVED, "AllBlocksCleared": CLEARED}
_decoder = msgspec.msgpack.Decoder()
MAX_DEPTH = 32  # containers inside containers; an EventBatch with extra_keys is ~6 deep
GENERIC_MAX_BYTES = 256 << 10  # payloads the generic decoder reads (at most ~75 MB of objects)
DECODED_PER_BYTE = 16  # the typed path's Python objects per payload byte, at most (14 seen)
GENERIC_PER_BYTE = 300  # the generic decoder's, at most (~260 seen: empty arrays)


def decoded_bound(nbytes: int) -> int:
    """The most bytes of Python objects decode() builds for a payload of `nbytes`."""
    return DECODED_PER_BYTE * nbytes + GENERIC_PER_BYTE * min(nbytes, GENERIC_MAX_BYTES)


class Undecodable(ValueError):
    """The payload is not a KV-event batch (the message says why)."""


class Event(NamedTuple):
    kind: int  # STORED | REMOVED | CLEARED | UNKNOWN
    hashes: list  # block hashes (int | bytes), in chain order for STORED
    parent: Any  # STORED: the first block's parent hash or None
    token_ids: list | None  # STORED: the blocks' token ids, when sent
    block_size: int  # STORED: tokens per block (0 when unknown)
    medium: str | None
    group: int  # KV cache group (0 when not sent)
    raw: Any = None  # UNKNOWN: the undecoded object


class DecodedBatch(NamedTuple):
    ts: float
    dp_rank: int | None
    events: list[Event]
    encoding: str  # "map" | "array" | "empty" (no events to tell)
    unknown: int  # events with an unknown tag or a malformed body


def too_deep(obj: Any, limit: int = MAX_DEPTH) -> bool:
    """Whether `obj` nests lists / dicts more than `limit` deep (iterative: no recursion)."""
    todo = [(obj, 1)]
    while todo:
        o, d = todo.pop()
        if isinstance(o, dict):
            items = [*o.keys(), *o.values()]
        elif isinstance(o, (list, tuple)):
            items = o
        else:
            continue
        if d > limit:
            return True
        todo.extend((x, d + 1) for x in items if isinstance(x, (list, tuple, dict)))
    return False


def _hash(h: Any) -> bool:
    return isinstance(h, (int, bytes)) and not isinstance(h, bool)


def _event(kind: int, f: list) -> Event:
    """f: the positional fields after the tag (None for absent trailing ones)."""
    n = len(f)
    hashes = f[0] if n else None
    if not isinstance(hashes, list) or not all(map(_hash, hashes)):
        if kind == CLEARED:
            med = f[0] if n and isinstance(f[0], str) else None
            return Event(CLEARED, [], None, None, 0, med, 0)
        raise TypeError("block_hashes is not a list of ints or bytes")
    if kind == STORED:
        parent = f[1] if n > 1 else None
        if parent is not None and not _hash(parent):
            raise TypeError("parent_block_hash is not an int or bytes")
        tok = f[2] if n > 2 and isinstance(f[2], list) else None
        bs = f[3] if n > 3 and isinstance(f[3], int) else 0
        med = f[5] if n > 5 and isinstance(f[5], str) else None
        grp = f[8] if n > 8 and isinstance(f[8], int) else 0
        if not bs and tok and hashes:
            bs = len(tok) // len(hashes)
        return Event(STORED, hashes, parent, tok, bs, med, grp)
    med = f[1] if n > 1 and isinstance(f[1], str) else None
    grp = f[2] if n > 2 and isinstance(f[2], int) else 0
    return Event(kind, hashes, None, None, 0, med, grp)


_MAP_FIELDS = {
    STORED: ("block_hashes", "parent_block_hash", "token_ids", "block_size", "lora_id",
             "medium", "lora_name", "extra_keys", "group_idx"),
    REMOVED: ("block_hashes", "medium", "group_idx"),
    CLEARED: ("medium",),
}


def decode_event(obj: Any) -> tuple[Event, str | None]:
    """One event object -> (Event, its encoding "map" | "array" | None when unknown)."""
    try:
        if isinstance(obj, dict):
            kind = _TAGS.get(obj.get("type"))  # type: ignore[arg-type]
            if kind is None:
                return Event(UNKNOWN, [], None, None, 0, None, 0, obj), None
            return _event(kind, [obj.get(k) for k in _MAP_FIELDS[kind]]), "map"
        if isinstance(obj, list) and obj and isinstance(obj[0], str):
            kind = _TAGS.get(obj[0])
            if kind is not None:
                return _event(kind, obj[1:]), "array"
    except TypeError:
        pass
    return Event(UNKNOWN, [], None, None, 0, None, 0, obj), None


# ---- the fast path: typed decoding in msgspec (C) for the four well-formed layouts -------------
# Field names follow Event; `name=` gives the wire name of map-form fields. A payload that does
# not fit (an unknown tag, a malformed field, extra positional fields) takes the slow path.
_H = int | bytes


_RENAME = {"hashes": "block_hashes", "parent": "parent_block_hash", "group": "group_idx"}


def _typed(array: bool) -> tuple:
    """The envelope Structs (array, map) of one event form (array_like tagged or "type"-map)."""
    opts: dict = ({"array_like": True} if array else
                  {"tag_field": "type", "rename": _RENAME})
    opt_h = _H | None
    stored = msgspec.defstruct("Stored", [
        ("hashes", list[_H], []), ("parent", opt_h, None), ("token_ids", list[int] | None, None),
        ("block_size", int, 0), ("lora_id", int | None, None), ("medium", str | None, None),
        ("lora_name", str | None, None), ("extra_keys", msgspec.Raw, None),  # skipped unread
        ("group", int, 0)],
        tag="BlockStored", gc=False, **opts)
    removed = msgspec.defstruct("Removed", [
        ("hashes", list[_H], []), ("medium", str | None, None), ("group", int, 0)],
        tag="BlockRemoved", gc=False, **opts)
    cleared = msgspec.defstruct("Cleared", [("medium", str | None, None)],
                                tag="AllBlocksCleared", gc=False, **opts)
    stored.kind, removed.kind, cleared.kind = STORED, REMOVED, CLEARED
    cleared.hashes, cleared.group = [], 0
    ev = list[stored | removed | cleared]  # type: ignore[valid-type]
    env = [("ts", float), ("events", ev), ("data_parallel_rank", int | None, None)]
    return (msgspec.defstruct("ArrayEnv", env, array_like=True, gc=False),
            msgspec.defstruct("MapEnv", env, gc=False))


_FAST = [(msgspec.msgpack.Decoder(env), "array" if arr else "map")
         for arr in (False, True) for env in _typed(arr)]


def _fast(payload: bytes) -> DecodedBatch | None:
    for i, (dec, enc) in enumerate(_FAST):
        try:
            b = dec.decode(payload)
        except (msgspec.ValidationError, msgspec.DecodeError):
            continue
        except RecursionError:
            raise Undecodable(f"nested deeper than {MAX_DEPTH} levels") from None
        if i:  # try the layout that worked first next time
            _FAST.insert(0, _FAST.pop(i))
        if b.data_parallel_rank is not None and b.data_parallel_rank < 0:
            return None
        _fixup(b.events)
        return DecodedBatch(b.ts, b.data_parallel_rank, b.events,
                            enc if b.events else "empty", 0)
    return None


def _fixup(events: list) -> None:
    """Block size from the token ids where a BlockStored does not send it."""
    for e in events:
        if e.kind == STORED and not e.block_size and e.token_ids and e.hashes:
            e.block_size = len(e.token_ids) // len(e.hashes)


def decode(payload: bytes) -> DecodedBatch:
    """Decode one payload; raises Undecodable when it is not an EventBatch. Typed events
    (the fast path) carry the same attributes as Event."""
    fast = _fast(payload)
    if fast is not None:
        return fast
    if len(payload) > GENERIC_MAX_BYTES:
        raise Undecodable(f"a payload of {len(payload)} bytes in none of the typed EventBatch "
                          f"layouts (the generic decoder reads at most {GENERIC_MAX_BYTES})")
    try:
        obj = _decoder.decode(payload)
    except (msgspec.DecodeError, ValueError, TypeError) as exc:
        raise Undecodable(f"not msgpack ({exc})") from None
    except RecursionError:
        raise Undecodable(f"nested deeper than {MAX_DEPTH} levels") from None
    if too_deep(obj):
        raise Undecodable(f"nested deeper than {MAX_DEPTH} levels")
    if isinstance(obj, dict):
        ts, events, rank = obj.get("ts"), obj.get("events"), obj.get("data_parallel_rank")
    elif isinstance(obj, list) and len(obj) >= 2:
        ts, events = obj[0], obj[1]
        rank = obj[2] if len(obj) > 2 else None
    else:
        raise Undecodable(f"not an EventBatch (a msgpack {type(obj).__name__})")
    if not isinstance(ts, (int, float)) or isinstance(ts, bool) or not isinstance(events, list):
        raise Undecodable("not an EventBatch (no float ts and events list)")
    if rank is not None and (not isinstance(rank, int) or isinstance(rank, bool)):
        rank = None
    out: list[Event] = []
    unknown = 0
    encoding = "empty"
    for e in events:
        ev, enc = decode_event(e)
        if enc is None:
            unknown += 1
        elif encoding == "empty":
            encoding = enc
        out.append(ev)
    return DecodedBatch(float(ts), rank, out, encoding, unknown)


def pieces(events: list, most: int):
    """The events in order as lists of at most about `most` block hashes each, a larger
    BlockStored or BlockRemoved split in chain order (a piece of a BlockStored has the
    previous piece's last hash as its parent, and its blocks' token ids): applying the
    pieces one after another is applying the batch, with a pause between them."""
    out: list = []
    n = 0
    for ev in events:
        hs = ev.hashes
        if len(hs) <= most:
            out.append(ev)
            n += len(hs) or 1
        else:
            stored = ev.kind == STORED  # else REMOVED (the only other kind with hashes)
            bs, tok = (ev.block_size, ev.token_ids) if stored else (0, None)
            for i in range(0, len(hs), most):
                if out:
                    yield out
                    out, n = [], 0
                part = tok[i * bs:(i + most) * bs] if tok is not None and bs else None
                parent = (hs[i - 1] if i else ev.parent) if stored else None
                yield [Event(ev.kind, hs[i:i + most], parent, part, bs, ev.medium, ev.group)]
            continue
        if n >= most:
            yield out
            out, n = [], 0
    if out:
        yield out
