"""A quiz answer, or a mock exam's creation, sent again (a double tap, a client's retry after
a timeout) counts once.

The client names its request with an `Idempotency-Key`; the key is reserved for 24 h in the
reservations the chat's `client_message_id` uses (`aircoach.turn.guards`, shared by every
instance), with the digest of the request it names. The reservation is held while the first
request records its work and marked recorded after it, with what it made (an exam's id):

- a repeat of a recorded request gets its result again and records nothing (`Claim.replay`,
  `Claim.made`);
- a repeat while the first request still records it is `AnswerKeyBusy` (409, retry shortly),
  unless the first request died: after `PENDING_LEASE_S` the repeat takes the key over;
- the key with another request is `AnswerKeyReused` (422 naming the key);
- a request that records nothing (refused by the quota, the store down) releases the key.
"""

from __future__ import annotations

import hashlib
import logging
import uuid
from dataclasses import dataclass

import anyio

from aircoach.turn.guards import ReservationStore

log = logging.getLogger(__name__)

ANSWER_KEY_TTL_S = 24 * 3600.0
# A first request that has not recorded its answer after this long has died (grading is a
# few store writes): a repeat takes the key over and records it.
PENDING_LEASE_S = 60.0
# Chat keys are a message id or `conversation/message id`, and neither a message id nor a
# conversation id holds both `.` and `/`: no chat key is a quiz key.
ANSWERS = "quiz.answer/"
EXAMS = "quiz.exam/"
_PENDING = "quiz-pending:"
_RECORDED = "quiz-recorded:"


class AnswerKeyReused(Exception):
    """The key names another answer (another question, or another letter)."""


class AnswerKeyBusy(Exception):
    """The key's first request is still recording its answer."""


@dataclass(frozen=True)
class Claim:
    """The key's reservation: `replay` when its answer was recorded already, else `holder`
    holds it for this request, which records the answer."""

    key: str
    holder: str
    replay: bool = False
    made: str = ""  # for a replay, what the first request made (`recorded`'s `made`)


def _kind(key: str) -> str:
    """What a reserved key names, for a log line: `quiz.answer`, `quiz.exam`."""
    return key.partition("/")[0]


def answer_digest(capitolo: int, numero: int, letter: str) -> str:
    """What a key remembers of its answer: the question and the letter it was read as, so
    that `b` and `la b` are the same answer."""
    return hashlib.sha256(f"{capitolo}.{numero}.{letter}".encode()).hexdigest()[:32]


def exam_digest(capitoli: list[int] | None, domande: int | None) -> str:
    """What a key remembers of an exam's request: its chapters (in any order) and size."""
    asked = f"{sorted(set(capitoli)) if capitoli else '-'}.{domande or '-'}"
    return hashlib.sha256(asked.encode()).hexdigest()[:32]


async def claim(
    reservations: ReservationStore,
    user_id: str,
    client_key: str,
    digest: str,
    *,
    now: float,
    kind: str = ANSWERS,
) -> Claim:
    """Reserve the user's `client_key` for the request `digest` (of `kind`, `ANSWERS` or
    `EXAMS`), or find who holds it. Raises `AnswerKeyReused`, `AnswerKeyBusy`."""
    key = kind + client_key
    holder = _PENDING + uuid.uuid4().hex
    held = await reservations.reserve(
        user_id, key, holder, now=now, ttl_s=ANSWER_KEY_TTL_S, fingerprint=digest
    )
    if held is None:
        return Claim(key, holder)
    if held.fingerprint != digest:
        raise AnswerKeyReused(client_key)
    if held.turn_id.startswith(_RECORDED):
        log.info("%s replayed for %r (Idempotency-Key repeated)", _kind(key), user_id)
        return Claim(key, held.turn_id, replay=True, made=held.turn_id.removeprefix(_RECORDED))
    if now - held.created_at > PENDING_LEASE_S and await reservations.take_over(
        user_id, key, held_by=held.turn_id, turn_id=holder, now=now, ttl_s=ANSWER_KEY_TTL_S
    ):
        log.warning("%s of %r never recorded by its first request: taken over", _kind(key), user_id)
        return Claim(key, holder)
    raise AnswerKeyBusy(client_key)


async def recorded(
    reservations: ReservationStore, user_id: str, claim: Claim, *, now: float, made: str = ""
) -> None:
    """Mark the claimed key's request recorded, with what it `made` (an exam's id): its repeats
    replay it from now on. A store that fails now does not fail the request (it is recorded):
    the key stays pending, and a repeat after `PENDING_LEASE_S` records it again."""
    try:
        await reservations.take_over(
            user_id,
            claim.key,
            held_by=claim.holder,
            turn_id=_RECORDED + (made or claim.holder.removeprefix(_PENDING)),
            now=now,
            ttl_s=ANSWER_KEY_TTL_S,
        )
    except Exception:
        log.warning(
            "%s of %r recorded, its key not marked", _kind(claim.key), user_id, exc_info=True
        )


async def release(reservations: ReservationStore, user_id: str, claim: Claim) -> None:
    """Free the key of an answer that was not recorded, so that the client's retry records
    it; a store that cannot is logged (the request's own error is the one the client gets),
    and the key frees itself after `PENDING_LEASE_S`."""
    try:
        # Shielded: a request cancelled while it recorded still frees its key.
        with anyio.CancelScope(shield=True), anyio.fail_after(5):
            await reservations.release(user_id, claim.key, claim.holder)
    except Exception:
        log.warning(
            "%s of %r not recorded, its key not released", _kind(claim.key), user_id, exc_info=True
        )
