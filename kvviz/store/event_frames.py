"""Events of a recording as one DataFrame in engine order (the reader's side of eventcodec.py)."""
from __future__ import annotations

from collections.abc import Callable

import pandas as pd

from kvviz.store import schema as codec
from kvviz.store.eventcodec import CHUNK_KINDS, decode_chunk
from kvviz.store.schema import EVENT_COLS as ROW_COLS  # `events` columns after event_id


def read(query: Callable[[str, tuple], list[tuple]], df: Callable[[str, tuple], pd.DataFrame],
         chunks: bool, lane: str | None, kinds: list[str] | None, since_t: float | None,
         limit: int | None) -> pd.DataFrame:
    """Events from both tables in engine order (event_id); filters as RunReader.events.
    `query` / `df` run SQL on the recording; `chunks`: the file has event_chunks."""
    where, row_params = codec.where(lane=lane, kind=kinds, since_t=since_t)
    cols = ", ".join(("event_id", *ROW_COLS))
    if limit is None:
        rows = df(f"SELECT {cols} FROM events{where} ORDER BY event_id", row_params)
    else:
        rows = df(f"SELECT * FROM (SELECT {cols} FROM events{where} ORDER BY event_id DESC "
                  f"LIMIT ?) ORDER BY event_id", (*row_params, int(limit)))
    parts = [rows] if len(rows) else []
    if chunks and (kinds is None or set(kinds) & set(CHUNK_KINDS)):
        parts += _read_chunks(query, lane, kinds, since_t, limit)
    if not parts:
        return rows.drop(columns="event_id")
    out = pd.concat(parts, ignore_index=True) if len(parts) > 1 else parts[0]
    out = out.sort_values("event_id", kind="stable")
    if limit is not None:
        out = out.tail(int(limit))
    return out.drop(columns="event_id").reset_index(drop=True)


def _read_chunks(query: Callable, lane: str | None, kinds: list[str] | None,
                 since_t: float | None, limit: int | None) -> list[pd.DataFrame]:
    where, params = codec.where("t_last", lane=lane, kind=kinds, since_t=since_t)
    sql = f"SELECT lane, kind, n, encoding, data FROM event_chunks{where} ORDER BY chunk_id"
    if limit is None:
        found = query(sql, tuple(params))
    else:  # newest chunks first, until they hold `limit` events
        found, have = [], 0
        for row in query(sql + " DESC", tuple(params)):
            found.append(row)
            have += int(row[2])
            if have >= limit:
                break
        found.reverse()
    out = []
    for lane, kind, n, encoding, data in found:
        try:
            c = decode_chunk(n, encoding, data)
        except ValueError as exc:
            raise ValueError(f"{lane} {kind} events: {exc}") from None
        frame = pd.DataFrame({"event_id": c["event_id"], "t": c["t"], "step": c["step"],
                              "lane": lane, "kind": kind, "seq_id": c["seq_id"], "reason": None,
                              "need_tokens": c["need_tokens"], "free_tokens": c["free_tokens"],
                              "largest_hole_tokens": 0, "count": 1})
        if since_t is not None:
            frame = frame[frame["t"] > since_t]
        out.append(frame)
    return out
