"""The heartbeat keeps slow streams alive without reordering or losing events."""

from __future__ import annotations

from contextlib import aclosing

import anyio

from aircoach.routes.sse import HEARTBEAT, OUTBOX_BYTES, encode_event, with_heartbeat
from aircoach.turn.events import AgentMessage, Done


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
    first = encode_event(AgentMessage(content="a"))
    async for chunk in with_heartbeat(events(), every_s=0.01):
        out.append(chunk)
        if first in out and out[out.index(first) :].count(HEARTBEAT) >= 2:
            release.set()
    assert [c for c in out if c != HEARTBEAT] == [first, encode_event(done)]
    assert out[out.index(first) :].count(HEARTBEAT) >= 2  # sent while the producer waited
    assert out[-1] == encode_event(done)


async def test_no_heartbeat_while_events_flow_and_ready_events_share_a_write():
    sent = [AgentMessage(content=str(i)) for i in range(50)]

    async def events():
        for event in sent:
            yield event

    out = [chunk async for chunk in with_heartbeat(events(), every_s=3600)]
    assert HEARTBEAT not in out
    assert b"".join(out) == b"".join(encode_event(event) for event in sent)
    assert len(out) < len(sent)  # events that were ready together went out together


async def test_a_client_that_reads_slowly_holds_back_the_turn_not_memory():
    """The outbox holds at most OUTBOX_BYTES (plus one event) before the turn waits for the
    client to take what is there."""
    produced: list[int] = []
    big = AgentMessage(content="x" * 10_000)

    async def events():
        for i in range(100):
            produced.append(i)
            yield big

    size = len(encode_event(big))
    async with aclosing(with_heartbeat(events(), every_s=3600)) as stream:
        first = await anext(stream)
        await anyio.wait_all_tasks_blocked()
        assert len(first) <= OUTBOX_BYTES + size
        # The write in the client's hands, a full outbox, the event waiting for room.
        assert len(produced) <= 2 * (OUTBOX_BYTES // size + 1) + 1
        rest = [chunk async for chunk in stream]
    assert b"".join([first, *rest]) == encode_event(big) * 100
