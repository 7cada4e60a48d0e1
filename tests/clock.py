"""A clock the test moves by hand (for TTLs, cooldowns and caches)."""

from __future__ import annotations


class FakeClock:
    def __init__(self, now: float = 1000.0):
        self.now = now

    def __call__(self) -> float:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += seconds
