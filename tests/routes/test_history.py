"""GET /api/history: the caller's turns only, newest first, cursor pagination."""

from __future__ import annotations

from aircoach.turn.records import Turn
from tests.helpers import app_with, asgi_client, chat, services_of
from tests.scripted_model import Script, ScriptedModels, text
from tests.store.test_dead_letters import accept_writes, refuse_writes


def stored(user: str, n: int) -> Turn:
    return Turn(
        userId=user,
        human=f"{user} domanda {n}",
        system=f"risposta {n}",
        timestamp=f"2025-03-01T10:{n:02d}:00.000000+00:00",
        prompt_version="abc123",
        model="scripted",
        thread_id=f"{user}:vabc123",
        turn_id=f"{n:08x}-{user}",
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
