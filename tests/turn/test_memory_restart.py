"""Memory survives a restart: a new app on the same SQLite file reseeds the thread."""

from __future__ import annotations

from aircoach.services import build_stores
from aircoach.turn.memory import LEGACY_TOOL_TEXT_CHARS, Memory, messages_from_turns
from aircoach.turn.records import ToolRecord, Turn
from tests.helpers import ObservedChats, app_with, asgi_client, chat
from tests.scripted_model import Script, ScriptedModels, call, text


async def test_second_app_on_the_same_store_reseeds_with_tool_results(settings, auth):
    async def run(replies, queries, chats=None):
        s = Script(replies)
        # Each app is a new process: empty memory, the same SQLite file.
        app = app_with(settings, models=ScriptedModels(s), chats=chats)
        async with asgi_client(app) as c:
            dones = [(await chat(c, auth(), q))[-1] for q in queries]
        s.assert_used()
        return s, dones

    _, dones = await run(
        [call("domanda_teoria", capitolo=3, numero=1), text("Esatto, è la b.")],
        ["Dammi la domanda 1 del capitolo 3", "La risposta è b"],
    )
    assert [d["context_turns"] for d in dones] == [0, 1]

    restarted = ObservedChats(build_stores(settings)[0])
    s, dones = await run([text("Bentornato.")], ["Eccomi di nuovo"], chats=restarted)
    assert dones[0]["context_turns"] == 2
    shown = s.calls[0]
    tool_messages = [m for m in shown if m.type == "tool"]
    assert len(tool_messages) == 1 and tool_messages[0].name == "domanda_teoria"
    assert tool_messages[0].content.startswith("Capitolo 3, domanda 1: ")
    (asked,) = [m for m in shown if m.type == "ai" and m.tool_calls]
    assert asked.tool_calls[0]["args"] == {"capitolo": 3, "numero": 1}
    assert asked.tool_calls[0]["id"] == tool_messages[0].tool_call_id
    assert [m.content for m in shown if m.type == "human"] == [
        "Dammi la domanda 1 del capitolo 3",
        "La risposta è b",
        "Eccomi di nuovo",
    ]
    assert restarted.reseeds == 1


def test_a_turn_stored_before_tools_existed_is_rebuilt_from_its_capped_tool_data():
    big = {"results": [{"testo": "x" * 100_000}]}
    turn = Turn(
        userId="u",
        human="cerca",
        system="Ecco.",
        tool=ToolRecord(tool_name="kb_search", data=big),
        timestamp="1",
        prompt_version="v",
        model="m",
        thread_id="u:vv",
        turn_id="old",
    )
    human, asked, result, answer = messages_from_turns([turn])
    assert asked.tool_calls == [
        {"name": "kb_search", "args": {}, "id": "old-t", "type": "tool_call"}
    ]
    assert result.tool_call_id == "old-t" and result.artifact == big
    assert len(result.content) == LEGACY_TOOL_TEXT_CHARS and result.content.endswith("…")
    assert (human.content, answer.content) == ("cerca", "Ecco.")


def test_messages_from_turns_rebuilds_tool_calls_and_answers():
    turns = [
        Turn(
            userId="u",
            human="q1",
            system="",
            tool=ToolRecord(tool_name="t", data={"x": 1}),
            timestamp="1",
            prompt_version="v",
            model="m",
            thread_id="u:vv",
            turn_id="a",
        ),
        Turn(
            userId="u",
            human="q2",
            system="r2",
            timestamp="2",
            prompt_version="v",
            model="m",
            thread_id="u:vv",
            turn_id="b",
        ),
    ]
    messages = messages_from_turns(turns)
    assert [m.type for m in messages] == ["human", "ai", "tool", "human", "ai"]
    assert messages[1].tool_calls[0]["id"] == messages[2].tool_call_id
    assert messages[2].artifact == {"x": 1}


async def test_memory_keeps_at_most_max_threads(settings, auth):
    s = Script([text(f"r{i}") for i in range(6)])
    app = app_with(settings.model_copy(update={"memory_max_threads": 3}), models=ScriptedModels(s))
    async with asgi_client(app) as c:
        for i in range(5):
            await chat(c, auth(f"user-{i}"), "ciao")
        memory: Memory = app.state.services.memory
        assert len(memory) == 3 and memory.checkpointed_threads() == 3
        done = (await chat(c, auth("user-0"), "di nuovo"))[-1]  # evicted early: reseeded
        assert done["context_turns"] == 1
