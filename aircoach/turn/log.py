"""The turn log: what lets a turn outlive its connection and be followed from any instance.

- Each turn's events, numbered from 1 in the order they were sent, are written as they happen,
  in batches, as typed event data (the event's JSON object, not SSE text): any encoder (our
  SSE, the AI SDK stream) can replay them. `done` is written last, after the turn document was
  stored, so a client that saw `done` can read the whole turn at once. Entries expire after
  `LOG_TTL_S`; a finished turn older than that replays from the stored turn.
- One running turn per thread (a user's conversation): a claim naming the turn, with an
  expiry (the turn's deadline and a grace period), so that a turn whose instance died frees
  its thread. The claim carries the cancel flag that `POST /api/turns/{id}/cancel` sets from
  any instance and the running turn polls.

The stores (SQLite, MongoDB) implement `TurnLogStore`; both pass the same contract tests.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass
from functools import cached_property
from typing import Any, Protocol

LOG_TTL_S = 24 * 3600.0
# A running turn's claim on its thread is a lease: it lasts CLAIM_LEASE_S and the turn renews
# it every CLAIM_RENEW_S while it runs, so a claim left behind (an instance that died, a
# release that failed while the store was down) frees its thread within the lease.
CLAIM_LEASE_S = 30.0
CLAIM_RENEW_S = 10.0


@dataclass(frozen=True)
class LoggedEvent:
    """One event of a turn: its number in the turn (1, 2, ...) and its JSON object (with
    `type`)."""

    seq: int
    data: dict[str, Any]

    @property
    def type(self) -> str:
        return str(self.data["type"])

    @cached_property
    def text(self) -> str:
        """The JSON text of `data`, compact, made once: the log stores it, the SSE sends it."""
        return json.dumps(self.data, ensure_ascii=False, separators=(",", ":"))


@dataclass(frozen=True)
class RunningTurn:
    """The turn that holds a thread, until `expires_at` (unix seconds)."""

    turn_id: str
    thread: str
    expires_at: float
    cancel_requested: bool = False


class TurnLogStore(Protocol):
    async def append(
        self, user_id: str, turn_id: str, events: Sequence[LoggedEvent], *, expires_at: float
    ) -> None:
        """Add events to the turn's log (idempotent by `seq`: a batch written twice is kept
        once)."""
        ...

    async def finish(
        self, user_id: str, turn_id: str, events: Sequence[LoggedEvent], *, expires_at: float
    ) -> None:
        """The turn's last write: add `events` (as `append`; none is fine) and free the thread
        the turn still holds, if it holds one, in one transaction where the store has them."""
        ...

    async def read(
        self, user_id: str, turn_id: str, *, after: int = 0, limit: int = 500
    ) -> list[LoggedEvent]:
        """The user's turn's events numbered above `after`, in order, at most `limit`; none
        for another user's turn."""
        ...

    async def claim(
        self, user_id: str, thread: str, turn_id: str, *, now: float, expires_at: float
    ) -> RunningTurn | None:
        """Make `turn_id` the running turn of (user, thread): None when it got the thread
        (free, or held by an expired claim), else the live claim that holds it."""
        ...

    async def take_over(
        self,
        user_id: str,
        thread: str,
        *,
        held_by: str,
        turn_id: str,
        now: float,
        expires_at: float,
    ) -> bool:
        """Move the thread from `held_by` to `turn_id` (`if_busy: "interrupt"`), asking
        `held_by` to stop: False when `held_by` no longer holds it."""
        ...

    async def release(self, user_id: str, thread: str, turn_id: str) -> None:
        """Free the thread if `turn_id` still holds it."""
        ...

    async def renew(self, user_id: str, turn_id: str, *, expires_at: float) -> None:
        """Extend the claim `turn_id` holds (if it still holds one) to `expires_at`."""
        ...

    async def running(self, user_id: str, turn_id: str, *, now: float) -> RunningTurn | None:
        """The user's live claim of `turn_id`, or None (finished, expired, another user's)."""
        ...

    async def request_cancel(self, user_id: str, turn_id: str, *, now: float) -> bool:
        """Ask the user's running turn to stop: False when it is not running."""
        ...

    async def cancel_requested(self, turn_id: str) -> bool:
        """Whether someone asked this turn to stop (its own poll)."""
        ...

    async def holder(self, user_id: str, thread: str, *, now: float) -> RunningTurn | None:
        """The live claim on the user's thread (its running turn), or None."""
        ...

    async def forget(self, user_id: str, turn_ids: Sequence[str]) -> None:
        """Drop the logged events of the user's turns (a deleted conversation's)."""
        ...


async def listed(events: list[LoggedEvent]) -> AsyncIterator[LoggedEvent]:
    """Events that exist already, as a stream of them."""
    for event in events:
        yield event
