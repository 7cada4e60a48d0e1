"""A clock the test moves by hand (for TTLs, cooldowns and caches)."""

from __future__ import annotations

import time

_DAY_S = 86_400


class FakeClock:
    def __init__(self, now: float = 1000.0):
        self.now = now

    def __call__(self) -> float:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += seconds


def quota_clock() -> FakeClock:
    """A wall clock ten seconds into a UTC day (so into a minute too) that has not begun: quota
    windows of a minute or a day a test fills cannot roll over under it unless the test moves
    it, and the store keeps what expires after it (MongoDB's TTL index drops documents whose
    expiry is past by the real clock). With `time.time`, a test's turns can straddle a minute
    and the quota it expects never comes."""
    return FakeClock((time.time() // _DAY_S + 2) * _DAY_S + 10)
