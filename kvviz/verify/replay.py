"""Replaying one lane's events up to each sample (docs/FORMAT.md, "Which events belong to a
sample"): the live set, each live sequence's length, the cumulative counters.

The token timeline is vLLM's (docs/FIDELITY.md): the step that completes a prefill samples the
first token, a sequence is freed in the step that samples its last one. With chunked prefill
on (`chunked`), a prefill may take several steps and a decode may wait a step for the token
budget; events do not say when, so lengths and tokens are then checked against bounds (at most
one token a step from the admission step on; a finished sequence sampled at least one)."""
from __future__ import annotations

from dataclasses import dataclass, field

REASONS = ("CAPACITY", "FRAGMENTATION", "POLICY")


@dataclass
class LaneReplay:
    """State rebuilt from events with step <= the sample's step."""
    lane: str
    chunked: bool = False  # chunked prefill on: lengths and tokens are bounds
    live: dict = field(default_factory=dict)  # seq_id -> (admission step, need)
    preemptions: int = 0
    failures: dict = field(default_factory=lambda: dict.fromkeys(REASONS, 0))
    done_tokens: int = 0  # tokens sampled by sequences no longer live (an upper bound)
    done_floor: int = 0  # ... and a lower bound (equal when not chunked)
    last_step: int = 0
    last_admit: tuple = (-1, 0)  # (step, free_tokens) of the latest admission
    problems: list = field(default_factory=list)

    def apply(self, ev: dict) -> None:
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
            self.live[seq] = (step, ev["need_tokens"])
        elif kind in ("finished", "preempted"):
            if seq not in self.live:
                self.problems.append(f"event {ev['event_id']}: {kind} sequence {seq} is not "
                                     "live")
                return
            if kind == "finished" and self.last_admit[0] == step:
                self.last_admit = (-1, 0)  # it freed blocks after the step's admissions
            start, _ = self.live.pop(seq)
            # it sampled one token in each step from the one completing its prefill (its
            # admission step unless chunked); a preempted one not in the step that preempted
            # it, a finished one also in its last step
            most = (step - start) + (kind == "finished")
            self.done_tokens += most
            self.done_floor += int(kind == "finished") if self.chunked else most
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

    def lengths(self, step: int) -> dict[int, int]:
        """Slots each live sequence has written at the end of `step` (at most that when
        `chunked`)."""
        return {s: need + (step - a) for s, (a, need) in self.live.items()}

    def tokens(self, step: int) -> tuple[int, int]:
        """(lowest, highest) tokens sampled by the end of `step`; equal when not `chunked`."""
        most = sum(step - a + 1 for a, _ in self.live.values())
        return self.done_floor + (0 if self.chunked else most), self.done_tokens + most

    def counters(self, step: int) -> dict:
        return {"preemptions": self.preemptions,
                "admit_failures_capacity": self.failures["CAPACITY"],
                "admit_failures_fragmentation": self.failures["FRAGMENTATION"],
                "admit_failures_policy": self.failures["POLICY"],
                "tokens_generated": self.tokens(step), "running": len(self.live)}
