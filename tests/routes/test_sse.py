"""The heartbeat keeps slow streams alive without reordering or losing events."""

from __future__ import annotations

from contextlib import aclosing
from typing import Any

import anyio

from aircoach.routes.sse import (
    HEARTBEAT,
    OUTBOX_BYTES,
    SseEncoder,
    encode_sse,
    live,
    with_heartbeat,
)
from aircoach.turn.events import AgentMessage, Done
from aircoach.turn.run import TurnRun

WAIT_S = 30.0  # for things that should happen at once; the test fails past it


def enc(event: Any, seq: int = 1) -> bytes:
    return encode_sse(seq, event.model_dump(mode="json"))


async def test_heartbeat_comments_while_the_producer_is_slow():
    """Whatever the machine's load: every event arrives once and in order, and while the
    producer waits the stream carries heartbeats (the producer waits until two were sent)."""
    release = anyio.Event()
    done = Done(turn_id="t", prompt_version="v", model="m", context_turns=0, request_id="r")

    async def events():
        yield enc(AgentMessage(content="a"))
        await release.wait()
        yield enc(done)

    out: list[bytes] = []
    first = enc(AgentMessage(content="a"))
    async for chunk in with_heartbeat(events(), every_s=0.01):
        out.append(chunk)
        if first in out and out[out.index(first) :].count(HEARTBEAT) >= 2:
            release.set()
    assert [c for c in out if c != HEARTBEAT] == [first, enc(done)]
    assert out[out.index(first) :].count(HEARTBEAT) >= 2  # sent while the producer waited
    assert out[-1] == enc(done)


async def test_no_heartbeat_while_events_flow_and_ready_events_share_a_write():
    sent = [AgentMessage(content=str(i)) for i in range(50)]

    async def events():
        for event in sent:
            yield enc(event)

    out = [chunk async for chunk in with_heartbeat(events(), every_s=3600)]
    assert HEARTBEAT not in out
    assert b"".join(out) == b"".join(enc(event) for event in sent)
    assert len(out) < len(sent)  # events that were ready together went out together


async def test_a_client_that_reads_slowly_holds_back_its_sender_not_the_outbox_memory():
    """The outbox holds at most OUTBOX_BYTES (plus one event) before the sender waits for the
    client to take what is there (the turn itself never waits for a client: `TurnRun`)."""
    produced: list[int] = []
    big = enc(AgentMessage(content="x" * 10_000))

    async def events():
        for i in range(100):
            produced.append(i)
            yield big

    size = len(big)
    async with aclosing(with_heartbeat(events(), every_s=3600)) as stream:
        first = await anext(stream)
        await anyio.wait_all_tasks_blocked()
        assert len(first) <= OUTBOX_BYTES + size
        # The write in the client's hands, a full outbox, the event waiting for room.
        assert len(produced) <= 2 * (OUTBOX_BYTES // size + 1) + 1
        rest = [chunk async for chunk in stream]
    assert b"".join([first, *rest]) == big * 100


class _Log:
    """A turn log that keeps nothing (the live connection reads the run, not the log)."""

    async def append(self, *args: Any, **kw: Any) -> None:
        pass

    async def finish(self, *args: Any, **kw: Any) -> None:
        pass

    async def renew(self, *args: Any, **kw: Any) -> None:
        pass

    async def cancel_requested(self, turn_id: str) -> bool:
        return False


DONE = Done(turn_id="t", prompt_version="v", model="m", context_turns=0, request_id="r")


async def test_a_live_turn_sends_a_burst_in_one_write_and_heartbeats_while_it_waits():
    """The live connection reads the running turn: events ready together share a write,
    a slow model gets heartbeats, and every event arrives once, in order, numbered."""
    words = [AgentMessage(content=f"{i} ") for i in range(30)]
    slow = anyio.Event()

    async def events():
        for word in words[:20]:  # a burst: no wait between them
            yield word
        await slow.wait()  # the model thinks
        for word in words[20:]:
            yield word
        yield DONE

    run = TurnRun(_Log(), user_id="alice", turn_id="t")  # type: ignore[arg-type]
    out: list[bytes] = []
    with anyio.fail_after(WAIT_S):
        async with anyio.create_task_group() as tg:
            tg.start_soon(run.produce, events())
            async for chunk in live(run, SseEncoder(), every_s=0.01):
                out.append(chunk)
                if out.count(HEARTBEAT) >= 2:
                    slow.set()
    sent = [*words, DONE]
    data = [c for c in out if c != HEARTBEAT]
    assert b"".join(data) == b"".join(enc(e, seq) for seq, e in enumerate(sent, start=1))
    assert len(data) < len(sent)  # not one write per event
    assert out.count(HEARTBEAT) >= 2 and out[-1] != HEARTBEAT


async def test_a_live_turn_never_waits_for_its_reader():
    """The turn runs to its end while nobody reads; the reader then gets all of it at once."""
    run = TurnRun(_Log(), user_id="alice", turn_id="t")  # type: ignore[arg-type]

    async def events():
        for i in range(100):
            yield AgentMessage(content="x" * 1000 + str(i))
        yield DONE

    with anyio.fail_after(WAIT_S):
        async with aclosing(live(run, SseEncoder(), every_s=3600)) as stream:
            await run.produce(events())  # nothing read yet
            assert run.finished
            out = [chunk async for chunk in stream]
    assert len(out) == 1 and out[0].count(b"event: agent_message") == 100
