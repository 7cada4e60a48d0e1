"""What a turn costs the event loop: no executor hops (LangSmith's span set-up around each
middleware hook stays on the loop while tracing is off), and events that are ready together
leave in one write."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from starlette.types import Message, Receive, Scope, Send

from tests.helpers import app_with, asgi_client
from tests.scripted_model import Script, ScriptedModels, call, text
from tests.sse import parse_sse


def count_executor_hops(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The functions the running loop sends to its executor from now on."""
    hops: list[str] = []
    loop = asyncio.get_running_loop()
    run_in_executor = loop.run_in_executor

    def counted(executor: Any, func: Any, *args: Any) -> Any:
        hops.append(getattr(getattr(func, "func", func), "__qualname__", repr(func)))
        return run_in_executor(executor, func, *args)

    monkeypatch.setattr(loop, "run_in_executor", counted)
    return hops


async def test_a_turn_with_a_tool_call_makes_no_executor_hop_and_few_writes(
    settings, auth, monkeypatch
):
    answer = "Ecco la domanda del capitolo tre, buona fortuna con la risposta."
    # An invalid chapter: the tool fails, its failure goes back to the model, which answers.
    script = Script([call("domanda_teoria", capitolo=99), text(answer)])
    app = app_with(settings, models=ScriptedModels(script))
    writes: list[int] = []

    async def counting(scope: Scope, receive: Receive, send: Send) -> None:
        async def counted(message: Message) -> None:
            if message["type"] == "http.response.body" and message.get("body"):
                writes.append(len(message["body"]))
            await send(message)

        await app(scope, receive, counted)

    executor_hops = count_executor_hops(monkeypatch)
    async with asgi_client(counting) as client:  # type: ignore[arg-type]
        response = await client.post(
            "/api/stream_query",
            json={"query": "Dammi una domanda del capitolo 3", "tools": {"domanda_teoria": True}},
            headers=auth(),
        )
    events = parse_sse(response.text)
    assert events[-1]["type"] == "done" and events[0]["type"] == "tool_result"
    assert executor_hops == []
    # One event per word of the answer plus the tool result and done, in far fewer writes.
    assert len(events) >= len(answer.split()) + 2
    assert len(writes) <= len(events) // 2
