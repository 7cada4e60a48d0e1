"""What a chat request passes before its turn runs: a repeated `client_message_id` finds the
turn it started (replayed, never run again), and a new turn is charged to the user's budget
(`QUOTA_TURNS_PER_MINUTE`, `QUOTA_TURNS_PER_DAY`), counted in the store so that every
instance shares it. Both happen before any model call. The time is `services.clock` (the
composition root's, `time.time` unless it is given another)."""

from __future__ import annotations

import logging
from dataclasses import dataclass

from aircoach.errors import QuotaExceeded, TurnInProgress
from aircoach.models import Turn
from aircoach.services import Services
from aircoach.turn.turn import new_turn_id

log = logging.getLogger(__name__)

RESERVATION_TTL_S = 24 * 3600.0
# A reservation whose turn is still not stored this long after the turn's cap belongs to a
# request that died (an instance killed mid-turn): a repeat takes it over and runs the turn.
_GRACE_S = 60.0
_IN_PROGRESS_RETRY_S = 2
_DAY_S = 86_400


@dataclass(frozen=True)
class Admission:
    """`replay`: the stored turn to send again; else `turn_id` is the new turn's id, and
    `key` (if any) is reserved for it."""

    turn_id: str
    key: str | None = None
    replay: Turn | None = None


async def admit(services: Services, user_id: str, key: str | None) -> Admission:
    """Replay, or reserve and charge; `TurnInProgress` (409) while the first request of the
    same key is answered, `QuotaExceeded` (429) when the budget is spent."""
    turn_id = new_turn_id()
    if key is None:
        await charge(services, user_id)
        return Admission(turn_id)
    reservations = services.guards.reservations
    now = services.clock()
    held = await reservations.reserve(user_id, key, turn_id, now=now, ttl_s=RESERVATION_TTL_S)
    if held is not None:
        stored = await services.chats.get_turn(user_id, held.turn_id)
        if stored is not None:
            log.info(
                "replaying turn %s for %r (client_message_id repeated)", stored.turn_id, user_id
            )
            return Admission(stored.turn_id, key, replay=stored)
        stale = now - held.created_at > services.settings.turn_timeout_s + _GRACE_S
        if not stale or not await reservations.take_over(
            user_id, key, held_by=held.turn_id, turn_id=turn_id, now=now, ttl_s=RESERVATION_TTL_S
        ):
            raise TurnInProgress(message_id=key, headers={"Retry-After": str(_IN_PROGRESS_RETRY_S)})
        log.warning("turn %s for %r never stored: its repeat takes over", held.turn_id, user_id)
    try:
        await charge(services, user_id)
    except QuotaExceeded:
        await reservations.release(user_id, key, turn_id)
        raise
    return Admission(turn_id, key)


async def charge(services: Services, user_id: str) -> None:
    """Count one turn in the user's current minute and day, or `QuotaExceeded` with the
    seconds until the window ends in `Retry-After`."""
    settings = services.settings
    quotas = services.guards.quotas
    now = services.clock()
    per_minute = settings.quota_turns_per_minute
    if per_minute:
        minute = int(now // 60)
        if not await quotas.hit(
            user_id, f"m:{minute}", limit=per_minute, expires_at=(minute + 2) * 60.0
        ):
            retry = max(1, int((minute + 1) * 60 - now) + 1)
            _refused(user_id, "minute", per_minute)
            raise QuotaExceeded(
                "quota_per_minute",
                limit=per_minute,
                retry_after=retry,
                headers={"Retry-After": str(retry)},
            )
    per_day = settings.quota_turns_per_day
    if per_day:
        day = int(now // _DAY_S)
        if not await quotas.hit(
            user_id, f"d:{day}", limit=per_day, expires_at=(day + 2) * float(_DAY_S)
        ):
            retry = max(1, int((day + 1) * _DAY_S - now) + 1)
            _refused(user_id, "day", per_day)
            raise QuotaExceeded("quota_per_day", limit=per_day, headers={"Retry-After": str(retry)})


def _refused(user_id: str, window: str, limit: int) -> None:
    log.warning("quota: %r spent its %d turns of this %s", user_id, limit, window)
