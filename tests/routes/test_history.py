"""GET /api/history: the caller's turns only, newest first, cursor pagination."""

from __future__ import annotations

from aircoach.turn.records import Turn
from tests.helpers import app_with, asgi_client


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
