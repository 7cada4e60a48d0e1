"""The heartbeat keeps slow streams alive without reordering or losing events."""

from __future__ import annotations

import anyio

from aircoach.sse import HEARTBEAT, with_heartbeat


async def test_heartbeat_comments_while_the_producer_is_slow():
    release = anyio.Event()

    async def events():
        yield {"type": "agent_message", "content": "a"}
        await release.wait()
        yield {"type": "done"}

    out = []
    async for chunk in with_heartbeat(events(), every_s=0.01):
        out.append(chunk)
        if out.count(HEARTBEAT) == 2:
            release.set()
    assert out[0].startswith(b"event: agent_message")
    assert out[1:3] == [HEARTBEAT, HEARTBEAT]
    assert out[-1].startswith(b"event: done")
