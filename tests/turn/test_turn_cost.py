"""What a turn costs the event loop: no executor hops (LangSmith's span set-up around each
middleware hook stays on the loop while tracing is off), and events that are ready together
leave in one write."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from starlette.types import Message, Receive, Scope, Send

from tests.helpers import CountedJobs, app_with, asgi_client
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


async def test_a_turn_makes_its_reads_in_one_hop_and_stores_its_memory_with_it(
    settings, auth, monkeypatch
):
    """The three reads a turn starts with (the quiz progress for the prompt, the
    conversation's newest turns, the long-term memory) go to the SQLite thread as one job, and
    the memory's new items go with the stored turn: four hops a turn, not seven."""
    from aircoach.store import sqlite

    answer = text("Il QNH è la pressione al livello del mare.")
    app = app_with(settings, models=ScriptedModels(Script([answer, answer])))
    body = {"query": "Che cos'è il QNH?", "tools": {"domanda_teoria": True}}
    async with asgi_client(app) as client:
        # Another student's turn first: the process's first turn also loads the quiz.
        response = await client.post("/api/stream_query", json=body, headers=auth("other"))
        assert parse_sse(response.text)[-1]["type"] == "done"
        jobs = CountedJobs.of(sqlite._threads, monkeypatch)
        response = await client.post("/api/stream_query", json=body, headers=auth())
        assert parse_sse(response.text)[-1]["type"] == "done"
        memory = await client.get("/api/memory", headers=auth())
    # The reads; then the thread's claim, the turn with its memory, the log's last write; a
    # slow turn may write its log once more on the way (TurnRun's tick).
    sizes = jobs.sizes[:-1]  # the last: the memory's read for GET /api/memory
    assert sizes[0] == 3 and sorted(sizes[1:]) in ([1, 1, 2], [1, 1, 1, 2]), jobs.sizes
    assert [item["text"] for item in memory.json()["items"]] == ["Ha chiesto: Che cos'è il QNH?"]
