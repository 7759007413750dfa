"""KV-event recordings of hostile streams, written through the real subscriber path (no
sockets): what a publisher that mixes types, nests, or loses most of its messages leaves in
a recording (issue 26 item 7)."""
from __future__ import annotations

import sqlite3
from pathlib import Path

import msgspec

from kvviz.node.kvevents.subscriber import Subscriber, SubscriberConfig
from kvviz.store.writer import RunWriter
from tests.kvevents.schema_pub import payload, store

DEEP = "[" * 5000 + "]" * 5000


def _record(path: Path, messages, endpoint: str = "tcp://127.0.0.1:45999") -> Path:
    """A finished recording of one stream that received `messages` ([seq, payload bytes])."""
    w = RunWriter(path, {"mode": "kv-events", "lanes": []})
    kv = w.kv_events()
    sub = Subscriber(SubscriberConfig((endpoint,)), kv)
    (st,) = sub.streams
    for seq, data in messages:
        sub.handle(st, [b"", int(seq).to_bytes(8, "big", signed=True), data])
    kv.flush()
    sub.close()
    w.close()
    return path


def mixed_token_ids(path: Path) -> Path:
    """BlockStored events whose token ids mix ints, strings, floats and nulls."""
    events = [{"type": "BlockStored", "block_hashes": [11, 12], "parent_block_hash": None,
               "token_ids": [1, "two", 3.5, None, [4]] * 7, "block_size": 16}]
    return _record(path, [(0, msgspec.msgpack.encode([1.0, events])),
                          (1, payload([store([13], 12, 16, tokens=list(range(16)))]))])


def nested_payloads(path: Path) -> Path:
    """Events whose fields are nested lists and maps where numbers belong."""
    nest: object = 7
    for _ in range(60):
        nest = {"a": [nest]}
    events = [{"type": "BlockStored", "block_hashes": [[nest]], "parent_block_hash": {"x": nest},
               "token_ids": [nest], "block_size": nest},
              {"type": "BlockRemoved", "block_hashes": nest}, ["BlockStored", [nest], nest]]
    return _record(path, [(0, msgspec.msgpack.encode([1.0, events])),
                          (1, msgspec.msgpack.encode({"ts": nest, "events": nest}))])


def nested_summary(path: Path) -> Path:
    """A recording whose stream summary_json is deeply nested JSON."""
    mixed_token_ids(path)
    with sqlite3.connect(path) as db:
        db.execute("UPDATE kv_streams SET summary_json = ?", (DEEP,))
    return path


def empty_run_table(path: Path) -> Path:
    """A KV-event recording whose run row was deleted."""
    mixed_token_ids(path)
    with sqlite3.connect(path) as db:
        db.execute("DELETE FROM run")
    return path


def gap_heavy(path: Path, batches: int = 300) -> Path:
    """Most messages lost: seq jumps by huge steps (up to near 2^63), then goes back."""
    msgs = []
    seq = 0
    for i in range(batches):
        msgs.append((seq, payload([store([10_000 + i], None, 16, tokens=list(range(16)))])))
        seq += 1 + (1 << (i % 62))
        if seq >= 1 << 62:
            seq = i
    msgs.append(((1 << 63) - 1, payload([store([99], None, 16, tokens=list(range(16)))])))
    return _record(path, msgs)


HOSTILE = {"mixed token ids": mixed_token_ids, "nested payloads": nested_payloads,
           "nested summary_json": nested_summary, "empty run table": empty_run_table,
           "gap heavy": gap_heavy}
