"""The server for bench_overhead: the real app plus two bare endpoints to compare it with.

(a) /bench/bare   streams the same agent_message tokens with FastAPI's SSE, no agent
(b) /bench/agent  runs the same agent (same factory, tools and middleware) with the same offline
                  model; no auth, no prompt store, no memory, nothing stored
(c) /api/stream_query  the full path
"""

from __future__ import annotations

import argparse
import uuid

import uvicorn
from fastapi import Request
from langchain_core.messages import AIMessageChunk

from aircoach.app import create_app
from aircoach.llm.offline import OfflineChatModel
from aircoach.prompts.sources import LocalDocSource
from aircoach.prompts.store import PromptStore
from aircoach.settings import get_settings
from aircoach.tools.registry import ToolContext
from aircoach.turn.agent import build_agent
from aircoach.turn.events import AgentMessage, Done
from aircoach.turn.sse import event_stream

QUERY = "Come si regola l'altimetro con il QNH prima del decollo?"


def build() -> object:
    settings = get_settings()
    app = create_app(settings)
    prompt: dict[str, str] = {}

    async def system_prompt() -> str:
        if "text" not in prompt:
            snapshot = await PromptStore(
                LocalDocSource(settings.prompt_docs_dir), ttl_s=1e9
            ).current()
            prompt["text"] = snapshot.text
        return prompt["text"]

    async def tokens() -> list[str]:
        if "tokens" not in prompt:
            model = OfflineChatModel()
            from langchain_core.messages import HumanMessage, SystemMessage

            msgs = [SystemMessage(await system_prompt()), HumanMessage(QUERY)]
            prompt["tokens"] = [c.text async for c in model.astream(msgs)]
        return prompt["tokens"]

    @app.post("/bench/bare")
    async def bare(request: Request):
        words = await tokens()

        async def events():
            for word in words:
                yield AgentMessage(content=word)
            yield Done(
                turn_id=uuid.uuid4().hex, prompt_version="bench", model="offline", context_turns=0
            )

        return event_stream(events())

    @app.post("/bench/agent")
    async def agent(request: Request):
        services = app.state.services
        snapshot = await services.prompts.current()
        registry = services.tools_for(snapshot)
        tools = registry.enabled(None)
        text = registry.system_prompt(snapshot.text, tools)
        graph = build_agent(
            model=OfflineChatModel(tool_examples={t.name: list(t.examples) for t in tools}),
            tools=tools,
            ctx=ToolContext(quiz=await services.quiz_service(), user_id="bench"),
            system_prompt=text,
            checkpointer=None,
            history_limit=settings.history_limit,
        )

        async def events():
            payload = {"messages": [{"role": "user", "content": QUERY}]}
            async for message, _meta in graph.astream(payload, stream_mode="messages"):
                if isinstance(message, AIMessageChunk) and message.text:
                    yield AgentMessage(content=message.text)
            yield Done(
                turn_id=uuid.uuid4().hex, prompt_version="bench", model="offline", context_turns=0
            )

        return event_stream(events())

    return app


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("--port", type=int, required=True)
    args = parser.parse_args()
    uvicorn.run(build(), host="127.0.0.1", port=args.port, log_level="warning")
