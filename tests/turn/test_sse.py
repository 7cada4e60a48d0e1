"""The heartbeat keeps slow streams alive without reordering or losing events."""

from __future__ import annotations

import anyio

from aircoach.turn.events import AgentMessage, Done
from aircoach.turn.sse import HEARTBEAT, with_heartbeat


async def test_heartbeat_comments_while_the_producer_is_slow():
    """Whatever the machine's load: every event arrives once and in order, and while the
    producer waits the stream carries heartbeats (the producer waits until two were sent)."""
    release = anyio.Event()
    done = Done(turn_id="t", prompt_version="v", model="m", context_turns=0, request_id="r")

    async def events():
        yield AgentMessage(content="a")
        await release.wait()
        yield done

    out: list[bytes] = []
    first = AgentMessage(content="a").encode()
    async for chunk in with_heartbeat(events(), every_s=0.01):
        out.append(chunk)
        if first in out and out[out.index(first) :].count(HEARTBEAT) >= 2:
            release.set()
    assert [c for c in out if c != HEARTBEAT] == [first, done.encode()]
    assert out[out.index(first) :].count(HEARTBEAT) >= 2  # sent while the producer waited
    assert out[-1] == done.encode()


async def test_no_heartbeat_while_events_flow():
    async def events():
        for i in range(50):
            yield AgentMessage(content=str(i))

    out = [chunk async for chunk in with_heartbeat(events(), every_s=3600)]
    assert HEARTBEAT not in out and len(out) == 50
