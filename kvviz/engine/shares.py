"""Where a lane's memory goes, as running sums over engine steps (no per-step snapshot).

Every step is added to the all-steps sums; a memory-pressure step (the head-of-line request
was refused for memory, CAPACITY or FRAGMENTATION, or a sequence was preempted) is also added
to the pressure sums. Steps where requests wait only for the batch limit or the prefill token
budget, with memory free, are not pressure steps. used + reserved + internal + free = 1 in
both averages. Cost: a few integer additions per step.
"""
from __future__ import annotations

FIELDS = ("used", "reserved", "internal", "free", "tail", "efi")
SHARE_KEYS = ("used", "reserved", "internal", "free")  # the four shares of capacity
EXACT_FLOAT_REPEATS = 1 << 20  # add.times above this: efi * times (may differ in the last bit)


def add_repeated(total: float, x: float, times: int) -> float:
    """total + x added `times` times, in the step engine's float order (bit for bit) while
    that is cheap; past EXACT_FLOAT_REPEATS (or for x = 0) one product, equal to the last bit
    or so."""
    if x == 0.0 or times > EXACT_FLOAT_REPEATS:
        return total + x * times
    for _ in range(times):
        total += x
    return total


class Shares:
    def __init__(self, capacity_tokens: int) -> None:
        self.capacity = capacity_tokens
        self.pressure = dict.fromkeys(("steps", *FIELDS), 0)
        self.every = dict.fromkeys(("steps", *FIELDS), 0)

    def add(self, pressure: bool, *, used: int, reserved: int, internal: int, free: int,
            tail: int, efi: float, times: int = 1) -> None:
        """`times` equal steps at once (1: one step); `pressure`: they were memory-pressure
        steps. Integer sums exactly as `times` calls; the float efi sum too while efi is 0.0
        (always so when nothing is held) or times is small."""
        if times != 1:
            used, reserved, internal, free, tail = (
                v * times for v in (used, reserved, internal, free, tail))
        self.add_sums(pressure, times, used, reserved, internal, free, tail)
        for acc in ((self.pressure, self.every) if pressure else (self.every,)):
            acc["efi"] = add_repeated(acc["efi"], efi, times)

    def add_sums(self, pressure: bool, steps: int, used: int, reserved: int, internal: int,
                 free: int, tail: int) -> None:
        """`steps` steps at once, given the sums of add's fields over them (efi 0.0)."""
        for acc in ((self.pressure, self.every) if pressure else (self.every,)):
            acc["steps"] += steps
            acc["used"] += used
            acc["reserved"] += reserved
            acc["internal"] += internal
            acc["free"] += free
            acc["tail"] += tail

    @property
    def pressure_steps(self) -> int:
        return int(self.pressure["steps"])

    def counters(self) -> dict[str, int]:
        """The running sums as cumulative integers (slot-steps): the share averages over any
        span of steps are differences of two readings divided by steps * capacity. Keys:
        share_steps, pressure_steps, {used,reserved,internal,free}_slot_steps and the same
        with `_pressure` appended."""
        out = {"share_steps": int(self.every["steps"]), "pressure_steps": self.pressure_steps}
        for k in SHARE_KEYS:
            out[f"{k}_slot_steps"] = int(self.every[k])
            out[f"{k}_slot_steps_pressure"] = int(self.pressure[k])
        return out

    def _means(self, acc: dict) -> dict[str, float] | None:
        steps = acc["steps"]
        if not steps:
            return None
        denom = steps * self.capacity
        out = {k: acc[k] / denom for k in SHARE_KEYS}
        out["tail_waste"] = acc["tail"] / denom
        out["external_frag_index"] = acc["efi"] / steps
        return out

    def summary(self) -> dict:
        """The flat `*_share` keys (and `tail_waste_share`, `external_frag_index_mean`) are
        averages over every step counted; `pressure_step_shares` holds the same averages over
        the memory-pressure steps only (None when there was no such step)."""
        keys = (*SHARE_KEYS, "tail_waste", "external_frag_index")
        every = self._means(self.every) or dict.fromkeys(keys, 0.0)
        flat = {"used_share": "used", "reserved_share": "reserved",
                "internal_share": "internal", "free_share": "free",
                "tail_waste_share": "tail_waste", "external_frag_index_mean": "external_frag_index"}
        out: dict = {k: every[v] for k, v in flat.items()}
        out["pressure_steps"] = self.pressure_steps
        out["pressure_step_shares"] = self._means(self.pressure)
        return out
