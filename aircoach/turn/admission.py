"""What a chat request passes before its turn runs, in this order: a repeated
`client_message_id` finds the turn it started (replayed if stored, rejoined if still running,
never run again); a new turn is charged to the user's budget (`QUOTA_TURNS_PER_MINUTE`,
`QUOTA_TURNS_PER_DAY`); and it claims its thread, which one turn runs at a time (409
`turn_in_progress` naming the running turn; or, with `if_busy: "interrupt"`, the running turn
is cancelled and the new one takes the thread). A turn that does not run after all (refused as
busy, or failed while it was prepared) is given back its charge and its key (`give_back`). All of
it is counted in the store so that every instance shares it, and happens before any model
call. It is given its parts (`Gate`, built by the composition root as `Services.gate`); the
time is the gate's `clock` (`time.time` unless the composition root is given another)."""

from __future__ import annotations

import hashlib
import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import anyio

from aircoach.errors import QuotaExceeded, TurnInProgress
from aircoach.settings import Settings
from aircoach.turn.dead_letters import DeadLetters
from aircoach.turn.follow import logged_done
from aircoach.turn.guards import GuardStores
from aircoach.turn.log import CLAIM_LEASE_S, TurnLogStore
from aircoach.turn.ports import ChatStore
from aircoach.turn.records import Turn
from aircoach.turn.run import RunningTurns
from aircoach.turn.turn import new_turn_id

log = logging.getLogger(__name__)

RESERVATION_TTL_S = 24 * 3600.0
# A reservation whose turn is still not stored this long after the turn's cap belongs to a
# request that died (an instance killed mid-turn): a repeat takes it over and runs the turn.
_GRACE_S = 60.0
_IN_PROGRESS_RETRY_S = 2
# Reads of a thread's claim when another request moves it between a read and a take-over.
_CLAIM_ATTEMPTS = 3
_DAY_S = 86_400
# How long a turn waits for the one it interrupted on another instance to log its end: that
# instance reads the cancel flag every TICK_S (0.5 s), then stores what the turn had.
REMOTE_END_WAIT_S = 5.0


@dataclass(frozen=True)
class Gate:
    """What admission reads: the reservations and quota counters, where a turn ends up
    (stored, or spooled while the store is down), the running turns' claims (and this
    process's running turns, which an interrupt stops at once), the quota and turn-timeout
    settings, and the wall clock."""

    guards: GuardStores
    chats: ChatStore
    dead_letters: DeadLetters
    turn_log: TurnLogStore
    running: RunningTurns
    settings: Settings
    clock: Callable[[], float]


@dataclass(frozen=True)
class Admission:
    """`replay`: the stored turn to send again; `rejoin`: the running turn to follow; else
    `turn_id` is the new turn's id and `key` (if any) is reserved for it."""

    turn_id: str
    key: str | None = None
    replay: Turn | None = None
    rejoin: bool = False
    charged: tuple[str, ...] = ()  # the quota windows this turn was counted in


class KeyReused(Exception):
    """A repeated key sent with another question than the one its turn answers (the route
    makes it a 422 naming the key): that turn is not this question's answer."""

    def __init__(self, key: str):
        super().__init__(f"client_message_id {key[:64]!r} already answers another question")
        self.key = key


def question_fingerprint(query: str) -> str:
    """The digest a reservation keeps of its question, to tell a retry from a reused key."""
    return hashlib.sha256(query.encode()).hexdigest()[:32]


async def admit(gate: Gate, user_id: str, key: str | None, *, query: str) -> Admission:
    """Replay, rejoin, or reserve and charge; `TurnInProgress` (409) while the first request
    of the same key is between its run and its store write, `KeyReused` when the key's turn
    answers another `query`, `QuotaExceeded` (429) when the budget is spent. The new turn
    then claims its thread (`hold_thread`) once it is prepared: a request that fails before
    (the store down) leaves no claim behind, and one refused here (429, or 503 when the quota
    store fails) leaves its key free and no count behind."""
    turn_id = new_turn_id()
    if key is not None:
        found = await _repeated(gate, user_id, key, turn_id, question_fingerprint(query))
        if found is not None:
            return found
    try:
        charged = await charge(gate, user_id)  # all windows or none
    except Exception:
        await give_back(gate, user_id, Admission(turn_id, key))
        raise
    return Admission(turn_id, key, charged=tuple(charged))


async def hold_thread(
    gate: Gate, user_id: str, thread: str, admission: Admission, *, interrupt: bool
) -> str | None:
    """Claim `thread` for the admitted turn, or `TurnInProgress` (409, naming the running
    turn); a turn that does not get its thread is given back (`give_back`). The id of the
    running turn it interrupted, if it did."""
    try:
        return await _claim(gate, user_id, thread, admission.turn_id, interrupt=interrupt)
    except Exception as exc:
        if not isinstance(exc, TurnInProgress):
            # The store may have taken the claim before it failed (its answer lost as it went
            # down): such a claim would hold the thread for its lease, a 409 naming a turn
            # that never ran. This process knows better (`_ended`).
            gate.running.gave_up(admission.turn_id)
        await give_back(gate, user_id, admission)
        raise


async def interrupted_has_ended(gate: Gate, user_id: str, turn_id: str) -> None:
    """Wait until `turn_id`, which `hold_thread` interrupted, has stored what it had and
    ended: when it runs in this process, at most `TURN_TIMEOUT_S`; on another instance, which
    sees the interrupt at its next read of the cancel flag (`TICK_S`), until its `done` is in
    the turn log, at most `REMOTE_END_WAIT_S` (an instance that died never logs it). A turn
    cut short drops its conversation's warm thread as it ends, and a regeneration takes the
    stopped answer back once it is stored: the turn that interrupted it is prepared again
    afterwards. A request that goes away (the client left) stops waiting: its turn will not
    run (`let_thread_go`)."""
    run = gate.running.get(turn_id)
    if run is not None:
        with anyio.move_on_after(gate.settings.turn_timeout_s):
            await run.ended.wait()
        return
    with anyio.move_on_after(REMOTE_END_WAIT_S) as waited:
        await logged_done(gate.turn_log, user_id, turn_id)
    if waited.cancelled_caught:
        log.warning(
            "turn %s, interrupted on another instance, logged no end within "
            "REMOTE_END_WAIT_S=%gs: the turn that interrupted it goes on without it",
            turn_id,
            REMOTE_END_WAIT_S,
        )


async def let_thread_go(gate: Gate, user_id: str, thread: str, admission: Admission) -> None:
    """Undo `hold_thread` for a turn that held its thread and will not run after all (its
    request cancelled while it waited for the turn it interrupted): the thread is freed for
    the next message at once, not when the claim's lease lapses, and the turn is given back
    (`give_back`). A release the store refuses is logged: this process counts the turn as
    one that never ran, so its next claim of the thread takes it over."""
    gate.running.gave_up(admission.turn_id)
    try:
        await gate.turn_log.release(user_id, thread, admission.turn_id)
    except Exception:
        log.warning(
            "turn %s for %r did not run and its thread could not be released",
            admission.turn_id,
            user_id,
            exc_info=True,
        )
    await give_back(gate, user_id, admission)


async def give_back(gate: Gate, user_id: str, admission: Admission) -> None:
    """Undo the admission of a turn that will not run (refused as busy, or failed while it was
    prepared: the store down): its charge is refunded and its key released, so that the
    client's retry runs it and costs one turn. What the store cannot take back is logged; the
    request's own error is the one the client gets."""
    await _refund(gate, user_id, admission.charged)
    if admission.key is not None:
        try:
            await gate.guards.reservations.release(user_id, admission.key, admission.turn_id)
        except Exception:
            log.warning(
                "turn %s for %r did not run and its key could not be released",
                admission.turn_id,
                user_id,
                exc_info=True,
            )


async def _refund(gate: Gate, user_id: str, windows: Sequence[str]) -> None:
    """Give back one count in each of `windows`; a store that cannot is logged, not raised."""
    for window in windows:
        try:
            await gate.guards.quotas.refund(user_id, window)
        except Exception:
            log.warning(
                "quota: a count of %r in window %s could not be given back",
                user_id,
                window,
                exc_info=True,
            )


async def _repeated(
    gate: Gate, user_id: str, key: str, turn_id: str, fingerprint: str
) -> Admission | None:
    """The admission of a repeated key (None: the key is now reserved for `turn_id`)."""
    reservations = gate.guards.reservations
    now = gate.clock()
    held = await reservations.reserve(
        user_id, key, turn_id, now=now, ttl_s=RESERVATION_TTL_S, fingerprint=fingerprint
    )
    if held is None:
        return None
    if held.fingerprint and held.fingerprint != fingerprint:
        raise KeyReused(key)
    stored = await finished_turn(gate, user_id, held.turn_id)
    if stored is not None:
        log.info("replaying turn %s for %r (client_message_id repeated)", stored.turn_id, user_id)
        return Admission(stored.turn_id, key, replay=stored)
    if await gate.turn_log.running(user_id, held.turn_id, now=now) is not None:
        log.info("rejoining turn %s for %r (client_message_id repeated)", held.turn_id, user_id)
        return Admission(held.turn_id, key, rejoin=True)
    stale = now - held.created_at > gate.settings.turn_timeout_s + _GRACE_S
    if not stale or not await reservations.take_over(
        user_id, key, held_by=held.turn_id, turn_id=turn_id, now=now, ttl_s=RESERVATION_TTL_S
    ):
        raise in_progress(key, held.turn_id)
    log.warning("turn %s for %r never stored: its repeat takes over", held.turn_id, user_id)
    return None


async def finished_turn(gate: Gate, user_id: str, turn_id: str) -> Turn | None:
    """The user's turn once it has ended: stored, or, when the store refused it (an outage),
    waiting in the spool until a healthy request replays it; None before either."""
    stored = await gate.chats.get_turn(user_id, turn_id)
    if stored is None:
        stored = await gate.dead_letters.find(user_id, turn_id)
    return stored


def in_progress(key: str, turn_id: str) -> TurnInProgress:
    """409 for a repeated key whose turn is between its run and its store write: retry soon.
    The message names the client's message id, not the conversation it is kept with."""
    return TurnInProgress(
        "turn_in_progress",
        message_id=key.rpartition("/")[2],
        fields={"turn_id": turn_id},
        headers={"Retry-After": str(_IN_PROGRESS_RETRY_S)},
    )


async def _ended(gate: Gate, user_id: str, turn_id: str) -> bool:
    """Whether the turn was stored (or spooled, the store being down), or never ran (its
    claim failed on this instance): it has ended."""
    if gate.running.never_ran(turn_id):
        return True
    if await gate.chats.get_turn(user_id, turn_id) is not None:
        return True
    return await gate.dead_letters.find(user_id, turn_id) is not None


async def _claim(
    gate: Gate, user_id: str, thread: str, turn_id: str, *, interrupt: bool
) -> str | None:
    """Make `turn_id` the running turn of `thread` (until its deadline and a grace period,
    should its instance die), or interrupt the running one when asked (its id). A take-over that
    another request made first (a second interrupt, a second message after an ended turn)
    reads the claim again: the 409 names the turn that holds the thread now, and an interrupt
    interrupts that one."""
    turn_log = gate.turn_log
    holder = ""
    for _ in range(_CLAIM_ATTEMPTS):
        now = gate.clock()
        expires_at = now + CLAIM_LEASE_S  # the running turn renews it (`TurnRun`)
        held = await turn_log.claim(user_id, thread, turn_id, now=now, expires_at=expires_at)
        if held is None:
            return None
        holder = held.turn_id
        if await _ended(gate, user_id, holder):
            if await turn_log.take_over(
                user_id,
                thread,
                held_by=held.turn_id,
                turn_id=turn_id,
                now=now,
                expires_at=expires_at,
            ):
                # Its release failed (the store was down as it ended): an ended turn holds
                # nothing.
                log.warning(
                    "turn %s still held the thread of %r after it ended", held.turn_id, user_id
                )
                return None
        elif not interrupt:
            break
        elif await turn_log.take_over(
            user_id, thread, held_by=held.turn_id, turn_id=turn_id, now=now, expires_at=expires_at
        ):
            log.info("turn %s for %r interrupts turn %s", turn_id, user_id, held.turn_id)
            gate.running.stop(held.turn_id)
            return held.turn_id
    raise TurnInProgress(
        "thread_busy",
        turn_id=holder,
        fields={"turn_id": holder},
        headers={"Retry-After": str(_IN_PROGRESS_RETRY_S)},
    )


async def charge(gate: Gate, user_id: str) -> list[str]:
    """Count one turn in the user's current minute and day, or `QuotaExceeded` with the
    seconds until the window ends in `Retry-After`; the windows counted in. All or nothing: a
    refusal, or a store failure, gives back the windows already counted."""
    charged: list[str] = []
    now = gate.clock()
    try:
        for window, limit, name, ends_at, expires_at in _windows(gate, now):
            if not await gate.guards.quotas.hit(
                user_id, window, limit=limit, now=now, expires_at=expires_at
            ):
                retry = max(1, int(ends_at - gate.clock()) + 1)
                _refused(user_id, name, limit)
                raise QuotaExceeded(
                    f"quota_per_{name}",
                    limit=limit,
                    retry_after=retry,  # the day's message does not say it
                    headers={"Retry-After": str(retry)},
                )
            charged.append(window)
    except Exception:
        await _refund(gate, user_id, charged)
        raise
    return charged


def _windows(gate: Gate, now: float) -> list[tuple[str, int, str, float, float]]:
    """The quota windows a turn is counted in at `now`: (key, limit, name, end, expiry), the day's
    first: a turn refused by the minute then found room in the day, so the minute's
    `Retry-After` is true, and one refused by the day is told the day's end even when its
    minute is spent too."""
    settings = gate.settings
    windows = []
    if per_day := settings.quota_turns_per_day:
        day = int(now // _DAY_S)
        windows.append(
            (f"d:{day}", per_day, "day", (day + 1) * float(_DAY_S), (day + 2) * float(_DAY_S))
        )
    if per_minute := settings.quota_turns_per_minute:
        minute = int(now // 60)
        windows.append(
            (f"m:{minute}", per_minute, "minute", (minute + 1) * 60.0, (minute + 2) * 60.0)
        )
    return windows


def _refused(user_id: str, window: str, limit: int) -> None:
    log.warning("quota: %r spent its %d turns of this %s", user_id, limit, window)
