"""The block stream's messages (docs/NODE.md, "The block stream"): ZeroMQ multipart
`[topic, seq, payload]`, topic `kvviz-blocks`, seq an 8-byte big-endian counter of the
messages the plugin produced (a message dropped on the way leaves a hole in it), payload one
msgpack map. Arrays travel as little-endian bytes named by their dtype below.

A payload is a "sample": the pool's geometry (`pool`), the engine step it was taken after,
vLLM's own free-block count, the per-block `refcnt` (int32) and `hashed` (uint8: holds a
prefix hash) planes indexed by vLLM block id, the block tables of the requests holding
blocks (`seqs`, `computed`, `final`, `lens`, `base` and `blocks`, int64/int32: `blocks` holds
each table's ids from its `base`-th on, back to back), the running and
waiting queues with the head's reason, and every event and request-log entry since the
previous message. The request log's hash chains travel as vLLM's bytes (each request's joined,
with their width); where the pool says `int_hashes` (vLLM's KV events send 64-bit ints, its
default), decode() turns them into the KV-event stream's form, 8 little-endian bytes a hash
(int_rows_le), so the engine's thread never converts them.

Tables. A "key" message (`key` true) carries every table whole (every `base` 0); the others
leave out the first `base` ids of a table whose earlier ids the previous message carried, so a
table that grew by k blocks costs k ids, not its length. `Tables` rebuilds whole tables on the
receiving side; it needs the message before (seq - 1): after a hole it waits for the next key
(the plugin sends one every KVVIZ_BLOCKS_KEY_EVERY messages, 8, and after it dropped one).
Wire version 1 (no `key`, no `base`: every table whole) is still read."""
from __future__ import annotations

import msgspec
import numpy as np

TOPIC = b"kvviz-blocks"
WIRE_VERSION = 2
READ_VERSIONS = (1, 2)  # version 1: every table whole, no `key` or `base`
MAX_PAYLOAD = 256 * 2**20  # a 16M-block pool's planes fit; anything larger is refused
ARRAYS = {"refcnt": np.int32, "hashed": np.uint8, "seqs": np.int64, "computed": np.int64,
          "final": np.int64, "lens": np.int32, "base": np.int32, "blocks": np.int32}
# the head of the waiting queue: why the scheduler did not admit it in that step, and the
# failure class kvviz records it as (a paged pool refuses with CAPACITY or POLICY only)
REASONS = {"no free blocks": "CAPACITY", "preempting": "CAPACITY", "watermark": "POLICY",
           "max_num_seqs": "POLICY", "token budget": "POLICY", "deferred": "POLICY",
           "other": "POLICY"}
EVENT_KINDS = ("admitted", "admit_failed", "preempted", "finished", "partial")

_enc = msgspec.msgpack.Encoder()
_dec = msgspec.msgpack.Decoder()


class WireError(ValueError):
    """A message that is not a kvviz block-stream sample of this wire version."""


def encode(msg: dict) -> bytes:
    out = dict(msg)
    for name in ARRAYS:
        if name in out:
            out[name] = np.ascontiguousarray(out[name], ARRAYS[name]).astype("<" + np.dtype(
                ARRAYS[name]).str[1:], copy=False).tobytes()
    return _enc.encode(out)


def frames(seq: int, payload: bytes) -> list[bytes]:
    return [TOPIC, seq.to_bytes(8, "big", signed=True), payload]


def decode(frames_: list[bytes]) -> tuple[int, dict]:
    """(seq, message) with its arrays as numpy arrays; WireError naming what is wrong."""
    if len(frames_) != 3 or frames_[0] != TOPIC or len(frames_[1]) != 8:
        raise WireError("not a kvviz block-stream message ([topic, seq, payload] expected)")
    if len(frames_[2]) > MAX_PAYLOAD:
        raise WireError(f"payload of {len(frames_[2])} bytes, more than {MAX_PAYLOAD}")
    try:
        msg = _dec.decode(frames_[2])
    except msgspec.DecodeError as exc:
        raise WireError(f"undecodable payload ({exc})") from None
    version = msg.get("wire") if isinstance(msg, dict) else None
    if type(version) is not int or version not in READ_VERSIONS:
        raise WireError(f"wire version {version!r}, expected one of {READ_VERSIONS} (the "
                        "plugin's kvviz and this kvviz differ: install one version in both)")
    if version == 1:  # every table whole
        msg["key"], msg["base"] = True, b""
    for name, dtype in ARRAYS.items():
        raw = msg.get(name, b"")
        if not isinstance(raw, bytes) or len(raw) % np.dtype(dtype).itemsize:
            raise WireError(f"array {name}: not a whole number of {np.dtype(dtype)} values")
        msg[name] = np.frombuffer(raw, np.dtype(dtype).newbyteorder("<")).astype(dtype)
    if version == 1:
        msg["base"] = np.zeros(msg["lens"].size, np.int32)
    _check(msg)
    return int.from_bytes(frames_[1], "big", signed=True), msg


def _check(msg: dict) -> None:
    pool = msg.get("pool")
    if not isinstance(pool, dict):
        raise WireError("no pool geometry")
    n, b = pool.get("num_blocks"), pool.get("block_size")
    if not (isinstance(n, int) and 2 <= n <= 2**24 and isinstance(b, int) and 1 <= b < 2**31):
        raise WireError(f"pool geometry num_blocks={n!r} block_size={b!r} out of range")
    clean = {"num_blocks": n, "block_size": b}
    for key, kind in POOL_FIELDS.items():
        v = pool.get(key)
        if v is None:
            continue
        if not isinstance(v, kind) or (kind is int and not 0 <= v < 2**31) or (
                kind is str and len(v) > 64):
            raise WireError(f"pool {key}: {str(v)[:40]!r} is not a {kind.__name__} in range")
        clean[key] = v
    msg["pool"] = clean
    if msg["refcnt"].size != n or msg["hashed"].size != n:
        raise WireError("refcnt / hashed planes do not have one value per block")
    m = msg["seqs"].size
    if not (msg["computed"].size == msg["final"].size == msg["lens"].size == m):
        raise WireError("block tables: seqs, computed, final and lens differ in length")
    key, base, lens = msg.get("key"), msg["base"], msg["lens"]
    if not isinstance(key, bool):
        raise WireError("key: not a boolean")
    if base.size != m or (lens < 0).any() or (base < 0).any() or (base > lens).any() or (
            key and base.any()):
        raise WireError("block tables: base not one count per table, in 0 .. lens (0 in a "
                        "key message)")
    if int(lens.sum()) - int(base.sum()) != msg["blocks"].size:
        raise WireError("block tables: lens less base do not add up to the blocks given")
    if msg["blocks"].size and (msg["blocks"].min() < 0 or msg["blocks"].max() >= n):
        raise WireError("block tables: a block id outside the pool")
    for key in ("step", "num_free"):
        if not isinstance(msg.get(key), int) or not 0 <= msg[key] < BIG:
            raise WireError(f"{key}: not a count")
    for key in ("seqs", "computed", "final"):
        a = msg[key]
        if a.size and (a.min() < (-1 if key == "seqs" else 0) or a.max() >= 2**31):
            raise WireError(f"{key}: values outside 0 .. 2^31 - 1")
    for key in ("dropped", "generated"):
        v = msg.setdefault(key, 0)
        if not isinstance(v, int) or isinstance(v, bool) or not 0 <= v < BIG:
            raise WireError(f"{key}: not a count")
    for key, shape in _ROWS.items():
        rows = msg.setdefault(key, [])
        if not isinstance(rows, list) or len(rows) > MAX_ROWS:
            raise WireError(f"{key}: not a list of at most {MAX_ROWS} rows")
        for row in rows:
            if not _fits(row, shape):
                raise WireError(f"{key}: a row {str(row)[:80]} is not {shape}")
    running = msg.setdefault("running", [])
    if not isinstance(running, list) or not all(
            isinstance(x, int) and abs(x) < BIG for x in running):
        raise WireError("running: not a list of sequence ids")
    head = msg.get("head")
    if head is not None and not _fits(head, (int, str, int, int)):
        raise WireError("head: not [seq, reason, need, free]")
    for step, kind, _s, reason, need, free in msg["events"]:
        if kind not in EVENT_KINDS or reason not in (None, "CAPACITY", "POLICY") or min(
                step, need, free) < 0:
            raise WireError(f"events: kind {kind!r} reason {reason!r} or a negative count")
    for row in msg["arrived"]:
        if not 1 <= row[6] <= 64 or len(row[5]) % row[6]:
            raise WireError("arrived: hashes not a whole number of hash_width bytes")
    if clean.get("int_hashes") and msg["arrived"]:  # converted here, not in the engine
        msg["arrived"] = [list(r) for r in int_rows_le(msg["arrived"])]


POOL_FIELDS = {"engine": str, "version": str, "scheduler": str, "dp_rank": int,
               "chunked_prefill": bool, "prefix_caching": bool, "max_num_seqs": int,
               "max_num_batched_tokens": int, "max_model_len": int, "watermark": float,
               "bytes_per_token": int,
               "int_hashes": bool}  # the geometry kept (other keys are left out)
MAX_ROWS = 1 << 20
BIG = 2**62  # every integer a row carries fits SQLite's int64 with room
_N = (int, type(None))
_ROWS = {"events": (int, str, int, (str, type(None)), int, int),
         "arrived": (int, str, int, int, int, bytes, int),
         "done": (int, int, int, str, int), "waiting": (int, str)}


def _fits(row, shape) -> bool:
    return (isinstance(row, list) and len(row) == len(shape)
            and all(isinstance(v, t) and not isinstance(v, bool)
                    and (not isinstance(v, int) or abs(v) < BIG) for v, t in zip(row, shape)))


def int_hashes_le(block_hashes) -> bytes:
    """Each hash as vLLM's maybe_convert_block_hash makes it an int (its bytes read big-endian,
    the low 64 bits kept), written as 8 little-endian bytes: its last 8 bytes reversed (a
    shorter hash zero-padded), without an int or a call per hash."""
    return b"".join([(_ZEROS + h)[:-9:-1] for h in block_hashes])


_ZEROS = bytes(8)


def int_rows_le(rows: list) -> list:
    """Request-log rows (seq, id, step, prompt, max_tokens, hashes joined, width) with their
    hashes as int_hashes_le makes them (width 8): for rows of one width >= 8, one numpy pass
    over all of them (each hash's last 8 bytes reversed), else hash by hash."""
    widths = {r[6] for r in rows}
    w = next(iter(widths)) if len(widths) == 1 else 0
    if w < 8:
        return [(*r[:5], int_hashes_le([r[5][i:i + r[6]] for i in range(0, len(r[5]), r[6])]),
                 8) for r in rows]
    le = np.frombuffer(b"".join([r[5] for r in rows]), np.uint8).reshape(-1, w)[:, :-9:-1]
    le = le.tobytes()
    out, at = [], 0
    for r in rows:
        k = len(r[5]) // w * 8
        out.append((*r[:5], le[at:at + k], 8))
        at += k
    return out


class Tables:
    """The receiving side's copy of the last message's whole tables (request seq -> where its
    ids are), to rebuild the whole tables of a message that left their first ids out."""

    def __init__(self) -> None:
        self.seq: int | None = None  # the message the copy is of (None: none usable)
        self.ids = np.empty(0, np.int32)
        self.where: dict[int, tuple[int, int]] = {}  # request seq -> (start, length)

    def whole(self, seq: int, msg: dict) -> bool:
        """Make msg["blocks"] every table whole (msg["base"] all 0) and keep them; False,
        leaving msg as it is and forgetting the copy, when a table left out ids this side
        does not have (a message was lost since, or its table is not here): wait for a key."""
        base, lens, blocks = msg["base"], msg["lens"], msg["blocks"]
        seqs = msg["seqs"]
        if base.any():
            where = self.where if self.seq is not None and seq == self.seq + 1 else None
            if where is None:
                self.seq = None
                return False
            parts, at, prev = [], 0, self.ids
            for s, n, b in zip(seqs.tolist(), lens.tolist(), base.tolist()):
                if b:
                    got = where.get(s) if s >= 0 else None
                    if got is None or got[1] < b:
                        self.seq = None
                        return False
                    parts.append(prev[got[0]:got[0] + b])
                parts.append(blocks[at:at + n - b])
                at += n - b
            blocks = np.concatenate(parts) if parts else blocks
            msg["blocks"], msg["base"] = blocks, np.zeros_like(base)
        starts = np.cumsum(lens, dtype=np.int64) - lens
        self.where = {s: (a, n) for s, a, n in zip(seqs.tolist(), starts.tolist(),
                                                    lens.tolist()) if s >= 0}
        self.seq, self.ids = seq, blocks
        return True
