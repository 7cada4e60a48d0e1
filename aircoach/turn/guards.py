"""The ports of the stores behind safe retries and per-user budgets, shared by every
instance (adapters in `aircoach.store`):

- `ReservationStore` (collection `idempotency`): one reservation per (user,
  client_message_id), naming the turn that answers it and the question it answers, for 24 h;
  a repeat finds the turn instead of running the model again. A quiz answer's
  `Idempotency-Key` is reserved here too (`aircoach.quiz.repeats`).
- `QuotaStore` (collection `quotas`): a counter per (user, window), incremented atomically
  and never past its limit.

Kept apart from `chats`: a reservation exists before its turn is stored, and both expire.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol


@dataclass(frozen=True)
class Reservation:
    """Who holds a client_message_id: the turn that answers it, reserved at `created_at`
    (unix seconds), for the question whose digest is `fingerprint` ("": reserved before
    reservations kept it)."""

    turn_id: str
    created_at: float
    fingerprint: str = ""


class ReservationStore(Protocol):
    async def reserve(
        self,
        user_id: str,
        key: str,
        turn_id: str,
        *,
        now: float,
        ttl_s: float,
        fingerprint: str = "",
    ) -> Reservation | None:
        """Reserve (user_id, key) for `turn_id` and the question `fingerprint` until
        `now + ttl_s`: None when this call got it (no reservation, or only an expired one),
        else the live reservation holding it."""
        ...

    async def take_over(
        self, user_id: str, key: str, *, held_by: str, turn_id: str, now: float, ttl_s: float
    ) -> bool:
        """Move the reservation from `held_by` to `turn_id` (its first request died before
        storing a turn); False when another request moved it first."""
        ...

    async def release(self, user_id: str, key: str, turn_id: str) -> None:
        """Drop the reservation if `turn_id` still holds it (its turn never started: a 429,
        a backend down), so that a retry runs."""
        ...

    async def forget_turns(self, user_id: str, turn_ids: Sequence[str]) -> None:
        """Drop the user's reservations of these turns (a deleted conversation's)."""
        ...


class QuotaStore(Protocol):
    async def hit(
        self, user_id: str, window: str, *, limit: int, now: float, expires_at: float
    ) -> bool:
        """Count one turn in `window` unless it already holds `limit`: whether it was
        counted. Atomic across instances; the counter may be dropped after `expires_at`
        (counters that expired by `now` may be dropped as this one is written)."""
        ...

    async def refund(self, user_id: str, window: str) -> None:
        """Take back one count of `window` (a turn refused after it was charged)."""
        ...


@dataclass(frozen=True)
class GuardStores:
    reservations: ReservationStore
    quotas: QuotaStore
