"""MODEL_MAX_OUTPUT_TOKENS reaches the provider in every chat request: Gemini's
`generationConfig.maxOutputTokens`, an OpenAI-compatible server's `max_tokens` (issue 29,
case 9: nothing capped the length of an answer, which the citation guard then reads)."""

from __future__ import annotations

from aircoach.settings import Settings
from tests.helpers import chat
from tests.llm.conftest import app_client
from tests.llm.fakes import gemini_text, openai_text


def test_the_cap_has_a_default():
    assert Settings(_env_file=None).model_max_output_tokens == 4096


async def test_gemini_is_asked_for_at_most_the_cap(gemini_api, gemini_settings, auth):
    gemini_api.script(gemini_text("La portanza ", "nasce dalla pressione."))
    async with app_client(gemini_settings(model_max_output_tokens=1500)) as (client, _):
        events = await chat(client, auth(), "Cos'è la portanza?")

    assert [e["type"] for e in events] == ["agent_message", "agent_message", "done"]
    (request,) = gemini_api.requests
    assert request.body["generationConfig"]["maxOutputTokens"] == 1500


async def test_an_openai_compatible_server_gets_max_tokens(openai_api, model_settings, auth):
    openai_api.script(openai_text("La portanza ", "nasce dalla pressione."))
    settings = model_settings(
        model_provider="openai",
        model_name="fake-llama",
        openai_base_url=f"{openai_api.url}/v1",
        model_max_output_tokens=1500,
    )
    async with app_client(settings) as (client, _):
        events = await chat(client, auth(), "Cos'è la portanza?")

    assert [e["type"] for e in events] == ["agent_message", "agent_message", "done"]
    (request,) = openai_api.requests
    # The name Ollama and LM Studio read (ChatOpenAI's own field would be sent as
    # `max_completion_tokens`, which they do not).
    assert request.body["max_tokens"] == 1500
    assert "max_completion_tokens" not in request.body
