"""Following a turn from the turn log, on any instance: the events after a number, then each
new one as the running turn writes it, until `done`.

A turn is running while it holds its claim (`TurnLogStore.running`); it lets go of the claim
once it is stored, just before it writes `done`. When the log has no more events and the turn
no longer runs, the follower reads again for `ENDING_READS` more polls (to let `done` arrive)
and, if it is still missing, the turn ended without it: its instance died or was frozen when
its response ended. The follower then ends with a `done` of its own: the stored turn's, or
`status: "interrupted"`. A client that already read `done` gets nothing more, nor does one
whose id runs past the logged `done` (no event of this turn has it): no `done` is made up
after a real one.

Events are taken only while their numbers follow each other: a batch being written may show
a later event before an earlier one, and the follower must neither skip nor repeat.
"""

from __future__ import annotations

import time
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import anyio

from aircoach.turn.log import LoggedEvent, TurnLogStore

POLL_S = 0.25
READ_LIMIT = 500
ENDING_READS = 2


async def follow(
    store: TurnLogStore,
    user_id: str,
    turn_id: str,
    *,
    after: int = 0,
    ended: Callable[[int], Awaitable[dict[str, Any]]],
    poll_s: float = POLL_S,
    give_up_s: float,
    clock: Callable[[], float] = time.time,
) -> AsyncIterator[LoggedEvent]:
    """The turn's events numbered above `after`, then the new ones, until `done`.
    `await ended(n)` makes the closing `done` (numbered `n`) of a turn that ended without
    logging one. Past `give_up_s` without a new event the turn counts as ended."""
    quiet_since = clock()
    ending = 0  # empty reads since the turn let go of its claim
    while True:
        batch = await store.read(user_id, turn_id, after=after, limit=READ_LIMIT)
        taken = 0
        for event in batch:
            if event.seq != after + 1:
                break  # a gap: the rest of that batch is still being written
            after, taken = event.seq, taken + 1
            yield event
            if event.type == "done":
                return
        if taken:
            quiet_since, ending = clock(), 0
            if taken == len(batch):
                continue  # maybe more: read on at once
        elif (
            ending
            or clock() - quiet_since > give_up_s
            or not await store.running(user_id, turn_id, now=clock())
        ):
            ending += 1
            # The client has read the end already, or names no event of ours: nothing more
            # will come (asked at once, so a client that rejoins an ended turn is not kept
            # waiting, and again before a `done` is made up).
            asks = (ending == 1 or ending > ENDING_READS) and after
            if asks and await _logged_done_by(store, user_id, turn_id, after):
                return
            if ending > ENDING_READS:
                yield LoggedEvent(after + 1, await ended(after + 1))
                return
        await anyio.sleep(poll_s)


async def logged_done(
    store: TurnLogStore, user_id: str, turn_id: str, *, poll_s: float = POLL_S
) -> None:
    """Wait until the log holds the turn's `done`: the turn has ended and stored what it had
    (or spooled it), on whichever instance it ran. The caller bounds the wait."""
    after = 0
    while True:
        for event in await store.read(user_id, turn_id, after=after, limit=READ_LIMIT):
            if event.type == "done":
                return
            after = event.seq
        await anyio.sleep(poll_s)


async def _logged_done_by(store: TurnLogStore, user_id: str, turn_id: str, seq: int) -> bool:
    """Whether the log holds the turn's `done` numbered `seq` or lower. An id past the log
    with no `done` in it is a client that read events live which the log never got (their
    instance died): that turn still ends with the `done` made for it."""
    at = await store.read(user_id, turn_id, after=seq - 1, limit=1)
    if at and at[0].seq == seq:
        return at[0].type == "done"
    # Past the log: only a client's id that this turn never sent gets here, so reading the
    # whole log once (a few pages at most) to find its `done` costs nothing that matters.
    last = 0
    while page := await store.read(user_id, turn_id, after=last, limit=READ_LIMIT):
        for event in page:
            if event.type == "done":
                return event.seq <= seq
        last = page[-1].seq
    return False
