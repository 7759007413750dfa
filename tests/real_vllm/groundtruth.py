"""vLLM's own ground truth, read independently of kvviz's code: /metrics parsed with a regex,
the replay buffer read with a DEALER socket of its own and rebuilt with plain dicts."""
from __future__ import annotations

import re

import msgspec
import zmq

_LINE = re.compile(r'^([a-zA-Z_:][a-zA-Z0-9_:]*)(\{[^}]*\})?\s+(\S+)$')
_LABEL = re.compile(r'(\w+)="((?:[^"\\]|\\.)*)"')


def metrics(text: str) -> dict[str, list[tuple[dict, float]]]:
    out: dict[str, list[tuple[dict, float]]] = {}
    for line in text.splitlines():
        m = _LINE.match(line)
        if m and not line.startswith("#"):
            labels = dict(_LABEL.findall(m.group(2) or ""))
            out.setdefault(m.group(1), []).append((labels, float(m.group(3))))
    return out


def one(m: dict, name: str, **labels) -> float:
    rows = [v for lab, v in m[name] if all(lab.get(k) == x for k, x in labels.items())]
    assert len(rows) == 1, (name, labels, m.get(name))
    return rows[0]


def replay_all(endpoint: str, timeout_s: float = 10.0) -> list[tuple[int, bytes]]:
    """Every batch vLLM's replay buffer holds, from seq 0: [(seq, payload)]."""
    ctx = zmq.Context()
    ctx.linger = 0
    sock = ctx.socket(zmq.DEALER)
    sock.setsockopt(zmq.LINGER, 0)
    try:
        sock.connect(endpoint)
        sock.send_multipart([b"", (0).to_bytes(8, "big")])
        got = []
        while True:
            assert sock.poll(int(timeout_s * 1000)), "vLLM's replay socket did not answer"
            _empty, _topic, seq, payload = sock.recv_multipart()
            s = int.from_bytes(seq, "big", signed=True)
            if s == -1:
                return got
            got.append((s, payload))
    finally:
        sock.close()
        ctx.term()


def rebuild(batches: list[tuple[int, bytes]]) -> dict:
    """hash -> parent of the cached blocks after all batches (vLLM 0.32 events: msgpack arrays
    `[tag, ...]` or maps with "type")."""
    cache: dict = {}
    for _, payload in sorted(batches):
        _ts, events, *_ = msgspec.msgpack.decode(payload)
        for ev in events:
            if isinstance(ev, dict):
                tag, hashes, parent = ev["type"], ev.get("block_hashes"), ev.get(
                    "parent_block_hash")
            else:
                tag, hashes = ev[0], ev[1] if len(ev) > 1 else None
                parent = ev[2] if tag == "BlockStored" else None
            if tag == "BlockStored":
                for h in hashes:
                    cache.setdefault(h, parent)
                    parent = h
            elif tag == "BlockRemoved":
                for h in hashes:
                    cache.pop(h, None)
            elif tag == "AllBlocksCleared":
                cache.clear()
    return cache
