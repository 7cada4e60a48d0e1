"""Server-Sent Events on top of FastAPI's own SSE support."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from typing import Any

import anyio
from fastapi.sse import EventSourceResponse, format_sse_event

HEARTBEAT_S = 15.0
HEARTBEAT = b": keep-alive\n\n"


def encode(event: dict[str, Any]) -> bytes:
    return format_sse_event(data_str=json.dumps(event, ensure_ascii=False), event=event["type"])


async def with_heartbeat(
    events: AsyncIterator[dict[str, Any]], every_s: float
) -> AsyncIterator[bytes]:
    """Encode events, and send a comment line whenever nothing was sent for `every_s`, so that
    proxies and mobile networks keep the connection open while a tool or the model is slow."""
    send, receive = anyio.create_memory_object_stream[bytes](max_buffer_size=16)

    async def produce() -> None:
        async with send:
            async for event in events:
                await send.send(encode(event))

    async with anyio.create_task_group() as tg, receive:
        tg.start_soon(produce)
        while True:
            with anyio.move_on_after(every_s) as timer:
                try:
                    data = await receive.receive()
                except anyio.EndOfStream:
                    break
            yield HEARTBEAT if timer.cancelled_caught else data


def event_stream(
    events: AsyncIterator[dict[str, Any]], every_s: float = HEARTBEAT_S
) -> EventSourceResponse:
    return EventSourceResponse(
        with_heartbeat(events, every_s),
        headers={"Cache-Control": "no-cache", "X-Accel-Buffering": "no"},
    )
