"""A regeneration (the AI SDK's `regenerate()`): the newest answer of a conversation, asked
for again, is replaced by the new one, not kept beside it.

The replaced turn is taken out of the store (or out of the dead-letter spool, when the store
refused it) once the new turn is admitted and before it is prepared, so that neither the
model's context nor `GET /api/history` holds it any more. If the new turn does not run after
all (refused as busy, or failed while it was prepared), the old one is put back as it was (its
turn id keeps its place), or, the store refusing it, spooled as a dead letter that the next
replay stores. Once the new turn runs, the old one's event log and
idempotency records are removed too, as a delete of the conversation removes its turns'.
After `stop()` the old answer still runs when its regeneration comes: the new turn interrupts
it and then takes it back the same way (`take_back_interrupted`)."""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

import anyio

from aircoach.turn.conversations import conversation_thread, shown_conversation_id
from aircoach.turn.records import Turn

if TYPE_CHECKING:
    # The chat route imports this module at start-up; admission imports the turn (LangChain).
    from aircoach.quiz.service import QuizService
    from aircoach.turn.admission import Gate

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Regeneration:
    """A request to answer the last user message again. `answer_id`: the answer it replaces
    when the client named it (useChat's `regenerate({messageId})`); None: the newest."""

    answer_id: str | None = None


async def take_back(
    gate: Gate,
    user_id: str,
    conversation_id: str | None,
    regeneration: Regeneration,
    *,
    question: str,
    interrupted: str | None = None,
    regenerating: str | None = None,
) -> Turn | None:
    """Remove the conversation's newest turn when it answers `question` (and is the answer
    named, if one was): from the store, or from the dead-letter spool when it waits there
    (the store refused it; it would come back beside the new answer at the next replay).
    The turn removed, or None (the newest turn answers another question, a client named an
    older answer, another request removed it first, or a newer turn still runs: `stop()`
    then `regenerate()`, and the stored one is an older answer to the same words): the new
    turn is then just a new turn. `interrupted`: only that turn may be removed, and the
    thread may be held by `regenerating`, the new turn (`take_back_interrupted`).
    `StoreUnavailable` when the store cannot be read or the spool fails to remove it."""
    newest = await gate.chats.recent_turns(user_id, 1, conversation=conversation_id)
    stored = newest[0] if newest else None
    spooled = await _spooled_newer(gate, user_id, conversation_id, regeneration, than=stored)
    turn = spooled or stored
    if turn is None:
        return None
    if turn.human != question or regeneration.answer_id not in (None, turn.turn_id):
        return None
    if interrupted is not None and turn.turn_id != interrupted:
        return None
    thread = conversation_thread(user_id, conversation_id)
    running = await gate.turn_log.holder(user_id, thread, now=gate.clock())
    if running is not None and running.turn_id not in (turn.turn_id, regenerating):
        return None
    if spooled is not None:
        await gate.dead_letters.remove(turn.turn_id)
    elif not await gate.chats.delete_turn(user_id, turn.turn_id):
        return None
    log.info("turn %s of %r taken back: it is being regenerated", turn.turn_id, user_id)
    return turn


async def take_back_interrupted(
    gate: Gate,
    user_id: str,
    conversation_id: str | None,
    regeneration: Regeneration,
    *,
    question: str,
    interrupted: str,
    regenerating: str,
) -> Turn | None:
    """`stop()` then `regenerate()`: the stopped answer ran on, and the new turn
    `regenerating` has just interrupted it (`interrupted`). Once it has stored what it had
    (waited for, on this instance or through the turn log), it is taken back as a stored
    answer is (`take_back`), when it is now the conversation's newest turn and answers
    `question`: the history then holds the new answer alone, as the AI SDK's own backends
    show it. An interrupted turn of another question stays (stored `interrupted`). Called
    once the interrupted turn has ended (`interrupted_has_ended`). The turn removed, or None;
    a store that fails is logged and the old answer stays."""
    taken: Turn | None = None
    try:
        with anyio.CancelScope(shield=True):
            taken = await take_back(
                gate,
                user_id,
                conversation_id,
                regeneration,
                question=question,
                interrupted=interrupted,
                regenerating=regenerating,
            )
    except Exception:
        log.warning(
            "turn %s was interrupted by its regeneration but could not be taken back",
            interrupted,
            exc_info=True,
        )
    return taken


async def _spooled_newer(
    gate: Gate,
    user_id: str,
    conversation_id: str | None,
    regeneration: Regeneration,
    *,
    than: Turn | None,
) -> Turn | None:
    """The conversation's newest turn when it waits in the dead-letter spool (the store
    refused it) and is newer than `than`, its newest stored one: the answer named, or else
    the newest spooled one of the conversation; None otherwise."""

    def belongs(turn: Turn) -> bool:
        return shown_conversation_id(turn.conversation_id) == conversation_id

    if regeneration.answer_id is not None:
        turn = await gate.dead_letters.find(user_id, regeneration.answer_id)
        if turn is not None and not belongs(turn):
            turn = None
    else:
        turn = await gate.dead_letters.newest(user_id, belongs)
    if turn is None or (than is not None and than.turn_id >= turn.turn_id):
        return None
    return turn


async def put_back(gate: Gate, turn: Turn) -> None:
    """Store again a turn taken back for a regeneration that did not run; spooled when the
    store refuses it (the request's own error is the one the client gets)."""
    try:
        await gate.chats.append_turn(turn)
    except Exception:
        log.warning("turn %s taken back could not be put back: spooled", turn.turn_id)
        await gate.dead_letters.keep(turn)  # which logs a spool that refuses it too
        return
    log.info("turn %s put back: its regeneration did not run", turn.turn_id)


async def let_go(gate: Gate, user_id: str, turn: Turn) -> None:
    """The regeneration runs: forget the replaced turn's event log and idempotency records.
    What the store cannot remove now is logged and the new turn runs all the same: a
    reservation left behind makes a resend of the replaced message's id a 409 until it goes
    stale, no worse."""
    try:
        await gate.turn_log.forget(user_id, [turn.turn_id])
        await gate.guards.reservations.forget_turns(user_id, [turn.turn_id])
    except Exception:
        log.warning(
            "turn %s was regenerated but its log or idempotency records remain",
            turn.turn_id,
            exc_info=True,
        )


async def let_go_gradings(
    quiz: Callable[[], Awaitable[QuizService]], user_id: str, turn: Turn
) -> None:
    """The regeneration runs: take back the quiz answers the replaced turn graded (its
    attempts, and their moves of the review schedule), which the new turn grades again. Not
    before: a regeneration that does not run leaves them as they were, with the turn put
    back. What the store cannot remove now is logged and the new turn runs all the same (the
    answer then counts twice, as before this was done)."""
    try:
        taken = await (await quiz()).take_back(user_id, turn.turn_id)
    except Exception:
        log.warning(
            "turn %s was regenerated but its quiz gradings remain", turn.turn_id, exc_info=True
        )
        return
    if taken:
        log.info("turn %s regenerated: its gradings of %s taken back", turn.turn_id, taken)
