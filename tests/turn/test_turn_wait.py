"""The turn's wait on the agent, once per streamed chunk (`ChatTurn._next_event`): it ends at
the turn's deadline (`TurnTimeout`) or at once when the turn is cancelled (`TurnCancelled`),
and a TimeoutError of the agent's own is the agent's failure, not the turn's deadline."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from types import SimpleNamespace
from typing import Any

import anyio
import pytest

from aircoach.errors import TurnTimeout
from aircoach.turn.events import AgentMessage
from aircoach.turn.turn import ChatTurn, TurnCancelled

WAIT_S = 30.0  # for what should happen at once


def _turn() -> Any:
    # The two fields the wait reads and `cancel` sets: the rest of a turn plays no part.
    return SimpleNamespace(cancelled=False, _timer=None, _waiting=None)


class _Stalls:
    """An agent that gives one event, then waits for ever (a model that stopped sending)."""

    def __init__(self) -> None:
        self.waiting = anyio.Event()
        self.given = False

    def __aiter__(self) -> AsyncIterator[AgentMessage]:
        return self

    async def __anext__(self) -> AgentMessage:
        if not self.given:
            self.given = True
            return AgentMessage(content="Il QNH ")
        self.waiting.set()
        await anyio.sleep_forever()
        raise AssertionError("unreachable")


async def test_each_wait_gets_the_event_and_the_last_ends_at_the_deadline():
    turn, agent = _turn(), _Stalls()
    deadline = anyio.current_time() + WAIT_S
    assert await ChatTurn._next_event(turn, agent, deadline) == AgentMessage(content="Il QNH ")
    with pytest.raises(TurnTimeout):
        await ChatTurn._next_event(turn, agent, anyio.current_time() + 0.01)
    assert turn._timer is None


async def test_a_cancel_ends_the_wait_at_once_and_the_next_one_before_it_begins():
    turn, agent = _turn(), _Stalls()
    await ChatTurn._next_event(turn, agent, anyio.current_time() + WAIT_S)

    async def cancel_once_waiting() -> None:
        await agent.waiting.wait()
        ChatTurn.cancel(turn)

    with anyio.fail_after(WAIT_S):
        async with anyio.create_task_group() as tg:
            tg.start_soon(cancel_once_waiting)
            with pytest.raises(TurnCancelled):
                await ChatTurn._next_event(turn, agent, anyio.current_time() + 3600)
    with pytest.raises(TurnCancelled):
        await ChatTurn._next_event(turn, agent, anyio.current_time() + 3600)


async def test_a_timeout_error_of_the_agent_s_own_is_its_failure():
    class TimesOut:
        def __aiter__(self) -> TimesOut:
            return self

        async def __anext__(self) -> AgentMessage:
            raise TimeoutError("a read of the model timed out")

    with pytest.raises(TimeoutError, match="read of the model"):
        await ChatTurn._next_event(_turn(), TimesOut(), anyio.current_time() + WAIT_S)


async def test_a_cancel_between_the_deadline_and_the_wake_up_does_not_fail():
    """The deadline fired and the wait has not woken yet when the cancel comes (another task's
    callback): an expired asyncio timeout refuses a new time; the cancel must not fail."""
    loop = asyncio.get_running_loop()
    turn, failed = _turn(), []

    def cancel() -> None:
        try:
            ChatTurn.cancel(turn)
        except Exception as exc:
            failed.append(exc)

    with pytest.raises(TimeoutError):
        async with asyncio.timeout_at(loop.time() - 1) as timer:
            turn._timer = timer
            loop.call_soon(cancel)  # after the timer's expiry (queued first), before the wake-up
            await asyncio.sleep(WAIT_S)
    assert failed == [] and turn.cancelled
