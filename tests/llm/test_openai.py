"""OpenAI-compatible servers (Ollama, vLLM, SGLang, LiteLLM): the real ChatOpenAI against a
fake chat-completions API on loopback, with streamed tool calls."""

from __future__ import annotations

from tests.helpers import chat
from tests.llm.conftest import app_client
from tests.llm.fakes import openai_call, openai_text


def _settings(model_settings, openai_api, **overrides):
    return model_settings(
        model_provider="openai",
        model_name="fake-llama",
        openai_base_url=f"{openai_api.url}/v1",
        **overrides,
    )


async def test_streamed_tool_call_runs_the_tool(openai_api, model_settings, auth):
    openai_api.script(openai_call("domanda_teoria", capitolo=5))
    async with app_client(_settings(model_settings, openai_api)) as (client, app):
        events = await chat(client, auth(), "Una domanda sul capitolo 5")
        turns = await app.state.services.chats.recent_turns("user-1", 5)

    assert [e["type"] for e in events] == ["tool_result", "done"]
    assert events[0]["final"] is True and events[0]["data"]["question"]["capitolo"] == 5
    assert events[1]["model"] == "fake-llama"
    (request,) = openai_api.requests
    assert request.path == "/v1/chat/completions"
    assert request.headers["authorization"] == "Bearer unused"  # Ollama needs no key
    assert request.body["model"] == "fake-llama" and request.body["stream"] is True
    assert [t["function"]["name"] for t in request.body["tools"]] == [
        "domanda_teoria",
        "verifica_risposta",
        "kb_search",  # no KB_SEARCH_URL: the course manual on board
    ]
    assert request.body["messages"][0]["role"] == "system"
    assert turns[0].tool is not None and turns[0].status == "ok"


async def test_text_turn_and_the_tool_result_round_trip(openai_api, model_settings, auth):
    openai_api.script(
        openai_call("domanda_teoria", call_id="call_x", capitolo=42),
        openai_text("Il capitolo 42 ", "non esiste."),
    )
    async with app_client(_settings(model_settings, openai_api)) as (client, _):
        events = await chat(client, auth(), "Domanda del capitolo 42")

    assert [e["type"] for e in events] == ["tool_result", "agent_message", "agent_message", "done"]
    assert events[0]["final"] is False  # the tool failed: the model explains
    answer = "".join(e["content"] for e in events if e["type"] == "agent_message")
    assert answer == "Il capitolo 42 non esiste."
    messages = openai_api.requests[1].body["messages"]
    assert messages[-2]["tool_calls"][0]["id"] == "call_x"
    assert messages[-1]["role"] == "tool" and messages[-1]["tool_call_id"] == "call_x"


async def test_a_json_turn_streams_from_the_server_too(openai_api, model_settings, auth):
    """`stream: false` is the client's choice; the model is still called with `stream`."""
    openai_api.script(openai_text("Il capitolo 42 ", "non esiste."))
    async with app_client(_settings(model_settings, openai_api)) as (client, _):
        response = await client.post(
            "/api/stream_query", json={"query": "ciao", "stream": False}, headers=auth()
        )

    assert response.status_code == 200, response.text
    assert response.json()["answer"] == "Il capitolo 42 non esiste."
    (request,) = openai_api.requests
    assert request.body["stream"] is True


async def test_api_key_is_sent_when_set(openai_api, model_settings, auth):
    openai_api.script(openai_text("Ciao."))
    settings = _settings(model_settings, openai_api, openai_api_key="sk-test")
    async with app_client(settings) as (client, _):
        events = await chat(client, auth(), "Ciao")
    assert events[0]["content"] == "Ciao."
    assert openai_api.requests[0].headers["authorization"] == "Bearer sk-test"
