"""The attach side of the block stream (kvviz/plugin, docs/NODE.md): a ZeroMQ SUB socket on
the plugin's endpoint, each message turned into one sample of a lane of the recording: a
BlockMap in docs/FORMAT.md's planes, the block tables, the engine events, the request log,
and the stream's gaps.

Addresses: vLLM's block 0 is its null block (never allocated, its ref_cnt not kept), so the
lane's map holds blocks 1 .. N-1 at addresses 0 .. N-2 (address = block id - 1), and its
capacity is (N - 1) x block_size, the capacity vLLM's own usage gauge divides by."""
from __future__ import annotations

import json
import queue
import threading
import time

import numpy as np

from kvviz.core import metrics as core_metrics
from kvviz.core.blockmap import FREE, BlockMap
from kvviz.core.errors import KvvizError
from kvviz.engine.eventlog import Event, EventColumns
from kvviz.plugin import wire
from kvviz.store import blocklane

MAX_PER_POLL = 64  # messages handled per poll() (the rest wait in the queue)
MAX_HELD = 256 * 2**20  # bytes received and waiting to be handled, at most


def lane_name(pool: dict) -> str:
    rank = pool.get("dp_rank", 0)
    return f"vllm-dp{rank}" if rank else "vllm"


def blockmap(msg: dict) -> tuple[BlockMap, dict]:
    """The map of one sample (addresses = block ids - 1) and the sample's own checks:
    `refcount_mismatches` (blocks whose vLLM ref_cnt is not the number of block tables
    holding them) and `untabled_blocks` (held by vLLM, in no table: drawn free)."""
    pool = msg["pool"]
    N, B = pool["num_blocks"], pool["block_size"]
    if msg.get("null_block", 0) != 0:
        raise wire.WireError(f"null block {msg.get('null_block')!r}, expected block 0")
    n = N - 1
    if msg["base"].any():
        raise wire.WireError("block tables not whole (wire.Tables makes them so, given the "
                             "message before)")
    keep = msg["seqs"] >= 0
    lens = msg["lens"]
    seqs, computed, final = msg["seqs"], msg["computed"], msg["final"]
    ids = msg["blocks"]
    if not keep.all():  # a table of a request the plugin has no id for: left out
        rows = np.repeat(keep, lens)
        ids, seqs, computed, final, lens = (ids[rows], seqs[keep], computed[keep],
                                            final[keep], lens[keep])
    if ids.size and ids.min() < 1:
        raise wire.WireError("a block table holds the null block (a sliding-window layer?)")
    addr = (ids - 1).astype(np.int64)
    starts = np.cumsum(lens) - lens
    pos = np.arange(addr.size) - np.repeat(starts, lens)
    fill = np.clip(np.repeat(computed, lens) - pos * B, 0, B)
    owner = np.full(n, FREE, np.int32)
    filled = np.zeros(n, np.int32)
    owner[addr[::-1]] = np.repeat(seqs, lens)[::-1]  # a shared block: its first holder
    filled[addr[::-1]] = fill[::-1]
    holders = np.bincount(addr, minlength=n)
    owned = owner != FREE
    refcnt = msg["refcnt"][1:]
    cached = msg["hashed"][1:].astype(bool) & ~owned & (refcnt == 0)
    filled[cached] = B
    checks = {"refcount_mismatches": int(np.count_nonzero(owned & (refcnt != holders))),
              "untabled_blocks": int(np.count_nonzero(~owned & (refcnt > 0)))}
    bm = BlockMap(owner=owner, filled=filled, allocated=np.where(owned, B, 0).astype(np.int32),
                  refcount=np.minimum(holders, 32767).astype(np.int16), cached=cached,
                  block_size=B, bytes_per_token=int(pool.get("bytes_per_token", 0)),
                  label=f"vllm paged:{B}", contiguous=False,
                  final_seq=seqs.astype(np.int32),
                  final_len=np.maximum(final, computed).astype(np.int32),
                  final_held=lens.astype(np.int64) * B,
                  table_len=lens.astype(np.int32), table_blocks=addr.astype(np.int32))
    return bm, checks


class BlockLane:
    """Subscribes to one plugin endpoint and writes what arrives into `writer`'s recording
    (`t0`: the recording's start, Unix seconds). Not thread-safe; poll() from one thread."""

    def __init__(self, endpoint: str, writer, t0: float) -> None:
        self.endpoint, self.writer, self.t0 = endpoint, writer, t0
        self.lane: str | None = None
        self.last_seq: int | None = None
        self.samples = self.gaps = self.bad = 0
        self.undrawn = 0  # messages recorded without their map (waiting for a key message)
        self.last_tok: tuple[float, int] | None = None  # (t, tokens) of the last sample
        self._tables = wire.Tables()
        self.problem: str | None = None
        self.counts = {"preemptions": 0, "CAPACITY": 0, "POLICY": 0, "tokens_generated": 0}
        self.last_t = 0.0
        self.held = 0  # bytes received and not handled yet
        self.overflow = 0  # messages the reader let go (more than MAX_HELD waiting)
        self._q: queue.Queue = queue.Queue()
        self._stop = threading.Event()
        self._error: list[str] = []
        ready = threading.Event()
        self._thread = threading.Thread(target=self._read, args=(ready,), daemon=True,
                                        name="kvviz-blocks-sub")
        self._thread.start()
        ready.wait(5.0)
        if self._error:
            raise KvvizError(f"--blocks {endpoint}: {self._error[0]}")

    def _read(self, ready: threading.Event) -> None:
        """Own thread: the SUB socket drained into a queue as fast as messages come, so a
        slow scrape or commit on the main thread loses nothing up to MAX_HELD bytes."""
        import zmq

        ctx = zmq.Context()
        sock = ctx.socket(zmq.SUB)
        try:
            sock.setsockopt(zmq.LINGER, 0)
            sock.setsockopt(zmq.RCVHWM, 1024)
            sock.setsockopt(zmq.MAXMSGSIZE, wire.MAX_PAYLOAD + 64)
            sock.setsockopt(zmq.SUBSCRIBE, wire.TOPIC)
            sock.connect(self.endpoint)
        except zmq.ZMQError as exc:
            self._error.append(f"cannot connect ({exc})")
            ready.set()
            sock.close(0)
            ctx.term()
            return
        ready.set()
        try:
            while not self._stop.is_set():
                if not sock.poll(100):
                    continue
                frames = sock.recv_multipart()
                size = sum(len(f) for f in frames)
                if self.held + size > MAX_HELD:
                    self.overflow += 1  # its seq hole is recorded as a gap
                    continue
                self.held += size
                self._q.put((size, frames))
        finally:
            sock.close(0)
            ctx.term()

    def poll(self, timeout_ms: int = 0) -> int:
        """Handle what arrived (at most MAX_PER_POLL messages), waiting up to timeout_ms for
        the first."""
        got = 0
        while got < MAX_PER_POLL:
            try:
                if not got and timeout_ms > 0:
                    size, frames = self._q.get(timeout=timeout_ms / 1000)
                else:
                    size, frames = self._q.get_nowait()
            except queue.Empty:
                break
            self.held -= size
            got += 1
            try:
                seq, msg = wire.decode(frames)
                self.handle(seq, msg)
            except wire.WireError as exc:
                self.bad += 1
                self.problem = f"{self.endpoint}: {exc}"
        return got

    def handle(self, seq: int, msg: dict) -> None:
        if self.last_seq is not None and seq == self.last_seq:
            return  # the plugin's repeat of its last sample while the engine is idle
        t = max(self.last_t, time.time() - self.t0)
        self.last_t = t
        # whole tables (wire.Tables): after a hole, messages that carry only the tables' new
        # ids are recorded without their map until the next key message
        drawn = self._tables.whole(seq, msg)
        bm, checks = blockmap(msg) if drawn else (None, None)
        conn = self.writer.conn
        if self.lane is None:
            self._register(msg)
        lane = self.lane
        if self.last_seq is not None and seq != self.last_seq + 1:
            kind = "gap" if seq > self.last_seq else "restart"
            if kind == "restart":
                self.last_tok = None
            blocklane.add_gap(conn, lane, t, kind, self.last_seq + 1 if kind == "gap" else seq,
                              seq - 1 if kind == "gap" else self.last_seq, msg["dropped"])
            self.gaps += 1
        self.last_seq = seq
        evs = []
        for step, kind, s, reason, need, free in msg["events"]:
            if s < 0 or kind not in wire.EVENT_KINDS:
                continue
            evs.append(Event(t, int(step), lane, kind, int(s), reason, int(need), int(free)))
            if kind == "preempted":
                self.counts["preemptions"] += 1
            elif kind == "admit_failed" and reason in self.counts:
                self.counts[reason] += 1
        if evs:
            self.writer.add_events(EventColumns.from_events(evs))
        if msg["arrived"]:
            blocklane.add_arrivals(conn, lane, t, msg["arrived"])
        if msg["done"]:
            blocklane.add_finishes(conn, lane, msg["done"])
        # tokens sampled so far, counted by the plugin step by step (the token timeline's
        # definition: each step a live request sampled in, docs/FORMAT.md)
        self.counts["tokens_generated"] = msg["generated"]
        if not drawn:
            self.undrawn += 1
            return
        # decode throughput between this lane's samples (docs/FORMAT.md, tokens_per_s); none
        # for its first sample and the first after a restart: the plugin counts the tokens
        # sampled since the server started, before attach joined
        tok, prev = msg["generated"], self.last_tok
        rate = (None if prev is None or tok < prev[1] else
                (tok - prev[1]) / (t - prev[0]) if t > prev[0] else 0.0)
        self.last_tok = (t, tok)
        waiting = msg["waiting"]
        reasons: dict[str, int] = {}
        for _, why in waiting:
            reasons[why] = reasons.get(why, 0) + 1
        head = msg.get("head") or [None, None, None, None]
        rec = {**core_metrics.compute(bm).as_dict(), **checks,
               "preemptions": self.counts["preemptions"],
               "admit_failures_capacity": self.counts["CAPACITY"],
               "admit_failures_fragmentation": 0,
               "admit_failures_policy": self.counts["POLICY"],
               "tokens_generated": self.counts["tokens_generated"], "tokens_per_s": rate,
               "running": len(msg["running"]), "waiting": len(waiting),
               "vllm_free_blocks": msg["num_free"], "stream_dropped": msg["dropped"],
               "head_seq": head[0], "head_reason": head[1], "head_need_tokens": head[2],
               "head_free_tokens": head[3], "waiting_reasons": json.dumps(reasons)}
        self.writer.add_sample(t, msg["step"], lane, rec, bm)
        self.samples += 1

    def _register(self, msg: dict) -> None:
        pool = msg["pool"]
        self.lane = lane_name(pool)
        n, B = pool["num_blocks"] - 1, pool["block_size"]
        lane = {"name": self.lane, "label": f"vLLM {pool.get('version', '')} paged:{B}",
                "allocator": "paged", "block_size": B, "capacity_tokens": n * B,
                "num_blocks": n, "bytes_per_token": int(pool.get("bytes_per_token", 0))}
        engine = {"enable_chunked_prefill": bool(pool.get("chunked_prefill", True)),
                  "max_num_seqs": pool.get("max_num_seqs"),
                  "max_num_batched_tokens": pool.get("max_num_batched_tokens"),
                  "max_model_len": pool.get("max_model_len"),
                  "watermark": pool.get("watermark")}
        blocklane.register_lane(self.writer.conn, lane, engine,
                                {"endpoint": self.endpoint, "pool": pool})

    def summary(self) -> dict:
        return {"endpoint": self.endpoint, "lane": self.lane, "samples": self.samples,
                "gaps": self.gaps, "undrawn": self.undrawn, "bad_messages": self.bad,
                "last_seq": self.last_seq,
                "overflow": self.overflow}

    def close(self) -> None:
        self._stop.set()
        self._thread.join(5.0)


class BlockLanes:
    """Several block streams (one per data-parallel rank's EngineCore), each its own lane."""

    def __init__(self, endpoints: list[str], writer, t0: float) -> None:
        self.lanes: list[BlockLane] = []
        try:
            for e in endpoints:
                self.lanes.append(BlockLane(e, writer, t0))
        except BaseException:
            self.close()
            raise

    @property
    def samples(self) -> int:
        return sum(ln.samples for ln in self.lanes)

    @property
    def gaps(self) -> int:
        return sum(ln.gaps for ln in self.lanes)

    @property
    def undrawn(self) -> int:
        return sum(ln.undrawn for ln in self.lanes)

    def poll(self, timeout_ms: int = 0) -> int:
        got = sum(ln.poll(0) for ln in self.lanes)
        if not got and timeout_ms > 0 and self.lanes:
            got = self.lanes[0].poll(timeout_ms) + sum(ln.poll(0) for ln in self.lanes[1:])
        return got

    def summary(self) -> list[dict]:
        return [ln.summary() for ln in self.lanes]

    def close(self) -> None:
        for ln in self.lanes:
            ln.close()
