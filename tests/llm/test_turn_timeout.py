"""TURN_TIMEOUT_S caps the whole agent run: a model that trickles bytes (each read well inside
MODEL_TIMEOUT_S) is cut off with `error model_unavailable`, the fallback answer (or the part
already streamed), and the turn stored as `error`."""

from __future__ import annotations

from aircoach.errors import TurnTimeout
from aircoach.turn.turn import FALLBACK_ANSWER
from tests.helpers import chat
from tests.llm.conftest import MODEL_TIMEOUT_S, app_client
from tests.llm.fakes import gemini_text

# Met only by a reply that trickles until the test releases it.
TURN_TIMEOUT_S = 1.0


async def _turn(settings, auth):
    async with app_client(settings) as (client, app):
        events = await chat(client, auth(), "Cos'è lo stallo?")
        turns = await app.state.services.chats.recent_turns("user-1", 5)
    return events, turns


async def test_a_trickling_model_is_cut_off_with_the_fallback_answer(
    gemini_api, gemini_settings, auth
):
    gemini_api.script(gemini_text("mai", trickle_after=0))
    settings = gemini_settings(turn_timeout_s=TURN_TIMEOUT_S)
    assert settings.model_timeout_s == MODEL_TIMEOUT_S  # a per-read timeout never fires here

    events, turns = await _turn(settings, auth)

    assert [e["type"] for e in events] == ["error", "agent_message", "done"]
    assert events[0] == {
        "type": "error",
        "code": "model_unavailable",
        "message": TurnTimeout().message_in("it"),
    }
    assert events[1]["content"] == FALLBACK_ANSWER
    (turn,) = turns
    assert (turn.status, turn.system, turn.turn_id) == (
        "error",
        FALLBACK_ANSWER,
        events[2]["turn_id"],
    )
    assert gemini_api.client_left.wait(30)  # the model request was cancelled, not left running


async def test_a_partial_answer_is_kept_when_the_cap_cuts_it(gemini_api, gemini_settings, auth):
    gemini_api.script(gemini_text("Lo stallo è ", "la perdita di portanza.", trickle_after=1))

    events, turns = await _turn(gemini_settings(turn_timeout_s=TURN_TIMEOUT_S), auth)

    assert [e["type"] for e in events] == ["agent_message", "error", "done"]
    assert events[0]["content"] == "Lo stallo è "
    assert events[1]["code"] == "model_unavailable"
    (turn,) = turns
    assert (turn.status, turn.system) == ("error", "Lo stallo è ")


async def test_a_json_answer_cut_half_way_is_the_fallback_answer(gemini_api, gemini_settings, auth):
    """A JSON turn keeps the text of model calls that ended: the client never saw the half
    answer of the call the cap cut, so it gets (and the store keeps) the fallback answer."""
    gemini_api.script(gemini_text("Lo stallo è ", "la perdita di portanza.", trickle_after=1))
    async with app_client(gemini_settings(turn_timeout_s=TURN_TIMEOUT_S)) as (client, app):
        response = await client.post(
            "/api/stream_query", json={"query": "Cos'è lo stallo?", "stream": False}, headers=auth()
        )
        turns = await app.state.services.chats.recent_turns("user-1", 5)

    assert response.status_code == 200, response.text
    body = response.json()
    assert (body["answer"], body["status"]) == (FALLBACK_ANSWER, "error")
    assert [e["code"] for e in body["errors"]] == ["model_unavailable"]
    (turn,) = turns
    assert (turn.status, turn.system) == ("error", FALLBACK_ANSWER)
