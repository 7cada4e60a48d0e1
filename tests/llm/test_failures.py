"""A failing model never leaves the user empty-handed: `error` event, the fixed fallback
answer, `done`, and the turn stored with status "error"; or, with MODEL_FALLBACK, the second
model answers instead."""

from __future__ import annotations

import pytest

from aircoach.turn.turn import FALLBACK_ANSWER
from tests.helpers import chat
from tests.llm.conftest import HANG_TIMEOUT_S, SHARED_TIMEOUT_S, app_client
from tests.llm.fakes import (
    Reply,
    gemini_empty,
    gemini_error,
    gemini_text,
    openai_call,
    openai_error,
    openai_text,
)

FAILURES = {
    "500": lambda: gemini_error(500),
    "503": lambda: gemini_error(503),
    "429": lambda: gemini_error(429),
    "hang": lambda: Reply(hang_before=True),
    "empty": gemini_empty,
}


async def _turn(settings, auth, query="Cos'è lo stallo?"):
    async with app_client(settings) as (client, app):
        events = await chat(client, auth(), query)
        turns = await app.state.services.chats.recent_turns("user-1", 5)
    return events, turns


@pytest.mark.parametrize("failure", FAILURES)
async def test_failure_sends_error_then_fallback_answer(failure, gemini_api, gemini_settings, auth):
    gemini_api.script(FAILURES[failure]())
    timeout = {"model_timeout_s": HANG_TIMEOUT_S} if failure == "hang" else {}
    events, turns = await _turn(gemini_settings(**timeout), auth)

    assert [e["type"] for e in events] == ["error", "agent_message", "done"]
    error = events[0]
    assert error["code"] == "model_unavailable"
    expected = "risposta vuota" if failure == "empty" else "non è disponibile in questo momento"
    assert expected in error["message"]
    assert events[1]["content"] == FALLBACK_ANSWER
    assert events[2]["model"] == "gemini-2.5-flash"
    (turn,) = turns
    assert (turn.status, turn.system) == ("error", FALLBACK_ANSWER)
    assert len(gemini_api.requests) == 1  # MODEL_MAX_RETRIES=0: one attempt


@pytest.mark.parametrize("failure", [name for name in FAILURES if name != "hang"])
async def test_fallback_model_answers_when_the_first_fails(
    failure, gemini_api, openai_api, gemini_settings, auth
):
    gemini_api.script(FAILURES[failure]())
    openai_api.script(openai_text("Lo stallo è ", "la perdita di portanza."))
    settings = gemini_settings(
        model_fallback="openai:fake-llama",
        openai_base_url=f"{openai_api.url}/v1",
    )
    events, turns = await _turn(settings, auth)

    assert [e["type"] for e in events] == ["agent_message", "agent_message", "done"]
    assert "".join(e["content"] for e in events[:-1]) == "Lo stallo è la perdita di portanza."
    assert events[-1]["model"] == "fake-llama"
    (turn,) = turns
    assert (turn.status, turn.model) == ("ok", "fake-llama")
    assert turn.system == "Lo stallo è la perdita di portanza."


async def test_a_model_that_hangs_times_out_and_the_fallback_answers(
    gemini_api, gemini_settings, auth
):
    """The timeout is met only by the hanging model: the fallback (offline) has no deadline."""
    gemini_api.script(Reply(hang_before=True))
    settings = gemini_settings(model_timeout_s=HANG_TIMEOUT_S, model_fallback="offline")
    events, turns = await _turn(settings, auth)

    # The offline fallback answers a theory question from the course manual.
    assert [e["type"] for e in events if e["type"] != "agent_message"] == ["tool_result", "done"]
    assert events[0]["tool_name"] == "kb_search"
    assert events[-1]["model"] == "offline" and turns[0].status == "ok"


async def test_offline_fallback_says_it_is_offline(gemini_api, gemini_settings, auth):
    gemini_api.script(gemini_error(500))
    events, turns = await _turn(gemini_settings(model_fallback="offline"), auth)

    assert events[-1]["type"] == "done" and events[-1]["model"] == "offline"
    answer = "".join(e["content"] for e in events if e["type"] == "agent_message")
    assert answer.startswith("[modello offline]")
    assert turns[0].status == "ok"


async def test_both_models_failing_gives_the_fallback_answer(
    gemini_api, openai_api, gemini_settings, auth
):
    gemini_api.script(gemini_error(503))
    openai_api.script(openai_error(500))
    settings = gemini_settings(
        model_fallback="openai:fake-llama", openai_base_url=f"{openai_api.url}/v1"
    )
    events, turns = await _turn(settings, auth)

    assert [e["type"] for e in events] == ["error", "agent_message", "done"]
    assert events[0]["code"] == "model_unavailable"
    assert events[1]["content"] == FALLBACK_ANSWER
    assert turns[0].status == "error"


async def test_no_fallback_once_text_was_streamed(gemini_api, openai_api, gemini_settings, auth):
    """Half an answer already reached the client: a second model would glue another answer
    to it. The partial text stays, the error is reported, and the fallback is not called."""
    gemini_api.script(gemini_text("Lo stallo ", "avviene oltre l'angolo critico.", hang_after=1))
    settings = gemini_settings(
        model_timeout_s=SHARED_TIMEOUT_S,
        model_fallback="openai:fake-llama",
        openai_base_url=f"{openai_api.url}/v1",
    )
    events, turns = await _turn(settings, auth)

    assert [e["type"] for e in events] == ["agent_message", "error", "done"]
    assert events[0]["content"] == "Lo stallo "
    assert events[1]["code"] == "model_unavailable"
    assert openai_api.requests == []
    assert (turns[0].status, turns[0].system) == ("error", "Lo stallo ")


@pytest.mark.integration
async def test_retries_follow_model_max_retries(gemini_api, gemini_settings, auth):
    """One retry (the SDK's default would be five) after a 503, with the SDK's own backoff."""
    gemini_api.script(gemini_error(503), gemini_text("Ecco la risposta."))
    events, turns = await _turn(gemini_settings(model_max_retries=1), auth)

    assert [e["type"] for e in events] == ["agent_message", "done"]
    assert len(gemini_api.requests) == 2
    assert turns[0].status == "ok"


async def test_fallback_stays_in_charge_for_the_rest_of_the_turn(
    gemini_api, openai_api, gemini_settings, auth
):
    """After the first model failed, the model call that follows a tool result goes straight
    to the model that answered (the fake Gemini would reject a second request)."""
    gemini_api.script(gemini_error(500))
    openai_api.script(
        openai_call("domanda_teoria", capitolo=42), openai_text("Il capitolo 42 non esiste.")
    )
    settings = gemini_settings(
        model_fallback="openai:fake-llama", openai_base_url=f"{openai_api.url}/v1"
    )
    events, turns = await _turn(settings, auth)

    assert [e["type"] for e in events] == ["tool_result", "agent_message", "done"]
    assert events[-1]["model"] == "fake-llama" and turns[0].status == "ok"
    assert len(gemini_api.requests) == 1 and len(openai_api.requests) == 2


@pytest.mark.integration
async def test_a_json_turn_falls_back_even_after_text_was_written(
    gemini_api, openai_api, gemini_settings, auth
):
    """A JSON client has read nothing when the first model stalls half-way: the second model
    answers the whole question, and the half answer is nowhere (not in the answer, not
    stored)."""
    gemini_api.script(gemini_text("Lo stallo ", "avviene oltre l'angolo critico.", hang_after=1))
    openai_api.script(openai_text("Lo stallo è la perdita di portanza ", "oltre l'angolo critico."))
    settings = gemini_settings(
        model_timeout_s=SHARED_TIMEOUT_S,
        model_fallback="openai:fake-llama",
        openai_base_url=f"{openai_api.url}/v1",
    )
    async with app_client(settings) as (client, app):
        response = await client.post(
            "/api/stream_query", json={"query": "Cos'è lo stallo?", "stream": False}, headers=auth()
        )
        turns = await app.state.services.chats.recent_turns("user-1", 5)

    assert response.status_code == 200, response.text
    body = response.json()
    answer = "Lo stallo è la perdita di portanza oltre l'angolo critico."
    assert (body["answer"], body["status"], body["errors"], body["model"]) == (
        answer,
        "ok",
        [],
        "fake-llama",
    )
    assert (turns[0].status, turns[0].system, turns[0].model) == ("ok", answer, "fake-llama")


async def test_a_fallback_of_the_primarys_provider_goes_to_model_base_url(
    gemini_api, gemini_settings, auth
):
    """MODEL_BASE_URL (a gateway, here the fake Gemini) is where the primary's provider is
    reached: a Gemini fallback goes there too, not to Google's own endpoint."""
    gemini_api.script(gemini_error(503), gemini_text("Lo stallo è la perdita di portanza."))
    settings = gemini_settings(model_fallback="gemini:gemini-2.5-flash-lite")
    events, turns = await _turn(settings, auth)

    assert [e["type"] for e in events] == ["agent_message", "done"]
    assert events[-1]["model"] == turns[0].model == "gemini-2.5-flash-lite"
    first, second = gemini_api.requests
    assert "/models/gemini-2.5-flash:" in first.path
    assert "/models/gemini-2.5-flash-lite:" in second.path


async def test_an_openai_fallback_of_an_openai_primary_uses_model_base_url(
    openai_api, model_settings, auth
):
    """A local server named by MODEL_BASE_URL alone (no key, no OPENAI_BASE_URL) serves both
    models, as the settings' start-up check already accepts."""
    openai_api.script(openai_error(500), openai_text("Lo stallo è la perdita di portanza."))
    settings = model_settings(
        model_provider="openai",
        model_name="fake-llama",
        model_base_url=f"{openai_api.url}/v1",
        model_fallback="openai:fake-qwen",
    )
    events, turns = await _turn(settings, auth)

    assert [e["type"] for e in events] == ["agent_message", "done"]
    assert events[-1]["model"] == turns[0].model == "fake-qwen"
    assert [r.body["model"] for r in openai_api.requests] == ["fake-llama", "fake-qwen"]
