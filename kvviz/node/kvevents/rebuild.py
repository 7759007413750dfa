"""A recording's KV-event batches -> the CacheModel: the prefix cache rebuilt by decoding the
stored payloads again, as the subscriber did when they arrived (kvviz.store.kv_reader reads
the rows; this module decodes and applies them), and `rebuild`, the plain reference the
model is tested against."""
from __future__ import annotations

import sqlite3
from collections.abc import Iterable
from typing import Any

from kvviz.node.kvevents.decode import CLEARED, REMOVED, STORED, Event, Undecodable, decode
from kvviz.node.kvevents.model import CacheModel
from kvviz.store import kv_reader


def load_model(conn: sqlite3.Connection, after_batch: int = 0, model: CacheModel | None = None,
               limit: int | None = None) -> tuple[CacheModel, int]:
    """Rebuild (or continue) the CacheModel from decodable batches with batch_id >
    after_batch (at most `limit` of them); returns (model, last batch id read). A batch whose
    seq does not follow its stream's last one is a publisher restart (its cache is empty).
    Cost: the batches read, decoded one by one."""
    model = model if model is not None else CacheModel()
    rank_of = kv_reader.stream_ranks(conn)
    last = after_batch
    for bid, sid, seq, t, payload in kv_reader.ok_batches(conn, after_batch, limit):
        last = bid
        model.note_seq(sid, seq)
        try:
            b = decode(payload)
        except Undecodable:
            continue
        model.apply(sid, rank_of.get(sid, 0) if b.dp_rank is None else b.dp_rank, b.events, t)
    return model, last


def rebuild(events: Iterable[Event]) -> dict[Any, Any]:
    """The cached hash -> parent map after `events`, computed the plain way (reference for
    tests and for verifying a recording): replay stores and removals over one dict."""
    cache: dict[Any, Any] = {}
    for ev in events:
        if ev.kind == STORED:
            p = ev.parent
            for h in ev.hashes:
                cache.setdefault(h, p)
                p = h
        elif ev.kind == REMOVED:
            for h in ev.hashes:
                cache.pop(h, None)
        elif ev.kind == CLEARED:
            cache.clear()
    return cache
