"""The quiz loop through the chat, as a student lives it: a question, an answer graded
against the key (also after a restart), progress that shapes the next question; and the key
never reaches a client before the answer is graded."""

from __future__ import annotations

import json
from typing import Any

import pytest
from langchain_core.messages import SystemMessage

from aircoach.errors import StoreUnavailable
from aircoach.settings import Settings
from tests.helpers import app_with, asgi_client, chat
from tests.scripted_model import Script, ScriptedModels, text

# A student's conversation played through the app: an integration module (docs/testing.md).
pytestmark = pytest.mark.integration

# Chapter 1, question 1 of the demo bank: the key is c, and this is its explanation.
EXPLANATION = "La portanza è proporzionale al quadrato della velocità"
SECTION = "# Progressi dell'allievo"


def answer_text(events: list[dict[str, Any]]) -> str:
    return "".join(e["content"] for e in events if e["type"] == "agent_message")


async def test_ask_restart_then_answer_is_graded_against_the_key(store_settings: Settings, auth):
    async with asgi_client(app_with(store_settings)) as client:  # the offline model
        events = await chat(client, auth(), "Dammi la domanda 1 del capitolo 1")
    assert [e["type"] for e in events] == ["tool_result", "done"]
    question = events[0]["data"]["question"]
    assert (question["capitolo"], question["numero"]) == (1, 1)

    async with asgi_client(app_with(store_settings)) as client:  # a restarted server
        events = await chat(client, auth(), "la c")
        assert events[-1]["context_turns"] == 1
        grading = events[0]
        assert grading["tool_name"] == "verifica_risposta" and grading["final"] is False
        assert grading["data"]["corretta"] is True and grading["data"]["risposta_corretta"] == "c"
        assert "Esito: risposta CORRETTA" in answer_text(events)

        await chat(client, auth(), "Dammi la domanda 1 del capitolo 1")
        events = await chat(client, auth(), "si dimezza")  # an option's text
        assert (events[0]["data"]["risposta"], events[0]["data"]["corretta"]) == ("b", False)
        progress = (await client.get("/api/progress", headers=auth())).json()
    assert (progress["risposte"], progress["corrette"]) == (2, 1)


async def test_a_letter_in_a_sentence_is_graded_in_the_chat(client, auth):
    await chat(client, auth(), "Dammi la domanda 1 del capitolo 1")  # the offline model
    events = await chat(client, auth(), "la c è giusta")
    grading = events[0]
    assert grading["tool_name"] == "verifica_risposta"
    assert (grading["data"]["risposta"], grading["data"]["corretta"]) == ("c", True)
    assert "Esito: risposta CORRETTA" in answer_text(events)


async def test_no_response_carries_the_key_before_the_answer_is_graded(settings: Settings, auth):
    async with asgi_client(app_with(settings)) as client:
        bodies = []
        streamed = await client.post(
            "/api/stream_query",
            json={"query": "Dammi la domanda 1 del capitolo 1"},
            headers=auth(),
        )
        bodies.append(streamed.text)
        as_json = await client.post(
            "/api/stream_query",
            json={"query": "Dammi 3 domande dai capitoli 1, 2 e 3", "stream": False},
            headers=auth("other"),
        )
        bodies.append(as_json.text)
        for path in (
            "/api/history",
            "/api/quiz/questions/1/1",
            "/api/quiz/questions?capitolo=1&limit=50",
            "/api/quiz/questions?testo=velocita&limit=50",
        ):
            bodies.append((await client.get(path, headers=auth())).text)
        bodies.append((await client.get("/api/history", headers=auth("other"))).text)
        for body in bodies:
            assert EXPLANATION not in body and "corretta" not in body
            assert "RISERVATO AL COACH" not in body

        graded = await chat(client, auth(), "c")
        assert EXPLANATION in graded[0]["data"]["spiegazione"]  # once graded, the key is told
        history = (await client.get("/api/history", headers=auth())).json()["turns"]
    assert [EXPLANATION in json.dumps(t, ensure_ascii=False) for t in history] == [True, False]
    assert "RISERVATO AL COACH" not in json.dumps(history)


async def test_a_quiz_turn_that_finds_nothing_ends_with_the_chapters(client, auth):
    events = await chat(client, auth(), "Fammi una domanda sull'elicottero")
    assert events[0]["type"] == "tool_result" and events[-1]["type"] == "done"
    result = events[0]
    assert result["final"] is False and result["data"]["question"] is None
    assert len(result["data"]["capitoli"]) == 10
    answer = answer_text(events)
    assert "Nessuna domanda trovata" in answer and "1 Principi di aerodinamica" in answer


async def test_three_questions_from_three_chapters_in_one_result(client, auth):
    events = await chat(client, auth(), "Dammi 3 domande dai capitoli 2, 5 e 7")
    assert [e["type"] for e in events] == ["tool_result", "done"]
    data = events[0]["data"]
    assert [q["capitolo"] for q in data["questions"]] == [2, 5, 7]
    assert data["query"]["capitoli"] == [2, 5, 7]
    assert all("corretta" not in q and "spiegazione" not in q for q in data["questions"])
    graded = await chat(client, auth(), "a")  # answers the first of them
    first = data["questions"][0]
    assert (graded[0]["data"]["capitolo"], graded[0]["data"]["numero"]) == (
        first["capitolo"],
        first["numero"],
    )


async def test_review_asks_again_what_the_student_got_wrong(client, auth):
    for letter in "ab":  # one of the two is wrong, and the latest answer is what counts
        body = {"capitolo": 6, "numero": 3, "risposta": letter}
        result = (await client.post("/api/quiz/answers", json=body, headers=auth())).json()
        if not result["corretta"]:
            break
    events = await chat(client, auth(), "Fammi ripassare i miei punti deboli")
    data = events[0]["data"]
    assert data["query"]["mode"] == "ripasso" and data["query"]["fonte"] == "in_scadenza"
    assert (data["question"]["capitolo"], data["question"]["numero"]) == (6, 3)


def system_prompt(script: Script, call: int = -1) -> str:
    return next(m.text for m in script.calls[call] if isinstance(m, SystemMessage))


async def test_progress_is_a_section_of_the_prompt_not_a_new_version(settings: Settings, auth):
    script = Script([text("a"), text("b"), text("c"), text("d")])
    async with asgi_client(app_with(settings, models=ScriptedModels(script))) as client:
        before = (await chat(client, auth(), "ciao"))[-1]
        assert SECTION not in system_prompt(script)
        for numero in (1, 2, 3):
            body = {"capitolo": 5, "numero": numero, "risposta": "a"}
            assert (await client.post("/api/quiz/answers", json=body, headers=auth())).is_success
        after = (await chat(client, auth(), "ciao"))[-1]
        prompt = system_prompt(script)
        assert "# Progressi dell'allievo\n- risposte ai quiz: 3, corrette: " in prompt
        assert "- capitolo 5 (Meteorologia): " in prompt
        assert (after["prompt_version"], after["context_turns"]) == (before["prompt_version"], 1)

        await chat(client, auth(), "ciao", user_data=False)
        assert SECTION not in system_prompt(script)
        await chat(
            client, auth(), "ciao", tools={"domanda_teoria": False, "verifica_risposta": False}
        )
        assert SECTION not in system_prompt(script)
    script.assert_used()


class _BrokenAttempts:
    async def add_attempt(self, attempt: Any) -> None:
        raise StoreUnavailable()

    async def chapter_stats(self, user_id: str) -> Any:
        raise StoreUnavailable()

    async def recent_attempts(self, user_id: str, limit: int) -> Any:
        raise StoreUnavailable()


async def test_progress_that_cannot_be_read_never_fails_the_turn(settings: Settings, auth, caplog):
    script = Script([text("Eccomi.")])
    app = app_with(settings, models=ScriptedModels(script), attempts=_BrokenAttempts())
    async with asgi_client(app) as client:
        events = await chat(client, auth(), "ciao")
    assert answer_text(events) == "Eccomi." and events[-1]["type"] == "done"
    assert SECTION not in system_prompt(script)
    assert "quiz progress unavailable for 'user-1'" in caplog.text


async def test_stream_false_answers_a_quiz_turn_with_the_question_as_text(client, auth):
    one = await client.post(
        "/api/stream_query",
        json={"query": "Dammi la domanda 1 del capitolo 1", "stream": False},
        headers=auth(),
    )
    body = one.json()
    question = body["tool"]["data"]["question"]
    lines = body["answer"].split("\n")
    assert lines[0] == f"Capitolo 1, domanda 1: {question['testo']}"
    assert lines[1:] == [f"{k}) {v}" for k, v in sorted(question["risposte"].items())]
    assert EXPLANATION not in body["answer"] and "RISERVATO" not in body["answer"]

    many = await client.post(
        "/api/stream_query",
        json={"query": "Dammi 3 domande dai capitoli 1, 2 e 3", "stream": False},
        headers=auth("other"),
    )
    blocks = many.json()["answer"].split("\n\n")
    assert [b.split(",")[0] for b in blocks] == ["Capitolo 1", "Capitolo 2", "Capitolo 3"]
