"""A regenerated answer to a quiz answer (`useChat`'s `regenerate()`): the grading it holds
counts once in the student's attempts and review schedule, not once per answer written."""

from __future__ import annotations

import json
from datetime import datetime
from typing import Any

import anyio
import httpx
import pytest

from aircoach.quiz.bank import load_demo_questions
from aircoach.quiz.review import iso
from aircoach.services import open_stores
from aircoach.settings import Settings
from tests.helpers import app_with, asgi_client, services_of

# A student's conversation played through the app: an integration module (docs/testing.md).
pytestmark = pytest.mark.integration


def ui_body(query: str, message_id: str, *, trigger: str = "submit-message") -> dict[str, Any]:
    last = {"id": message_id, "role": "user", "parts": [{"type": "text", "text": query}]}
    return {"id": "chat-1", "messages": [last], "trigger": trigger}


async def test_a_regenerated_grading_counts_once(settings: Settings, auth):
    """Question 1 of chapter 1 (key c), answered b, then the answer regenerated: one attempt,
    tagged with the new turn, and one review of the question. The repeat window is off, so
    that a grading counted twice would also move the schedule twice."""
    settings = settings.model_copy(update={"quiz_repeat_window_s": 0.0})
    app = app_with(settings)  # the offline model grades "la b" against the key
    services = services_of(app)
    async with asgi_client(app) as client:
        asked = ui_body("Dammi la domanda 1 del capitolo 1", "m-1")
        assert (await client.post("/api/chat", json=asked, headers=auth())).status_code == 200
        first = await client.post("/api/chat", json=ui_body("la b", "m-2"), headers=auth())
        assert first.status_code == 200, first.text
        again = await client.post(
            "/api/chat", json=ui_body("la b", "m-2", trigger="regenerate-message"), headers=auth()
        )
        assert again.status_code == 200, again.text
        assert again.headers["X-Turn-ID"] != first.headers["X-Turn-ID"]
        progress = (await client.get("/api/progress", headers=auth())).json()
    assert (progress["risposte"], progress["corrette"], progress["viste"]) == (1, 0, 1)
    (attempt,) = await services.attempts.recent_attempts("user-1", 10)
    assert (attempt.capitolo, attempt.numero, attempt.risposta) == (1, 1, "b")
    assert attempt.turn_id == again.headers["X-Turn-ID"]
    record = await services.reviews.get("user-1", (1, 1))
    assert record is not None and record.reviews == 1 and record.last_right is False
    assert record.reviewed_at == iso(datetime.fromisoformat(attempt.timestamp))


def said(response: Any) -> str:
    lines = [line[len("data: ") :] for line in response.text.splitlines()]
    parts = [json.loads(line) for line in lines if line.startswith("{")]
    return "".join(p["delta"] for p in parts if p["type"] == "text-delta")


async def test_a_regenerated_exam_grading_repeats_the_result_and_counts_once(
    settings: Settings, auth
):
    """The answers that end a chat mock exam, regenerated: the exam is graded once (its
    answers count once), and the new answer gives that result again instead of "already
    submitted" (which the offline model tells as a failure)."""
    bank = {(q["capitolo"], q["numero"]): q["corretta"] for q in await load_demo_questions()}
    app = app_with(settings)
    async with asgi_client(app) as client:
        started = await client.post(
            "/api/chat", json=ui_body("simulazione d'esame con 5 domande", "m-1"), headers=auth()
        )
        assert started.status_code == 200, started.text
        (exam,) = (await client.get("/api/exams", headers=auth())).json()["items"]
        view = (await client.get(f"/api/exams/{exam['id']}", headers=auth())).json()
        keys = [bank[(q["capitolo"], q["numero"])] for q in view["domande"]]
        wrong = next(x for x in "abcd" if x != keys[0])
        answers = " ".join(f"{n}{x}" for n, x in enumerate([wrong, *keys[1:]], start=1))
        first = await client.post("/api/chat", json=ui_body(answers, "m-2"), headers=auth())
        assert "4 risposte corrette su 5" in said(first)
        again = await client.post(
            "/api/chat", json=ui_body(answers, "m-2", trigger="regenerate-message"), headers=auth()
        )
        assert again.status_code == 200, again.text
        assert "4 risposte corrette su 5" in said(again), said(again)
        # Other answers to the graded exam are still refused: it is graded once.
        other = " ".join(f"{n}{x}" for n, x in enumerate(keys, start=1))
        refused = await client.post("/api/chat", json=ui_body(other, "m-3"), headers=auth())
        assert "risposte corrette su 5" not in said(refused)
        progress = (await client.get("/api/progress", headers=auth())).json()
    assert (progress["risposte"], progress["corrette"]) == (5, 4)


async def test_a_regeneration_cancelled_while_it_takes_back_a_grading_rebuilds_the_schedule(
    settings: Settings, auth
):
    """The client leaves while its regeneration takes back the old answer's grading: between
    the removal of the attempt and the rebuild of the question's schedule. The step is not cut
    in two: the schedule is rebuilt from the attempts left (none), not left counting the
    attempt that is gone (which the new answer would then count a second time)."""
    settings = settings.model_copy(update={"quiz_repeat_window_s": 0.0})
    attempts = open_stores(settings).attempts
    removed, go_on = anyio.Event(), anyio.Event()
    regenerating = False

    class HeldAfterTheRemoval:
        """The rebuild's read of the question's attempts waits, once the removal is done."""

        def __getattr__(self, name: str) -> Any:
            return getattr(attempts, name)

        async def question_attempts(self, user_id: str, key: Any) -> Any:
            if regenerating:
                removed.set()
                await go_on.wait()
            return await attempts.question_attempts(user_id, key)

    app = app_with(settings, attempts=HeldAfterTheRemoval())
    services = services_of(app)
    leaving, left = anyio.CancelScope(), anyio.Event()

    async def regenerate(client: httpx.AsyncClient) -> None:
        with leaving:
            again = ui_body("la b", "m-2", trigger="regenerate-message")
            await client.post("/api/chat", json=again, headers=auth())
        left.set()

    async with asgi_client(app) as client:
        asked = ui_body("Dammi la domanda 1 del capitolo 1", "m-1")
        assert (await client.post("/api/chat", json=asked, headers=auth())).status_code == 200
        first = await client.post("/api/chat", json=ui_body("la b", "m-2"), headers=auth())
        assert first.status_code == 200, first.text
        regenerating = True
        async with anyio.create_task_group() as tg:
            tg.start_soon(regenerate, client)
            await removed.wait()
            leaving.cancel()
            go_on.set()
            await left.wait()
    assert await attempts.recent_attempts("user-1", 10) == []
    record = await services.reviews.get("user-1", (1, 1))
    assert record is not None and record.reviews == 0 and record.reviewed_at is None, record
