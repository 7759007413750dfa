"""Where a lane's memory goes, as running sums over engine steps (no per-step snapshot).

Shares of capacity are averaged over the steps when at least one request was waiting (memory
under pressure); when no step was, over all steps. used + reserved + internal + free = 1.
"""
from __future__ import annotations

FIELDS = ("used", "reserved", "internal", "free", "tail", "efi")
EXACT_FLOAT_REPEATS = 1 << 20  # add.times above this: efi * times (may differ in the last bit)


class Shares:
    def __init__(self, capacity_tokens: int) -> None:
        self.capacity = capacity_tokens
        self.pressure = dict.fromkeys(("steps", *FIELDS), 0)
        self.every = dict.fromkeys(("steps", *FIELDS), 0)

    def wants(self, pressure: bool) -> bool:
        """Whether this step counts: always under pressure; otherwise only until the first
        pressure step (after it, all-steps sums are never reported)."""
        return pressure or not self.pressure["steps"]

    def add(self, pressure: bool, *, used: int, reserved: int, internal: int, free: int,
            tail: int, efi: float, times: int = 1) -> None:
        """`times` equal steps at once: integer sums exactly as `times` calls; the float efi
        sum too while efi is 0.0 (always so when nothing is held) or times is small."""
        vals = {"used": used, "reserved": reserved, "internal": internal, "free": free,
                "tail": tail}
        for acc in ((self.pressure, self.every) if pressure else (self.every,)):
            acc["steps"] += times
            for k, v in vals.items():
                acc[k] += v * times
            if efi == 0.0 or times > EXACT_FLOAT_REPEATS:
                acc["efi"] += efi * times
            else:
                for _ in range(times):
                    acc["efi"] += efi

    @property
    def pressure_steps(self) -> int:
        return int(self.pressure["steps"])

    def summary(self) -> dict[str, float]:
        acc = self.pressure if self.pressure["steps"] else self.every
        steps = max(1, acc["steps"])
        denom = steps * self.capacity
        return {
            "used_share": acc["used"] / denom,
            "reserved_share": acc["reserved"] / denom,
            "internal_share": acc["internal"] / denom,
            "free_share": acc["free"] / denom,
            "tail_waste_share": acc["tail"] / denom,
            "external_frag_index_mean": acc["efi"] / steps,
            "pressure_steps": self.pressure_steps,
        }
