"""A turn's events for a client that comes back (`GET /api/turns/{turn_id}/events`, or a
repeated `client_message_id` while its turn runs): taken as they come from the turn itself
when it runs on this instance, else followed from the turn log while the turn runs or its log
is kept, else rebuilt from the stored turn; None when the caller has no turn of that id."""

from __future__ import annotations

import time
from collections.abc import AsyncIterator
from typing import Any

from aircoach.logs import current_request_id
from aircoach.messages import Language
from aircoach.turn.events import Done
from aircoach.turn.follow import follow
from aircoach.turn.log import LoggedEvent, TurnLogStore, listed
from aircoach.turn.ports import ChatStore
from aircoach.turn.replay import replayed_events
from aircoach.turn.run import RunningTurns


async def turn_events(
    turn_log: TurnLogStore,
    chats: ChatStore,
    user_id: str,
    turn_id: str,
    *,
    after: int,
    language: Language,
    give_up_s: float,
    caveats: bool,
    running: RunningTurns,
) -> AsyncIterator[LoggedEvent] | None:
    """The events numbered above `after`, to the turn's `done` (`caveats`: GROUNDING_CAVEAT,
    for a turn rebuilt from the store; `running`: the turns this process runs)."""
    run = running.get(turn_id)
    if run is not None and run.user_id == user_id:
        # Here: every event as the turn makes it, not when the log's next write lands.
        return run.live(after)

    async def ended(seq: int) -> dict[str, Any]:
        stored = await chats.get_turn(user_id, turn_id)
        if stored is not None:
            return replayed_events(stored, language, caveats=caveats)[-1].data
        done = Done(
            status="interrupted",
            turn_id=turn_id,
            prompt_version="",
            model="",
            context_turns=0,
            request_id=current_request_id() or "",
        )
        return done.model_dump(mode="json")

    logged = await turn_log.read(user_id, turn_id, after=0, limit=1)
    if logged or await turn_log.running(user_id, turn_id, now=time.time()) is not None:
        return follow(turn_log, user_id, turn_id, after=after, ended=ended, give_up_s=give_up_s)
    stored = await chats.get_turn(user_id, turn_id)
    if stored is None:
        return None
    events = replayed_events(stored, language, caveats=caveats)
    # Numbered anew (the log that numbered them first is gone, its answer one event now): a
    # client whose Last-Event-ID runs past them still gets `done`, never a stream without it.
    return listed([e for e in events if e.seq > after] or events[-1:])
