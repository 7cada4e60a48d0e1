"""The same memory on every instance: a thread rebuilt from the store holds exactly the
messages the warm thread held (tool calls with their ids and arguments, tool messages with
the text the model was given), whichever instance answers."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from langchain_core.messages import AIMessage, BaseMessage, ToolMessage

from aircoach.services import build_stores
from aircoach.settings import Settings
from tests.helpers import ObservedChats, app_with, asgi_client, chat
from tests.scripted_model import Script, ScriptedModels, call, text
from tests.tools.conftest import tool_urls
from tests.tools.fake_service import FakeToolService, Reply

KB_ANSWER = {
    "results": [
        {"riferimento": f"3.{i}", "materia": "aerodinamica", "score": 0.9, "testo": "y" * 3000}
        for i in range(12)
    ]
}


@pytest.fixture
def tool_service() -> Iterator[FakeToolService]:
    service = FakeToolService().start()
    yield service
    service.stop()


def seen(message: BaseMessage) -> tuple[Any, ...]:
    """What a model is given of a message (its id is the checkpointer's business)."""
    calls = [(c["name"], c["args"], c["id"]) for c in getattr(message, "tool_calls", [])]
    if isinstance(message, ToolMessage):
        return ("tool", message.content, message.tool_call_id, message.name, message.status)
    return (message.type, message.content, calls)


def mixed_turn() -> list[AIMessage]:
    """A model that talks before calling a tool, then calls another one, then answers."""
    first = AIMessage(
        "Un attimo, controllo. ",
        tool_calls=[
            {"name": "domanda_teoria", "args": {"capitolo": 99}, "id": "c-1", "type": "tool_call"}
        ],
    )
    second = AIMessage(
        "",
        tool_calls=[
            {"name": "kb_search", "args": {"query": "stallo"}, "id": "c-2", "type": "tool_call"},
            {"name": "kb_search", "args": {"query": "vite"}, "id": "c-3", "type": "tool_call"},
        ],
    )
    return [first, second, text("Ecco cosa dice il manuale.")]


@pytest.mark.parametrize("conversation", [None, "volo-1"])
async def test_the_model_sees_the_same_history_warm_and_after_a_reseed(
    store_settings: Settings, auth, tool_service: FakeToolService, conversation: str | None
):
    """In the user's default conversation and in a named one (`conversation_id`), beside a
    turn of another conversation, which neither instance shows the model."""
    tool_service.plan("/kb", Reply(200, KB_ANSWER))
    settings = store_settings.model_copy(update={"tool_env": tool_urls(tool_service)})
    script = Script(
        [
            call("domanda_teoria", capitolo=1, numero=1),  # a quiz turn (return_direct)
            call("verifica_risposta", capitolo=1, numero=1, risposta="la c"),  # a graded answer
            text("Esatto: la portanza quadruplica."),
            call("kb_search", query="portanza"),  # an HTTP tool turn
            text("Il manuale spiega la portanza."),
            *mixed_turn(),
            text("Altro discorso."),  # a turn of another conversation
            text("Ciao!"),  # the warm turn whose input is compared
            text("Ciao di nuovo!"),  # the same turn's input on a cold instance
        ]
    )
    here = {"conversation_id": conversation} if conversation else {}
    elsewhere = {"conversation_id": "altra"}
    warm = app_with(settings, models=ScriptedModels(script))
    async with asgi_client(warm) as client:
        for query in (
            "Dammi la domanda 1 del capitolo 1",
            "la c",
            "Cosa dice il manuale sulla portanza?",
            "Spiegami lo stallo",
        ):
            await chat(client, auth(), query, **here)
        await chat(client, auth(), "parliamo d'altro", **elsewhere)
        await chat(client, auth(), "ciao", **here)
    warm_input = script.calls[-1]
    assert not any(m.content == "parliamo d'altro" for m in warm_input)

    restarted = ObservedChats(build_stores(settings)[0])
    cold = app_with(settings, models=ScriptedModels(script), chats=restarted)
    async with asgi_client(cold) as client:
        await chat(client, auth(), "ciao", **here)
    cold_input = script.calls[-1]
    script.assert_used()
    assert restarted.reseeds == 1

    # The warm input ends with "ciao"; the cold one holds that turn too, then its own "ciao".
    history = [seen(m) for m in warm_input[:-1]]
    assert [seen(m) for m in cold_input[: len(history)]] == history
    assert [m.type for m in cold_input[len(history) :]] == ["human", "ai", "human"]

    tool_texts = [m.content for m in warm_input if isinstance(m, ToolMessage)]
    assert tool_texts[0].startswith("Capitolo 1, domanda 1: ")  # with the key, for the model
    assert "RISERVATO AL COACH" in tool_texts[0]
    assert tool_texts[1].startswith("Esito: risposta CORRETTA")
    assert tool_texts[2].startswith("[Manuale: 12 risultati]")  # capped as the format says
    assert len(tool_texts[2]) < 10_000 and "(altri 4 risultati non mostrati)" in tool_texts[2]
    assert tool_texts[3].startswith("[Tool domanda_teoria failed: capitolo must be")
    mixed = [seen(m) for m in warm_input if m.type == "ai"][-3:]
    assert mixed == [
        ("ai", "Un attimo, controllo. ", [("domanda_teoria", {"capitolo": 99}, "c-1")]),
        (
            "ai",
            "",
            [("kb_search", {"query": "stallo"}, "c-2"), ("kb_search", {"query": "vite"}, "c-3")],
        ),
        ("ai", "Ecco cosa dice il manuale.", []),
    ]


async def test_every_tool_call_of_a_turn_is_stored_with_its_arguments_and_texts(
    settings: Settings, auth, tool_service: FakeToolService
):
    tool_service.plan("/kb", Reply(200, {"results": [{"testo": "La vite segue lo stallo."}]}))
    settings = settings.model_copy(update={"tool_env": tool_urls(tool_service)})
    script = Script(mixed_turn())
    app = app_with(settings, models=ScriptedModels(script))
    async with asgi_client(app) as client:
        events = await chat(client, auth(), "Spiegami lo stallo")
    assert [e["type"] for e in events[:4]] == ["agent_message"] * 3 + ["tool_result"]
    [turn] = await app.state.services.chats.recent_turns("user-1", 5)
    assert [(c.tool_name, c.call_id, c.arguments, c.status, c.step) for c in turn.tools] == [
        ("domanda_teoria", "c-1", {"capitolo": 99}, "error", 0),
        ("kb_search", "c-2", {"query": "stallo"}, "success", 1),
        ("kb_search", "c-3", {"query": "vite"}, "success", 1),
    ]
    assert [c.offset for c in turn.tools] == [len("Un attimo, controllo. ")] * 3
    assert turn.tools[1].text == "[Manuale: 1 risultati]\n- [] () score=: La vite segue lo stallo."
    assert turn.tools[1].data["items"] == [{"testo": "La vite segue lo stallo."}]
    # Seed-era readers still find in `tool` the last tool result the client got (the two
    # parallel calls may finish in either order; their `meta.latency_ms` tells them apart).
    last = [e for e in events if e["type"] == "tool_result"][-1]
    assert turn.tool is not None and turn.tool.model_dump() == {
        "tool_name": "kb_search",
        "data": last["data"],
    }
    assert last["data"] in [call.data for call in turn.tools[1:]]
    assert turn.system == "Un attimo, controllo. Ecco cosa dice il manuale."


async def test_a_json_turn_stores_what_the_same_streamed_turn_stores(
    settings: Settings, auth, tool_service: FakeToolService
):
    """A JSON turn runs the agent without LangGraph's token stream (it reads each model
    call's text when the call ends): the stored turn, its tool calls' steps and offsets, and
    the answer are those of the streamed turn."""
    tool_service.plan("/kb", Reply(200, {"results": [{"testo": "La vite segue lo stallo."}]}))
    settings = settings.model_copy(update={"tool_env": tool_urls(tool_service)})
    kept = []
    for user, stream in (("user-sse", True), ("user-json", False)):
        app = app_with(settings, models=ScriptedModels(Script(mixed_turn())))
        async with asgi_client(app) as client:
            response = await client.post(
                "/api/stream_query",
                json={"query": "Spiegami lo stallo", "stream": stream},
                headers=auth(user),
            )
            assert response.status_code == 200, response.text
            [turn] = await app.state.services.chats.recent_turns(user, 5)
            kept.append((response, turn))
    (_, streamed), (response, answered) = kept
    assert response.json()["answer"] == "Un attimo, controllo. Ecco cosa dice il manuale."
    assert answered.system == streamed.system == response.json()["answer"]
    calls = [
        [(c.tool_name, c.call_id, c.arguments, c.text, c.status, c.step, c.offset) for c in t.tools]
        for t in (streamed, answered)
    ]
    assert calls[0] == calls[1] and [c[-1] for c in calls[1]] == [len("Un attimo, controllo. ")] * 3
