"""Gemini end to end: the real ChatGoogleGenerativeAI (google-genai underneath) against a fake
Gemini REST API on loopback, through POST /api/stream_query."""

from __future__ import annotations

from tests.helpers import chat
from tests.llm.conftest import app_client
from tests.llm.fakes import gemini_call, gemini_text


async def test_text_turn_streams_gemini_chunks(gemini_api, gemini_settings, auth):
    gemini_api.script(gemini_text("La portanza ", "nasce dalla differenza ", "di pressione."))
    async with app_client(gemini_settings()) as (client, app):
        events = await chat(client, auth(), "Cos'è la portanza?")
        turns = await app.state.services.chats.recent_turns("user-1", 5)

    assert [e["type"] for e in events] == ["agent_message"] * 3 + ["done"]
    answer = "".join(e["content"] for e in events[:-1])
    assert answer == "La portanza nasce dalla differenza di pressione."
    assert events[-1]["model"] == "gemini-2.5-flash"

    (request,) = gemini_api.requests
    assert request.path == "/v1beta/models/gemini-2.5-flash:streamGenerateContent?alt=sse"
    assert request.headers["x-goog-api-key"] == "fake-key"
    assert request.body["contents"][-1] == {
        "role": "user",
        "parts": [{"text": "Cos'è la portanza?"}],
    }
    assert "AIR Coach" in request.body["systemInstruction"]["parts"][0]["text"]
    declared = [f["name"] for t in request.body["tools"] for f in t["functionDeclarations"]]
    assert declared == ["domanda_teoria", "verifica_risposta", "kb_search"]

    (turn,) = turns
    assert (turn.system, turn.status, turn.model) == (answer, "ok", "gemini-2.5-flash")


async def test_a_json_turn_streams_from_gemini_too(gemini_api, gemini_settings, auth):
    """`stream: false` changes what the client gets, not how Gemini is called: streamed, so
    MODEL_TIMEOUT_S (a read timeout) waits for the next part of an answer, not the whole."""
    gemini_api.script(gemini_text("La portanza ", "nasce dalla differenza ", "di pressione."))
    async with app_client(gemini_settings()) as (client, _):
        response = await client.post(
            "/api/stream_query",
            json={"query": "Cos'è la portanza?", "stream": False},
            headers=auth(),
        )

    assert response.status_code == 200, response.text
    assert response.json()["answer"] == "La portanza nasce dalla differenza di pressione."
    (request,) = gemini_api.requests
    assert request.path == "/v1beta/models/gemini-2.5-flash:streamGenerateContent?alt=sse"


async def test_tool_turn_runs_the_function_gemini_calls(gemini_api, gemini_settings, auth):
    gemini_api.script(gemini_call("domanda_teoria", capitolo=3))
    async with app_client(gemini_settings()) as (client, app):
        events = await chat(client, auth(), "Dammi una domanda del capitolo 3")
        turns = await app.state.services.chats.recent_turns("user-1", 5)

    assert [e["type"] for e in events] == ["tool_result", "done"]
    result = events[0]
    assert result["tool_name"] == "domanda_teoria" and result["final"] is True
    assert result["data"]["question"]["capitolo"] == 3
    (turn,) = turns
    assert turn.tool is not None and turn.tool.data == result["data"]
    assert turn.status == "ok"


async def test_failed_tool_goes_back_to_gemini_as_a_function_response(
    gemini_api, gemini_settings, auth
):
    gemini_api.script(
        gemini_call("domanda_teoria", capitolo=99),
        gemini_text("Il capitolo 99 non esiste: scegline uno da 1 a 10."),
    )
    async with app_client(gemini_settings()) as (client, _):
        events = await chat(client, auth(), "Domanda del capitolo 99")

    assert events[0]["type"] == "tool_result" and events[0]["final"] is False
    assert events[-1]["type"] == "done"
    answer = "".join(e["content"] for e in events if e["type"] == "agent_message")
    assert answer == "Il capitolo 99 non esiste: scegline uno da 1 a 10."
    second = gemini_api.requests[1].body["contents"]
    call, response = second[-2]["parts"][0], second[-1]["parts"][0]
    assert call["functionCall"]["name"] == "domanda_teoria"
    assert response["functionResponse"]["name"] == "domanda_teoria"
