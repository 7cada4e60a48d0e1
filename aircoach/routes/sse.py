"""The turn's events as Server-Sent Events, on top of FastAPI's own SSE support: the
encoding, the heartbeat, the responses, and the stream's description in the OpenAPI schema.

A chat turn's response (`turn_stream`) runs the turn inside the request and sends its events
as they come; a client that leaves stops the sending, never the turn, which goes on to its end
(or its deadline) and is stored whole: the client can rejoin it (`GET
/api/turns/{turn_id}/events`) from any instance. Followers and replays (`event_stream`) send
events that already exist: a client that leaves ends them.
"""

from __future__ import annotations

import inspect
import json
from collections.abc import AsyncGenerator, AsyncIterator
from contextlib import aclosing
from typing import Any, Protocol

import anyio
from fastapi.sse import EventSourceResponse, format_sse_event
from starlette.types import Receive, Scope, Send

from aircoach.logs import current_stages
from aircoach.routes.openapi_events import event_ref
from aircoach.turn.events import EVENT_TYPES, TurnEvent
from aircoach.turn.log import LoggedEvent
from aircoach.turn.run import TurnRun

HEARTBEAT_S = 15.0
HEARTBEAT = b": keep-alive\n\n"
# Encoded events waiting for the socket before the turn waits for the client to read them.
OUTBOX_BYTES = 64 * 1024


def encode_sse(seq: int, data: dict[str, Any]) -> bytes:
    """One SSE message: `event: <type>`, one `data:` line of JSON, `id: <seq>` (the event's
    number in its turn)."""
    text = json.dumps(data, ensure_ascii=False, separators=(",", ":"))
    return format_sse_event(data_str=text, event=str(data["type"]), id=str(seq))


def encode_event(event: TurnEvent, seq: int) -> bytes:
    return encode_sse(seq, event.model_dump(mode="json"))


class _Outbox:
    """Encoded events on their way to the socket. The turn adds each one without yielding to
    the event loop; the writer takes everything that is there in one piece, so the events
    ready together (a model's chunks arrive in bursts) cost one socket write, not one each."""

    def __init__(self, limit_bytes: int):
        self.limit_bytes = limit_bytes
        self._parts: list[bytes] = []
        self._size = 0
        self._closed = False
        self._ready = anyio.Event()  # something to take, or the end
        self._taken = anyio.Event()  # room again

    async def put(self, data: bytes) -> None:
        while self._size >= self.limit_bytes:  # the client reads slowly: wait for it
            self._taken = anyio.Event()
            await self._taken.wait()
        self._parts.append(data)
        self._size += len(data)
        self._ready.set()

    def close(self) -> None:
        self._closed = True
        self._ready.set()

    def take(self) -> bytes | None:
        """Everything waiting (b"" when nothing is), or None once closed and empty."""
        if not self._parts:
            return None if self._closed else b""
        data = b"".join(self._parts)
        self._parts.clear()
        self._size = 0
        self._ready = anyio.Event()
        self._taken.set()
        return data

    async def wait(self) -> None:
        await self._ready.wait()


class Encoder(Protocol):
    """One wire format of a turn's numbered events, one encoder per response (it may keep
    state): the bytes that open the stream, each event's bytes (b"" for an event the format
    leaves out), and the bytes that close it."""

    def opening(self) -> bytes: ...

    def event(self, event: LoggedEvent) -> bytes: ...

    def closing(self) -> bytes: ...


class SseEncoder:
    """Our SSE: each event as its message, nothing around them."""

    def opening(self) -> bytes:
        return b""

    def event(self, event: LoggedEvent) -> bytes:
        return format_sse_event(data_str=event.text, event=event.type, id=str(event.seq))

    def closing(self) -> bytes:
        return b""


async def encoded(
    events: AsyncIterator[LoggedEvent], encoder: Encoder
) -> AsyncGenerator[bytes, None]:
    """The stream of `events` (which exist already or come from the store) in `encoder`'s
    format."""
    stages = current_stages()
    if opening := encoder.opening():
        yield opening
    async for event in events:
        with stages.timed("encode"):
            data = encoder.event(event)
        if data:
            yield data
    if closing := encoder.closing():
        yield closing


async def live(run: TurnRun, encoder: Encoder, every_s: float) -> AsyncGenerator[bytes, None]:
    """A running turn's events as they come: each write carries every event ready by then,
    and a comment line goes out whenever nothing did for `every_s`, so that proxies and
    mobile networks keep the connection open while a tool or the model is slow.

    The sender reads the run's events itself, with no task or queue between: one wake-up and
    one write per burst of events (a model's chunks arrive in bursts), not one each. A client
    that reads slowly never holds the turn back: the run keeps every event of the turn
    anyway (for the turn log), and the sender catches up from where it is."""
    stages = current_stages()
    if opening := encoder.opening():
        yield opening
    sent = 0
    while True:
        if sent < len(run.events):
            batch = run.events[sent:]
            sent += len(batch)
            with stages.timed("encode"):
                data = b"".join(encoder.event(event) for event in batch)
            if data:
                yield data
            continue
        if run.finished:
            break
        # No await since the checks above: the producer cannot add an event unseen.
        with anyio.move_on_after(every_s) as timer:
            await run.changed()
        if timer.cancelled_caught:
            yield HEARTBEAT
    if closing := encoder.closing():
        yield closing


async def with_heartbeat(
    chunks: AsyncGenerator[bytes, None], every_s: float
) -> AsyncIterator[bytes]:
    """Send the messages of events that come from elsewhere (a follower reads the store),
    each write carrying every message ready by then, and a comment line whenever nothing was
    sent for `every_s`. The heartbeat's timer runs only while the outbox is empty: while
    events flow it costs nothing."""
    outbox = _Outbox(OUTBOX_BYTES)

    async def produce() -> None:
        # aclosing: if this task is cancelled while waiting for room, the source is closed
        # here and now, not whenever it is garbage-collected.
        try:
            async with aclosing(chunks):
                async for data in chunks:
                    await outbox.put(data)
        finally:
            outbox.close()

    async with anyio.create_task_group() as tg:
        tg.start_soon(produce)
        while True:
            data = outbox.take()
            if data is None:
                break
            if data:
                yield data
                continue
            with anyio.move_on_after(every_s) as timer:
                await outbox.wait()
            if timer.cancelled_caught:
                yield HEARTBEAT


class _EventStream(EventSourceResponse):
    """Stops sending as soon as the client leaves, on every ASGI server.

    Starlette stops listening for `http.disconnect` on ASGI 2.4 servers, which report a
    disconnect only by failing the next `send`; with a stalled model or tool that send may be
    a heartbeat away. So listen on every version, and close the body iterator on the way out.
    """

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        async with anyio.create_task_group() as tg:

            async def stream() -> None:
                try:
                    async with aclosing(self.body_iterator):  # type: ignore[type-var]
                        await self.stream_response(send)
                except OSError:
                    pass  # the ASGI 2.4 way of saying the client left
                tg.cancel_scope.cancel()

            tg.start_soon(stream)
            await self.listen_for_disconnect(receive)
            tg.cancel_scope.cancel()


class _TurnStream(_EventStream):
    """A turn that runs inside its request: the events go out as `_EventStream` sends them,
    and the request ends only when the turn has, whether the client stayed or not (on
    serverless nothing may run once the request returns)."""

    def __init__(
        self,
        run: TurnRun,
        events: AsyncGenerator[TurnEvent, None],
        every_s: float,
        encoder: Encoder,
        **kw: object,
    ):
        super().__init__(live(run, encoder, every_s), **kw)  # type: ignore[arg-type]
        self.run = run
        self.events = events

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        async with anyio.create_task_group() as tg:
            tg.start_soon(self.run.produce, self.events)
            await super().__call__(scope, receive, send)


def _headers(headers: dict[str, str] | None) -> dict[str, str]:
    return {"Cache-Control": "no-cache", "X-Accel-Buffering": "no", **(headers or {})}


def turn_stream(
    run: TurnRun,
    events: AsyncGenerator[TurnEvent, None],
    every_s: float = HEARTBEAT_S,
    *,
    headers: dict[str, str] | None = None,
    encoder: Encoder | None = None,
) -> EventSourceResponse:
    """The response of a new turn: `events` run to their end through `run`, each one
    encoded by `encoder` (our SSE by default; `aircoach.routes.ui_stream` the AI SDK's)."""
    return _TurnStream(run, events, every_s, encoder or SseEncoder(), headers=_headers(headers))


def event_stream(
    events: AsyncIterator[LoggedEvent],
    every_s: float = HEARTBEAT_S,
    *,
    headers: dict[str, str] | None = None,
    encoder: Encoder | None = None,
) -> EventSourceResponse:
    """The response of events that exist already (a follower, a replay)."""
    body = with_heartbeat(encoded(events, encoder or SseEncoder()), every_s)
    return _EventStream(body, headers=_headers(headers))


def sse_item_schema() -> dict[str, Any]:
    """One SSE message of the stream, in FastAPI's convention for streams (`itemSchema`):
    one alternative per event type, its `data` described by the event's model."""
    alternatives = []
    for event in EVENT_TYPES:
        name = event.model_fields["type"].default
        alternatives.append(
            {
                "type": "object",
                "title": event.__name__,
                "description": inspect.cleandoc(event.__doc__ or ""),
                "required": ["event", "data"],
                "properties": {
                    "event": {"type": "string", "const": name},
                    "data": {
                        "type": "string",
                        "contentMediaType": "application/json",
                        "contentSchema": event_ref(event),
                    },
                    "id": {
                        "type": "string",
                        "description": "The event's number in the turn: 1, 2, ...",
                    },
                    "retry": {"type": "integer", "minimum": 0},
                },
            }
        )
    return {"oneOf": alternatives}
