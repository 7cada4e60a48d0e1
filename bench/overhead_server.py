"""The server for bench_overhead: the real app plus bare endpoints to compare it with.

(a) /bench/bare          streams the model's reply tokens with our SSE, no agent
(b0) /bench/create_agent a bare LangGraph `create_agent` with the same model: no tools, no
                         middleware, no checkpointer (the agent itself)
(b) /bench/agent         our agent (same factory, tools and middleware) with the same model; no
                         auth, no prompt store, no memory, nothing stored
(c) /api/stream_query    the full path (SSE, or JSON with `"stream": false`)

BENCH_MODEL=fixed (default) gives every endpoint the trivial fixed-reply model of
`bench/fixed_model.py`; BENCH_MODEL=offline the offline model (which scores the prompt's
passages for every reply).
"""

from __future__ import annotations

import argparse
import os
import uuid
from typing import Any

import uvicorn
from fastapi import Request
from langchain.agents import create_agent
from langchain_core.messages import AIMessageChunk, HumanMessage, SystemMessage

from aircoach.app import create_app
from aircoach.llm.offline import OfflineChatModel
from aircoach.quiz.service import QuizService
from aircoach.routes.sse import event_stream
from aircoach.services import Services
from aircoach.settings import get_settings
from aircoach.tools.registry import ToolContext
from aircoach.turn.agent import build_agent
from aircoach.turn.events import AgentMessage, Done
from bench.fixed_model import FixedModels, FixedReplyModel

QUERY = "Come si regola l'altimetro con il QNH prima del decollo?"


def build() -> object:
    settings = get_settings()
    fixed = os.environ.get("BENCH_MODEL", "fixed") == "fixed"
    parts: dict[str, Any] = {"models": FixedModels()} if fixed else {}
    app = create_app(services=Services.build(settings, **parts))
    cache: dict[str, Any] = {}

    def model(tools: list[Any]) -> Any:
        if fixed:
            return FixedReplyModel()
        return OfflineChatModel(tool_examples={t.name: list(t.examples) for t in tools})

    async def prompt() -> tuple[str, list[Any]]:
        services = app.state.services
        snapshot = await services.prompts.current()
        registry = services.tools_for(snapshot)
        tools = registry.enabled(None)
        return registry.system_prompt(snapshot.text, tools), tools

    async def tokens() -> list[str]:
        if "tokens" not in cache:
            text, tools = await prompt()
            msgs = [SystemMessage(text), HumanMessage(QUERY)]
            cache["tokens"] = [c.text async for c in model(tools).astream(msgs) if c.text]
        return cache["tokens"]

    def done() -> Done:
        return Done(
            turn_id=uuid.uuid4().hex,
            prompt_version="bench",
            model="bench",
            context_turns=0,
            request_id=uuid.uuid4().hex,
        )

    async def agent_events(graph: Any) -> Any:
        payload = {"messages": [{"role": "user", "content": QUERY}]}
        async for message, _meta in graph.astream(payload, {}, stream_mode="messages"):
            if isinstance(message, AIMessageChunk) and message.text:
                yield AgentMessage(content=message.text)
        yield done()

    @app.post("/bench/bare")
    async def bare(request: Request) -> Any:
        words = await tokens()

        async def events() -> Any:
            for word in words:
                yield AgentMessage(content=word)
            yield done()

        return event_stream(events())

    @app.post("/bench/create_agent")
    async def bare_agent(request: Request) -> Any:
        text, tools = await prompt()
        return event_stream(agent_events(create_agent(model(tools), [], system_prompt=text)))

    @app.post("/bench/agent")
    async def agent(request: Request) -> Any:
        services = app.state.services
        text, tools = await prompt()
        graph = build_agent(
            model=model(tools),
            tools=tools,
            ctx=ToolContext(user_id="bench", deps={QuizService: await services.quiz_service()}),
            system_prompt=text,
            checkpointer=None,
            history_limit=settings.history_limit,
        )
        return event_stream(agent_events(graph))

    return app


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("--port", type=int, required=True)
    args = parser.parse_args()
    uvicorn.run(build(), host="127.0.0.1", port=args.port, log_level="warning")
