"""1,000 turns from 50 users at concurrency 32 against a real uvicorn server on 127.0.0.1:
no 5xx, every turn stored exactly once, every user's history complete and in order."""

from __future__ import annotations

import re
from collections import defaultdict
from pathlib import Path

import httpx
import pytest

from tests.load.harness import (
    REQUEST_TIMEOUT_S,
    check_clear,
    check_stored,
    figures,
    run_load,
    sqlite_turns,
)

pytestmark = [pytest.mark.load, pytest.mark.integration]

USERS = 50
TURNS_PER_USER = 20
CONCURRENCY = 32
HISTORY_LIMIT = 10
# Fewer threads in memory than users: conversations are evicted and reseeded from the store
# all through the run, so the memory's LRU and freshness check are under load too.
MEMORY_MAX_THREADS = 16

_TAG = re.compile(r"^\[(u\d+) #(\d+)\] ")


def _queries(user: str) -> list[str]:
    # Every fifth turn asks for a quiz (the return_direct tool, reading the quiz store); the
    # others are theory questions, answered from the course manual (a kb_search step).
    return [
        f"[{user} #{n:02d}] " + ("Fammi un quiz" if n % 5 == 4 else "Cos'è lo stallo?")
        for n in range(TURNS_PER_USER)
    ]


async def test_thousand_turns_fifty_users(serve, dev_token, data_dir: Path):
    server = serve(
        HISTORY_LIMIT=str(HISTORY_LIMIT),
        MEMORY_MAX_THREADS=str(MEMORY_MAX_THREADS),
    )
    users = [f"u{i:02d}" for i in range(USERS)]
    plan = [(user, _queries(user)) for user in users]

    outcomes, elapsed = await run_load(server.url, plan, dev_token, concurrency=CONCURRENCY)
    print("\n" + figures(f"{USERS} users, concurrency {CONCURRENCY}", outcomes, elapsed))

    assert len(outcomes) == USERS * TURNS_PER_USER
    server_errors = [o.describe() for o in outcomes if o.status >= 500]
    assert not server_errors, f"{len(server_errors)} 5xx, first: {server_errors[:3]}"
    for outcome in outcomes:
        check_clear(outcome, codes=())  # no error of any kind
        assert outcome.answered
        # The model saw the user's earlier turns, up to the window, whatever was evicted.
        n = int(_TAG.match(outcome.query)[2])
        assert outcome.done["context_turns"] == min(n, HISTORY_LIMIT), outcome.describe()

    rows = sqlite_turns(data_dir / "aircoach.sqlite3")
    assert len(rows) == USERS * TURNS_PER_USER
    check_stored(outcomes, [r["turn_id"] for r in rows])
    assert {r["status"] for r in rows} == {"ok"}
    by_user: dict[str, list[dict]] = defaultdict(list)
    for row in rows:  # ordered by timestamp
        by_user[row["userId"]].append(row)
    assert sorted(by_user) == users
    for user, turns in by_user.items():
        assert [t["human"] for t in turns] == _queries(user), f"{user}: history out of order"
        stamps = [t["timestamp"] for t in turns]
        assert stamps == sorted(set(stamps)), f"{user}: timestamps not strictly increasing"
        quiz_turns = [t for t in turns if t["human"].endswith("Fammi un quiz")]
        assert all(t["tool"] for t in quiz_turns), f"{user}: a quiz turn lost its tool result"

    # The API serves the same history, newest first.
    async with httpx.AsyncClient(base_url=server.url, timeout=REQUEST_TIMEOUT_S) as client:
        for user in users[:: USERS // 5]:
            page = await client.get(
                "/api/history",
                params={"limit": TURNS_PER_USER},
                headers={"Authorization": f"Bearer {dev_token(user)}"},
            )
            assert page.status_code == 200, page.text
            humans = [t["human"] for t in page.json()["turns"]]
            assert humans == _queries(user)[::-1]
        assert (await client.get("/api/health")).status_code == 200
