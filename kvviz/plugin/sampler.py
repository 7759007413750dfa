"""The sampler inside vLLM's EngineCore: what the scheduler decided (admissions, refusals and
their reasons, preemptions, finishes, the queues, the request log) around the mirror of its
block pool (kvviz/plugin/pool_mirror.py), as the messages of docs/NODE.md's block stream.

Steps. vLLM's `Scheduler.current_step` counts `schedule()` calls. Every event is labelled with
the step counter at the moment it happens (an admission or preemption inside schedule() S:
S; a finish in the update that follows: S too, or S + 1 under async scheduling, whose
schedule() S + 1 runs before update S). A sample is taken at the start of a `schedule()` call,
before the counter moves, and after the last update when the scheduler runs dry: a sample
labelled S reflects exactly the events labelled <= S, as docs/FORMAT.md asks.

Cost. Every step: O(admissions + requests not scheduled or still in prefill) Python after
schedule(), a call layer on each allocate_slots of an admission, and a few attribute reads per
arrival, finish and preemption (an arrival's hash chain is kept as vLLM's bytes, joined: the
receiver converts it, kvviz/plugin/wire.py). Every sample (4 Hz): the pool mirror's tables and
refresh, and O(running + waiting) Python for the queues.
"""
from __future__ import annotations

import logging
import time
from itertools import islice

from kvviz.plugin import wire
from kvviz.plugin.pool_mirror import PoolMirror

log = logging.getLogger("kvviz.plugin")
CARRY_MAX = 1 << 20  # events + finishes held for the next sample while the queue is full


class Settings:
    """From the server's environment: KVVIZ_BLOCKS_ENDPOINT (required), KVVIZ_BLOCKS_HZ
    (samples a second, default 4), KVVIZ_BLOCKS_EVERY_STEPS (a sample every N engine steps
    instead; 1 = every step), KVVIZ_BLOCKS_QUEUE (messages held for a slow publisher, 8),
    KVVIZ_BLOCKS_KEY_EVERY (whole block tables every N messages, 8; the others carry each
    long table's new ids; 1 = every message whole)."""

    def __init__(self, env: dict) -> None:
        self.endpoint = env["KVVIZ_BLOCKS_ENDPOINT"]
        self.hz = float(env.get("KVVIZ_BLOCKS_HZ", "4"))
        self.every_steps = int(env.get("KVVIZ_BLOCKS_EVERY_STEPS", "0"))
        self.max_queue = int(env.get("KVVIZ_BLOCKS_QUEUE", "8"))
        self.key_every = int(env.get("KVVIZ_BLOCKS_KEY_EVERY", "8"))
        if not (0 < self.hz <= 1000) or self.every_steps < 0 or not (
                1 <= self.max_queue <= 4096 and 1 <= self.key_every <= 4096):
            raise ValueError("KVVIZ_BLOCKS_HZ must be in (0, 1000], KVVIZ_BLOCKS_EVERY_STEPS "
                             ">= 0, KVVIZ_BLOCKS_QUEUE and KVVIZ_BLOCKS_KEY_EVERY in 1..4096")


class PoolSampler:
    """Hooks one scheduler (and, through PoolMirror, its pool) and produces the messages of
    docs/NODE.md's block stream."""

    def __init__(self, sched, settings: Settings, publisher, host: dict) -> None:
        kvm = sched.kv_cache_manager
        coord = kvm.coordinator
        if len(coord.single_type_managers) != 1:
            raise RuntimeError(f"{len(coord.single_type_managers)} KV cache groups (a hybrid "
                               "model): kvviz maps single-group pools only")
        self.sched, self.settings, self.pub, self.host = sched, settings, publisher, host
        self.pool = coord.block_pool
        self.B = int(sched.block_size)
        self.seq_of: dict[str, int] = {}
        self.next_seq = 0
        self.live: set[str] = set()
        # live requests whose prefill may be unfinished: admitted and not yet seen scheduled
        # past it. A running request's KV falls behind its tokens again only by preemption
        # or a new admission, except where a KV connector rewinds it (a failed load): there
        # every live request is checked at every step.
        self.prefilling: set[str] = set()
        self.rewinds = getattr(sched, "connector", None) is not None
        self.events: list[tuple] = []  # rows as tuples: the GC stops tracking a tuple of
        # scalars, so rows held until the next sample are not traversed by every collection
        self.generated = 0  # tokens sampled so far: steps a live request sampled in
        self.arrived: list[tuple] = []  # hash chains as vLLM's bytes, joined (the wire's
        # receiver converts them); carried past a full queue
        self.done: list[tuple] = []
        self.admits: dict[str, int] = {}  # this step's admissions -> free blocks after
        self.failed: tuple | None = None  # this step's refused head: (rid, need, free)
        self.last_fail: tuple | None = None  # (seq, reason) of the last admit_failed event
        self.head: list | None = None
        self.due_t = 0.0  # when the next timed sample is due (time.monotonic())
        self.last_step = -1
        self.key_in = 0  # messages until the next key (whole tables) is due
        self.dropped_seen = 0  # the publisher's drops as of the last message it took
        self.disabled = False
        self.waiting_status = host["waiting_status"]
        self.status_names: dict = {}  # a finished request's status -> its name
        self.mirror = PoolMirror(self.pool, coord.single_type_managers[0], self._after_reset,
                                 derive=host.get("derive", False))
        self._hook(kvm, coord)

    def _after_reset(self) -> None:  # the next schedule() samples the emptied cache
        self.last_step, self.due_t = -1, 0.0

    # ---- the admission hook on the manager (an instance attribute shadows the method) ------
    def _hook(self, kvm, coord) -> None:
        """Builds the wrappers that `waiting_reached` installs: schedule() calls allocate_slots
        once per running request first (left unwrapped: a call layer each), then once per
        admission it tries. From there to the end of the step, allocate_slots notes each
        admission's outcome and the coordinator's get_num_blocks_to_allocate its count: a
        refused admission needed the last count it asked for (vLLM 0.32 refuses right after
        counting), so what it needed is known without asking vLLM again."""
        pool, B = self.pool, self.B
        allocate = kvm.allocate_slots
        count = coord.get_num_blocks_to_allocate
        last_count = [-1]
        waiting = self.waiting_status

        def get_num_blocks_to_allocate(*a, **kw):
            last_count[0] = n = count(*a, **kw)
            return n

        def allocate_slots(request, *a, **kw):
            last_count[0] = -1
            out = allocate(request, *a, **kw)
            if request.status in waiting:  # an admission (not a running request's call)
                free_now = pool.get_num_free_blocks()
                if out is None:  # (no count asked: estimated from its tokens)
                    need = last_count[0] if last_count[0] >= 0 else -(-request.num_tokens // B)
                    self.failed = (request.request_id, need, free_now)
                else:
                    self.admits[request.request_id] = free_now
            return out

        self.kvm, self.coord, self.hooked = kvm, coord, False
        self.admission_hook, self.count_hook = allocate_slots, get_num_blocks_to_allocate

    def waiting_reached(self) -> None:
        """schedule() has reached its waiting queue: its allocate_slots calls are admissions
        from here to the end of the step (after_schedule takes the wrappers off)."""
        self.kvm.allocate_slots = self.admission_hook
        self.coord.get_num_blocks_to_allocate = self.count_hook
        self.hooked = True

    def _unhook_admissions(self) -> None:
        """The class's methods again. Set and deleted as attributes, never through the
        instances' `__dict__`: reading that makes CPython 3.11 build the instance's dict,
        after which no method call on it is specialized again (~20 ns more per call,
        docs/BENCHMARKS.md)."""
        if self.hooked:
            self.hooked = False
            del self.kvm.allocate_slots
            del self.coord.get_num_blocks_to_allocate

    def unhook(self) -> None:
        self.disabled = True
        self._unhook_admissions()
        self.mirror.unhook()

    # ---- what the mixin calls -------------------------------------------------------------
    def arrived_request(self, request) -> None:
        rid = request.request_id
        if rid in self.seq_of:
            return  # a streaming session's next chunk: the same request
        seq = self.seq_of[rid] = self.next_seq
        self.next_seq += 1
        hs = request.block_hashes  # vLLM's own bytes, joined (see wire.int_rows_le)
        self.arrived.append((seq, rid, self.sched.current_step + 1, request.num_prompt_tokens,
                             request.max_tokens, b"".join(hs), len(hs[0]) if hs else 8))

    def preempted(self, request) -> None:
        """Called before vLLM frees the victim's table (the mirror notes it)."""
        if self.mirror.freed is not None:
            self.mirror.note_freed(request.request_id)
        seq = self.seq_of.get(request.request_id, -1)
        self.live.discard(request.request_id)
        self.prefilling.discard(request.request_id)
        self.events.append((self.sched.current_step, "preempted", seq, None, 0, 0))

    def finished(self, request) -> None:
        """Called before vLLM frees the request (and its table: the mirror notes it)."""
        rid = request.request_id
        if self.mirror.freed is not None:
            self.mirror.note_freed(rid)
        seq = self.seq_of.pop(rid, -1)
        step = self.sched.current_step
        if rid in self.live:
            self.live.remove(rid)
            self.prefilling.discard(rid)
            self.events.append((step, "finished", seq, None, 0, 0))
        status = request.status  # vLLM's IntEnum: hashed as an int, its name looked up once
        name = self.status_names.get(status) or self.status_names.setdefault(status,
                                                                               status.name)
        self.done.append((seq, step, request.num_output_tokens, name, request.num_preemptions))

    def before_schedule(self) -> None:
        mirror = self.mirror
        if mirror.watching and len(mirror.dirty) > mirror.cap:
            mirror.overflow()
        every = self.settings.every_steps
        if every:
            last = self.last_step
            due = self.sched.current_step - max(last, 0) >= every or last < 0
        else:  # the common step: one clock read and one comparison
            due = time.monotonic() >= self.due_t
        if due and self.sched.current_step != self.last_step:  # (not twice in one step)
            self.sample()

    def after_schedule(self, out) -> None:
        sched = self.sched
        step = sched.current_step
        self._unhook_admissions()
        B, live, prefilling, events = self.B, self.live, self.prefilling, self.events
        if self.admits:
            running, requests, seq_of = self.host["running_status"], sched.requests, self.seq_of
            rewinds = self.rewinds
            for rid, free_after in self.admits.items():
                req = requests.get(rid)
                if req is None or req.status is not running:
                    continue  # an async KV load: it waits on
                live.add(rid)
                if rewinds or req.is_prefill_chunk:  # else its prefill ends in this step
                    prefilling.add(rid)
                events.append((step, "admitted", seq_of.get(rid, -1), None,
                               req.num_tokens, free_after * B))
                self.last_fail = None
            self.admits.clear()
        # vLLM's schedule() has advanced num_computed_tokens by what it scheduled: a live
        # request samples a token in this step unless the token budget gave it nothing or its
        # prefill is still short (a chunk). Those are `partial` events (docs/FORMAT.md).
        planned, requests, seq_of = out.num_scheduled_tokens, sched.requests, self.seq_of
        # Every request schedule() planned is in vLLM's running list, and every request that
        # enters it is admitted through the wrapper above (live) and leaves `live` only when
        # it leaves the list (preempted, finished): planned is a subset of live, so when they
        # are as many, no live request was left out (the common step: no set difference).
        idle = live.difference(planned) if len(planned) != len(live) else ()
        self.generated += len(live) - len(idle)
        for rid in idle:
            req = requests.get(rid)
            if req is not None:
                events.append((step, "partial", seq_of.get(rid, -1), None,
                               req.num_computed_tokens, 0))
        if prefilling or self.rewinds:
            past = []
            for rid in live if self.rewinds else prefilling:
                if rid not in planned:
                    continue
                req = requests[rid]
                if req.is_prefill_chunk:
                    self.generated -= 1
                    events.append((step, "partial", seq_of.get(rid, -1), None,
                                   req.num_computed_tokens, 0))
                else:
                    past.append(rid)
            prefilling.difference_update(past)
        failed, self.failed = self.failed, None
        queue = sched.kv_holding_waiting or sched.waiting
        if not queue:
            self.head = None
            return
        req = queue.peek_request()
        rid = req.request_id
        if failed is not None and failed[0] == rid and not out.preempted_req_ids:
            _, need, free = failed  # the common refusal: allocate_slots said why
            reason = "no free blocks" if need > free else "watermark"
        else:
            reason, need, free = self._why(req, out)
        seq = self.seq_of.get(rid, -1)
        self.head = [seq, reason, need * B, free * B]
        cls = wire.REASONS[reason]
        if reason != "preempting" and self.last_fail != (seq, cls):
            self.last_fail = (seq, cls)
            self.events.append((step, "admit_failed", seq, cls, need * B, free * B))

    def _why(self, req, out) -> tuple[str, int, int]:
        """Why schedule() left `req` at the head of the queue, when allocate_slots did not
        refuse it in this step (after_schedule reads that case itself): the branch its loop
        took."""
        sched = self.sched
        free = self.pool.get_num_free_blocks()
        need = -(-req.num_tokens // self.B)
        if out.preempted_req_ids:
            return "preempting", need, free
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
        sched, pool, mirror = self.sched, self.pool, self.mirror
        # whole tables every key_every messages and after a message was dropped (here or in
        # the publisher's socket), else each long table's new ids (wire.Tables rebuilds them)
        dropped = self.pub.dropped
        key = self.key_in <= 0 or dropped != self.dropped_seen
        seqs, computed, final, lens, base, blocks = mirror.tables(
            sched.requests, self.seq_of, sched.max_model_len, key)
        key = mirror.reader.key  # the mirror may read whole where it recounts
        mirror.refresh()  # deriving: from the tables just read
        step = sched.current_step
        seq_of = self.seq_of
        msg = {"wire": wire.WIRE_VERSION, "pool": self.host["pool"], "step": step,
               "t": time.time(), "num_free": pool.get_num_free_blocks(),
               "null_block": pool.null_block.block_id,
               "refcnt": mirror.refcnt.copy(), "hashed": mirror.hashed.copy(),
               "seqs": seqs, "computed": computed, "final": final, "lens": lens,
               "key": key, "base": base, "blocks": blocks,
               "running": [seq_of.get(r.request_id, -1) for r in sched.running],
               "waiting": self._waiting(), "head": self.head,
               "events": self.events, "arrived": self.arrived, "done": self.done,
               "generated": self.generated}
        self.events, self.arrived, self.done = [], [], []
        self.last_step, self.due_t = step, time.monotonic() + 1.0 / self.settings.hz
        self.key_in = self.settings.key_every - 1 if key else self.key_in - 1
        if self.pub.offer(msg):
            self.dropped_seen = dropped
        elif len(msg["events"]) + len(msg["done"]) < CARRY_MAX:
            # the queue was full: the map is lost (a gap; the next message is key), the
            # events and the request log travel with the next sample
            self.events = msg["events"] + self.events
            self.arrived = msg["arrived"] + self.arrived
            self.done = msg["done"] + self.done

    def _waiting(self, most: int = 4096) -> list:
        """[seq, reason] per waiting request (at most `most`), the head first: the head's
        reason is the scheduler's; the others were not considered ("queued") unless it
        skipped them ("deferred")."""
        sched, seq_of, deferred = self.sched, self.seq_of, self.sched.deferred_waiting
        out = [[seq_of.get(r.request_id, -1), "deferred" if r in deferred else "queued"]
               for q in (sched.kv_holding_waiting, sched.waiting) for r in islice(q, most)]
        del out[most:]
        head = self.head
        if out and head is not None and head[0] == out[0][0]:
            out[0][1] = head[1]
        return out
