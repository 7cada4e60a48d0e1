"""Server-Sent Events on top of FastAPI's own SSE support."""

from __future__ import annotations

from collections.abc import AsyncGenerator, AsyncIterator
from contextlib import aclosing

import anyio
from fastapi.sse import EventSourceResponse
from starlette.types import Receive, Scope, Send

from aircoach.turn.events import TurnEvent

HEARTBEAT_S = 15.0
HEARTBEAT = b": keep-alive\n\n"


async def with_heartbeat(
    events: AsyncGenerator[TurnEvent, None], every_s: float
) -> AsyncIterator[bytes]:
    """Encode events, and send a comment line whenever nothing was sent for `every_s`, so that
    proxies and mobile networks keep the connection open while a tool or the model is slow."""
    send, receive = anyio.create_memory_object_stream[bytes](max_buffer_size=16)

    async def produce() -> None:
        # aclosing: if this task is cancelled while blocked on `send`, the turn's generator is
        # closed here and now (and stores what it has), not whenever it is garbage-collected.
        async with send, aclosing(events):
            async for event in events:
                await send.send(event.encode())

    async with anyio.create_task_group() as tg, receive:
        tg.start_soon(produce)
        while True:
            with anyio.move_on_after(every_s) as timer:
                try:
                    data = await receive.receive()
                except anyio.EndOfStream:
                    break
            yield HEARTBEAT if timer.cancelled_caught else data


class _EventStream(EventSourceResponse):
    """Ends the turn as soon as the client leaves, on every ASGI server.

    Starlette stops listening for `http.disconnect` on ASGI 2.4 servers, which report a
    disconnect only by failing the next `send`; with a stalled model or tool that send may be
    a heartbeat away, and the turn would run on for nobody. So listen on every version, and
    close the body iterator on the way out so the turn stores what it has before we return.
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


def event_stream(
    events: AsyncGenerator[TurnEvent, None],
    every_s: float = HEARTBEAT_S,
    *,
    headers: dict[str, str] | None = None,
) -> EventSourceResponse:
    return _EventStream(
        with_heartbeat(events, every_s),
        headers={"Cache-Control": "no-cache", "X-Accel-Buffering": "no", **(headers or {})},
    )
