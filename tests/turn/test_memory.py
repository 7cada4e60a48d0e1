"""Process memory that stays right: across instances sharing one store, under eviction, across
prompt versions; and bounded (threads per process, checkpoints per thread)."""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from contextlib import AsyncExitStack
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import httpx
import pytest
from langchain_core.messages import AIMessage, BaseMessage, HumanMessage, SystemMessage

from aircoach.services import build_stores
from aircoach.settings import Settings
from aircoach.tools.registry import ToolContext
from aircoach.turn.agent import build_agent
from aircoach.turn.memory import Memory
from aircoach.turn.records import Turn
from aircoach.turn.turn import new_turn_id
from tests.helpers import (
    ObservedChats,
    app_with,
    asgi_client,
    chat,
    copy_prompt_docs,
    prepared_turn,
)
from tests.scripted_model import Script, ScriptedChatModel, ScriptedModels, text


def humans(messages: list[BaseMessage]) -> list[str]:
    return [m.text for m in messages if isinstance(m, HumanMessage)]


def answers(messages: list[BaseMessage]) -> list[str]:
    return [m.text for m in messages if isinstance(m, AIMessage) and m.text]


def scripted_app(settings: Settings, script: Script, **parts: Any) -> Any:
    return app_with(settings, models=ScriptedModels(script), **parts)


@pytest.fixture
async def clients() -> AsyncIterator[Callable[[Any], httpx.AsyncClient]]:
    async with AsyncExitStack() as stack:

        async def open_client(app: Any) -> httpx.AsyncClient:
            return await stack.enter_async_context(asgi_client(app))

        yield open_client


def assert_checkpointer_bounded(memory: Memory) -> None:
    saver = memory.checkpointer
    assert memory.checkpointed_threads() <= memory.max_threads
    threads = set(saver.storage)
    assert {key[0] for key in saver.blobs} <= threads, "blobs left behind by a dropped thread"
    assert {key[0] for key in saver.writes} <= threads, "writes left behind by a dropped thread"


async def test_two_instances_sharing_a_store_each_turn_sees_every_earlier_turn(
    store_settings: Settings, auth, clients
):
    settings = store_settings.model_copy(update={"history_limit": 3})
    script = Script([text(f"risposta {i}") for i in range(8)])
    stores = [ObservedChats(build_stores(settings)[0]) for _ in range(2)]
    # Two processes' worth of memory over one database.
    apps = [scripted_app(settings, script, chats=store) for store in stores]
    instances = [await clients(app) for app in apps]
    headers = auth("pilot")

    for i in range(8):
        events = await chat(instances[i % 2], headers, f"domanda {i}")
        assert events[-1]["context_turns"] == min(i, 3), f"turn {i}"
        shown = script.calls[-1]
        earlier = range(max(0, i - 3), i)
        assert humans(shown) == [*(f"domanda {j}" for j in earlier), f"domanda {i}"]
        assert answers(shown) == [f"risposta {j}" for j in earlier]
    # Each instance had to catch up with the other before every one of its turns but its first.
    assert [store.reseeds for store in stores] == [3, 4]


async def test_a_turn_stored_by_another_instance_while_this_one_answers_is_not_missed(
    store_settings: Settings, auth, clients
):
    """A answers turn 2 while B stores turn 3; A's own turn 2 is then the newest stored turn,
    but A's next turn must still see B's (the freshness mark compares the newest two ids)."""
    script = Script([text("r1"), text("r3 da B"), text("r2 da A"), text("r4")])
    a, b = scripted_app(store_settings, script), scripted_app(store_settings, script)
    client_a, client_b = await clients(a), await clients(b)
    headers = auth("pilot")
    await chat(client_a, headers, "q1")
    in_flight = await prepared_turn(a, "pilot", "q2")
    await chat(client_b, headers, "q3 via B")  # stored while A is still answering q2
    assert [e.type async for e in in_flight.events()][-1] == "done"  # q2 is now the newest

    events = await chat(client_a, headers, "q4")
    shown = script.calls[-1]
    assert set(humans(shown)) == {"q1", "q3 via B", "q2", "q4"}
    assert events[-1]["context_turns"] == 3


async def test_a_warm_thread_is_not_reread_and_stays_short(settings, auth, clients):
    settings = settings.model_copy(update={"history_limit": 2})
    script = Script([text(f"risposta {i}") for i in range(9)])
    chats = ObservedChats(build_stores(settings)[0])
    app = scripted_app(settings, script, chats=chats)
    client = await clients(app)
    memory: Memory = app.state.services.memory

    contexts = [
        (await chat(client, auth("pilot"), f"domanda {i}"))[-1]["context_turns"] for i in range(9)
    ]
    assert contexts == [0, 1, 2, 2, 2, 2, 2, 2, 2]
    # Rebuilt from the store (to 2 turns) only when it reached 2 * history_limit turns: before
    # turns 4, 6 and 8; every other turn was answered from memory after one indexed read.
    assert chats.reseeds == 3
    (thread,) = memory.checkpointer.storage.values()
    assert len(thread[""]) == 1, "older checkpoints of the thread were not pruned"
    assert len(humans(script.calls[-1])) == 3


async def test_evicted_users_get_their_history_back_through_the_api(settings, auth, clients):
    settings = settings.model_copy(update={"memory_max_threads": 4, "history_limit": 3})
    users = 12  # three times the threads kept: u0's is evicted long before it comes back
    script = Script([text("prima"), *(text("ok") for _ in range(users)), text("bentornato")])
    app = scripted_app(settings, script)
    client = await clients(app)
    memory: Memory = app.state.services.memory

    await chat(client, auth("u0"), "la mia prima domanda")
    for n in range(users):
        await chat(client, auth(f"u{n}"), "ciao")
        assert_checkpointer_bounded(memory)
    assert memory.checkpointed_threads() == len(memory) == 4

    events = await chat(client, auth("u0"), "ti ricordi di me?")
    assert events[-1]["context_turns"] == 2
    assert humans(script.calls[-1]) == ["la mia prima domanda", "ciao", "ti ricordi di me?"]
    assert answers(script.calls[-1]) == ["prima", "ok"]


@pytest.mark.load
@pytest.mark.integration
async def test_5000_users_never_hold_more_than_100_threads(settings):
    """5,000 users' turns through one process's memory: the same calls a chat turn makes
    (`ensure_thread`, the agent run, `append_turn`, `record_turn`) on the real SQLite store,
    with one compiled agent (rebuilding it per turn, as requests do, touches no memory and
    would triple the run time)."""
    users = 5000
    chats = build_stores(settings)[0]
    memory = Memory(max_threads=100, reseed_turns=3)
    script = Script([text("prima"), *(text("ok") for _ in range(users)), text("bentornato")])
    agent = build_agent(
        model=ScriptedChatModel(script=script),
        tools=[],
        ctx=ToolContext(user_id="-"),  # no tools here
        system_prompt="Sei un istruttore di volo.",
        checkpointer=memory.checkpointer,
        history_limit=3,
    )

    async def turn(user: str, query: str) -> int:
        thread = f"{user}:v1"
        held = await memory.ensure_thread(agent, thread, user, chats)
        await agent.ainvoke({"messages": [HumanMessage(query)]}, memory.config(thread))
        turn_id = new_turn_id()
        await chats.append_turn(
            Turn(
                userId=user,
                human=query,
                system="ok",
                timestamp=datetime.now(UTC).isoformat(),
                prompt_version="v1",
                model="scripted",
                thread_id=thread,
                turn_id=turn_id,
            )
        )
        memory.record_turn(thread, turn_id)
        return held

    assert await turn("u0", "la mia prima domanda") == 0
    for n in range(users):
        await turn(f"u{n}", "ciao")
        assert memory.checkpointed_threads() <= 100 and len(memory) <= 100
        if n % 500 == 0:
            assert_checkpointer_bounded(memory)
    assert_checkpointer_bounded(memory)
    assert memory.checkpointed_threads() == 100

    assert await turn("u0", "ti ricordi di me?") == 2
    assert humans(script.calls[-1]) == ["la mia prima domanda", "ciao", "ti ricordi di me?"]


async def test_prompt_change_mid_conversation_keeps_the_history(
    settings, auth, clients, tmp_path: Path
):
    docs = copy_prompt_docs(tmp_path / "prompt_docs")
    script = Script([text("uno"), text("due"), text("tre")])
    app = scripted_app(settings.model_copy(update={"prompt_docs_dir": docs}), script)
    client = await clients(app)

    first = await chat(client, auth(), "domanda uno")
    await chat(client, auth(), "domanda due")
    doc = sorted(docs.glob("*.md"))[0]
    doc.write_text(doc.read_text("utf-8") + "\n\nNuova regola: rispondi sempre in rima.\n", "utf-8")
    snapshot, previous = await app.state.services.prompts.reload()
    assert previous == first[-1]["prompt_version"] != snapshot.version

    done = (await chat(client, auth(), "domanda tre"))[-1]
    assert done["prompt_version"] == snapshot.version and done["context_turns"] == 2
    shown = script.calls[-1]
    assert isinstance(shown[0], SystemMessage) and "rispondi sempre in rima" in shown[0].text
    assert humans(shown) == ["domanda uno", "domanda due", "domanda tre"]
    assert answers(shown) == ["uno", "due"]


async def test_a_failed_turn_is_not_kept_half_done_in_memory(settings, auth, clients):
    script = Script([text("uno"), RuntimeError("model down"), text("tre")])
    app = scripted_app(settings, script)
    client = await clients(app)

    await chat(client, auth(), "domanda uno")
    events = await chat(client, auth(), "domanda due")
    assert [e["type"] for e in events] == ["error", "agent_message", "done"]
    await chat(client, auth(), "domanda tre")
    # The thread was rebuilt from the store, which holds the failed turn with its fallback.
    shown = script.calls[-1]
    assert humans(shown) == ["domanda uno", "domanda due", "domanda tre"]
    assert answers(shown)[0] == "uno" and answers(shown)[1] == events[1]["content"]


async def test_pruning_keeps_the_state_and_bounds_a_warm_thread(settings):
    memory = Memory(max_threads=10, reseed_turns=100)
    script = Script([text("x" * 500) for _ in range(12)])
    agent = build_agent(
        model=ScriptedChatModel(script=script),
        tools=[],
        ctx=None,  # type: ignore[arg-type]  # no tools, so nothing reads it
        system_prompt="Sei un istruttore di volo.",
        checkpointer=memory.checkpointer,
        history_limit=100,
    )
    saver, config = memory.checkpointer, memory.config("pilot:v1")
    assert await memory.ensure_thread(agent, "pilot:v1", "pilot", build_stores(settings)[0]) == 0
    sizes = []
    for i in range(12):
        await agent.ainvoke({"messages": [HumanMessage(f"domanda {i}")]}, config)
        before = (await agent.aget_state(config)).values["messages"]
        memory.record_turn("pilot:v1", f"t{i}")
        after = (await agent.aget_state(config)).values["messages"]
        assert after == before and len(after) == 2 * (i + 1)
        assert len(saver.storage["pilot:v1"][""]) == 1
        sizes.append(sum(len(data) for _kind, data in saver.blobs.values()))
    # One copy of the conversation: grows by about one turn per turn, not by the whole list.
    assert sizes[-1] - sizes[-2] == pytest.approx(sizes[1] - sizes[0], rel=0.5)
    assert sizes[-1] < 12 * 1100

    memory.forget("pilot:v1")
    assert not saver.storage and not saver.blobs and not saver.writes


def test_a_subject_holding_a_colon_has_threads_of_its_own():
    """`sub:vVERSION` and `sub:conversation:vVERSION`: the subject `alice:c1`'s default thread
    was `alice`'s conversation `c1` (an identity provider may put `:` in a subject), kept
    apart only by the reseed of a thread that holds another user's turns."""
    from aircoach.turn.prepare import memory_thread_id

    assert memory_thread_id("alice:c1", None, "v1") != memory_thread_id("alice", "c1", "v1")
    assert memory_thread_id("alice", "c1", "v1") == "alice:c1:vv1"  # ids as they were
    assert memory_thread_id("auth0|123", None, "v1") == "auth0|123:vv1"
    # No subject is written as another's: the escape itself is escaped.
    written = {memory_thread_id(sub, None, "v") for sub in ("a:b", "a%3Ab", "a%253Ab")}
    assert len(written) == 3
