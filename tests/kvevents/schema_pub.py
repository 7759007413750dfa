"""A test publisher written from the engines' published schemas (not from kvviz's publisher).

Array form (older vLLM, SGLang, TensorRT-LLM): msgspec Structs with array_like=True, tag=True.
Map form (current vLLM): Structs tagged by "type" encoded as maps. Envelope: array or map.
"""
from __future__ import annotations

import threading
import time

import msgspec
import zmq


class ABlockStored(msgspec.Struct, array_like=True, tag="BlockStored"):
    block_hashes: list[int | bytes]
    parent_block_hash: int | bytes | None
    token_ids: list[int]
    block_size: int
    lora_id: int | None


class ABlockRemoved(msgspec.Struct, array_like=True, tag="BlockRemoved"):
    block_hashes: list[int | bytes]


class AAllBlocksCleared(msgspec.Struct, array_like=True, tag="AllBlocksCleared"):
    pass


class MBlockStored(msgspec.Struct, tag_field="type", tag="BlockStored"):
    block_hashes: list[int | bytes]
    parent_block_hash: int | bytes | None
    token_ids: list[int]
    block_size: int
    lora_id: int | None = None
    medium: str | None = "GPU"
    lora_name: str | None = None
    group_idx: int = 0


class MBlockRemoved(msgspec.Struct, tag_field="type", tag="BlockRemoved"):
    block_hashes: list[int | bytes]
    medium: str | None = "GPU"
    group_idx: int = 0


class MAllBlocksCleared(msgspec.Struct, tag_field="type", tag="AllBlocksCleared"):
    medium: str | None = None


class ArrayBatch(msgspec.Struct, array_like=True):
    ts: float
    events: list
    data_parallel_rank: int | None = None


class MapBatch(msgspec.Struct):
    ts: float
    events: list
    data_parallel_rank: int | None = None


def store(hashes, parent, block_size=4, enc="map", tokens=None):
    tok = tokens if tokens is not None else list(range(block_size * len(hashes)))
    cls = MBlockStored if enc == "map" else ABlockStored
    return cls(hashes, parent, tok, block_size, None)


def remove(hashes, enc="map"):
    return (MBlockRemoved if enc == "map" else ABlockRemoved)(hashes)


def clear(enc="map"):
    return MAllBlocksCleared() if enc == "map" else AAllBlocksCleared()


def payload(events, ts=1.0, rank=None, envelope="array") -> bytes:
    b = (ArrayBatch if envelope == "array" else MapBatch)(ts, events, rank)
    return msgspec.msgpack.encode(b)


class SchemaPublisher:
    """PUB on `endpoint` (+ an optional ROUTER replay with every batch sent so far), answering
    in the older `[seq, payload]` layout or vLLM 0.32's `[topic, seq, payload]` (layout="0.32",
    as vllm/distributed/kv_events.py ZmqEventPublisher._service_replay sends it)."""

    def __init__(self, endpoint: str, replay: str | None = None, topic: bytes = b"",
                 layout: str = "legacy") -> None:
        self.layout = layout
        self.ctx = zmq.Context()
        self.ctx.linger = 0  # a context left to the GC must not wait on unsent messages
        self.pub = self.ctx.socket(zmq.PUB)
        self.pub.setsockopt(zmq.LINGER, 0)
        self.pub.bind(endpoint)
        self.topic, self.seq, self.sent = topic, 0, []
        self.lock = threading.Lock()
        self.stop = threading.Event()
        self.thread = None
        if replay:
            self.router = self.ctx.socket(zmq.ROUTER)
            self.router.setsockopt(zmq.LINGER, 0)
            self.router.bind(replay)
            self.thread = threading.Thread(target=self._serve, daemon=True)
            self.thread.start()

    def send(self, data: bytes, *, drop: bool = False, seq: int | None = None) -> int:
        """Publish (or only buffer, with drop=True: a batch the subscriber misses)."""
        s = self.seq if seq is None else seq
        with self.lock:
            self.sent.append((s, data))
        if not drop:
            self.pub.send_multipart([self.topic, s.to_bytes(8, "big", signed=True), data])
        self.seq = s + 1
        return s

    def _serve(self) -> None:
        while not self.stop.is_set():
            if not self.router.poll(50):
                continue
            ident, _empty, start = self.router.recv_multipart()
            todo, ends = self.answer(int.from_bytes(start, "big", signed=True))
            end = (-1).to_bytes(8, "big", signed=True)
            for s, p in todo:
                seq = s.to_bytes(8, "big", signed=True)
                self.router.send_multipart([ident, b"", self.topic, seq, p]
                                           if self.layout == "0.32" else [ident, b"", seq, p])
            if ends:
                self.router.send_multipart([ident, b"", b"", end, b""] if self.layout == "0.32"
                                           else [ident, b"", end, b""])

    def answer(self, first: int) -> tuple[list, bool]:
        """What a replay request from seq `first` is answered with: the batches kept from
        there, and whether the end marker follows (test doubles of a busy node override it)."""
        with self.lock:
            return [x for x in self.sent if x[0] >= first], True

    def close(self) -> None:
        self.stop.set()
        if self.thread is not None:
            self.thread.join(2)
            self.router.close()
        self.pub.close()
        self.ctx.term()


def publish_for(pub: SchemaPublisher, seconds: float, data_of) -> threading.Thread:
    """A daemon thread sending data_of(i) every 50 ms for `seconds` or until pub.stop is set
    (started)."""
    def go() -> None:
        end, i = time.monotonic() + seconds, 0
        while time.monotonic() < end and not pub.stop.is_set():
            pub.send(data_of(i))
            i += 1
            time.sleep(0.05)
    th = threading.Thread(target=go, daemon=True)
    th.start()
    return th
