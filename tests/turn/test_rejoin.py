"""A client that comes back to a turn (`GET /api/turns/{turn_id}/events`): after a replayed
stream, from the same numbers; once the turn's event log is gone, from the turn rebuilt from
the store, numbered anew and always ending with `done`."""

from __future__ import annotations

from pathlib import Path

from aircoach.services import build_turn_log
from tests.helpers import app_with, asgi_client, chat
from tests.scripted_model import Script, ScriptedModels, text
from tests.sse import parse_sse, parse_sse_ids


async def test_a_client_past_the_rebuilt_numbers_still_gets_done(settings, auth, tmp_path: Path):
    words = " ".join(f"parola{i}" for i in range(12))
    app = app_with(settings, models=ScriptedModels(Script([text(words)])))
    async with asgi_client(app) as client:
        events = await chat(client, auth(), "ciao")
    done = events[-1]
    assert done["type"] == "done" and len(events) > 4  # the answer came in several events
    # Another instance whose log no longer holds the turn (its 24 h are over): the turn is
    # rebuilt from the store, its answer one event, so the numbers the client saw run past it.
    elsewhere = settings.model_copy(update={"data_dir": tmp_path / "other"})
    (tmp_path / "other").mkdir()
    later = app_with(settings, turn_log=build_turn_log(elsewhere))
    async with asgi_client(later) as client:
        response = await client.get(
            f"/api/turns/{done['turn_id']}/events",
            headers={**auth(), "Last-Event-ID": str(len(events) - 1)},
        )
    assert response.status_code == 200, response.text
    rebuilt = parse_sse(response.text)
    assert [e["type"] for e in rebuilt] == ["done"]
    assert rebuilt[0]["turn_id"] == done["turn_id"] and rebuilt[0]["status"] == "ok"


async def test_a_client_at_or_past_a_logged_done_gets_an_empty_stream(settings, auth):
    app = app_with(settings, models=ScriptedModels(Script([text("ciao a te")])))
    async with asgi_client(app) as client:
        events = await chat(client, auth(), "ciao")
        done_id = len(events)  # the events are numbered 1, 2, ...: `done` is the last
        for last_read in (done_id, done_id + 3):
            response = await client.get(
                f"/api/turns/{events[-1]['turn_id']}/events",
                headers={**auth(), "Last-Event-ID": str(last_read)},
            )
            assert response.status_code == 200, response.text
            assert parse_sse(response.text) == [], last_read


async def test_a_rejoin_after_a_replayed_stream_neither_repeats_nor_skips(settings, auth):
    """A resend of a finished turn's `client_message_id` replayed it as `tool_result`, the
    whole answer, `done`, numbered from 1, while its log numbered the first stream's events
    (1 to 59 for one answer): a client that dropped after the replay's whole answer and
    rejoined got the answer's words again, from the second on."""
    words = " ".join(f"parola{i}" for i in range(12))
    app = app_with(settings, models=ScriptedModels(Script([text(words)])))
    async with asgi_client(app) as client:
        body = {"query": "ciao", "client_message_id": "m-1"}
        first = await client.post("/api/stream_query", json=body, headers=auth())
        again = await client.post("/api/stream_query", json=body, headers=auth())
        assert again.headers["Idempotent-Replayed"] == "true"
        assert len(parse_sse(first.text)) > 4  # the answer came in several events
        kept = parse_sse_ids(again.text)[:1]  # the replay dropped after its first event
        response = await client.get(
            f"/api/turns/{again.headers['X-Turn-ID']}/events",
            headers={**auth(), "Last-Event-ID": str(kept[-1][0])},
        )
    assert response.status_code == 200, response.text
    read = kept + parse_sse_ids(response.text)
    assert read == parse_sse_ids(first.text)
    assert "".join(event.get("content", "") for _, event in read) == words
