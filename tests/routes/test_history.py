"""GET /api/history: the caller's turns only, newest first, cursor pagination."""

from __future__ import annotations

from typing import Any

from aircoach.turn.records import Turn
from tests.helpers import app_with, asgi_client, chat, services_of
from tests.scripted_model import Script, ScriptedModels, text
from tests.store.test_dead_letters import accept_writes, refuse_writes


def stored(user: str, n: int, conversation_id: str | None = None) -> Turn:
    return Turn(
        userId=user,
        human=f"{user} domanda {n}",
        system=f"risposta {n}",
        timestamp=f"2025-03-01T10:{n:02d}:00.000000+00:00",
        prompt_version="abc123",
        model="scripted",
        thread_id=f"{user}:vabc123",
        turn_id=f"{n:08x}-{user}",
        conversation_id=conversation_id,
    )


async def test_history_pages_the_callers_turns_newest_first(store_settings, auth):
    app = app_with(store_settings)
    chats = app.state.services.chats
    for n in range(5):
        await chats.append_turn(stored("alice", n))
        await chats.append_turn(stored("mallory", n))

    seen: list[str] = []
    before = None
    async with asgi_client(app) as c:
        for _ in range(4):
            params = {"limit": 2, **({"before": before} if before else {})}
            response = await c.get("/api/history", params=params, headers=auth("alice"))
            assert response.status_code == 200
            page = response.json()
            assert all(t["userId"] == "alice" for t in page["turns"])
            seen += [t["human"] for t in page["turns"]]
            before = page["next_before"]
            if before is None:
                break
        assert seen == [f"alice domanda {n}" for n in (4, 3, 2, 1, 0)]
        assert before is None

        assert (await c.get("/api/history", params={"limit": 0}, headers=auth())).status_code == 422
        assert (await c.get("/api/history")).status_code == 401
        page = (await c.get("/api/history", headers=auth("nobody"))).json()
        assert page == {"turns": [], "next_cursor": None, "next_before": None}

        seen, cursor = [], None
        for _ in range(4):
            params = {"limit": 2, **({"cursor": cursor} if cursor else {})}
            page = (await c.get("/api/history", params=params, headers=auth("alice"))).json()
            seen += [t["human"] for t in page["turns"]]
            cursor = page["next_cursor"]
            if cursor is None:
                break
        assert seen == [f"alice domanda {n}" for n in (4, 3, 2, 1, 0)]


async def test_a_last_page_that_is_just_full_has_no_cursor(store_settings, auth):
    """Four turns by two: the second page said `next_cursor` (and `next_before`), and the
    client asked for an empty third page (the OpenAPI document: null on the last page)."""
    app = app_with(store_settings)
    for n in range(4):
        await app.state.services.chats.append_turn(stored("alice", n))
    async with asgi_client(app) as c:
        first = (await c.get("/api/history", params={"limit": 2}, headers=auth("alice"))).json()
        assert first["next_cursor"] is not None and first["next_before"] is not None
        params = {"limit": 2, "cursor": first["next_cursor"]}
        last = (await c.get("/api/history", params=params, headers=auth("alice"))).json()
    assert [t["human"] for t in last["turns"]] == ["alice domanda 1", "alice domanda 0"]
    assert last["next_cursor"] is None and last["next_before"] is None


async def test_the_default_conversation_pages_alone_as_default(store_settings, auth):
    """A client shows the default conversation (its turns sent without `conversation_id`)
    beside the named ones: `conversation_id=default` pages it alone, turns a client stored
    under `default` before the id was reserved included, while no id still pages every
    conversation's."""
    app = app_with(store_settings)
    chats = app.state.services.chats
    where = [None, "alfa", "beta", "default", "alfa", None, "beta", None]
    for n, conversation_id in enumerate(where):
        await chats.append_turn(stored("alice", n, conversation_id))
    await chats.append_turn(stored("mallory", 8))

    async def pages(c: Any, **params: Any) -> list[list[tuple[str, str | None]]]:
        seen, cursor = [], None
        for _ in range(len(where)):
            query = {"limit": 3, **params, **({"cursor": cursor} if cursor else {})}
            response = await c.get("/api/history", params=query, headers=auth("alice"))
            assert response.status_code == 200, response.text
            page = response.json()
            seen.append([(t["human"], t["conversation_id"]) for t in page["turns"]])
            cursor = page["next_cursor"]
            if cursor is None:
                return seen
        raise AssertionError(f"no last page: {seen}")

    async with asgi_client(app) as c:
        default = await pages(c, conversation_id="default")
        alfa = await pages(c, conversation_id="alfa")
        every = await pages(c)
    assert default == [
        [("alice domanda 7", None), ("alice domanda 5", None), ("alice domanda 3", None)],
        [("alice domanda 0", None)],
    ]
    assert alfa == [[("alice domanda 4", "alfa"), ("alice domanda 1", "alfa")]]
    assert [h for page in every for h, _ in page] == [
        f"alice domanda {n}" for n in range(7, -1, -1)
    ]


def test_the_history_conversation_parameter_is_documented_with_default(openapi_schema):
    (parameter,) = [
        p
        for p in openapi_schema["paths"]["/api/history"]["get"]["parameters"]
        if p["name"] == "conversation_id"
    ]
    assert parameter["required"] is False
    schema = parameter["schema"]["anyOf"][0]
    assert schema == {
        "type": "string",
        "minLength": 1,
        "maxLength": 64,
        "pattern": "^[A-Za-z0-9_-]{1,64}$",
    }  # `default` included: no `not`
    assert "`default`: only the default conversation's" in parameter["description"]


async def test_a_spooled_turn_is_read_by_id_from_any_instance(settings, auth):
    """The store refused a turn's write: its stream still ended with `done` (after
    `persist_failed`), and the turn waits in the dead-letter spool. Its client reads it by
    id, while the store still refuses writes and on another instance whose replay is not due
    yet (it looked at the spool a moment ago), as a retry with its key already could."""
    script = Script([text("prima"), text("la risposta intera")])
    a = app_with(settings, models=ScriptedModels(script))
    b = app_with(settings, models=ScriptedModels(script))
    me = auth()
    async with asgi_client(a) as on_a, asgi_client(b) as on_b:
        await chat(on_b, me, "salvata")  # b looks at the spool after it
        refuse_writes(settings.sqlite_file)
        events = await chat(on_a, me, "rifiutata")
        assert events[-2]["code"] == "persist_failed"
        turn_id = events[-1]["turn_id"]
        while_down = await on_a.get(f"/api/turns/{turn_id}", headers=me)
        accept_writes(settings.sqlite_file)
        assert not services_of(b).dead_letters.due
        on_another = await on_b.get(f"/api/turns/{turn_id}", headers=me)
        theirs = await on_b.get(f"/api/turns/{turn_id}", headers=auth("mallory"))
    for response in (while_down, on_another):
        assert response.status_code == 200, response.text
        assert response.json()["turn_id"] == turn_id
        assert response.json()["system"] == "la risposta intera"
    assert theirs.status_code == 404 and theirs.json()["error"] == "not_found"
    script.assert_used()


def test_a_history_turn_documents_its_error_code_as_required_and_nullable(openapi_schema):
    """Every history turn has `error_code` beside `status`: a string for a failed turn, null
    for any other, so a client tells why a stored turn failed without an `undefined` check."""
    turn = openapi_schema["components"]["schemas"]["HistoryTurn"]
    assert {"status", "error_code"} <= set(turn["required"])
    field = turn["properties"]["error_code"]
    assert field["anyOf"] == [{"type": "string"}, {"type": "null"}]
    assert "`status: error`" in field["description"] and "message" in field["description"]
