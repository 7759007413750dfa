"""The sampler inside vLLM's EngineCore: a mixin over the scheduler class vLLM chose, and the
incremental mirror of its block pool (docs/NODE.md, "Inside vLLM").

Steps. vLLM's `Scheduler.current_step` counts `schedule()` calls. Every event is labelled with
the step counter at the moment it happens (an admission or preemption inside schedule() S:
S; a finish in the update that follows: S too, or S + 1 under async scheduling, whose
schedule() S + 1 runs before update S). A sample is taken at the start of a `schedule()` call,
before the counter moves, and after the last update when the scheduler runs dry: a sample
labelled S reflects exactly the events labelled <= S, as docs/FORMAT.md asks.

Cost. A full scan of the pool is O(blocks) Python (60-140 ms at 200,000 blocks), so nothing
here scans: the pool's mutating verbs (get_new_blocks, free_blocks, touch, unpin_blocks, the
hash insert / remove, reset_prefix_cache) are wrapped on the pool instance to note the block
ids they touch, and a sample re-reads only those blocks' ref_cnt and hash; a request's block
table is read from where the previous sample stopped (tables only grow while a request
holds them). A sample then costs O(blocks touched + requests) Python plus O(blocks) numpy.
"""
from __future__ import annotations

import logging
import time

import numpy as np

from kvviz.plugin import wire

log = logging.getLogger("kvviz.plugin")
CARRY_MAX = 1 << 20  # events + finishes held for the next sample while the queue is full


class Settings:
    """From the server's environment: KVVIZ_BLOCKS_ENDPOINT (required), KVVIZ_BLOCKS_HZ
    (samples a second, default 4), KVVIZ_BLOCKS_EVERY_STEPS (a sample every N engine steps
    instead; 1 = every step), KVVIZ_BLOCKS_QUEUE (messages held for a slow publisher, 8)."""

    def __init__(self, env: dict) -> None:
        self.endpoint = env["KVVIZ_BLOCKS_ENDPOINT"]
        self.hz = float(env.get("KVVIZ_BLOCKS_HZ", "4"))
        self.every_steps = int(env.get("KVVIZ_BLOCKS_EVERY_STEPS", "0"))
        self.max_queue = int(env.get("KVVIZ_BLOCKS_QUEUE", "8"))
        if not (0 < self.hz <= 1000) or self.every_steps < 0 or not 1 <= self.max_queue <= 4096:
            raise ValueError("KVVIZ_BLOCKS_HZ must be in (0, 1000], KVVIZ_BLOCKS_EVERY_STEPS "
                             ">= 0, KVVIZ_BLOCKS_QUEUE in 1..4096")


class PoolSampler:
    """Hooks one scheduler's pool and produces the messages of docs/NODE.md's block stream."""

    def __init__(self, sched, settings: Settings, publisher, host: dict) -> None:
        kvm = sched.kv_cache_manager
        coord = kvm.coordinator
        if len(coord.single_type_managers) != 1:
            raise RuntimeError(f"{len(coord.single_type_managers)} KV cache groups (a hybrid "
                               "model): kvviz maps single-group pools only")
        self.sched, self.settings, self.pub, self.host = sched, settings, publisher, host
        self.pool = coord.block_pool
        self.tables = coord.single_type_managers[0].req_to_blocks
        self.B = int(sched.block_size)
        n = self.pool.num_gpu_blocks
        self.refcnt = np.zeros(n, np.int32)
        self.hashed = np.zeros(n, np.uint8)
        self.dirty: list[int] = []
        self.cache: dict[str, list] = {}  # request id -> its table as read (_entry)
        self.gen = 0
        self.seq_of: dict[str, int] = {}
        self.next_seq = 0
        self.live: set[str] = set()
        self.events: list[list] = []
        self.generated = 0  # tokens sampled so far: steps a live request sampled in
        self.arrived: list[list] = []
        self.done: list[list] = []
        self.admits: dict[str, int] = {}  # this step's admissions -> free blocks after
        self.failed: tuple | None = None  # this step's refused head: (rid, need, free)
        self.last_fail: tuple | None = None  # (seq, reason) of the last admit_failed event
        self.head: list | None = None
        self.last_t = 0.0
        self.last_step = -1
        self.disabled = False
        self.waiting_status = host["waiting_status"]
        self._hook(kvm, coord)

    # ---- hooks on the pool and the manager (instance attributes shadow the methods) --------
    def _hook(self, kvm, coord) -> None:
        pool, dirty = self.pool, self.dirty
        get_new, free, touch = pool.get_new_blocks, pool.free_blocks, pool.touch
        unpin, insert = pool.unpin_blocks, pool._insert_block_hash
        remove, reset = pool._remove_cached_block_hashes, pool.reset_prefix_cache

        def get_new_blocks(num_blocks):
            ret = get_new(num_blocks)
            dirty.extend([b.block_id for b in ret])
            return ret

        def free_blocks(ordered_blocks):
            blocks = ordered_blocks if isinstance(ordered_blocks, list) else list(ordered_blocks)
            free(blocks)
            dirty.extend([b.block_id for b in blocks])

        def touch_(blocks):
            touch(blocks)
            dirty.extend([b.block_id for b in blocks])

        def unpin_blocks(blocks, on_reuse):
            blocks = list(blocks)
            unpin(blocks, on_reuse)
            dirty.extend([b.block_id for b in blocks])

        def insert_block_hash(key, block, num_tokens):
            insert(key, block, num_tokens)
            dirty.append(block.block_id)

        def remove_hashes(block):
            out = remove(block)
            dirty.append(block.block_id)
            return out

        def reset_prefix_cache():
            ok = reset()
            if ok:  # the next schedule() samples, even at the same step: the emptied cache
                self.hashed[:] = 0
                self.last_step, self.last_t = -1, 0.0
            return ok

        self._orig = {"get_new_blocks": get_new_blocks, "free_blocks": free_blocks,
                      "touch": touch_, "unpin_blocks": unpin_blocks,
                      "_insert_block_hash": insert_block_hash,
                      "_remove_cached_block_hashes": remove_hashes,
                      "reset_prefix_cache": reset_prefix_cache}
        for name, fn in self._orig.items():
            setattr(pool, name, fn)
        allocate, count = kvm.allocate_slots, coord.get_num_blocks_to_allocate
        last_count = [0]
        waiting = self.waiting_status

        def get_num_blocks_to_allocate(*a, **kw):
            last_count[0] = n = count(*a, **kw)
            return n

        def allocate_slots(request, *a, **kw):
            if request.status not in waiting:  # a running request: vLLM's call, untouched
                return allocate(request, *a, **kw)
            # an admission: what it needed is what get_num_blocks_to_allocate answered last
            coord.get_num_blocks_to_allocate = get_num_blocks_to_allocate
            try:
                out = allocate(request, *a, **kw)
            finally:
                del coord.get_num_blocks_to_allocate  # the class's method again
            free_now = pool.get_num_free_blocks()
            if out is None:
                self.failed = (request.request_id, last_count[0], free_now)
            else:
                self.admits[request.request_id] = free_now
            return out

        kvm.allocate_slots = allocate_slots
        self._hooked = ((pool, tuple(self._orig)), (kvm, ("allocate_slots",)))

    def unhook(self) -> None:
        for obj, names in self._hooked:
            for name in names:
                obj.__dict__.pop(name, None)
        self.disabled = True

    # ---- what the mixin calls -------------------------------------------------------------
    def arrived_request(self, request) -> None:
        rid = request.request_id
        if rid in self.seq_of:
            return  # a streaming session's next chunk: the same request
        seq = self.seq_of[rid] = self.next_seq
        self.next_seq += 1
        hashes = self.host["hashes"](request.block_hashes)
        self.arrived.append([seq, rid, self.sched.current_step + 1, request.num_prompt_tokens,
                             request.max_tokens, hashes[0], hashes[1]])

    def preempted(self, request) -> None:
        seq = self.seq_of.get(request.request_id, -1)
        self.live.discard(request.request_id)
        self.events.append([self.sched.current_step, "preempted", seq, None, 0, 0])

    def finished(self, request) -> None:
        rid = request.request_id
        seq = self.seq_of.pop(rid, -1)
        step = self.sched.current_step
        if rid in self.live:
            self.live.discard(rid)
            self.events.append([step, "finished", seq, None, 0, 0])
        self.done.append([seq, step, request.num_output_tokens, request.status.name,
                          request.num_preemptions])

    def before_schedule(self) -> None:
        s = self.settings
        step = self.sched.current_step
        if step == self.last_step:
            return
        if s.every_steps:
            due = step - max(self.last_step, 0) >= s.every_steps or self.last_step < 0
        else:
            due = time.monotonic() - self.last_t >= 1.0 / s.hz
        if due:
            self.sample()

    def after_schedule(self, out) -> None:
        sched = self.sched
        step = sched.current_step
        B = self.B
        for rid, free_after in self.admits.items():
            req = sched.requests.get(rid)
            if req is None or req.status is not self.host["running_status"]:
                continue  # an async KV load: it waits on
            self.live.add(rid)
            self.events.append([step, "admitted", self.seq_of.get(rid, -1), None,
                                req.num_tokens, free_after * B])
            self.last_fail = None
        self.admits.clear()
        # vLLM's schedule() has advanced num_computed_tokens by what it scheduled: a running
        # request samples a token in this step unless its prefill is still short (a chunk) or
        # the token budget gave it nothing. Those are `partial` events (docs/FORMAT.md).
        planned, requests, seq_of = out.num_scheduled_tokens, sched.requests, self.seq_of
        for rid in self.live:
            req = requests.get(rid)
            if req is None:
                continue
            if rid in planned and not req.is_prefill_chunk:
                self.generated += 1
            else:
                self.events.append([step, "partial", seq_of.get(rid, -1), None,
                                    req.num_computed_tokens, 0])
        failed, self.failed = self.failed, None
        queue = sched.kv_holding_waiting or sched.waiting
        if not queue:
            self.head = None
            return
        req = queue.peek_request()
        reason, need, free = self._why(req, out, failed)
        seq = self.seq_of.get(req.request_id, -1)
        self.head = [seq, reason, need * B, free * B]
        cls = wire.REASONS[reason]
        if reason != "preempting" and self.last_fail != (seq, cls):
            self.last_fail = (seq, cls)
            self.events.append([step, "admit_failed", seq, cls, need * B, free * B])

    def _why(self, req, out, failed) -> tuple[str, int, int]:
        """Why schedule() left `req` at the head of the queue: the branch its loop took."""
        sched = self.sched
        free = self.pool.get_num_free_blocks()
        need = -(-req.num_tokens // self.B)
        if out.preempted_req_ids:
            return "preempting", need, free
        if failed is not None and failed[0] == req.request_id:
            _, need, free = failed
            return ("no free blocks" if need > free else "watermark"), need, free
        if len(sched.running) >= sched.max_num_running_reqs:
            return "max_num_seqs", need, free
        if out.total_num_scheduled_tokens >= sched.max_num_scheduled_tokens or (
                not sched.scheduler_config.enable_chunked_prefill):
            return "token budget", need, free
        if req in sched.deferred_waiting:
            return "deferred", need, free
        return "other", need, free

    # ---- a sample ---------------------------------------------------------------------------
    def sample(self) -> None:
        sched, pool = self.sched, self.pool
        if self.dirty:
            blocks, extra = pool.blocks, pool.cached_block_hashes_by_block
            ids = np.fromiter(set(self.dirty), np.int64)
            self.dirty.clear()
            got = [blocks[b] for b in ids.tolist()]
            self.refcnt[ids] = [b.ref_cnt for b in got]
            self.hashed[ids] = [b._block_hash is not None or b.block_id in extra for b in got]
        self.gen += 1
        gen, cache, requests = self.gen, self.cache, sched.requests
        seqs, computed, final, lens, parts = [], [], [], [], []
        for rid, lst in self.tables.items():
            n = len(lst)
            if not n:
                continue
            ent = cache.get(rid)
            if ent is None or ent[0] is not lst or ent[2] > n or (
                    ent[2] and ent[1][ent[2] - 1] != lst[ent[2] - 1].block_id):
                ent = cache[rid] = self._entry(rid, lst, requests.get(rid))
            elif ent[2] < n:
                k, buf = ent[2], ent[1]
                if buf.size < n:
                    buf = ent[1] = np.resize(buf, 2 * n)
                buf[k:n] = [b.block_id for b in lst[k:n]]
                ent[2] = n
            ent[6] = gen
            req = ent[5]
            seqs.append(ent[3])
            computed.append(0 if req is None else req.num_computed_tokens)
            final.append(ent[4])
            lens.append(n)
            parts.append(ent[1][:n])
        if len(cache) != len(lens):
            for rid in [r for r, e in cache.items() if e[6] != gen]:
                del cache[rid]
        step = sched.current_step
        msg = {"wire": wire.WIRE_VERSION, "pool": self.host["pool"], "step": step,
               "t": time.time(), "num_free": pool.get_num_free_blocks(),
               "null_block": pool.null_block.block_id,
               "refcnt": self.refcnt.copy(), "hashed": self.hashed.copy(),
               "seqs": np.array(seqs, np.int64), "computed": np.array(computed, np.int64),
               "final": np.array(final, np.int64), "lens": np.array(lens, np.int32),
               "blocks": np.concatenate(parts) if parts else np.empty(0, np.int32),
               "running": [self.seq_of.get(r.request_id, -1) for r in sched.running],
               "waiting": self._waiting(), "head": self.head,
               "events": self.events, "arrived": self.arrived, "done": self.done,
               "generated": self.generated}
        self.events, self.arrived, self.done = [], [], []
        self.last_t, self.last_step = time.monotonic(), step
        if not self.pub.offer(msg) and len(msg["events"]) + len(msg["done"]) < CARRY_MAX:
            # the queue was full: the map is lost (a gap), the events and the request log
            # travel with the next sample
            self.events = msg["events"] + self.events
            self.arrived = msg["arrived"] + self.arrived
            self.done = msg["done"] + self.done

    def _entry(self, rid: str, lst: list, req) -> list:
        """A request's cached table: [list, block ids (grown by doubling), blocks read, seq,
        the most tokens it can reach, the request, the sample that saw it last]."""
        n = len(lst)
        buf = np.resize(np.fromiter((b.block_id for b in lst), np.int32, n), max(16, 2 * n))
        most = 0 if req is None else min(self.sched.max_model_len,
                                         req.num_prompt_tokens + req.max_tokens)
        return [lst, buf, n, self.seq_of.get(rid, -1), most, req, 0]

    def _waiting(self, most: int = 4096) -> list:
        """[seq, reason] per waiting request, the head first: the head's reason is the
        scheduler's; the others were not considered ("queued") unless it skipped them."""
        sched = self.sched
        out = []
        head = self.head
        for q in (sched.kv_holding_waiting, sched.waiting):
            for req in q:
                if len(out) >= most:
                    return out
                seq = self.seq_of.get(req.request_id, -1)
                if not out and head is not None and head[0] == seq:
                    out.append([seq, head[1]])
                elif req in sched.deferred_waiting:
                    out.append([seq, "deferred"])
                else:
                    out.append([seq, "queued"])
        return out

