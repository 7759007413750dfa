"""Where a lane's memory goes, as running sums over engine steps (no per-step snapshot).

Shares of capacity are averaged over the steps when at least one request was waiting (memory
under pressure); when no step was, over all steps. used + reserved + internal + free = 1.
"""
from __future__ import annotations

FIELDS = ("used", "reserved", "internal", "free", "tail", "efi")


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
            tail: int, efi: float) -> None:
        vals = {"used": used, "reserved": reserved, "internal": internal, "free": free,
                "tail": tail, "efi": efi}
        for acc in ((self.pressure, self.every) if pressure else (self.every,)):
            acc["steps"] += 1
            for k, v in vals.items():
                acc[k] += v

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
