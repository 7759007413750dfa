"""Replaying one lane's events up to each sample (docs/FORMAT.md, "Which events belong to a
sample"): the live set, each live sequence's length, the cumulative counters.

The token timeline is vLLM's (docs/FIDELITY.md): the step that completes a prefill samples the
first token, a sequence is freed in the step that samples its last one, and a `partial` event
marks a step that left a sequence short of its known tokens (kvviz/verify/timeline.py). Files
of format 5 on carry those events, so lengths and tokens are exact under every engine setting.
Older files with chunked prefill on (`bounds`) lack them: lengths and tokens are then checked
against bounds (at most one token a step from the admission step on; a finished sequence
sampled at least one)."""
from __future__ import annotations

from dataclasses import dataclass, field

from kvviz.verify.timeline import Timeline

REASONS = ("CAPACITY", "FRAGMENTATION", "POLICY")
PARTIAL_SINCE = 5  # the format version from which recordings carry `partial` events
MAX_LIVE = 1 << 19  # sequences live at once in all lanes together (~200 bytes each)


@dataclass
class Budget:
    """Sequences the lanes' replays may still hold live (shared by the lanes of a run)."""
    left: int = field(default_factory=lambda: MAX_LIVE)


@dataclass
class LaneReplay:
    """State rebuilt from events with step <= the sample's step."""
    lane: str
    chunked: bool = False  # bounds only: chunked prefill on in a file without partial events
    live: dict = field(default_factory=dict)  # seq_id -> Timeline
    preemptions: int = 0
    failures: dict = field(default_factory=lambda: dict.fromkeys(REASONS, 0))
    done_tokens: int = 0  # tokens sampled by sequences no longer live (an upper bound)
    done_floor: int = 0  # ... and a lower bound (equal when not chunked)
    last_step: int = 0
    last_admit: tuple = (-1, 0)  # (step, free_tokens) of the latest admission
    problems: list = field(default_factory=list)
    budget: Budget = field(default_factory=Budget)
    stopped: str = ""  # why the replay stopped (more live sequences than the budget)

    def apply(self, ev: dict) -> None:
        if self.stopped:
            return
        kind, seq, step = ev["kind"], ev["seq_id"], ev["step"]
        if step < self.last_step:
            self.problems.append(f"event {ev['event_id']} ({kind}) at step {step} after step "
                                 f"{self.last_step}: steps go back")
        self.last_step = max(self.last_step, step)
        if kind == "admitted":
            self.last_admit = (step, ev["free_tokens"])
            if seq in self.live:
                self.problems.append(f"event {ev['event_id']}: sequence {seq} admitted while "
                                     "live")
            elif self.budget.left <= 0:
                self._stop(ev)
                return
            else:
                self.budget.left -= 1
            self.live[seq] = Timeline.admitted(step, ev["need_tokens"])
        elif kind == "partial":
            self._partial(ev)
        elif kind in ("finished", "preempted"):
            if seq not in self.live:
                self.problems.append(f"event {ev['event_id']}: {kind} sequence {seq} is not "
                                     "live")
                return
            if kind == "finished" and self.last_admit[0] == step:
                self.last_admit = (-1, 0)  # it freed blocks after the step's admissions
            line = self.live.pop(seq)
            self.budget.left += 1
            # a preempted one sampled nothing in the step that preempted it, a finished one
            # sampled its last token in its last step (so that step was no partial one)
            most = line.advance(step if kind == "finished" else step - 1)
            if kind == "finished" and not most:  # its last step was a partial one
                self.problems.append(f"event {ev['event_id']}: sequence {seq} finished at step "
                                     f"{step}, a step that sampled nothing for it")
            self.done_tokens += most
            self.done_floor += min(most, 1) if self.chunked and kind == "finished" else (
                0 if self.chunked else most)
            if kind == "preempted":
                self.preemptions += 1
        elif kind == "admit_failed":
            if ev["reason"] not in REASONS:
                self.problems.append(f"event {ev['event_id']}: admit_failed reason "
                                     f"{ev['reason']!r}")
            else:
                self.failures[ev["reason"]] += 1
        elif kind == "rejected":
            if seq in self.live:
                self.problems.append(f"event {ev['event_id']}: rejected sequence {seq} is live")
        elif kind == "evicted":
            if seq != -1:
                self.problems.append(f"event {ev['event_id']}: evicted carries seq_id {seq}, "
                                     "not -1")
        else:
            self.problems.append(f"event {ev['event_id']}: unknown kind {kind!r}")

    def _stop(self, ev: dict) -> None:
        """Too many live sequences to replay: the lane's replay ends here, its memory given
        back; what it can no longer check is said by whoever reads `stopped`."""
        self.stopped = (f"{self.lane}: the replay of its events from event {ev['event_id']} "
                        f"(step {ev['step']}) on, and the checks that need it: more than "
                        f"{MAX_LIVE:,} sequences were live at once in all lanes, more than the "
                        "verifier holds")
        self.budget.left += len(self.live)
        self.live.clear()

    def _partial(self, ev: dict) -> None:
        """A step that left a live sequence at `need_tokens` slots, short of its known
        tokens, sampling nothing for it."""
        seq, step, have = ev["seq_id"], ev["step"], ev["need_tokens"]
        line = self.live.get(seq)
        if line is None or line.step >= step:
            self.problems.append(f"event {ev['event_id']}: partial for sequence {seq} at step "
                                 f"{step}, " + ("not live" if line is None else
                                                "a second one in that step"))
            return
        fresh = line.step == step - 1 and line.length == 0  # admitted in this step
        most = line.advance(step - 1)
        self.done_tokens += most
        self.done_floor += 0 if self.chunked else most
        if not (0 <= have < line.known) or (not fresh and have < line.length):
            self.problems.append(f"event {ev['event_id']}: partial leaves sequence {seq} at "
                                 f"{have} slots, outside {0 if fresh else line.length}.."
                                 f"{line.known - 1} (written before .. known - 1)")
        line.step, line.length = step, have

    def lengths(self, step: int) -> dict[int, int]:
        """Slots each live sequence has written at the end of `step` (at most that when
        `chunked`)."""
        return {s: line.length_at(step) for s, line in self.live.items()}

    def tokens(self, step: int) -> tuple[int, int]:
        """(lowest, highest) tokens sampled by the end of `step`; equal when not `chunked`."""
        most = sum(line.sampled_by(step) for line in self.live.values())
        return self.done_floor + (0 if self.chunked else most), self.done_tokens + most

    def counters(self, step: int) -> dict:
        return {"preemptions": self.preemptions,
                "admit_failures_capacity": self.failures["CAPACITY"],
                "admit_failures_fragmentation": self.failures["FRAGMENTATION"],
                "admit_failures_policy": self.failures["POLICY"],
                "tokens_generated": self.tokens(step), "running": len(self.live)}
