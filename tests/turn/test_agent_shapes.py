"""One compiled agent structure per prompt version and tool set, shared by the requests: each
request binds its own model, system prompt (with its per-user sections) and tools' context,
so two users running through one structure at the same time never see each other's."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import anyio
from langchain_core.messages import AIMessage, BaseMessage, HumanMessage, SystemMessage, ToolMessage
from langchain_core.outputs import ChatGenerationChunk
from pydantic import Field

from aircoach.llm.offline import OfflineChatModel, stream_chunks
from tests.helpers import app_with, asgi_client, chat, services_of

USERS = {"sub-anna": ("Anna", "a"), "sub-bruno": ("Bruno", "b")}


class _Gate:
    """Lets the first model call of each turn go on only once both turns are in it."""

    def __init__(self, parties: int):
        self.parties, self.arrived, self.open = parties, 0, anyio.Event()

    async def wait(self) -> None:
        self.arrived += 1
        if self.arrived == self.parties:
            self.open.set()
        with anyio.fail_after(30):
            await self.open.wait()


class _Seen:
    def __init__(self) -> None:
        self.prompts: dict[str, list[str]] = {}  # the user the query names -> system prompts
        self.gate = _Gate(2)


class _TwoUsersModel(OfflineChatModel):
    """Knows its user only from the query ("sono Anna"); answers the quiz question 1/1 with
    that user's letter, then says it is done."""

    model_name: str = "two-users"
    seen: Any = Field(exclude=True)

    def bind_tools(self, tools: Any, **kwargs: Any) -> Any:
        return self

    def respond(self, messages: list[BaseMessage]) -> AIMessage:
        query = next(m.text for m in reversed(messages) if isinstance(m, HumanMessage))
        name, letter = next(v for v in USERS.values() if v[0] in query)
        system = messages[0]
        assert isinstance(system, SystemMessage)
        self.seen.prompts.setdefault(name, []).append(system.text)
        if isinstance(messages[-1], ToolMessage):
            return AIMessage(f"Fatto, {name}.")
        args = {"capitolo": 1, "numero": 1, "risposta": letter}
        return AIMessage(
            "", tool_calls=[{"name": "verifica_risposta", "args": args, "id": f"c-{name}"}]
        )

    async def _astream(
        self, messages: list[BaseMessage], stop: Any = None, run_manager: Any = None, **kw: Any
    ) -> AsyncIterator[ChatGenerationChunk]:
        if not isinstance(messages[-1], ToolMessage):
            await self.seen.gate.wait()
        for chunk in stream_chunks(self.respond(messages)):
            yield chunk


class _Models:
    def __init__(self, seen: _Seen):
        self.seen = seen

    async def models_for(self, tools: list[Any]) -> list[Any]:
        return [_TwoUsersModel(seen=self.seen)]


class _Profiles:
    async def profile(self, sub: str) -> dict[str, Any]:
        return {"user_id": sub, "name": f"{USERS[sub][0]} Allievo"}


async def test_two_users_share_one_structure_and_see_only_their_own_sections(settings, token):
    seen = _Seen()
    app = app_with(settings, models=_Models(seen), user_data=_Profiles())
    services = services_of(app)
    quiz = await services.quiz_service()
    # Anna has answered before: her prompt has a progress section, Bruno's has none.
    await quiz.grade("sub-anna", 2, 1, "a", turn_id=None)
    done: dict[str, list[dict[str, Any]]] = {}

    async def turn(client: Any, sub: str) -> None:
        headers = {"Authorization": f"Bearer {token(sub)}"}
        body = {"tools": {"verifica_risposta": True}}
        done[sub] = await chat(client, headers, f"Sono {USERS[sub][0]}: rispondo", **body)

    async with asgi_client(app) as client, anyio.create_task_group() as tg:
        for sub in USERS:
            tg.start_soon(turn, client, sub)

    assert services.agent_shapes.builds == 1 and len(services.agent_shapes) == 1
    for sub, (name, letter) in USERS.items():
        other = next(n for s, (n, _) in USERS.items() if s != sub)
        prompts = seen.prompts[name]
        assert len(prompts) == 2  # the tool call, then the answer after its result
        for prompt in prompts:
            assert f"{name} Allievo" in prompt and other not in prompt
            assert ("# Progressi dell'allievo" in prompt) == (name == "Anna")
        events = done[sub]
        assert events[-1]["type"] == "done"
        assert [e["content"] for e in events if e["type"] == "agent_message"] != []
        # The tool ran with this request's context: this user, this turn.
        (attempt,) = [
            a for a in await services.attempts.recent_attempts(sub, 10) if a.capitolo == 1
        ]
        assert attempt.risposta == letter and attempt.turn_id == events[-1]["turn_id"]


def test_a_structure_per_prompt_version_and_tool_set_and_no_more_than_the_bound(settings):
    from aircoach.tools.registry import ToolRegistry
    from aircoach.turn.agent import AgentShapes
    from tests.helpers import shipped_docs

    specs = ToolRegistry.from_docs(shipped_docs(), env={}).enabled(None)
    shapes = AgentShapes(checkpointer=None, history_limit=3, max_shapes=2)
    first = shapes.get("v1", specs)
    assert shapes.get("v1", specs) is first and shapes.builds == 1
    assert shapes.get("v1", specs[:1]) is not first  # another tool set
    assert shapes.get("v2", specs) is not first  # another prompt version
    assert len(shapes) == 2 and shapes.builds == 3
    assert shapes.get("v1", specs) is not first  # the least recently used went first
