"""Task run stores that fail where a test needs the store to fail (shared by the HTTP routes'
and the SQS worker's tests)."""

from __future__ import annotations

from aircoach.errors import StoreUnavailable


class DownRuns:
    """A run store that is down: nothing is stored or read."""

    async def insert_run(self, run):
        raise StoreUnavailable()

    async def get_run(self, run_id):
        raise StoreUnavailable()


class UnmarkedKeys:
    """The real runs, whose keys cannot be marked done (the store fails right after a run)."""

    def __init__(self, real):
        self.real = real

    def __getattr__(self, name):
        return getattr(self.real, name)

    async def complete(self, key, run_id):
        raise StoreUnavailable()


class UnstoredRuns:
    """The real runs, none of which can be stored (the store fails after the review queue)."""

    def __init__(self, real):
        self.real = real

    def __getattr__(self, name):
        return getattr(self.real, name)

    async def insert_run(self, run):
        raise StoreUnavailable()
